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


_MID_ONLY: Final = 0x0080  # property flags with only message_id set (AMQP basic properties)


def _binary(kind: Any, n: int, lengths: Any, data: Any) -> Any:
    """An Arrow binary/string array over `data` (the values concatenated) and u32 `lengths`."""
    import pyarrow as pa
    import pyarrow.compute as pc

    if n == 0:
        return pa.array([], type=kind)
    ends = pc.cumulative_sum(lengths.cast(pa.int32()))
    offsets = pa.concat_arrays([pa.array([0], type=pa.int32()), ends])
    return pa.Array.from_buffers(kind, n, [None, offsets.buffers()[1], data])


def _property_columns(props: Any) -> tuple[Any, Any, Any]:
    """(headers map, properties map, message_id) arrays from the raw properties column.

    Messages without properties cost nothing per row; a message whose only property is
    `message_id` (what the ringmq writer publishes) is sliced without decoding; anything else
    goes through the AMQP properties decoder, memoised for repeated headers.
    """
    import pyarrow as pa
    import pyarrow.compute as pc

    n = len(props)
    smap = pa.map_(pa.string(), pa.string())
    if n == 0 or pc.all(pc.equal(props, pa.scalar(b"\x00\x00", pa.binary()))).as_py():
        empty = pa.MapArray.from_arrays(
            pa.repeat(pa.scalar(0, pa.int32()), n + 1),
            pa.array([], type=pa.string()),
            pa.array([], type=pa.string()),
        )
        return empty, empty, pa.nulls(n, pa.string())
    h_off = [0]
    h_keys: list[str] = []
    h_vals: list[str] = []
    p_off = [0]
    p_keys: list[str] = []
    p_vals: list[str] = []
    ids: list[str | None] = []
    memo: dict[bytes, tuple[dict[str, str], dict[str, str], str | None]] = {}
    for raw in props.to_pylist():
        if len(raw) >= 3 and raw[0] == 0 and raw[1] == _MID_ONLY and len(raw) == 3 + raw[2]:
            mid = raw[3:].decode("utf-8", "replace")
            p_keys.append("message_id")
            p_vals.append(mid)
            ids.append(mid)
        else:
            got = memo.get(raw)
            if got is None:
                got = property_maps(raw)
                if len(memo) < 1024:
                    memo[raw] = got
            h, p, mid = got
            h_keys += h.keys()
            h_vals += h.values()
            p_keys += p.keys()
            p_vals += p.values()
            ids.append(mid)
        h_off.append(len(h_keys))
        p_off.append(len(p_keys))
    headers = pa.MapArray.from_arrays(
        pa.array(h_off, type=pa.int32()),
        pa.array(h_keys, type=pa.string()),
        pa.array(h_vals, type=pa.string()),
    )
    other = pa.MapArray.from_arrays(
        pa.array(p_off, type=pa.int32()),
        pa.array(p_keys, type=pa.string()),
        pa.array(p_vals, type=pa.string()),
    )
    return headers.cast(smap), other.cast(smap), pa.array(ids, type=pa.string())


def count_and_last_seq(data: bytes) -> tuple[int, int]:
    """(rows, seq of the last row, -1 when none) of an `x-ringmq-columns` body, read from its
    head without building anything (a reader's next request depends on it).

    Raises:
        ValueError: the body is truncated.
    """
    import struct

    if len(data) < 4:
        raise ValueError("truncated columns")
    (n,) = struct.unpack_from("<I", data, 0)
    if n == 0:
        return 0, -1
    at = 4 + 8 * n + 8 * (n - 1)  # u32 n, u64[n] positions, then the seqs
    if at + 8 > len(data):
        raise ValueError("truncated columns")
    return n, struct.unpack_from("<Q", data, at)[0]


def columns_to_batch(queue: str, data: bytes) -> pa.RecordBatch:
    """One Arrow record batch with `READ_SCHEMA`'s columns from an `x-ringmq-columns` body.

    Fixed-width columns and the body, routing key and exchange are zero-copy views of `data`
    (see `ringmq.management.streams.encode_columns` for the layout); only the properties are
    looked at per row.

    Raises:
        ValueError: the body is truncated or inconsistent.
    """
    import struct

    import pyarrow as pa
    import pyarrow.compute as pc

    if len(data) < 4:
        raise ValueError("truncated columns")
    (n,) = struct.unpack_from("<I", data, 0)
    buf = pa.py_buffer(data)
    off = 4

    def take(width: int) -> Any:
        nonlocal off
        if off + width * n > len(data):
            raise ValueError("truncated columns")
        b = buf.slice(off, width * n)
        off += width * n
        return b

    pos = pa.Array.from_buffers(pa.int64(), n, [None, take(8)])
    seq = pa.Array.from_buffers(pa.int64(), n, [None, take(8)])
    flags = pa.Array.from_buffers(pa.uint8(), n, [None, take(1)])
    ts = pa.Array.from_buffers(pa.int64(), n, [None, take(8)])
    lens = [pa.Array.from_buffers(pa.uint32(), n, [None, take(4)]) for _ in range(4)]
    blobs = []
    for ln in lens:
        total = int(pc.sum(ln).as_py() or 0)
        if off + total > len(data):
            raise ValueError("truncated columns")
        blobs.append(buf.slice(off, total))
        off += total
    if off != len(data):
        raise ValueError("columns body has trailing bytes")
    return assemble(
        queue,
        pos,
        seq,
        _binary(pa.binary(), n, lens[3], blobs[3]),
        _binary(pa.string(), n, lens[1], blobs[1]),
        _binary(pa.string(), n, lens[0], blobs[0]),
        _binary(pa.binary(), n, lens[2], blobs[2]),
        pc.not_equal(pc.bit_wise_and(flags, pa.scalar(1, pa.uint8())), pa.scalar(0, pa.uint8())),
        ts,
    )


def assemble(
    queue: str,
    pos: Any,
    seq: Any,
    body: Any,
    routing_key: Any,
    exchange: Any,
    props: Any,
    redelivered: Any,
    timestamp_ms: Any,
) -> pa.RecordBatch:
    """The record batch of `READ_SCHEMA` from its columns as Arrow arrays (positions and seqs
    int64, timestamps int64 ms, the raw AMQP properties binary: decoded into the headers,
    properties and message id columns here), whichever wire they came from."""
    import pyarrow as pa
    import pyarrow.compute as pc

    headers, other, ids = _property_columns(props)
    arrays = [
        pa.repeat(pa.scalar(queue, pa.string()), len(pos)),
        pos,
        seq,
        body,
        routing_key,
        exchange,
        headers,
        other,
        ids,
        redelivered,
        pc.multiply(timestamp_ms, 1000).cast(pa.timestamp("us", tz="UTC")),
    ]
    return pa.RecordBatch.from_arrays(arrays, schema=arrow_schema())
