"""Reading a paged queue through the management API leaves its backlog on disk.

A queue past its in-memory head (default: 16,384 messages or 8 MiB) keeps the rest paged. The
queue page (which the console polls every few seconds), the queue list, the overview,
`/metrics` and the definitions export must read the queue's counters, never load its messages:
here a backlog of about 190 MiB, published over AMQP with no consumer, is read through every
one of them over HTTP while tracemalloc (which sees the broker's thread too: it runs in this
process) measures what the broker allocates. Paging the backlog in would allocate all of it;
the bound below is a sixth of it. Publishing must not hold it either (the paged tail's buffer
of new publishes is bounded in bytes), and a purge removes it reading a durable queue's spill
back one batch at a time (storage must hear every removed seq), never all of it at once.
"""

from __future__ import annotations

import tracemalloc
from collections.abc import Iterator
from typing import Any

import httpx
import pika
import pytest

from ringmq.core.queue import DEFAULT_HEAD_BYTES, Queue
from ringmq.node import BrokerThread
from tests.integration.conftest import BrokerFactory, wait_until

pytestmark = pytest.mark.integration

MiB = 1024 * 1024
QUEUE = "backlog"
BOUND = 32 * MiB
"""Most the broker may allocate and keep (or peak at) while a ~190 MiB backlog is read."""
READS = (
    f"/api/queues/%2F/{QUEUE}",
    "/api/queues",
    "/api/queues/%2F",
    "/api/overview",
    "/metrics",
    "/metrics/per-object",
    "/api/definitions",
    f"/api/queues/%2F/{QUEUE}/bindings",
    f"/api/queues/%2F/{QUEUE}/scheduled",
    f"/api/queues/%2F/{QUEUE}",  # the console polls it: a second read changes nothing
)
SIZES = [(64 * 1024, 3000), (MiB, 190)]
"""Bodies and counts of a backlog of about 190 MiB."""


@pytest.fixture
def traced() -> Iterator[None]:
    tracemalloc.start()
    try:
        yield
    finally:
        tracemalloc.stop()


def _publish(b: BrokerThread, size: int, count: int, durable: bool) -> None:
    # No confirms (a confirm per publish would wait for an fsync each): the queue's depth
    # says when every publish is in.
    params = pika.ConnectionParameters("127.0.0.1", b.port, heartbeat=0)
    with pika.BlockingConnection(params) as conn:
        ch = conn.channel()
        ch.queue_declare(QUEUE, durable=durable)
        props = pika.BasicProperties(delivery_mode=2 if durable else 1)
        body = b"x" * size
        for _ in range(count):
            ch.basic_publish("", QUEUE, body, props)
        engine = _engine(b)
        wait_until(lambda: b.call(lambda: engine.message_count) == count, timeout=60)


def _get(http: httpx.Client, path: str) -> Any:
    r = http.get(path)
    assert r.status_code == 200, (path, r.text[:200])
    return r.json() if r.headers["content-type"].startswith("application/json") else r.text


def _engine(b: BrokerThread) -> Queue:
    return b.call(lambda: b.broker.vhosts["/"].queues[QUEUE].queue)


def _in_memory(b: BrokerThread, engine: Queue) -> tuple[int, int]:
    # ready bodies, and paged ones still buffered on their way to the page file
    return b.call(lambda: (engine.counters.ready_bytes, engine.paged_in_memory[1]))


def _http(b: BrokerThread) -> httpx.Client:
    return httpx.Client(
        base_url=f"http://127.0.0.1:{b.server.http_port}", auth=("guest", "guest"), timeout=60
    )


@pytest.mark.usefixtures("traced")
@pytest.mark.parametrize("durable", [False, True], ids=["transient", "durable"])
@pytest.mark.parametrize(("size", "count"), SIZES, ids=["64KiB", "1MiB"])
def test_management_reads_of_a_paged_queue_load_none_of_it(
    broker_factory: BrokerFactory, size: int, count: int, durable: bool
) -> None:
    b = broker_factory(http_port=0)
    _publish(b, size, count, durable)
    engine = _engine(b)
    before = _in_memory(b, engine)
    tracemalloc.reset_peak()
    base = tracemalloc.get_traced_memory()[0]
    with _http(b) as http:
        answers = {path: _get(http, path) for path in READS}
    assert tracemalloc.get_traced_memory()[1] - base < BOUND  # the peak while reading
    assert _in_memory(b, engine) == before  # nothing was paged in by the reads
    paged = b.call(lambda: engine.spilled - engine.paged_in_memory[0])
    page = answers[f"/api/queues/%2F/{QUEUE}"]
    listed = next(q for q in answers["/api/queues"] if q["name"] == QUEUE)
    for q in (page, listed):
        assert q["messages"] == q["messages_ready"] == count
        assert q["message_bytes"] == count * size
        assert q["messages_paged"] == paged > count // 2
        assert q["messages_ram"] == count - paged
        assert q["message_bytes_ram"] == sum(before) <= DEFAULT_HEAD_BYTES + MiB
    assert page["head_message_timestamp"] is not None
    assert f"rabbitmq_queue_messages_ready {count}" in answers["/metrics"]


@pytest.mark.usefixtures("traced")
@pytest.mark.parametrize("durable", [False, True], ids=["transient", "durable"])
def test_a_backlog_of_large_bodies_waits_on_disk_not_in_memory(
    broker_factory: BrokerFactory, durable: bool
) -> None:
    # Paged publishes are buffered on their way to the page file; the buffer must be bounded
    # in bytes, not only in messages (128 bodies of 1 MiB would wait in memory, counted paged).
    b = broker_factory(http_port=0)
    _publish(b, MiB, 190, durable)
    assert tracemalloc.get_traced_memory()[0] < BOUND
    held, buffered = _in_memory(b, _engine(b))
    assert held <= DEFAULT_HEAD_BYTES
    assert buffered <= MiB


@pytest.mark.usefixtures("traced")
@pytest.mark.parametrize("durable", [False, True], ids=["transient", "durable"])
def test_purging_a_paged_queue_never_loads_it(broker_factory: BrokerFactory, durable: bool) -> None:
    # A durable queue's purge tells storage every removed seq: it reads the spill back, one
    # read-ahead batch at a time, not all at once.
    size, count = SIZES[0]
    b = broker_factory(http_port=0)
    _publish(b, size, count, durable)
    engine = _engine(b)
    tracemalloc.reset_peak()
    base = tracemalloc.get_traced_memory()[0]
    with _http(b) as http:
        assert http.delete(f"/api/queues/%2F/{QUEUE}/contents").status_code == 204
        assert tracemalloc.get_traced_memory()[1] - base < BOUND  # the peak while purging
        after = _get(http, f"/api/queues/%2F/{QUEUE}")
    assert (after["messages"], after["messages_paged"], after["message_bytes_ram"]) == (0, 0, 0)
    assert _in_memory(b, engine) == (0, 0)
    assert tracemalloc.get_traced_memory()[0] < BOUND
