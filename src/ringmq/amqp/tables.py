"""AMQP field tables and arrays with RabbitMQ's 0-9-1 type letters.

Wire types (RabbitMQ's errata, which every RabbitMQ client follows) and their Python values:

====  =========================  ==========================================================
tag   wire                       Python value (decode)
====  =========================  ==========================================================
t     boolean octet              ``bool``
b     signed 8-bit               ``int``
B     unsigned 8-bit             ``int``
s     signed 16-bit              ``int``
u     unsigned 16-bit            ``int``
I     signed 32-bit              ``int``
i     unsigned 32-bit            ``int``
l     signed 64-bit              ``int``
f     IEEE float32               ``float``
d     IEEE float64               ``float``
D     decimal (scale u8, i32)    ``decimal.Decimal``
S     long string (u32 + bytes)  ``str`` when valid UTF-8, else ``bytes`` (as pika does)
x     byte array (u32 + bytes)   ``bytes``
A     array                      ``list``
F     nested table               ``dict``
T     timestamp (u64 seconds)    timezone-aware UTC ``datetime`` (as pika and pamqp do)
V     void                       ``None``
====  =========================  ==========================================================

Encoding follows pika byte for byte: keys keep their insertion order; ``bool`` -> ``t``; ``int``
-> ``I`` when it fits 32 signed bits, else ``l``; ``str`` -> ``S``; ``bytes``/``bytearray`` ->
``x`` (so bytes round-trip as bytes); ``float`` -> ``d``; ``Decimal`` -> ``D`` (normalised
first); ``datetime`` -> ``T`` (naive values are taken as UTC); ``dict`` -> ``F``;
``list``/``tuple`` -> ``A``; ``None`` -> ``V``. Anything else raises ``TypeError``.

Decoding raises only ``AMQPError``: FRAME_ERROR (501) for truncated data, SYNTAX_ERROR (502) for
an unknown type letter, invalid UTF-8 in a key, or nesting deeper than ``MAX_DEPTH``.
"""

from __future__ import annotations

import struct
from datetime import UTC, datetime
from decimal import Decimal
from typing import Any, Final

from ringmq.amqp.reply_codes import AMQPError, ReplyCode

Buffer = bytes | bytearray | memoryview
"""What decoders accept: any contiguous bytes-like object."""

MAX_DEPTH: Final = 64
"""Deepest nesting of tables/arrays accepted on decode (bounds recursion)."""

_U8: Final = struct.Struct(">B")
_I8: Final = struct.Struct(">b")
_I16: Final = struct.Struct(">h")
_U16: Final = struct.Struct(">H")
_I32: Final = struct.Struct(">i")
_U32: Final = struct.Struct(">I")
_I64: Final = struct.Struct(">q")
_U64: Final = struct.Struct(">Q")
_F32: Final = struct.Struct(">f")
_F64: Final = struct.Struct(">d")
_DEC: Final = struct.Struct(">Bi")
_TAG_I32: Final = struct.Struct(">ci")
_TAG_I64: Final = struct.Struct(">cq")
_TAG_U32: Final = struct.Struct(">cI")
_TAG_U64: Final = struct.Struct(">cQ")
_TAG_F64: Final = struct.Struct(">cd")
_TAG_DEC: Final = struct.Struct(">cBi")

_EMPTY_TABLE: Final = b"\x00\x00\x00\x00"


class _BadValueError(Exception):
    """Internal: a decode error that is not a truncation (mapped to SYNTAX_ERROR)."""


# ---------------------------------------------------------------------------------- encode


def encode_table(table: dict[str, Any] | None) -> bytes:
    """Encode a field table (u32 byte length + entries).

    Args:
        table: mapping of str keys (at most 255 UTF-8 bytes each) to encodable values.

    Returns:
        The encoded table, including its length prefix.

    Raises:
        TypeError: a value has no AMQP field type.
        ValueError: a key is longer than 255 bytes or a value is out of range.
    """
    if not table:
        return _EMPTY_TABLE
    pieces: list[bytes] = []
    _encode_entries(pieces, table)
    payload = b"".join(pieces)
    return _U32.pack(len(payload)) + payload


def encode_array(values: list[Any]) -> bytes:
    """Encode a field array (u32 byte length + values)."""
    pieces: list[bytes] = []
    for value in values:
        _encode_value(pieces, value)
    payload = b"".join(pieces)
    return _U32.pack(len(payload)) + payload


def _encode_entries(pieces: list[bytes], table: dict[str, Any]) -> None:
    for key, value in table.items():
        raw = key.encode("utf-8")
        if len(raw) > 255:
            raise ValueError(f"field table key {key[:32]!r}... is longer than 255 bytes")
        pieces.append(bytes((len(raw),)))
        pieces.append(raw)
        _encode_value(pieces, value)


def _encode_value(pieces: list[bytes], value: Any) -> None:
    # Order matters: bool is an int subclass, so it is tested first.
    if isinstance(value, str):
        raw = value.encode("utf-8")
        pieces.append(_TAG_U32.pack(b"S", len(raw)))
        pieces.append(raw)
    elif isinstance(value, bytes | bytearray | memoryview):
        raw = bytes(value)
        pieces.append(_TAG_U32.pack(b"x", len(raw)))
        pieces.append(raw)
    elif isinstance(value, bool):
        pieces.append(b"t\x01" if value else b"t\x00")
    elif isinstance(value, int):
        if -0x80000000 <= value <= 0x7FFFFFFF:
            pieces.append(_TAG_I32.pack(b"I", value))
        elif -0x8000000000000000 <= value <= 0x7FFFFFFFFFFFFFFF:
            pieces.append(_TAG_I64.pack(b"l", value))
        else:
            raise ValueError(f"integer {value} does not fit a signed 64-bit field")
    elif isinstance(value, float):
        pieces.append(_TAG_F64.pack(b"d", value))
    elif isinstance(value, Decimal):
        pieces.append(_encode_decimal(value))
    elif isinstance(value, datetime):
        if value.tzinfo is None:
            value = value.replace(tzinfo=UTC)
        pieces.append(_TAG_U64.pack(b"T", int(value.timestamp())))
    elif isinstance(value, dict):
        pieces.append(b"F")
        pieces.append(encode_table(value))
    elif isinstance(value, list | tuple):
        pieces.append(b"A")
        pieces.append(encode_array(list(value)))
    elif value is None:
        pieces.append(b"V")
    else:
        raise TypeError(f"no AMQP field type for {type(value).__name__} value {value!r}")


def _encode_decimal(value: Decimal) -> bytes:
    # Normalised first, as pika does, so trailing zeros do not eat the scale octet.
    sign, digits, exponent = value.normalize().as_tuple()
    if not isinstance(exponent, int):
        raise ValueError(f"cannot encode {value} as an AMQP decimal")
    mantissa = int("".join(map(str, digits)) or "0") * (-1 if sign else 1)
    if exponent > 0:
        mantissa *= 10**exponent
        exponent = 0
    scale = -exponent
    if scale > 255 or not -0x80000000 <= mantissa <= 0x7FFFFFFF:
        raise ValueError(f"decimal {value} is out of the AMQP decimal range")
    return _TAG_DEC.pack(b"D", scale, mantissa)


# ---------------------------------------------------------------------------------- decode


def decode_table(buf: Buffer, offset: int) -> tuple[dict[str, Any], int]:
    """Decode a field table starting at ``offset`` (at its u32 length).

    Returns:
        ``(table, offset just past it)``.

    Raises:
        AMQPError: FRAME_ERROR if truncated, SYNTAX_ERROR for a bad type letter, bad UTF-8 in a
            key, or nesting deeper than ``MAX_DEPTH``.
    """
    try:
        return _decode_table(buf, offset, 0)
    except (struct.error, IndexError):
        raise AMQPError(ReplyCode.FRAME_ERROR, "truncated field table") from None
    except UnicodeDecodeError:
        raise AMQPError(ReplyCode.SYNTAX_ERROR, "invalid UTF-8 in a field table key") from None
    except _BadValueError as exc:
        raise AMQPError(ReplyCode.SYNTAX_ERROR, str(exc)) from None


def decode_array(buf: Buffer, offset: int) -> tuple[list[Any], int]:
    """Decode a field array starting at ``offset``; errors as ``decode_table``."""
    try:
        return _decode_array(buf, offset, 0)
    except (struct.error, IndexError):
        raise AMQPError(ReplyCode.FRAME_ERROR, "truncated field array") from None
    except UnicodeDecodeError:
        raise AMQPError(ReplyCode.SYNTAX_ERROR, "invalid UTF-8 in a field table key") from None
    except _BadValueError as exc:
        raise AMQPError(ReplyCode.SYNTAX_ERROR, str(exc)) from None


def _span(buf: Buffer, offset: int) -> tuple[int, int]:
    (size,) = _U32.unpack_from(buf, offset)
    start = offset + 4
    end = start + size
    if end > len(buf):
        raise struct.error("field table/array/string runs past the end of the data")
    return start, end


def _decode_table(buf: Buffer, offset: int, depth: int) -> tuple[dict[str, Any], int]:
    if depth > MAX_DEPTH:
        raise _BadValueError(f"field tables nested deeper than {MAX_DEPTH}")
    pos, end = _span(buf, offset)
    result: dict[str, Any] = {}
    while pos < end:
        klen = buf[pos]
        kend = pos + 1 + klen
        if kend > end:
            raise struct.error("truncated field table key")
        key = str(buf[pos + 1 : kend], "utf-8")
        value, pos = _decode_value(buf, kend, end, depth)
        result[key] = value
    if pos != end:
        raise struct.error("field table entry runs past the table's length")
    return result, end


def _decode_array(buf: Buffer, offset: int, depth: int) -> tuple[list[Any], int]:
    if depth > MAX_DEPTH:
        raise _BadValueError(f"field arrays nested deeper than {MAX_DEPTH}")
    pos, end = _span(buf, offset)
    result: list[Any] = []
    while pos < end:
        value, pos = _decode_value(buf, pos, end, depth)
        result.append(value)
    if pos != end:
        raise struct.error("field array value runs past the array's length")
    return result, end


def _fixed(s: struct.Struct, buf: Buffer, pos: int, end: int) -> tuple[Any, int]:
    nxt = pos + s.size
    if nxt > end:
        raise struct.error("truncated field value")
    return s.unpack_from(buf, pos)[0], nxt


def _decode_value(buf: Buffer, pos: int, end: int, depth: int) -> tuple[Any, int]:
    if pos >= end:
        raise struct.error("missing field value type")
    tag = buf[pos]
    pos += 1
    match tag:
        case 0x53:  # 'S'
            start, nxt = _span(buf, pos)
            if nxt > end:
                raise struct.error("long string runs past its container")
            raw = bytes(buf[start:nxt])
            try:
                return raw.decode("utf-8"), nxt
            except UnicodeDecodeError:
                return raw, nxt
        case 0x49:  # 'I'
            return _fixed(_I32, buf, pos, end)
        case 0x74:  # 't'
            value, nxt = _fixed(_U8, buf, pos, end)
            return value != 0, nxt
        case 0x46:  # 'F'
            table, nxt = _decode_table(buf, pos, depth + 1)
            if nxt > end:
                raise struct.error("nested table runs past its container")
            return table, nxt
        case 0x6C:  # 'l'
            return _fixed(_I64, buf, pos, end)
        case 0x78:  # 'x'
            start, nxt = _span(buf, pos)
            if nxt > end:
                raise struct.error("byte array runs past its container")
            return bytes(buf[start:nxt]), nxt
        case 0x41:  # 'A'
            array, nxt = _decode_array(buf, pos, depth + 1)
            if nxt > end:
                raise struct.error("nested array runs past its container")
            return array, nxt
        case 0x62:  # 'b'
            return _fixed(_I8, buf, pos, end)
        case 0x42:  # 'B'
            return _fixed(_U8, buf, pos, end)
        case 0x73:  # 's'
            return _fixed(_I16, buf, pos, end)
        case 0x75:  # 'u'
            return _fixed(_U16, buf, pos, end)
        case 0x69:  # 'i'
            return _fixed(_U32, buf, pos, end)
        case 0x66:  # 'f'
            return _fixed(_F32, buf, pos, end)
        case 0x64:  # 'd'
            return _fixed(_F64, buf, pos, end)
        case 0x44:  # 'D'
            (scale, mantissa), nxt = _fixed2(_DEC, buf, pos, end)
            return Decimal(mantissa).scaleb(-scale), nxt
        case 0x54:  # 'T'
            seconds, nxt = _fixed(_U64, buf, pos, end)
            try:
                return datetime.fromtimestamp(seconds, UTC), nxt
            except (OverflowError, OSError, ValueError):
                raise _BadValueError(f"timestamp {seconds} is out of range") from None
        case 0x56:  # 'V'
            return None, pos
        case _:
            raise _BadValueError(f"unknown field value type {chr(tag)!r} (0x{tag:02x})")


def _fixed2(s: struct.Struct, buf: Buffer, pos: int, end: int) -> tuple[tuple[Any, ...], int]:
    nxt = pos + s.size
    if nxt > end:
        raise struct.error("truncated field value")
    return s.unpack_from(buf, pos), nxt


__all__ = ["MAX_DEPTH", "Buffer", "decode_array", "decode_table", "encode_array", "encode_table"]
