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
