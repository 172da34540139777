"""The AMQP writer's frames, column by column: a whole Arrow batch of publishes in one buffer.

A publish on channel 1 is a method frame (the same bytes for every row with the same exchange
and routing key), a content header frame (frame head, class 60, weight 0, body size, the
row's encoded properties, frame end), one body frame (frame head, body, frame end) unless the
body is empty, and more body frames when it does not fit `frame_max`. `publish_frames` builds
the fixed-size parts of every row at once with numpy (structured arrays written in network
byte order), lays each row's pieces side by side with one Arrow kernel
(`binary_join_element_wise`, one copy of each body, in C++), and hands out the joined values
buffer with each message's end offset, so `publisher.Publisher.publish_framed` sends slices of
it. Rows whose body needs more than one frame are encoded one at a time by the codec's
`encode_content_frames`, in their place. `tests/unit/connector/spark/test_sink_columns.py`
holds the result to the codec's bytes, row for row.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any, Final

from ringmq.amqp import spec
from ringmq.amqp.frames import (
    FRAME_BODY,
    FRAME_END,
    FRAME_HEADER,
    FRAME_OVERHEAD,
    encode_content_frames,
    encode_method_frame,
)

CHANNEL: Final = 1
METHODS_KEPT: Final = 10_000
"""Most method frames kept in a caller's cache."""
JOIN_BYTES: Final = 16 * 1024 * 1024
"""Most body bytes joined into one buffer (Arrow's 32-bit offsets; bounded memory)."""


def _header_dtype() -> Any:
    import numpy as np

    # A content header frame's head and fixed fields: type, channel, size, class, weight,
    # body size (frames.HEADER_HEAD), packed, big-endian.
    return np.dtype(
        [("t", "u1"), ("c", ">u2"), ("s", ">u4"), ("k", ">u2"), ("w", ">u2"), ("b", ">u8")]
    )


def _body_head_dtype() -> Any:
    import numpy as np

    # The header frame's end octet, then the body frame's head: type, channel, size.
    return np.dtype([("e", "u1"), ("t", "u1"), ("c", ">u2"), ("s", ">u4")])


def _fixed(arr: Any, width: int) -> Any:
    """A numpy structured array's records as an Arrow `binary` array of `width`-byte values."""
    import pyarrow as pa

    fixed = pa.FixedSizeBinaryArray.from_buffers(
        pa.binary(width), len(arr), [None, pa.py_buffer(arr.tobytes())]
    )
    return fixed.cast(pa.binary())


def _varying(rows: Any, lengths: Any) -> Any:
    """An Arrow `binary` array whose row i is the first `lengths[i]` bytes of `rows[i]` (a
    two-dimensional uint8 array)."""
    import numpy as np
    import pyarrow as pa

    keep = np.arange(rows.shape[1]) < lengths[:, None]
    offsets = np.zeros(len(lengths) + 1, dtype=np.int32)
    np.cumsum(lengths, out=offsets[1:])
    data = rows[keep].tobytes()
    return pa.Array.from_buffers(
        pa.binary(), len(lengths), [None, pa.py_buffer(offsets.tobytes()), pa.py_buffer(data)]
    )


def _lengths(arr: Any) -> Any:
    import numpy as np

    from ringmq.connector.spark.bulk import value_offsets

    return np.diff(value_offsets(arr))


def _joined(methods: Any, props: Any, bodies: Any) -> tuple[memoryview, list[int]]:
    """The frames of rows whose bodies fit one frame: (buffer, each message's end offset)."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.compute as pc

    n = len(bodies)
    body_lens = _lengths(bodies)
    head = np.zeros(n, dtype=_header_dtype())
    head["t"] = FRAME_HEADER
    head["c"] = CHANNEL
    head["s"] = _lengths(props) + 12
    head["k"] = 60
    head["b"] = body_lens
    mid = np.zeros(n, dtype=_body_head_dtype())
    mid["e"] = FRAME_END
    mid["t"] = FRAME_BODY
    mid["c"] = CHANNEL
    mid["s"] = body_lens
    full = body_lens > 0
    if full.all():
        body_head = _fixed(mid, 8)
        tail: Any = pa.scalar(b"\xce", pa.binary())
    else:  # an empty body has no body frame: the header's frame end alone
        rows = mid.view(np.uint8).reshape(n, 8)
        body_head = _varying(rows, np.where(full, 8, 1))
        ends = np.full((n, 1), FRAME_END, dtype=np.uint8)
        tail = _varying(ends, full.astype(np.int32))
    empty = pa.scalar(b"", pa.binary())
    wire = pc.binary_join_element_wise(
        methods, _fixed(head, 19), props, body_head, bodies, tail, empty
    )
    bufs = wire.buffers()
    offs = np.frombuffer(bufs[1], dtype="<i4", count=n + 1)
    base = int(offs[0])
    data = memoryview(bufs[2] if bufs[2] is not None else b"")[base : int(offs[n])]
    return data, (offs[1:] - base).tolist()


def publish_frames(
    exchanges: Sequence[str],
    routing_keys: Sequence[str],
    props: Any,
    bodies: Any,
    frame_max: int,
    methods: dict[tuple[str, str], bytes],
    join_bytes: int = JOIN_BYTES,
) -> Iterator[tuple[memoryview | bytes, list[int]]]:
    """(buffer, end offset of each of its messages) pieces holding the publishes of the rows,
    in order: row i publishes `bodies[i]` with the encoded properties `props[i]` (Arrow
    `binary` arrays without nulls) to `exchanges[i]` with `routing_keys[i]`. `methods` caches
    method frames by (exchange, routing key) across calls; `join_bytes` bounds the body bytes
    of one piece (one row at least)."""
    import numpy as np
    import pyarrow as pa

    n = len(bodies)
    max_body = frame_max - FRAME_OVERHEAD
    pairs: list[tuple[str, str]] = []
    frame_of: dict[tuple[str, str], bytes] = {}
    for pair in dict.fromkeys(zip(exchanges, routing_keys, strict=True)):
        frame = methods.get(pair)
        if frame is None:
            ex, rk = pair
            frame = encode_method_frame(CHANNEL, spec.BasicPublish(exchange=ex, routing_key=rk))
            if len(methods) < METHODS_KEPT:
                methods[pair] = frame
        frame_of[pair] = frame
        pairs.append(pair)
    if len(pairs) == 1:
        method_of: Any = pa.scalar(frame_of[pairs[0]], pa.binary())
    else:
        index = {pair: i for i, pair in enumerate(pairs)}
        frames = pa.array([frame_of[p] for p in pairs], pa.binary())
        rows = [index[p] for p in zip(exchanges, routing_keys, strict=True)]
        method_of = frames.take(pa.array(rows, pa.int32()))
    body_lens = _lengths(bodies)
    big = np.flatnonzero(body_lens > max_body).tolist()
    lo = 0
    for stop in [*big, n]:
        # The rows before the next oversized one, cut so that each join holds at most
        # `join_bytes` of bodies (and one row at least).
        while lo < stop:
            cum = np.cumsum(body_lens[lo:stop])
            hi = lo + max(1, int(np.searchsorted(cum, join_bytes, side="right")))
            m = method_of if len(pairs) == 1 else method_of[lo:hi]
            yield _joined(m, props[lo:hi], bodies[lo:hi])
            lo = hi
        if stop < n:
            method = spec.BasicPublish(exchange=exchanges[stop], routing_key=routing_keys[stop])
            one = encode_content_frames(
                CHANNEL, method, props[stop].as_py(), bodies[stop].as_py(), frame_max
            )
            yield one, [len(one)]
            lo = stop + 1
