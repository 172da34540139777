"""Paging end to end: a queue outgrows its (small) in-memory head and drains in order."""

from __future__ import annotations

from pathlib import Path

import pika
import pytest

from ringmq.server.memory import MemoryLimits
from tests.integration.conftest import BrokerFactory

pytestmark = pytest.mark.integration

N = 3000


def params(port: int) -> pika.ConnectionParameters:
    return pika.ConnectionParameters("127.0.0.1", port, heartbeat=0)


def test_backlog_beyond_the_head_pages_to_disk_and_drains_in_order(
    broker_factory: BrokerFactory, tmp_path: Path
) -> None:
    data = tmp_path / "data"
    b = broker_factory(data_dir=data, memory=MemoryLimits(head_count=64, head_bytes=16 * 1024))
    with pika.BlockingConnection(params(b.port)) as conn:
        ch = conn.channel()
        ch.queue_declare("backlog")
        ch.confirm_delivery()
        for i in range(N):
            ch.basic_publish("", "backlog", b"%05d" % i + b"." * 200)

        def counters() -> tuple[int, int, int]:
            q = b.broker.vhosts["/"].queues["backlog"].queue
            return q.counters.ready, q.counters.paged, q.message_count

        ready, paged, total = b.call(counters)
        assert total == N
        assert ready <= 64
        assert paged == N - ready
        assert any(p.suffix == ".page" for p in (data / "paging").rglob("*"))
        assert ch.queue_declare("backlog", passive=True).method.message_count == N

        # take a few without acking and give them back: they return ahead of the paged tail
        held = []
        for _ in range(5):
            m, _, _ = ch.basic_get("backlog")
            assert m is not None
            held.append(m.delivery_tag)
        ch.basic_nack(held[-1], multiple=True, requeue=True)

        got: list[bytes] = []
        redelivered: list[bool] = []
        ch.basic_qos(prefetch_count=200)
        for method, _, body in ch.consume("backlog", inactivity_timeout=10):
            assert method is not None, "consumer starved"
            got.append(body[:5])
            redelivered.append(method.redelivered)
            ch.basic_ack(method.delivery_tag)
            if len(got) == N:
                break
        ch.cancel()
        assert got == [b"%05d" % i for i in range(N)]
        assert redelivered == [True] * 5 + [False] * (N - 5)
        assert b.call(counters) == (0, 0, 0)


def test_persistent_backlog_beyond_the_head_survives_a_restart_in_order(
    broker_factory: BrokerFactory, tmp_path: Path
) -> None:
    data = tmp_path / "data"
    limits = MemoryLimits(head_count=32, head_bytes=8 * 1024)
    b = broker_factory(data_dir=data, memory=limits)
    n = 500
    with pika.BlockingConnection(params(b.port)) as conn:
        ch = conn.channel()
        ch.queue_declare("durable-backlog", durable=True)
        props = pika.BasicProperties(delivery_mode=2)
        for i in range(n):
            ch.basic_publish("", "durable-backlog", b"%04d" % i, props)
        # a transient one at the end is paged too, and is gone after the restart
        ch.basic_publish("", "durable-backlog", b"transient")
        # a round trip after the publishes: all of them are in the queue (clean stop syncs)
        assert ch.queue_declare("durable-backlog", passive=True).method.message_count == n + 1
    paged = b.call(lambda: b.broker.vhosts["/"].queues["durable-backlog"].queue.counters.paged)
    assert paged > 0
    b.stop()

    b2 = broker_factory(data_dir=data, memory=limits)
    with pika.BlockingConnection(params(b2.port)) as conn:
        ch = conn.channel()
        assert ch.queue_declare("durable-backlog", durable=True).method.message_count == n
        got = []
        while True:
            m, _, body = ch.basic_get("durable-backlog", auto_ack=True)
            if m is None:
                break
            got.append(body)
        assert got == [b"%04d" % i for i in range(n)]
