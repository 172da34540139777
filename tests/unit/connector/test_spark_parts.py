"""Connector pieces that need neither a JVM nor a broker: options, splits, rows, pickling."""

from __future__ import annotations

import pickle

import pytest

pytest.importorskip("pyspark")
pa = pytest.importorskip("pyarrow")

from ringmq.amqp.properties import BasicProperties, encode_properties  # noqa: E402
from ringmq.connector.client import AMQPParams  # noqa: E402
from ringmq.connector.records import Record  # noqa: E402
from ringmq.connector.spark import OptionError, Options, RingMQDataSource  # noqa: E402
from ringmq.connector.spark.rows import READ_SCHEMA, to_batch  # noqa: E402
from ringmq.connector.spark.source import RangePartition, RingMQStreamReader, split  # noqa: E402


def test_options_parse_case_insensitive_and_defaults() -> None:
    o = Options.parse(
        {
            "URL": "amqp://u:p%40ss@10.0.0.1:5673/v%2Fh",
            "Queues": "a, b,,c",
            "consumerName": "job",
            "MAXMESSAGESPERBATCH": "500",
        }
    )
    assert (o.user, o.password, o.vhost) == ("u", "p@ss", "v/h")
    assert o.queues == ("a", "b", "c")
    assert o.max_messages_per_batch == 500
    assert o.http_url == "http://u:p%40ss@10.0.0.1:15672"
    assert o.require_consumer() == "job"
    with pytest.raises(OptionError, match="consumerName"):
        Options.parse({"queue": "q"}).require_consumer()
    with pytest.raises(OptionError, match="queue"):
        Options.parse({}).require_queues()
    with pytest.raises(OptionError, match="integer"):
        Options.parse({"maxMessagesPerBatch": "lots"})
    assert AMQPParams.from_url("amqp://h") == AMQPParams(host="h")


@pytest.mark.parametrize(
    ("lo", "hi", "parts", "min_size", "want"),
    [
        (0, 0, 2, 1, []),
        (0, 10, 2, 1, [(0, 5), (5, 10)]),
        (0, 10, 3, 1, [(0, 4), (4, 7), (7, 10)]),
        (5, 10, 4, 3, [(5, 10)]),
        (0, 7, 8, 1, [(i, i + 1) for i in range(7)]),
    ],
)
def test_split(lo: int, hi: int, parts: int, min_size: int, want: list[tuple[int, int]]) -> None:
    got = split(lo, hi, parts, min_size)
    assert got == want
    assert sum(b - a for a, b in got) == max(0, hi - lo)


def test_rows_to_arrow_batch() -> None:
    props = encode_properties(
        BasicProperties(headers={"sym": "A", "n": 3}, message_id="id1", content_type="t/x")
    )
    recs = [
        Record(0, 11, False, 1_700_000_000_123, "ex", "rk", props, b"\x00body"),
        Record(1, 13, True, 0, "", "q", b"\x00\x00", b""),
    ]
    batch = to_batch("q1", recs)
    assert batch.num_rows == 2
    d = batch.to_pydict()
    assert d["queue"] == ["q1", "q1"]
    assert d["seq"] == [11, 13]
    assert d["body"] == [b"\x00body", b""]
    assert dict(d["headers"][0]) == {"sym": "A", "n": "3"}
    assert dict(d["properties"][0]) == {"content_type": "t/x", "message_id": "id1"}
    assert d["message_id"] == ["id1", None]
    assert d["redelivered"] == [False, True]
    assert batch.schema.names == [c.split()[0] for c in READ_SCHEMA.split(", ")]


def test_partitions_and_reader_pickle() -> None:
    o = Options.parse({"queue": "q", "consumerName": "c"})
    p = pickle.loads(pickle.dumps(RangePartition(o, "q", 3, 9)))
    assert (p.queue, p.lo, p.hi, p.options) == ("q", 3, 9, o)
    reader = pickle.loads(pickle.dumps(RingMQStreamReader(o)))
    assert reader.consumer == "c"
    assert RingMQDataSource.name() == "ringmq"
