"""The writer's bulk path: Arrow record batches straight into `/api/streams/.../publish` bodies.

`encode_batch` lays an Arrow batch out in the `application/x-ringmq-publish` format (see
`ringmq.connector.records.encode_publish`) from the columns' own buffers: bodies and routing
keys are copied as whole buffers and their lengths computed with numpy, and the properties of
the common row (only a `message_id`) are built with Arrow compute kernels. Rows that carry
`headers` or `properties` columns take the per-row AMQP properties encoder. Message ids are the
ones the AMQP path uses (`writerows.digest`), so both paths de-duplicate each other's copies.

`publish_batches` groups rows by exchange, posts requests that grow from `FIRST_ROWS` rows to
`BULK_ROWS` and overlaps encoding the next request with the broker ingesting the previous one
(one sender thread, one HTTP connection).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from typing import TYPE_CHECKING, Any, Final

if TYPE_CHECKING:
    import pyarrow as pa

    from ringmq.connector.spark.options import Options

BULK_ROWS: Final = 50_000
"""Most rows per publish request."""
FIRST_ROWS: Final = 2048
"""Rows of a task's first request; each next one is twice as large, up to `BULK_ROWS`."""
BULK_BYTES: Final = 32 * 1024 * 1024
"""Most body bytes per publish request (at least one batch)."""
_MID_ONLY_FLAGS: Final = b"\x00\x80"  # basic properties: only message_id present
_PERSISTENT_MID_FLAGS: Final = b"\x10\x80\x02"  # delivery_mode (= 2) and message_id present


def _binary(arr: Any) -> Any:
    """`arr` as a plain `binary` array without nulls (strings are cast, nulls are empty)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    if isinstance(arr, pa.ChunkedArray):
        arr = arr.combine_chunks()
    if not pa.types.is_binary(arr.type):
        arr = arr.cast(pa.binary())
    if arr.null_count:
        arr = pc.fill_null(arr, pa.scalar(b"", pa.binary()))
    return arr


def value_offsets(arr: Any) -> Any:
    """The numpy view of a non-empty binary array's `len + 1` value offsets, sliced or not."""
    import numpy as np

    n = len(arr)
    return np.frombuffer(arr.buffers()[1], dtype="<i4", count=arr.offset + n + 1)[arr.offset :]


_COPY_BELOW: Final = 512
"""Average body size under which `_values` copies bodies into bytes objects."""


def _values(arr: Any) -> list[Any]:
    """The values of a non-empty binary array as bytes-like objects: bytes copied out by Arrow
    when they are small on average (cheaper than a view each: 0.02 against 0.2 us at 100 B),
    else views of its buffer (copying 1 KiB bodies costs 0.3 us, a view 0.16)."""
    import itertools

    offs = value_offsets(arr)
    if int(offs[-1] - offs[0]) < _COPY_BELOW * len(arr):
        return arr.to_pylist()  # type: ignore[no-any-return]
    data = memoryview(arr.buffers()[2])
    ends = offs.tolist()
    return list(map(data.__getitem__, map(slice, ends, itertools.islice(ends, 1, None))))


def _lengths_and_values(arr: Any) -> tuple[bytes, bytes | memoryview]:
    """(u32 little-endian lengths, concatenated values) of a binary array, sliced or not; the
    values are a view of the array's buffer, not a copy."""
    import numpy as np

    if len(arr) == 0:
        return b"", b""
    bufs = arr.buffers()
    offs = value_offsets(arr)
    lengths = np.diff(offs).astype("<u4").tobytes()
    lo, hi = int(offs[0]), int(offs[-1])
    data = b"" if bufs[2] is None or hi == lo else memoryview(bufs[2])[lo:hi]
    return lengths, data


def _ids(batch: Any, ids: Callable[[Any, int], Any], start: int) -> Any:
    """The message ids of the batch: the `message_id` column where set, else generated."""
    import pyarrow.compute as pc

    made = ids(batch, start)
    if "message_id" not in batch.schema.names:
        return made
    given = batch.column("message_id")
    return pc.coalesce(given.cast(made.type), made)


def sequential_ids(prefix: str, partition: int) -> Callable[[Any, int], Any]:
    """Ids `<prefix>:<partition>:<row index>` (streams: the same on replay and retry)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    def make(batch: Any, start: int) -> Any:
        idx = pa.array(range(start, start + batch.num_rows), type=pa.int64()).cast(pa.string())
        head = pa.scalar(f"{prefix}:{partition}", pa.string())
        return pc.binary_join_element_wise(head, idx, ":")

    return make


def content_ids(
    prefix: str, partition: int, rks: Callable[[Any], list[str]]
) -> Callable[[Any, int], Any]:
    """Ids `<prefix>:<partition>:<row index>:<hash of routing key and body>` (batch writes).

    The hashes (`writerows.digest_words`) are taken over the bodies as `_values` hands them
    out, and the ids are put together with numpy and Arrow kernels: no Python string per
    row."""
    import itertools

    import numpy as np
    import pyarrow as pa
    import pyarrow.compute as pc

    from ringmq.connector.spark.writerows import digest_words, seeds

    def make(batch: Any, start: int) -> Any:
        n = batch.num_rows
        if not n:
            return pa.array([], type=pa.string())
        keys = rks(batch)
        by_key = {rk: seeds(rk) for rk in set(keys)}
        if len(by_key) == 1:
            crc, z = by_key[keys[0]]
            crcs: Any = itertools.repeat(crc)
            zs: Any = itertools.repeat(z)
        else:
            crcs = [by_key[k][0] for k in keys]
            zs = [by_key[k][1] for k in keys]
        words = digest_words(_values(_binary(batch.column("body"))), crcs, zs)
        idx = pa.array(np.arange(start, start + n, dtype=np.int64)).cast(pa.string())
        head = pa.scalar(f"{prefix}:{partition}", pa.string())
        return pc.binary_join_element_wise(head, idx, hex_words(words), ":")

    return make


def hex_words(words: Any) -> Any:
    """16 lowercase hex digits of each 64-bit word of a numpy array, as an Arrow string array."""
    import numpy as np
    import pyarrow as pa

    n = len(words)
    digits = words.astype(">u8").tobytes().hex().encode()
    offsets = np.arange(0, 16 * (n + 1), 16, dtype=np.int32)
    return pa.Array.from_buffers(
        pa.string(), n, [None, pa.py_buffer(offsets), pa.py_buffer(digits)]
    )


def _mid_properties(ids: Any, persistent: bool = False) -> Any:
    """Basic properties holding only `message_id` (and delivery_mode 2 when `persistent`),
    one per id (ids of at most 255 bytes)."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.compute as pc

    raw = _binary(ids)
    lens = pc.binary_length(raw).to_numpy(zero_copy_only=False)
    if len(lens) and int(lens.max()) > 255:
        raise ValueError("message_id longer than 255 bytes")
    one = pa.FixedSizeBinaryArray.from_buffers(
        pa.binary(1), len(raw), [None, pa.py_buffer(lens.astype(np.uint8).tobytes())]
    ).cast(pa.binary())
    flags = pa.scalar(_PERSISTENT_MID_FLAGS if persistent else _MID_ONLY_FLAGS, pa.binary())
    return pc.binary_join_element_wise(flags, one, raw, pa.scalar(b"", pa.binary()))


def _row_properties(batch: Any, ids: Any, persistent: bool = False) -> Any:
    """Per-row properties for batches with `headers` or `properties` columns."""
    import pyarrow as pa

    from ringmq.amqp.properties import encode_properties
    from ringmq.connector.spark.writerows import row_properties

    names = batch.schema.names
    headers = batch.column("headers").to_pylist() if "headers" in names else None
    extras = batch.column("properties").to_pylist() if "properties" in names else None
    out: list[bytes] = []
    for i, mid in enumerate(ids.to_pylist()):
        h = headers[i] if headers is not None else None
        extra = extras[i] if extras is not None else None
        out.append(encode_properties(row_properties(mid, h, extra, persistent)))
    return pa.array(out, type=pa.binary())


def routing_keys(options: Options) -> Callable[[Any], list[str]]:
    """The rows' routing keys as Python strings (the `routing_key` column or the option)."""

    def get(batch: Any) -> list[str]:
        if "routing_key" in batch.schema.names:
            col = batch.column("routing_key")
            return [options.routing_key if v is None else str(v) for v in col.to_pylist()]
        return [options.routing_key] * batch.num_rows

    return get


def message_columns(
    batch: pa.RecordBatch, options: Options, ids: Callable[[Any, int], Any], start: int
) -> tuple[Any, Any, Any]:
    """(message ids, encoded basic properties, bodies as `binary`) of the rows of `batch`,
    numbered from `start`: what both writer paths send for each row."""
    names = batch.schema.names
    mids = _ids(batch, ids, start)
    if "headers" in names or "properties" in names:
        props = _row_properties(batch, mids, options.persistent)
    else:
        props = _mid_properties(mids, options.persistent)
    return mids, props, _binary(batch.column("body"))


def encode_batch(
    batch: pa.RecordBatch, options: Options, ids: Callable[[Any, int], Any], start: int
) -> tuple[list[bytes | memoryview], str | None, str | None]:
    """(publish body, first id, last id) of the rows of `batch`, numbered from `start`. The
    body is a list of parts, sent one after the other: the values are views of the batch's
    buffers, never joined into one copy (`StreamClient.publish` takes the parts)."""
    import struct

    import pyarrow as pa
    import pyarrow.compute as pc

    n = batch.num_rows
    names = batch.schema.names
    mids, props, bodies = message_columns(batch, options, ids, start)
    if "routing_key" in names:
        rk = _binary(
            pc.fill_null(
                batch.column("routing_key").cast(pa.string()),
                pa.scalar(options.routing_key, pa.string()),
            )
        )
        rk_lens, rk_data = _lengths_and_values(rk)
    else:
        one = options.routing_key.encode()
        rk_lens, rk_data = struct.pack("<I", len(one)) * n, one * n
    p_lens, p_data = _lengths_and_values(props)
    b_lens, b_data = _lengths_and_values(bodies)
    body = [struct.pack("<I", n), rk_lens, p_lens, b_lens, rk_data, p_data, b_data]
    first = mids[0].as_py() if n else None
    last = mids[n - 1].as_py() if n else None
    return body, first, last


def _by_exchange(batch: Any, default: str) -> Iterator[tuple[str, Any]]:
    import pyarrow as pa
    import pyarrow.compute as pc

    if "exchange" not in batch.schema.names:
        yield default, batch
        return
    col = pc.fill_null(batch.column("exchange").cast(pa.string()), default)
    values = pc.unique(col).to_pylist()
    if len(values) == 1:
        yield str(values[0]), batch
        return
    for v in values:
        yield str(v), batch.filter(pc.equal(col, v))


def publish_batches(
    options: Options, batches: Iterator[Any], ids: Callable[[Any, int], Any]
) -> tuple[int, str | None, str | None]:
    """Publish every row through the streams API; (count, first id, last id).

    Returns only after the broker confirmed every message; raises `PublishError` on a nack
    and `StreamAPIError` on a refused request (the Spark task fails and is retried).
    """
    import pyarrow as pa

    from ringmq.connector.client import StreamClient
    from ringmq.connector.spark.options import http_with_credentials

    client = StreamClient(
        http_with_credentials(options.http_url, options.user, options.password), options.vhost
    )
    count = 0
    first: str | None = None
    last: str | None = None
    pending: list[Any] = []
    rows = 0
    size = 0
    sent: Future[dict[str, Any]] | None = None

    with client, ThreadPoolExecutor(1, thread_name_prefix="ringmq-bulk") as pool:

        def flush() -> None:
            nonlocal count, first, last, pending, rows, size, sent
            if not pending:
                return
            table = pa.Table.from_batches(pending).combine_chunks()
            pending, rows, size = [], 0, 0
            for whole in table.to_batches():
                for exchange, part in _by_exchange(whole, options.exchange):
                    body, a, b = encode_batch(part, options, ids, count)
                    if sent is not None:
                        sent.result()
                    sent = pool.submit(client.publish, exchange, body)
                    count += part.num_rows
                    first = a if first is None else first
                    last = b if b is not None else last

        # Requests grow from FIRST_ROWS rows to BULK_ROWS: the broker takes the first while the
        # rest is encoded, and a small task still makes more than one request.
        limit = FIRST_ROWS
        for batch in batches:
            while batch.num_rows:
                part = batch.slice(0, limit - rows)
                batch = batch.slice(part.num_rows)
                pending.append(part)
                rows += part.num_rows
                size += part.column("body").nbytes
                if rows >= limit or size >= BULK_BYTES:
                    flush()
                    limit = min(BULK_ROWS, 2 * limit)
        flush()
        if sent is not None:
            sent.result()
    return count, first, last
