"""The stream reader driven the way Spark drives it, without a JVM, against a live broker.

Spark's sequence (docs/spark.md): initialOffset, then per trigger latestOffset(start, limit),
partitions(start, end), read(p) on executors, commit(end) one batch late; on a restart a new
reader instance gets partitions(start, end) of the uncommitted batch directly.
"""

from __future__ import annotations

import pickle
from collections.abc import Sequence

import pytest

pytest.importorskip("pyspark")
pytest.importorskip("pyarrow")

from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadMaxRows

from ringmq.connector.client import StreamClient
from ringmq.connector.publisher import Publisher
from ringmq.connector.spark.options import Options
from ringmq.connector.spark.source import RingMQBatchReader, RingMQStreamReader
from ringmq.node import BrokerThread
from tests.unit.connector.conftest import urls

pytestmark = pytest.mark.integration


def _setup(b: BrokerThread, queue: str, n: int, args: dict[str, object] | None = None) -> None:
    import pika

    conn = pika.BlockingConnection(pika.ConnectionParameters("127.0.0.1", b.port))
    conn.channel().queue_declare(queue, arguments=args)
    conn.close()
    amqp, _ = urls(b)
    with Publisher(amqp) as pub:
        pub.publish_many(("", queue, b"\x00\x00", b"%03d" % i) for i in range(n))


def _rows(reader: RingMQStreamReader, parts: Sequence[object]) -> list[bytes]:
    out: list[bytes] = []
    for p in parts:
        # Executors get a pickled copy of the partition and of a fresh reader.
        p2 = pickle.loads(pickle.dumps(p))
        for batch in pickle.loads(pickle.dumps(reader)).read(p2):
            out += batch.column("body").to_pylist()
    return out


def test_spark_call_sequence_with_restart(live_broker: BrokerThread) -> None:
    amqp, http = urls(live_broker)
    _setup(live_broker, "seq-q", 25)
    opts = Options.parse(
        {
            "url": amqp,
            "httpUrl": http,
            "queue": "seq-q",
            "consumerName": "c1",
            "minMessagesPerPartition": "3",
        }
    )
    r = RingMQStreamReader(opts)
    start = r.initialOffset()
    assert start == {"seq-q": 0}
    end = r.latestOffset(start, ReadMaxRows(10))
    assert end == {"seq-q": 10}
    parts = r.partitions(start, end)
    assert len(parts) == 2
    assert _rows(r, parts) == [b"%03d" % i for i in range(10)]
    assert _rows(r, parts) == [b"%03d" % i for i in range(10)]  # a retry reads the same
    # batch 1 planned (offset log written), then the driver dies before it commits
    end1 = r.latestOffset(end, ReadMaxRows(10))
    assert end1 == {"seq-q": 20}
    with StreamClient(http) as c:
        lease = c.info("seq-q")["leases"][0]
    assert (lease["settled"], lease["next"]) == (10, 20)  # batch 0 settled early (F4)
    # restart: a new reader replays batch 1 exactly
    r2 = RingMQStreamReader(opts)
    assert _rows(r2, r2.partitions(end, end1)) == [b"%03d" % i for i in range(10, 20)]
    r2.commit(end1)
    end2 = r2.latestOffset(end1, ReadAllAvailable())
    assert end2 == {"seq-q": 25}
    assert r2.latestOffset(end2, ReadMaxRows(10)) == end2  # idle: unchanged
    r2.commit(end2)
    with StreamClient(http) as c:
        info = c.info("seq-q")
    assert (info["ready"], info["unacked"], info["messages"]) == (0, 0, 0)
    # a new query (fresh checkpoint) under the same name starts at the settled mark
    r3 = RingMQStreamReader(opts)
    assert r3.initialOffset() == {"seq-q": 25}
    for reader in (r, r2, r3):
        reader.stop()


def test_available_now_target_and_old_signature(live_broker: BrokerThread) -> None:
    amqp, http = urls(live_broker)
    _setup(live_broker, "an-q", 12)
    opts = Options.parse({"url": amqp, "httpUrl": http, "queue": "an-q", "consumerName": "c"})
    r = RingMQStreamReader(opts)
    r.prepareForTriggerAvailableNow()
    _setup(live_broker, "an-q", 5)  # arrives after the trigger started: not in this run
    assert r.latestOffset() == {"an-q": 12}  # Spark 4.0/4.1 call: no arguments
    assert r.latestOffset({"an-q": 12}, ReadMaxRows(100)) == {"an-q": 12}
    latest = r.reportLatestOffset()
    r.stop()
    assert latest["an-q"]["ready"] == 5


def test_ring_evictions_show_in_progress(live_broker: BrokerThread) -> None:
    amqp, http = urls(live_broker)
    _setup(live_broker, "ring-q", 3, {"x-ring-size": 3})
    opts = Options.parse({"url": amqp, "httpUrl": http, "queue": "ring-q", "consumerName": "c"})
    r = RingMQStreamReader(opts)
    assert r.latestOffset({"ring-q": 0}, ReadMaxRows(1)) == {"ring-q": 1}
    _setup(live_broker, "ring-q", 6, {"x-ring-size": 3})  # evicts 5 of the waiting ticks
    r.latestOffset({"ring-q": 1}, ReadMaxRows(100))
    latest = r.reportLatestOffset()["ring-q"]
    r.stop()
    assert latest["evicted"]["ring_evicted"] == 5
    assert latest["skipped"] == 5


def test_batch_reader_partitions_cover_the_queue(live_broker: BrokerThread) -> None:
    amqp, http = urls(live_broker)
    _setup(live_broker, "b-q", 30)
    opts = Options.parse(
        {"url": amqp, "httpUrl": http, "queue": "b-q", "minMessagesPerPartition": "4"}
    )
    reader = RingMQBatchReader(opts)
    parts = reader.partitions()
    assert len(parts) == 2
    got = [b for p in parts for batch in reader.read(p) for b in batch.column("body").to_pylist()]
    assert got == [b"%03d" % i for i in range(30)]


def test_batches_above_one_reserve_call(
    live_broker: BrokerThread, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The broker reserves at most MAX_RESERVE_PER_CALL positions per request: larger batches
    # are reserved in several calls (shrunk here to 7 so that a small queue shows it).
    from ringmq.connector.spark import source

    monkeypatch.setattr(source, "_RESERVE_CALL", 7)
    amqp, http = urls(live_broker)
    _setup(live_broker, "big-q", 30)
    opts = Options.parse({"url": amqp, "httpUrl": http, "queue": "big-q", "consumerName": "big"})
    reader = RingMQStreamReader(opts)
    start = reader.initialOffset()
    end = reader.latestOffset(start, ReadMaxRows(25))
    assert end == {"big-q": 25}
    parts = reader.partitions(start, end)
    assert _rows(reader, parts) == [b"%03d" % i for i in range(25)]
    # the rest: fewer than asked, the loop stops at the short call
    assert reader.latestOffset(end, ReadMaxRows(100)) == {"big-q": 30}
    reader.stop()
    with StreamClient(http) as c:
        lease = c.info("big-q")["leases"][0]
        assert (lease["settled"], lease["next"], lease["held"]) == (25, 30, 5)


def test_stream_start_is_resolved_once_per_runner(live_broker: BrokerThread) -> None:
    # Spark asks a new query's runner for initialOffset twice (to plan the first batch's end,
    # then its start): `latest` must name the same offset both times, whatever was published
    # in between, or the first batch's range is not the one its end was computed from.
    import pika

    from ringmq.connector.spark.streamsource import StreamOffsetReader

    amqp, http = urls(live_broker)
    conn = pika.BlockingConnection(pika.ConnectionParameters("127.0.0.1", live_broker.port))
    conn.channel().queue_declare("log-q", durable=True, arguments={"x-queue-type": "stream"})
    conn.close()
    with Publisher(amqp) as pub:
        pub.publish_many(("", "log-q", b"\x00\x00", b"early") for _ in range(5))
    opts = Options.parse(
        {"url": amqp, "httpUrl": http, "queue": "log-q", "startingOffsets": "latest"}
    )
    reader = StreamOffsetReader(opts)
    assert reader.initialOffset() == {"log-q": 5}  # a new query's first ask
    with Publisher(amqp) as pub:
        pub.publish_many(("", "log-q", b"\x00\x00", b"late") for _ in range(3))
    with StreamClient(http) as c:
        assert c.stream_bounds("log-q")["next_offset"] == 8
    try:
        assert reader.initialOffset() == {"log-q": 5}
        assert reader.latestOffset({"log-q": 5}, ReadAllAvailable()) == {"log-q": 8}
    finally:
        reader.stop()
