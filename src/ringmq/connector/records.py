"""Decoding of the streams API's range-read records (`application/x-ringmq-records`).

The format is fixed by docs/spark.md: per record a `>QQBqBBII` head (position, queue seq,
flags with bit 0 = redelivered, timestamp_ms, exchange length, routing-key length, properties
length, body length), then exchange, routing key, the raw AMQP basic properties and the body.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import Any, Final

from ringmq.amqp.properties import BasicProperties, decode_properties

RECORD_HEAD: Final = struct.Struct(">QQBqBBII")
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
