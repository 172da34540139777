"""A real broker stopped cleanly starts from its recovery terms; a long backlog comes back
without being held in memory, and paged persistent messages were never written twice."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pika
import pytest

from ringmq.node import BrokerThread
from ringmq.server.memory import MemoryLimits
from ringmq.storage import terms
from tests.integration.conftest import BrokerFactory

pytestmark = pytest.mark.integration

PERSISTENT = pika.BasicProperties(delivery_mode=2)
COUNT = 2500
BODY = 4000  # 10 MB in all: over the 8 MiB head a queue keeps in memory at recovery


def connect(b: BrokerThread) -> Any:
    creds = pika.PlainCredentials("guest", "guest")
    return pika.BlockingConnection(
        pika.ConnectionParameters(host=b.host, port=b.port, credentials=creds)
    )


def body(i: int) -> bytes:
    return b"m%05d" % i + b"." * (BODY - 6)


def test_clean_stop_then_start_from_the_terms_with_the_backlog_on_disk(
    broker_factory: BrokerFactory, tmp_path: Path
) -> None:
    data = tmp_path / "d"
    b = broker_factory(data_dir=data, memory=MemoryLimits(head_count=500))
    with connect(b) as conn:
        ch = conn.channel()  # no confirms needed: the clean stop syncs everything
        ch.queue_declare("backlog", durable=True)
        for i in range(COUNT):
            ch.basic_publish("", "backlog", body(i), PERSISTENT)
        method, _props, first = ch.basic_get("backlog", auto_ack=False)
        assert first == body(0)
        ch.basic_nack(method.delivery_tag, requeue=True)  # delivered once: count 1
    engine: Any = b.broker.vhosts["/"].queues["backlog"].queue
    assert engine.counters.paged >= COUNT - 500
    assert engine._paging.spill.pages.refs_written > 0  # paged by reference to the journal copy
    b.stop()
    assert (data / "store" / terms.NAME).exists()

    b2 = broker_factory(data_dir=data)
    store: Any = b2.broker.durability.store  # type: ignore[union-attr]
    assert store.used_terms
    assert not (data / "store" / terms.NAME).exists()
    engine = b2.broker.vhosts["/"].queues["backlog"].queue
    c = engine.counters
    assert c.message_count == COUNT
    assert c.ready_bytes <= 8 * 1024 * 1024 + BODY
    assert c.paged > 0
    got: list[tuple[bytes, bool]] = []
    with connect(b2) as conn:
        ch = conn.channel()
        ch.basic_qos(prefetch_count=500)
        for method, _props, content in ch.consume("backlog", inactivity_timeout=5):
            if method is None:
                break
            got.append((content, method.redelivered))
            ch.basic_ack(method.delivery_tag)
            if len(got) == COUNT:
                break
        ch.cancel()
    assert [content for content, _ in got] == [body(i) for i in range(COUNT)]
    assert [i for i, (_, red) in enumerate(got) if red] == [0]  # a clean stop keeps flags exact
