"""The streams API's wire formats and request validation (pure functions, no state).

Range reads answer `application/x-ringmq-records`: a sequence of records, each
`>QQBqBBII` = position, queue seq, flags (bit 0 redelivered), timestamp_ms, exchange length,
routing-key length, properties length, body length; then exchange, routing key, the raw AMQP
basic properties (flags + list, exactly as published) and the body. The connector decodes them
(`ringmq.connector.records`). With `format=columns`, reads and browses answer
`application/x-ringmq-columns` instead: the same fields as little-endian column arrays followed
by the four concatenated variable-length columns (`encode_columns`), which the connector maps
straight into Arrow buffers without a per-message Python loop.

Bulk publishes send `application/x-ringmq-publish` (`decode_publish`). docs/spark.md is the
wire reference.
"""

from __future__ import annotations

import struct
import sys
from array import array
from collections.abc import Iterable
from itertools import accumulate, pairwise
from typing import Any, Final

from ringmq.core.message import Message, amqp091_content
from ringmq.core.queue.columns import Columns

RECORDS_MEDIA_TYPE: Final = "application/x-ringmq-records"
COLUMNS_MEDIA_TYPE: Final = "application/x-ringmq-columns"
PUBLISH_MEDIA_TYPE: Final = "application/x-ringmq-publish"
STORED_MEDIA_TYPE: Final = "application/x-ringmq-stream-records"
"""A stream's records as its segment files hold them (`GET .../log?format=stored`)."""
MAX_PUBLISH: Final = 200_000
"""Most messages in one bulk publish request."""
MAX_READ: Final = 200_000
"""Most positions one range read or browse may ask for."""
RECORD_HEAD: Final = struct.Struct(">QQBqBBII")
_LITTLE: Final = sys.byteorder == "little"


class StreamError(Exception):
    """A request the streams API refuses (mapped to an HTTP status)."""

    def __init__(self, status: int, reason: str) -> None:
        super().__init__(reason)
        self.status = status
        self.reason = reason


def encode_record(
    pos: int, seq: int, redelivered: bool, message: Message, parts: list[bytes]
) -> None:
    """Append one record of the range-read wire format to `parts`."""
    ex = message.exchange.encode()
    rk = message.routing_key.encode()
    # the wire carries AMQP 0-9-1 properties: another protocol's form goes as its conversion
    pb, body = amqp091_content(message)
    parts.append(
        RECORD_HEAD.pack(
            pos,
            seq,
            1 if redelivered else 0,
            message.timestamp_ms,
            len(ex),
            len(rk),
            len(pb),
            len(body),
        )
    )
    parts += (ex, rk, pb, body)


def _le(a: array[int]) -> bytes:
    # little-endian bytes of `a` (left unchanged)
    if not _LITTLE:
        a = array(a.typecode, a)
        a.byteswap()
    return a.tobytes()


def encode_columns(rows: Iterable[tuple[int, int, bool, Message]]) -> bytes:
    """The `application/x-ringmq-columns` encoding of (position, seq, redelivered, message)
    rows (`encode_column_set` of their columns)."""
    cols = Columns()
    positions: array[int] = array("Q")
    cols.add_rows(rows, positions)
    return encode_column_set(cols, positions)


def encode_column_set(cols: Columns, positions: array[int] | None = None) -> bytes:
    """The `application/x-ringmq-columns` encoding of browsed `cols`, at `positions` (None:
    each row's position is its seq, as in a browse).

    Layout, little-endian: `u32 n`; `u64[n]` positions; `u64[n]` seqs; `u8[n]` flags (bit 0
    redelivered); `i64[n]` timestamp_ms; `u32[n]` lengths of exchange, routing key, properties
    and body (four arrays); then all exchanges, all routing keys, all properties (raw, as
    published) and all bodies, each concatenated in row order.
    """
    seqs = _le(cols.seqs)
    n = len(cols)
    columns = cols.var_columns()
    parts: list[bytes | memoryview] = [
        struct.pack("<I", n),
        seqs if positions is None else _le(positions),
        seqs,
        bytes(cols.redelivered),
        _le(cols.timestamps),
    ]
    parts += (_le(col.lengths()) for col in columns)
    # One join over every piece: the bodies are copied once, not joined and then joined again.
    for col in columns:
        col.extend_pieces(parts)
    return b"".join(parts)


def decode_publish(data: bytes) -> list[tuple[str, bytes, bytes]]:
    """(routing key, properties, body) of an `application/x-ringmq-publish` body.

    Layout, little-endian: `u32 n`; `u32[n]` lengths of routing keys, properties and bodies
    (three arrays); then all routing keys, all properties (AMQP basic properties: flags and
    list, as in a content header) and all bodies, each concatenated in row order.

    Raises:
        StreamError: 400 when the body is malformed.
    """
    if len(data) < 4:
        raise StreamError(400, "publish body too short")
    (n,) = struct.unpack_from("<I", data, 0)
    if n > MAX_PUBLISH:
        raise StreamError(400, f"at most {MAX_PUBLISH} messages per publish request")
    off = 4
    cols: list[array[int]] = []
    for _ in range(3):
        a: array[int] = array("I")
        if off + 4 * n > len(data):
            raise StreamError(400, "publish body truncated")
        a.frombytes(data[off : off + 4 * n])
        if not _LITTLE:
            a.byteswap()
        cols.append(a)
        off += 4 * n
    rk_lens, p_lens, b_lens = cols
    rk_total = sum(rk_lens)
    p_total = sum(p_lens)
    if off + rk_total + p_total + sum(b_lens) != len(data):
        raise StreamError(400, "publish body length does not match its columns")
    rk_at = off
    p_at = rk_at + rk_total
    b_at = p_at + p_total
    try:
        rks = _routing_keys(data, rk_at, rk_lens)
    except UnicodeDecodeError:
        raise StreamError(400, "routing key is not UTF-8") from None
    # offsets of each value, then one slice (one copy) of `data` per value
    ps = list(accumulate(p_lens, initial=p_at))
    bs = list(accumulate(b_lens, initial=b_at))
    props = [data[a:b] for a, b in pairwise(ps)]
    bodies = [data[a:b] for a, b in pairwise(bs)]
    return list(zip(rks, props, bodies, strict=True))


def _routing_keys(data: bytes, at: int, lens: array[int]) -> list[str]:
    # Each message's routing key; one decode when they are all the same (a Spark sink's).
    n = len(lens)
    first = lens[0] if n else 0
    if n and lens.count(first) == n and data[at : at + first * n] == data[at : at + first] * n:
        return [str(data[at : at + first], "utf-8")] * n
    out: list[str] = []
    for rl in lens:
        out.append(str(data[at : at + rl], "utf-8"))
        at += rl
    return out


ERROR_NAMES: Final = {
    # HTTP status -> the streams API's "error" field
    400: "bad_request",
    403: "access_refused",
    404: "not_found",
    500: "not_durable",
    503: "unavailable",
}


def parse_format(value: str | None) -> bool:
    """The `format` query parameter: True for columns, False for records (the default)."""
    if value in (None, "records"):
        return False
    if value == "columns":
        return True
    raise StreamError(400, "format must be records or columns")


def parse_consumer(value: Any) -> str:
    """A reader's name: 1..255 characters."""
    if not isinstance(value, str) or not value or len(value) > 255:
        raise StreamError(400, "consumer must be a non-empty string of at most 255 characters")
    return value


def parse_int(value: Any, what: str, minimum: int, maximum: int | None = None) -> int:
    """An integer parameter in [minimum, maximum] (400 otherwise)."""
    if isinstance(value, bool) or not isinstance(value, int):
        try:
            value = int(value)
        except (TypeError, ValueError):
            raise StreamError(400, f"{what} must be an integer") from None
    if value < minimum or (maximum is not None and value > maximum):
        raise StreamError(400, f"{what} out of range")
    return int(value)


def encode_rows(rows: list[tuple[int, int, bool, Message]], *, columns: bool) -> bytes:
    """(position, seq, redelivered, message) rows in the records or the columns format."""
    if columns:
        return encode_columns(rows)
    parts: list[bytes] = []
    for pos, seq, red, msg in rows:
        encode_record(pos, seq, red, msg, parts)
    return b"".join(parts)
