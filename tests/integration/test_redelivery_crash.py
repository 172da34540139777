"""Crash test: a delayed redelivery (Artemis' `redelivery-delay`) survives a kill -9.

A `ringmq serve` with an address setting that delays redeliveries on `slow.#` takes a
confirmed persistent message on a durable quorum queue (quorum: 0-9-1 consumers see the
delivery count as `x-delivery-count`); a consumer rejects it with requeue, so it waits off the
queue with a due time the management API lists. The broker is SIGKILLed and started again on
the same data directory. Checked, on the broker's own due time and on ordering rather than on
how long anything took: the restarted broker lists the message as scheduled with the same due
time; a message published after the restart is delivered before it; it is delivered once, at
or after its due time, flagged redelivered with its delivery count; nothing confirmed is lost.
"""

from __future__ import annotations

import contextlib
import time
from pathlib import Path
from typing import Any

import httpx
import pika
import pika.exceptions
import pytest

from tests.serve import Serve

pytestmark = [
    pytest.mark.integration,
    pytest.mark.slow,  # it waits out the delay
    # pika leaves the sockets of connections the kill broke for the garbage collector
    pytest.mark.filterwarnings("ignore::ResourceWarning"),
    pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning"),
]

QUEUE = "slow.orders"
# The kill and the restart must fit in it (a bound, not a measurement: a restart took about
# 7 s on a loaded test machine).
DELAY_MS = 20_000
CONFIG = f"""
[[address_settings]]
match = "slow.#"
redelivery_delay_ms = {DELAY_MS}
"""


def _channel(serve: Serve) -> tuple[pika.BlockingConnection, Any]:
    conn = pika.BlockingConnection(
        pika.ConnectionParameters("127.0.0.1", serve.port, connection_attempts=1, socket_timeout=5)
    )
    ch = conn.channel()
    ch.confirm_delivery()
    return conn, ch


def _scheduled(serve: Serve) -> list[dict[str, Any]]:
    assert serve.http_port is not None
    r = httpx.get(
        f"http://127.0.0.1:{serve.http_port}/api/queues/%2F/{QUEUE}/scheduled",
        auth=("guest", "guest"),
        timeout=10,
    )
    assert r.status_code == 200, r.text
    found: list[dict[str, Any]] = r.json()
    return found


def test_a_delayed_redelivery_waits_out_its_due_time_across_a_kill(tmp_path: Path) -> None:
    data = tmp_path / "data"
    config = tmp_path / "ringmq.toml"
    config.write_text(CONFIG)
    first = Serve(data, tmp_path / "serve-0.log", http=True, config=config)
    try:
        conn, ch = _channel(first)
        ch.queue_declare(QUEUE, durable=True, arguments={"x-queue-type": "quorum"})
        props = pika.BasicProperties(delivery_mode=2)
        ch.basic_publish("", QUEUE, b"rejected", props)  # returns once confirmed
        method, _props, body = ch.basic_get(QUEUE, auto_ack=False)
        assert body == b"rejected"
        assert not method.redelivered
        ch.basic_reject(method.delivery_tag, requeue=True)
        # A confirmed persistent publish after it: its confirm waits for an fsync covering
        # every write before it, the wait the reject journaled included (nothing is lost
        # to the kill that the broker had not made durable).
        ch.queue_declare("barrier", durable=True)
        ch.basic_publish("", "barrier", b"b", props)
        (waiting,) = _scheduled(first)
        due_ms = waiting["due_ms"]
        assert ch.basic_get(QUEUE, auto_ack=False) == (None, None, None)
    finally:
        first.kill()
        with contextlib.suppress(Exception):
            conn.close()

    second = Serve(data, tmp_path / "serve-1.log", http=True, config=config)
    try:
        # the broker's own due time came back with the message, not a new delay
        assert [m["due_ms"] for m in _scheduled(second)] == [due_ms]
        conn, ch = _channel(second)
        ch.basic_publish("", QUEUE, b"after", pika.BasicProperties(delivery_mode=2))
        got: list[tuple[bytes, bool, Any, int]] = []
        timeout_s = 3 * DELAY_MS / 1000  # against hanging only
        for method, props, body in ch.consume(QUEUE, inactivity_timeout=timeout_s):
            if method is None:
                break
            got.append((body, method.redelivered, props.headers, int(time.time() * 1000)))
            ch.basic_ack(method.delivery_tag)
            if len(got) == 2:
                break
        ch.cancel()
        assert [(body, redelivered) for body, redelivered, _h, _t in got] == [
            (b"after", False),
            (b"rejected", True),
        ]
        _b, _r, headers, received_ms = got[1]
        assert headers == {"x-delivery-count": 1}  # one delivery before this one
        assert received_ms >= due_ms  # not before its due time
        assert _scheduled(second) == []
        assert ch.queue_declare(QUEUE, passive=True).method.message_count == 0  # once
        assert ch.basic_get("barrier", auto_ack=True)[2] == b"b"  # nothing confirmed lost
        conn.close()
    finally:
        second.kill()
