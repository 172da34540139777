"""The streams HTTP API and the plain clients against a running broker."""

from __future__ import annotations

import itertools
from collections.abc import Callable
from typing import Any

import pika
import pytest

from ringmq.amqp.properties import BasicProperties, encode_properties
from ringmq.connector.client import StreamAPIError, StreamClient
from ringmq.connector.publisher import Publisher
from ringmq.connector.records import property_maps
from ringmq.node import BrokerThread

from .conftest import urls

pytestmark = pytest.mark.integration


def _declare(b: BrokerThread, queue: str, args: dict[str, object] | None = None) -> None:
    conn = pika.BlockingConnection(pika.ConnectionParameters("127.0.0.1", b.port))
    ch = conn.channel()
    ch.queue_declare(queue, arguments=args)
    conn.close()


def _props(**kw: object) -> bytes:
    return encode_properties(BasicProperties(**kw))  # type: ignore[arg-type]


def test_publish_reserve_read_settle(live_broker: BrokerThread) -> None:
    amqp, http = urls(live_broker)
    _declare(live_broker, "q1")
    msgs = [
        ("", "q1", _props(message_id=f"m{i}", headers={"i": i}), b"body%d" % i) for i in range(50)
    ]
    with Publisher(amqp) as pub:
        assert pub.publish_many(msgs) == 50
    with StreamClient(http) as c:
        info = c.info("q1")
        assert info["ready"] == 50
        r = c.reserve("q1", "spark", 0, 20)
        assert (r["start"], r["end"]) == (0, 20)
        assert r["ready"] == 30
        assert r["unacked"] == 20
        a = c.read("q1", "spark", 0, 20)
        b = c.read("q1", "spark", 5, 10)
        assert [x.body for x in a] == [b"body%d" % i for i in range(20)]
        assert [x.pos for x in b] == [5, 6, 7, 8, 9]
        assert a == c.read("q1", "spark", 0, 20)
        headers, other, mid = property_maps(a[3].properties_bin)
        assert (headers, other["message_id"], mid) == ({"i": "3"}, "m3", "m3")
        assert all(x.seq < y.seq for x, y in itertools.pairwise(a))
        s = c.settle("q1", "spark", 20)
        assert (s["deleted"], s["settled"]) == (20, 20)
        assert c.settle("q1", "spark", 20)["deleted"] == 0
        # browse is non-destructive and sees the 30 ready messages
        page = c.browse_all("q1", page=7)
        assert [x.body for x in page] == [b"body%d" % i for i in range(20, 50)]
        assert c.info("q1")["ready"] == 30
        lease = c.info("q1")["leases"][0]
        assert (lease["consumer"], lease["settled"], lease["held"]) == ("spark", 20, 0)
        assert c.drop("q1", "spark")
        assert not c.drop("q1", "spark")


def test_expired_lease_goes_to_amqp_consumer(live_broker: BrokerThread) -> None:
    amqp, http = urls(live_broker)
    _declare(live_broker, "q2")
    with Publisher(amqp) as pub:
        pub.publish_many(("", "q2", b"\x00\x00", b"%d" % i) for i in range(5))
    with StreamClient(http) as c:
        r = c.reserve("q2", "job", 0, 5, lease_ms=200)
        assert r["end"] == 5
        conn = pika.BlockingConnection(pika.ConnectionParameters("127.0.0.1", live_broker.port))
        ch = conn.channel()
        got: list[tuple[bytes, bool]] = []
        # Nothing is ready until the lease expires; then the messages come back redelivered.
        for method, _, body in ch.consume("q2", inactivity_timeout=10):
            assert method is not None
            got.append((body, method.redelivered))
            ch.basic_ack(method.delivery_tag)
            if len(got) == 5:
                break
        conn.close()
        assert got == [(b"%d" % i, True) for i in range(5)]
        lease = c.info("q2")["leases"][0]
        assert (lease["expired"], lease["held"], lease["next"]) == (1, 0, 0)


def test_errors(live_broker: BrokerThread) -> None:
    _, http = urls(live_broker)
    with StreamClient(http) as c:
        with pytest.raises(StreamAPIError) as e:
            c.info("nope")
        assert e.value.status == 404
        _declare(live_broker, "q3")
        with pytest.raises(StreamAPIError) as e:
            c.reserve("q3", "", 0, 1)
        assert e.value.status == 400
    with (
        StreamClient(http.replace("guest:guest", "guest:wrong")) as bad,
        pytest.raises(StreamAPIError) as e,
    ):
        bad.info("q3")
    assert e.value.status == 401


def test_publisher_refused_on_missing_exchange(live_broker: BrokerThread) -> None:
    amqp, _ = urls(live_broker)
    from ringmq.connector.client import PublishError

    with Publisher(amqp) as pub, pytest.raises(PublishError, match="404"):
        pub.publish_many([("no-such-exchange", "k", b"\x00\x00", b"x")])


def test_framed_publishes_are_confirmed_or_refused(live_broker: BrokerThread) -> None:
    """`publish_framed` (pieces sent on its second thread) returns once all are confirmed, and
    raises the broker's refusal on the caller's thread."""
    pa = pytest.importorskip("pyarrow")
    from ringmq.connector.client import PublishError
    from ringmq.connector.spark.amqpframes import publish_frames

    amqp, http = urls(live_broker)
    _declare(live_broker, "framed")
    n = 3000
    props = pa.array([_props(message_id=f"f{i}") for i in range(n)], pa.binary())
    bodies = pa.array([b"x" * (i % 300) for i in range(n)], pa.binary())

    def pieces(ex: str) -> Any:
        return publish_frames(
            [ex] * n, ["framed"] * n, props, bodies, 131072, {}, join_bytes=50_000
        )

    with Publisher(amqp, window=500) as pub:
        assert pub.publish_framed(pieces("")) == n
        with pytest.raises(PublishError, match="404"):
            pub.publish_framed(pieces("no-such-exchange"))
    with StreamClient(http) as sc:
        assert sc.info("framed")["ready"] == n


def test_dedup_by_message_id_per_queue_and_exchange(live_broker: BrokerThread) -> None:
    amqp, http = urls(live_broker)
    conn = pika.BlockingConnection(pika.ConnectionParameters("127.0.0.1", live_broker.port))
    ch = conn.channel()
    ch.queue_declare("dq", arguments={"x-message-deduplication-window-ms": 60_000})
    ch.queue_declare("plain")
    ch.exchange_declare("dx", "fanout", arguments={"x-message-deduplication-window-ms": 60_000})
    ch.queue_declare("fq")
    ch.queue_bind("fq", "dx")
    conn.close()
    ids = ["a", "b", "a", "c", "b"]
    with Publisher(amqp) as pub:
        for q in ("dq", "plain"):
            pub.publish_many(("", q, _props(message_id=m), m.encode()) for m in ids)
        pub.publish_many(("dx", "", _props(message_id=m), m.encode()) for m in ids)
        pub.publish_many([("", "dq", b"\x00\x00", b"no-id"), ("", "dq", b"\x00\x00", b"no-id")])
    with StreamClient(http) as c:
        assert [r.body for r in c.browse_all("dq")] == [b"a", b"b", b"c", b"no-id", b"no-id"]
        assert len(c.browse_all("plain")) == 5
        assert [r.body for r in c.browse_all("fq")] == [b"a", b"b", b"c"]


def test_tail_seq_covers_the_newest_message_after_refusals(live_broker: BrokerThread) -> None:
    # Refused publishes take a seq too: tail_seq must be a seq, not a count of added messages,
    # or a batch browse over [head_seq, tail_seq] would miss the newest message.
    _, http = urls(live_broker)
    _declare(live_broker, "qtail", {"x-max-length": 2, "x-overflow": "reject-publish"})
    conn = pika.BlockingConnection(pika.ConnectionParameters("127.0.0.1", live_broker.port))
    ch = conn.channel()
    for body in (b"a", b"b", b"refused"):
        ch.basic_publish("", "qtail", body)
    ch.basic_get("qtail", auto_ack=True)  # a goes: room for one more
    ch.basic_publish("", "qtail", b"c")
    conn.close()
    with StreamClient(http) as c:
        info = c.info("qtail")
        newest = c.browse_all("qtail")
        assert [x.body for x in newest] == [b"b", b"c"]
        assert info["tail_seq"] == newest[-1].seq


def _paged_queue(b: BrokerThread, queue: str) -> Callable[[], Any]:
    """Declare `queue`, fill it with 12 000 x 1 KiB (past the 8 MiB in-memory head, so most
    of it is paged) and return a getter of its engine (call it on the broker's loop)."""
    amqp, _ = urls(b)
    _declare(b, queue)
    with Publisher(amqp) as pub:
        pub.publish_many(("", queue, b"\x00\x00", b"%05d" % i + b"x" * 1019) for i in range(12_000))

    def engine() -> Any:
        return b.broker.vhosts["/"].queues[queue].queue

    assert b.call(lambda: engine().spilled) > 0
    return engine


def test_info_and_reserve_leave_a_paged_queue_paged(live_broker: BrokerThread) -> None:
    # head_seq used to come from the browse index, which pages the whole queue in and stops
    # paging it for good: a Spark query start (initialOffset, AvailableNow) did that.
    _, http = urls(live_broker)
    engine = _paged_queue(live_broker, "qpaged")
    spilled = live_broker.call(lambda: engine().spilled)
    with StreamClient(http) as c:
        info = c.info("qpaged")
        assert info["head_seq"] == 1
        assert info["ready"] == 12_000
        r = c.reserve("qpaged", "spark", 0, 100)
        assert r["end"] == 100
        assert c.info("qpaged")["head_seq"] == 1  # the reserved (unacked) messages lead
        assert c.read("qpaged", "spark", 0, 1)[0].body.startswith(b"00000")
    assert live_broker.call(lambda: engine().spilled) == spilled
    assert live_broker.call(lambda: engine()._index) is None


def test_browsing_a_paged_queue_leaves_it_paged(live_broker: BrokerThread) -> None:
    # The streams browse (Spark's batch read) reads the paged tail in place: building the
    # browse index would page the whole queue in and keep it in memory until a restart.
    _, http = urls(live_broker)
    engine = _paged_queue(live_broker, "qbrowse")
    spilled = live_broker.call(lambda: engine().spilled)
    with StreamClient(http) as c:
        got = c.browse_all("qbrowse", page=5_000)
        assert [r.body[:5] for r in got] == [b"%05d" % i for i in range(12_000)]
        assert [r.seq for r in got] == list(range(1, 12_001))
        cols = c.browse_columns("qbrowse", got[-10].seq, 100)
        assert int.from_bytes(cols[:4], "little") == 9
        # the columns of the paged rows (read from their page records) are the records'
        rows = pytest.importorskip("ringmq.connector.spark.rows")
        for after in (None, 5_000):
            batch = rows.columns_to_batch("qbrowse", c.browse_columns("qbrowse", after, 12_000))
            want = rows.to_batch("qbrowse", c.browse("qbrowse", after, 12_000))
            assert batch.num_rows == (12_000 if after is None else 7_000)
            assert batch.equals(want)
    assert live_broker.call(lambda: engine().spilled) == spilled
    assert live_broker.call(lambda: engine()._index) is None
    conn = pika.BlockingConnection(pika.ConnectionParameters("127.0.0.1", live_broker.port))
    ch = conn.channel()
    for i in range(3):  # consumers still get the queue in order
        _, _, body = ch.basic_get("qbrowse", auto_ack=True)
        assert body[:5] == b"%05d" % i
    conn.close()
