"""The reader's schema and the conversion of broker records into Arrow record batches."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Final

from ringmq.connector.records import Record, property_maps

if TYPE_CHECKING:
    import pyarrow as pa

READ_SCHEMA: Final = (
    "queue string, position long, seq long, body binary, routing_key string, exchange string, "
    "headers map<string,string>, properties map<string,string>, message_id string, "
    "redelivered boolean, timestamp timestamp"
)
"""Columns of `spark.read(Stream).format("ringmq")` (docs/spark.md)."""

WRITE_COLUMNS: Final = ("body", "routing_key", "exchange", "headers", "message_id", "properties")
"""Columns the writer understands; `body` is required, the others are optional."""


def arrow_schema() -> pa.Schema:
    import pyarrow as pa

    smap = pa.map_(pa.string(), pa.string())
    return pa.schema(
        [
            ("queue", pa.string()),
            ("position", pa.int64()),
            ("seq", pa.int64()),
            ("body", pa.binary()),
            ("routing_key", pa.string()),
            ("exchange", pa.string()),
            ("headers", smap),
            ("properties", smap),
            ("message_id", pa.string()),
            ("redelivered", pa.bool_()),
            ("timestamp", pa.timestamp("us", tz="UTC")),
        ]
    )


def to_batch(queue: str, records: Sequence[Record]) -> pa.RecordBatch:
    """One Arrow record batch with `READ_SCHEMA`'s columns."""
    import pyarrow as pa

    headers: list[list[tuple[str, str]]] = []
    props: list[list[tuple[str, str]]] = []
    ids: list[str | None] = []
    for r in records:
        h, p, mid = property_maps(r.properties_bin)
        headers.append(list(h.items()))
        props.append(list(p.items()))
        ids.append(mid)
    n = len(records)
    columns: list[Any] = [
        [queue] * n,
        [r.pos for r in records],
        [r.seq for r in records],
        [r.body for r in records],
        [r.routing_key for r in records],
        [r.exchange for r in records],
        headers,
        props,
        ids,
        [r.redelivered for r in records],
        [r.timestamp_ms * 1000 for r in records],
    ]
    schema = arrow_schema()
    arrays = [pa.array(col, type=f.type) for col, f in zip(columns, schema, strict=True)]
    return pa.RecordBatch.from_arrays(arrays, schema=schema)
