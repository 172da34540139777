"""Decoding of the streams API's range-read records (`application/x-ringmq-records`).

The format is fixed by docs/spark.md: per record a `>QQBqBBII` head (position, queue seq,
flags with bit 0 = redelivered, timestamp_ms, exchange length, routing-key length, properties
length, body length), then exchange, routing key, the raw AMQP basic properties and the body.
"""

from __future__ import annotations

import struct
import sys
from array import array
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, Final

from ringmq.amqp.properties import BasicProperties, decode_properties

RECORD_HEAD: Final = struct.Struct(">QQBqBBII")
PUBLISH_MEDIA_TYPE: Final = "application/x-ringmq-publish"
_PROPERTY_NAMES: Final = (
    "content_type",
    "content_encoding",
    "delivery_mode",
    "priority",
    "correlation_id",
    "reply_to",
    "expiration",
    "message_id",
    "timestamp",
    "type",
    "user_id",
    "app_id",
    "cluster_id",
)


@dataclass(frozen=True, slots=True)
class Record:
    """One message of a range read or a browse."""

    pos: int
    seq: int
    redelivered: bool
    timestamp_ms: int
    exchange: str
    routing_key: str
    properties_bin: bytes
    body: bytes

    def properties(self) -> BasicProperties:
        """The decoded AMQP basic properties."""
        return decode_properties(self.properties_bin)


def decode_records(data: bytes) -> list[Record]:
    """All records in a response body.

    Raises:
        ValueError: the body is truncated.
    """
    out: list[Record] = []
    view = memoryview(data)
    off = 0
    n = len(data)
    unpack = RECORD_HEAD.unpack_from
    size = RECORD_HEAD.size
    while off < n:
        if off + size > n:
            raise ValueError("truncated record head")
        pos, seq, flags, ts, exl, rkl, pl, bl = unpack(view, off)
        off += size
        end = off + exl + rkl + pl + bl
        if end > n:
            raise ValueError("truncated record")
        ex = str(view[off : off + exl], "utf-8")
        off += exl
        rk = str(view[off : off + rkl], "utf-8")
        off += rkl
        props = bytes(view[off : off + pl])
        off += pl
        body = bytes(view[off : off + bl])
        off += bl
        out.append(Record(pos, seq, bool(flags & 1), ts, ex, rk, props, body))
    return out


def _text(value: Any) -> str:
    if isinstance(value, bytes | bytearray):
        return bytes(value).decode("utf-8", "replace")
    return str(value)


def property_maps(props_bin: bytes) -> tuple[dict[str, str], dict[str, str], str | None]:
    """(headers as strings, the other present properties as strings, message_id)."""
    if props_bin == b"\x00\x00":
        return {}, {}, None
    p = decode_properties(props_bin)
    headers = {str(k): _text(v) for k, v in (p.headers or {}).items()}
    other = {name: _text(v) for name in _PROPERTY_NAMES if (v := getattr(p, name)) is not None}
    return headers, other, p.message_id


def _le(a: array[int]) -> bytes:
    if sys.byteorder != "little":
        a.byteswap()
    return a.tobytes()


def encode_publish(messages: Iterable[tuple[str, bytes, bytes]]) -> bytes:
    """An `application/x-ringmq-publish` body of (routing key, properties, body) messages.

    Layout, little-endian: `u32 n`; `u32[n]` lengths of routing keys, properties and bodies;
    then all routing keys, all properties (AMQP basic properties, flags and list) and all
    bodies, each concatenated in order. The Spark sink builds the same layout from Arrow
    buffers directly (`ringmq.connector.spark.sink`).
    """
    rks: list[bytes] = []
    props: list[bytes] = []
    bodies: list[bytes] = []
    for rk, p, b in messages:
        rks.append(rk.encode())
        props.append(p)
        bodies.append(b)
    lens = [_le(array("I", map(len, col))) for col in (rks, props, bodies)]
    return b"".join(
        [struct.pack("<I", len(rks)), *lens, b"".join(rks), b"".join(props), b"".join(bodies)]
    )


def skip_published(body: bytes, k: int) -> bytes:
    """The publish body without its first `k` messages (to resume after a partial publish)."""
    (n,) = struct.unpack_from("<I", body, 0)
    k = min(k, n)
    if k == 0:
        return body
    cols: list[array[int]] = []
    for c in range(3):
        a: array[int] = array("I")
        a.frombytes(body[4 + 4 * n * c : 4 + 4 * n * (c + 1)])
        if sys.byteorder != "little":
            a.byteswap()
        cols.append(a)
    off = 4 + 12 * n
    parts: list[bytes] = []
    for a in cols:
        total, skip = sum(a), sum(a[:k])
        parts.append(body[off + skip : off + total])
        off += total
    rest = [_le(a[k:]) for a in cols]
    return b"".join([struct.pack("<I", n - k), *rest, *parts])
