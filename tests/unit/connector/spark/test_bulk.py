"""Bulk publish, columnar reads and permissions of the streams API against a running broker."""

from __future__ import annotations

import pika
import pytest

pytest.importorskip("pyspark")
pa = pytest.importorskip("pyarrow")

from ringmq.amqp.properties import BasicProperties, encode_properties  # noqa: E402
from ringmq.connector.client import PublishError, StreamAPIError, StreamClient  # noqa: E402
from ringmq.connector.records import encode_publish, property_maps, skip_published  # noqa: E402
from ringmq.connector.spark.options import Options  # noqa: E402
from ringmq.connector.spark.rows import columns_to_batch, count_and_last_seq, to_batch  # noqa: E402
from ringmq.connector.spark.sink import arrow_rows, publish_arrow, publish_rows  # noqa: E402
from ringmq.management.records import PermissionInfo  # noqa: E402
from ringmq.node import BrokerThread  # noqa: E402
from tests.facade import admin_of  # noqa: E402
from tests.unit.connector.conftest import urls  # noqa: E402

pytestmark = pytest.mark.integration


def _channel(b: BrokerThread) -> tuple[pika.BlockingConnection, object]:
    conn = pika.BlockingConnection(pika.ConnectionParameters("127.0.0.1", b.port))
    return conn, conn.channel()


def _mid(i: int) -> bytes:
    return encode_properties(BasicProperties(message_id=f"m{i}"))


def test_bulk_publish_routes_dedups_and_confirms(live_broker: BrokerThread) -> None:
    _, http = urls(live_broker)
    conn, ch = _channel(live_broker)
    ch.queue_declare("plain")  # type: ignore[attr-defined]
    ch.queue_declare("durable", durable=True)  # type: ignore[attr-defined]
    ch.queue_declare(  # type: ignore[attr-defined]
        "dedup", arguments={"x-message-deduplication-window-ms": 60_000}
    )
    ch.exchange_declare("fan", "fanout")  # type: ignore[attr-defined]
    ch.queue_bind("plain", "fan")  # type: ignore[attr-defined]
    ch.queue_bind("dedup", "fan")  # type: ignore[attr-defined]
    ch.queue_declare(  # type: ignore[attr-defined]
        "small", arguments={"x-max-length": 2, "x-overflow": "reject-publish"}
    )
    conn.close()
    with StreamClient(http) as c:
        body = encode_publish(("", _mid(i), b"b%d" % i) for i in range(10))
        assert c.publish("fan", body)["published"] == 10
        assert c.publish("fan", body)["published"] == 10  # a retry: dedup drops it there
        assert c.info("plain")["ready"] == 20
        assert c.info("dedup")["ready"] == 10
        persistent = encode_properties(BasicProperties(delivery_mode=2))
        n = 3000  # more than one slice of the endpoint
        assert (
            c.publish("", encode_publish(("durable", persistent, b"p") for _ in range(n)))[
                "published"
            ]
            == n
        )
        got = c.browse_all("durable")
        assert len(got) == n
        assert property_maps(got[0].properties_bin)[1] == {"delivery_mode": "2"}
        # a queue refusing messages: nacks fail the publish, as AMQP confirms do
        with pytest.raises(PublishError, match="nacked"):
            c.publish("", encode_publish(("small", b"\x00\x00", b"x") for _ in range(3)))
        assert c.info("small")["ready"] == 2
        with pytest.raises(StreamAPIError) as err:
            c.publish("missing", encode_publish([("", b"\x00\x00", b"x")]))
        assert err.value.status == 404
        with pytest.raises(StreamAPIError) as err:
            c._request(
                "POST",
                "/api/streams/%2F/fan/publish",
                raw=b"\x05\x00\x00\x00",
                content_type="application/x-ringmq-publish",
            )
        assert err.value.status == 400


def test_skip_published_resumes_after_k() -> None:
    msgs = [(f"rk{i}", _mid(i), b"body%d" % i) for i in range(5)]
    body = encode_publish(msgs)
    assert skip_published(body, 0) == body
    assert skip_published(body, 2) == encode_publish(msgs[2:])
    assert skip_published(body, 5) == encode_publish([])


def test_columns_match_records(live_broker: BrokerThread) -> None:
    _, http = urls(live_broker)
    conn, ch = _channel(live_broker)
    ch.queue_declare("cols")  # type: ignore[attr-defined]
    conn.close()
    props = [
        b"\x00\x00",
        _mid(1),
        encode_properties(BasicProperties(headers={"k": "v", "n": 3}, message_id="x")),
        encode_properties(BasicProperties(content_type="text/plain", app_id="a")),
    ]
    with StreamClient(http) as c:
        c.publish("", encode_publish(("cols", props[i % 4], b"m%d" % i) for i in range(40)))
        c.reserve("cols", "r", 0, 30)
        cols = columns_to_batch("cols", c.read_columns("cols", "r", 3, 27))
        recs = to_batch("cols", c.read("cols", "r", 3, 27))
        assert cols.num_rows == 24
        assert cols.equals(recs)
        browse_cols = columns_to_batch("cols", c.browse_columns("cols", None, 100))
        assert browse_cols.equals(to_batch("cols", c.browse("cols", None, 100)))
        assert browse_cols.column("body").to_pylist() == [b"m%d" % i for i in range(30, 40)]
        assert count_and_last_seq(c.browse_columns("cols", None, 100)) == (
            10,
            browse_cols.column("seq")[9].as_py(),
        )
        empty_body = c.read_columns("cols", "r", 30, 30)
        assert columns_to_batch("cols", empty_body).num_rows == 0
        assert count_and_last_seq(empty_body) == (0, -1)
    with pytest.raises(ValueError, match="truncated"):
        columns_to_batch("q", b"\x02\x00\x00\x00" + b"\x00" * 10)
    with pytest.raises(ValueError, match="truncated"):
        count_and_last_seq(b"\x02\x00\x00\x00" + b"\x00" * 10)


def _admin(b: BrokerThread, fn: object) -> None:
    b.call(fn)  # type: ignore[arg-type]


def test_permissions(live_broker: BrokerThread) -> None:
    _, http = urls(live_broker)
    port = live_broker.server.http_port
    conn, ch = _channel(live_broker)
    ch.queue_declare("secret")  # type: ignore[attr-defined]
    ch.queue_declare("open")  # type: ignore[attr-defined]
    ch.exchange_declare("locked", "fanout")  # type: ignore[attr-defined]
    conn.close()
    admin = admin_of(live_broker)

    def setup() -> None:
        admin.add_user("reader", password="pw", password_hash=None, tags=["management"])
        admin.set_permissions(PermissionInfo("reader", "/", "", "^open$", "^open$"))
        admin.add_user("nobody", password="pw", password_hash=None, tags=["management"])

    _admin(live_broker, setup)
    with StreamClient(http) as guest:
        guest.publish(
            "", encode_publish([("secret", b"\x00\x00", b"s"), ("open", b"\x00\x00", b"o")])
        )
    reader = StreamClient(f"http://reader:pw@127.0.0.1:{port}")
    nobody = StreamClient(f"http://nobody:pw@127.0.0.1:{port}")
    with reader, nobody:
        assert reader.info("open")["ready"] == 1
        assert [r.body for r in reader.browse("open")] == [b"o"]
        for call in (
            lambda: reader.info("secret"),
            lambda: reader.browse("secret"),
            lambda: reader.reserve("secret", "c", 0, 1),
            lambda: reader.read("secret", "c", 0, 1),
            lambda: reader.settle("secret", "c", 0),
            lambda: nobody.info("open"),
            lambda: reader.publish("locked", encode_publish([("", b"\x00\x00", b"x")])),
            lambda: nobody.publish("", encode_publish([("open", b"\x00\x00", b"x")])),
        ):
            with pytest.raises(StreamAPIError) as err:
                call()
            assert err.value.status == 403, err.value
        # the default exchange is "amq.default" for permissions, as in AMQP
        with pytest.raises(StreamAPIError) as err:
            reader.publish("", encode_publish([("open", b"\x00\x00", b"x")]))
        assert err.value.status == 403

        def admin_call() -> None:
            admin.set_permissions(
                PermissionInfo("reader", "/", "", "^(open|amq.default)$", "^open$")
            )

        _admin(live_broker, admin_call)
        assert reader.publish("", encode_publish([("open", b"\x00\x00", b"x")]))["published"] == 1
        assert reader.info("open")["ready"] == 2


def test_sink_http_path_matches_amqp_ids(live_broker: BrokerThread) -> None:
    amqp, http = urls(live_broker)
    conn, ch = _channel(live_broker)
    ch.queue_declare("sink", arguments={"x-message-deduplication-window-ms": 60_000})  # type: ignore[attr-defined]
    ch.queue_declare("other")  # type: ignore[attr-defined]
    ch.exchange_declare("fx", "fanout")  # type: ignore[attr-defined]
    ch.queue_bind("other", "fx")  # type: ignore[attr-defined]
    conn.close()
    smap = pa.map_(pa.string(), pa.string())
    plain = pa.RecordBatch.from_pydict(
        {"body": pa.array([b"a", b"b", b"c"]), "routing_key": pa.array([None, "sink", None])}
    )
    rich = pa.RecordBatch.from_pydict(
        {
            "body": pa.array(["d", "e"]),
            "headers": pa.array([[("k", "1")], None], type=smap),
            "message_id": pa.array([None, "fixed"]),
            "exchange": pa.array([None, "fx"]),
        }
    )
    via_amqp = Options.parse({"url": amqp, "routingKey": "sink"})
    via_http = Options.parse({"url": amqp, "httpUrl": http, "routingKey": "sink"})
    assert (via_amqp.publish_via, via_http.publish_via) == ("amqp", "http")
    a = publish_rows(via_amqp, arrow_rows(iter([plain])), streaming=False)
    h = publish_arrow(via_http, iter([plain]), streaming=False)
    assert (a.count, h.count) == (3, 3)
    assert (a.first_id, a.last_id) == (h.first_id, h.last_id)
    with StreamClient(http) as c:
        assert [r.body for r in c.browse_all("sink")] == [b"a", b"b", b"c"]  # copies dropped
        r = publish_arrow(via_http, iter([rich]), streaming=False)
        assert r.count == 2
        got = c.browse_all("sink")
        assert [x.body for x in got] == [b"a", b"b", b"c", b"d"]
        headers, _, mid = property_maps(got[3].properties_bin)
        assert headers == {"k": "1"}
        assert mid is not None
        assert mid.startswith("spark:0:")
        fx = c.browse_all("other")
        assert [x.body for x in fx] == [b"e"]
        assert property_maps(fx[0].properties_bin)[2] == "fixed"
        # streaming ids (no TaskContext: prefix from the option) are sequential row numbers
        seq_opts = Options.parse(
            {"url": amqp, "httpUrl": http, "routingKey": "other", "messageIdPrefix": "q:7"}
        )
        s = publish_arrow(seq_opts, iter([plain, plain]), streaming=True)
        assert (s.count, s.first_id, s.last_id) == (6, "q:7:0:0", "q:7:0:5")


def test_bulk_publish_waits_out_a_resource_alarm(live_broker: BrokerThread) -> None:
    import threading

    _, http = urls(live_broker)
    conn, ch = _channel(live_broker)
    ch.queue_declare("alarmed")  # type: ignore[attr-defined]
    conn.close()
    broker = live_broker.broker
    live_broker.call(lambda: broker.set_alarm("memory", "memory alarm (test)"))
    answers: list[dict[str, object]] = []

    def publish() -> None:
        with StreamClient(http) as c:
            body = encode_publish(("alarmed", _mid(i), b"%d" % i) for i in range(50))
            # As parts (what the Spark writer sends): joined only for the retry after a 503.
            parts: list[bytes | memoryview] = [body[:7], memoryview(body)[7:100], body[100:]]
            answers.append(c.publish("", parts, retry_s=30))

    t = threading.Thread(target=publish)
    t.start()
    with StreamClient(http) as c:
        # Refused (503) while the alarm is on: nothing gets in.
        for _ in range(3):
            t.join(0.3)
            assert c.info("alarmed")["ready"] == 0
        live_broker.call(lambda: broker.set_alarm("memory", None))
        t.join(30)
        assert not t.is_alive()
        assert answers == [{"published": 50, "nacked": 0, "first_nacked": None}]
        assert [r.body for r in c.browse_all("alarmed")] == [b"%d" % i for i in range(50)]


def test_bulk_publish_fails_when_the_store_cannot_sync(
    live_broker: BrokerThread, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A failed fsync nacks the held confirms (the AMQP publisher sees basic.nack): the bulk
    # publish must fail too rather than answer as if the messages were durable.
    import errno
    import os

    from ringmq.storage import journal

    _, http = urls(live_broker)
    conn, ch = _channel(live_broker)
    ch.queue_declare("dq", durable=True)  # type: ignore[attr-defined]
    conn.close()
    persistent = encode_properties(BasicProperties(delivery_mode=2))
    with StreamClient(http) as c:
        assert c.publish("", encode_publish([("dq", persistent, b"ok")]))["published"] == 1

        def bad_fsync(fd: int) -> None:
            raise OSError(errno.EIO, os.strerror(errno.EIO))

        monkeypatch.setattr(journal, "_datasync", bad_fsync)
        with pytest.raises(StreamAPIError) as err:
            c.publish("", encode_publish([("dq", persistent, b"lost")]))
        assert err.value.status == 500
        assert "durable" in err.value.text


@pytest.mark.parametrize("headers", [False, True])
@pytest.mark.parametrize("persistent", [False, True])
def test_persistent_writer_option_sets_delivery_mode(headers: bool, persistent: bool) -> None:
    from ringmq.amqp.properties import decode_properties
    from ringmq.connector.spark.bulk import encode_batch, sequential_ids
    from ringmq.management.streamwire import decode_publish

    cols = {"body": pa.array([b"a", b"b"], pa.binary())}
    if headers:
        cols["headers"] = pa.array([[("k", "v")], None], pa.map_(pa.string(), pa.string()))
    batch = pa.RecordBatch.from_pydict(cols)
    opts = Options.parse({"routingKey": "rk", "persistent": str(persistent).lower()})
    body, first, last = encode_batch(batch, opts, sequential_ids("q:1", 0), 0)
    props = [decode_properties(p) for _, p, _ in decode_publish(b"".join(body))]
    assert [p.message_id for p in props] == [first, last] == ["q:1:0:0", "q:1:0:1"]
    assert [p.delivery_mode for p in props] == [2 if persistent else None] * 2


def test_readers_page_with_their_next_request_under_way(
    live_broker: BrokerThread, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The executors' reads, without Spark: pages of 7 so that every partition takes several
    # requests, each asked for while the previous page is handed over; together the
    # partitions hold every message once, in order.
    from ringmq.connector.spark import source

    monkeypatch.setattr(source, "_READ_STEP", 7)
    amqp, http = urls(live_broker)
    conn, ch = _channel(live_broker)
    ch.queue_declare("pages")  # type: ignore[attr-defined]
    conn.close()
    with StreamClient(http) as c:
        c.publish("", encode_publish(("pages", b"\x00\x00", b"p%d" % i) for i in range(50)))
        opts = Options.parse(
            {
                "url": amqp,
                "httpUrl": http,
                "queue": "pages",
                "consumerName": "pr",
                "minMessagesPerPartition": "1",
                "partitionsPerRange": "3",
            }
        )
        batch = source.RingMQBatchReader(opts)
        parts = batch.partitions()
        assert len(parts) == 3
        got = [b for p in parts for page in batch.read(p) for b in page.column("body").to_pylist()]
        assert got == [b"p%d" % i for i in range(50)]
        c.reserve("pages", "pr", 0, 50)
        stream = source.RingMQStreamReader(opts)
        ranges = [source.RangePartition(opts, "pages", a, b) for a, b in ((0, 22), (22, 50))]
        got = [
            b for p in ranges for page in stream.read(p) for b in page.column("body").to_pylist()
        ]
        assert got == [b"p%d" % i for i in range(50)]
