"""Publish runs through a real socket: pika pipelines confirm publishes, the broker takes each
read's run as one batch (adapters/amqp091/runs.py) and answers as it would one publish at a time.

pika's `SelectConnection` writes every `basic_publish` of one callback together, so the broker
reads them in few reads: a coalesced ack (`multiple=true`) shows a run was taken (one publish
at a time acks each tag alone).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pika
import pytest
from pika.spec import Basic

from ringmq.node import BrokerThread
from tests.integration.conftest import BrokerFactory

pytestmark = pytest.mark.integration


@dataclass
class _Outcome:
    acked: set[int] = field(default_factory=set)
    nacked: set[int] = field(default_factory=set)
    returned: list[bytes] = field(default_factory=list)
    multiple: int = 0  # acks with multiple=true


def _publish(
    port: int,
    publishes: Sequence[tuple[str, str, str | None, bytes, bool]],
    *,
    persistent: bool = False,
    meanwhile: Callable[[_Outcome], None] | None = None,
) -> _Outcome:
    """Publish (exchange, routing key, message id, body, mandatory) each, pipelined on one
    confirm channel, and wait until every one is confirmed; `meanwhile` is called once, a
    moment after the publishes were written."""
    out = _Outcome()
    mode = 2 if persistent else None
    n = len(publishes)
    params = pika.ConnectionParameters("127.0.0.1", port)
    state: dict[str, Any] = {}

    def settled() -> int:
        return len(out.acked) + len(out.nacked)

    def on_confirm(frame: Any) -> None:
        m = frame.method
        tags = (
            [t for t in range(1, m.delivery_tag + 1) if t not in out.acked | out.nacked]
            if m.multiple
            else [m.delivery_tag]
        )
        if isinstance(m, Basic.Ack):
            out.multiple += bool(m.multiple)
            out.acked.update(tags)
        else:
            out.nacked.update(tags)
        if settled() == n:
            state["conn"].close()

    def on_return(_ch: Any, _method: Any, _props: Any, body: bytes) -> None:
        out.returned.append(body)

    def on_selected(_frame: Any) -> None:
        ch = state["ch"]
        for exchange, rk, mid, body, mandatory in publishes:
            props = pika.BasicProperties(message_id=mid, delivery_mode=mode)
            ch.basic_publish(exchange, rk, body, props, mandatory=mandatory)
        if meanwhile is not None:
            state["conn"].ioloop.call_later(0.3, lambda: meanwhile(out))

    def on_channel(ch: Any) -> None:
        state["ch"] = ch
        ch.add_on_return_callback(on_return)
        ch.confirm_delivery(on_confirm, callback=on_selected)

    conn = pika.SelectConnection(
        params,
        on_open_callback=lambda c: c.channel(on_open_callback=on_channel),
        on_close_callback=lambda c, _reason: c.ioloop.stop(),
    )
    state["conn"] = conn
    conn.ioloop.call_later(30, conn.ioloop.stop)  # a bound: a broken broker fails the test
    conn.ioloop.start()
    if not conn.is_closed:  # the bound ran out: close, then let the loop finish closing
        conn.close()
        conn.ioloop.start()
    conn.ioloop.close()
    assert settled() == n, f"{settled()} of {n} publishes settled"
    return out


def _drain(port: int, queue: str) -> list[tuple[bytes, str | None]]:
    conn = pika.BlockingConnection(pika.ConnectionParameters("127.0.0.1", port))
    ch = conn.channel()
    got = []
    while True:
        method, props, body = ch.basic_get(queue, auto_ack=True)
        if method is None:
            break
        got.append((body, props.message_id))
    conn.close()
    return got


def _declare(port: int, queue: str, arguments: dict[str, Any] | None = None) -> None:
    conn = pika.BlockingConnection(pika.ConnectionParameters("127.0.0.1", port))
    conn.channel().queue_declare(queue, arguments=arguments)
    conn.close()


def test_a_run_with_duplicate_ids(broker: BrokerThread) -> None:
    _declare(broker.port, "runs-dedup", {"x-message-deduplication-window-ms": 60_000})
    ids = [f"id{i % 250}" for i in range(300)]
    out = _publish(
        broker.port, [("", "runs-dedup", mid, f"m{i}".encode(), False) for i, mid in enumerate(ids)]
    )
    assert out.acked == set(range(1, 301))
    assert not out.nacked
    assert out.multiple, "no run was taken (every publish acked alone)"
    got = _drain(broker.port, "runs-dedup")
    assert [b for b, _ in got] == [f"m{i}".encode() for i in range(250)]


def test_a_run_into_an_unroutable_exchange_with_mandatory(broker: BrokerThread) -> None:
    _declare(broker.port, "runs-plain")
    publishes = [
        ("amq.direct", "nobody", None, f"u{i}".encode(), True)
        if i % 10 == 3
        else ("", "runs-plain", None, f"m{i}".encode(), False)
        for i in range(200)
    ]
    out = _publish(broker.port, publishes)
    assert out.acked == set(range(1, 201))
    assert sorted(out.returned) == sorted(f"u{i}".encode() for i in range(3, 200, 10))
    assert out.multiple
    got = _drain(broker.port, "runs-plain")
    assert [b for b, _ in got] == [f"m{i}".encode() for i in range(200) if i % 10 != 3]


def test_a_reject_publish_queue_filling_mid_run(broker: BrokerThread) -> None:
    _declare(broker.port, "runs-capped", {"x-max-length": 50, "x-overflow": "reject-publish"})
    out = _publish(
        broker.port, [("", "runs-capped", None, f"m{i}".encode(), False) for i in range(120)]
    )
    assert out.acked == set(range(1, 51))
    assert out.nacked == set(range(51, 121))
    got = _drain(broker.port, "runs-capped")
    assert [b for b, _ in got] == [f"m{i}".encode() for i in range(50)]


def test_a_run_of_persistent_messages_is_confirmed_once_on_disk(
    broker_factory: BrokerFactory, tmp_path: Path
) -> None:
    data = tmp_path / "d"
    b = broker_factory(data_dir=data)
    commit = b.server.commit
    assert commit is not None
    gate = threading.Event()
    real_sync_files = commit.store.sync_files  # the group commit's fsync of a point

    def gated_sync_files(point: Any) -> None:
        gate.wait(30)
        real_sync_files(point)

    b.call(lambda: setattr(commit.store, "sync_files", gated_sync_files))
    b.call(b.server.timers.stop_sweep)  # confirms only from the fsync of a read batch
    conn = pika.BlockingConnection(pika.ConnectionParameters("127.0.0.1", b.port))
    conn.channel().queue_declare("runs-durable", durable=True)
    conn.close()
    before: list[int] = []

    def open_gate(out: _Outcome) -> None:
        before.append(len(out.acked) + len(out.nacked))
        gate.set()

    try:
        publishes = [("", "runs-durable", f"id{i}", f"p{i}".encode(), False) for i in range(200)]
        out = _publish(b.port, publishes, persistent=True, meanwhile=open_gate)
    finally:
        gate.set()
        b.call(lambda: setattr(commit.store, "sync_files", real_sync_files))
    assert before == [0]  # nothing confirmed while the fsync had not completed
    assert out.acked == set(range(1, 201))
    b.stop()
    b2 = broker_factory(data_dir=data)
    got = _drain(b2.port, "runs-durable")
    assert [body for body, _ in got] == [f"p{i}".encode() for i in range(200)]
