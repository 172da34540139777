"""Records to an Arrow batch in the read schema (no JVM, no broker)."""

from __future__ import annotations

import pytest

pytest.importorskip("pyspark")
pa = pytest.importorskip("pyarrow")

from ringmq.amqp.properties import BasicProperties, encode_properties  # noqa: E402
from ringmq.connector.records import Record  # noqa: E402
from ringmq.connector.spark.rows import READ_SCHEMA, to_batch  # noqa: E402


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
