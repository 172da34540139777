"""The AMQP 1.0 type codec: encoded bytes to Python values (`types.py`), and back (`encode`).

Theory of operation
-------------------
Decoding is table driven: ``_DEC[constructor]`` is a function ``(buf, off, depth) -> (value,
new_off)`` reading the value whose constructor byte sits just before ``off``. Fixed-width values
are read with precompiled ``struct.Struct.unpack_from`` (which raises ``struct.error`` past the
end of the buffer); variable-width and compound values check their declared size against the
buffer before slicing, so a short slice never passes for a value. Compound values (list, map,
array, described) nest through ``depth``, bounded by `MAX_DEPTH`, and an element count is
bounded by the bytes left (every element takes at least its constructor byte; an array of
zero-width elements by `ZERO_WIDTH_ARRAY_MAX`), so no input costs more than its size in work.
The public ``decode`` turns every failure a hostile input can cause (short buffer, unknown
constructor, bad UTF-8, size mismatch, unhashable map key, depth) into `DecodeError`, and only
that: it becomes ``amqp:decode-error`` above.

``skip`` finds the end of a value from its header alone (the broker steps over a message's
body that way). Encoding lives in ``encoder.py``; `encode` and `encode_into` are re-exported
here, so ``codec`` is the one import for both directions; the constructor codes are in
``constructors.py``.

The module is pure: no I/O, no clock, nothing of ringmq outside this package.
"""

from __future__ import annotations

import struct
import uuid
from collections.abc import Callable
from typing import Any, Final

from ringmq.amqp10.constructors import (
    ARRAY8,
    ARRAY32,
    BOOLEAN,
    BYTE,
    CHAR,
    DECIMAL32,
    DECIMAL64,
    DECIMAL128,
    DESCRIBED,
    DOUBLE,
    FALSE,
    FLOAT,
    INT,
    LIST0,
    LIST8,
    LIST32,
    LONG,
    MAP8,
    MAP32,
    NULL,
    SHORT,
    SMALLINT,
    SMALLLONG,
    SMALLUINT,
    SMALLULONG,
    STR8,
    STR32,
    SYM8,
    SYM32,
    TIMESTAMP,
    TRUE,
    UBYTE,
    UINT,
    UINT0,
    ULONG,
    ULONG0,
    USHORT,
    UUID,
    VBIN8,
    VBIN32,
)
from ringmq.amqp10.encoder import encode as encode
from ringmq.amqp10.encoder import encode_into as encode_into
from ringmq.amqp10.types import (
    Array,
    Byte,
    Char,
    Decimal32,
    Decimal64,
    Decimal128,
    DecodeError,
    Described,
    Float,
    Int,
    Short,
    Symbol,
    Timestamp,
    UByte,
    UInt,
    ULong,
    UShort,
)

Buffer = bytes | bytearray | memoryview
"""What the decoder reads: any bytes-like object indexed by byte."""

MAX_DEPTH: Final = 64
"""Deepest nesting of compound values accepted (lists in maps in described values ...)."""

_B: Final = struct.Struct(">B")
_BB: Final = struct.Struct(">BB")
_H: Final = struct.Struct(">H")
_I: Final = struct.Struct(">I")
_II: Final = struct.Struct(">II")
_Q: Final = struct.Struct(">Q")
_b: Final = struct.Struct(">b")
_h: Final = struct.Struct(">h")
_i: Final = struct.Struct(">i")
_q: Final = struct.Struct(">q")
_f: Final = struct.Struct(">f")
_d: Final = struct.Struct(">d")

Decoder = Callable[[Buffer, int, int], tuple[Any, int]]

# ---------------------------------------------------------------------------------------------
# Decoding


def decode(buf: Buffer, off: int = 0) -> tuple[Any, int]:
    """Decode one value at ``buf[off:]``.

    Returns:
        The value (see ``types.py`` for the Python types) and the offset just after it.

    Raises:
        DecodeError: truncated or malformed input (never anything else).
    """
    try:
        return _value(buf, off, 0)
    except DecodeError:
        raise
    except (struct.error, IndexError, TypeError, ValueError, OverflowError) as exc:
        raise DecodeError(f"malformed AMQP 1.0 value at offset {off}: {exc}") from None


def decode_all(buf: Buffer) -> list[Any]:
    """Every value of ``buf``, one after the other (DecodeError as `decode`)."""
    out: list[Any] = []
    off, end = 0, len(buf)
    while off < end:
        value, off = decode(buf, off)
        out.append(value)
    return out


def _value(buf: Buffer, off: int, depth: int) -> tuple[Any, int]:
    dec = _DEC[buf[off]]
    if dec is None:
        raise DecodeError(f"invalid constructor 0x{buf[off]:02x} at offset {off}")
    return dec(buf, off + 1, depth)


def _fixed(s: struct.Struct, wrap: Callable[[Any], Any] | None) -> Decoder:
    size = s.size
    unpack = s.unpack_from
    if wrap is None:

        def dec_plain(buf: Buffer, off: int, depth: int) -> tuple[Any, int]:
            return unpack(buf, off)[0], off + size

        return dec_plain

    def dec(buf: Buffer, off: int, depth: int) -> tuple[Any, int]:
        return wrap(unpack(buf, off)[0]), off + size

    return dec


def _const(value: Any) -> Decoder:
    def dec(buf: Buffer, off: int, depth: int) -> tuple[Any, int]:
        return value, off

    return dec


def _boolean(buf: Buffer, off: int, depth: int) -> tuple[Any, int]:
    b = buf[off]
    if b > 1:
        raise DecodeError(f"invalid boolean 0x{b:02x}")
    return b == 1, off + 1


def _raw(n: int, wrap: Callable[[bytes], Any]) -> Decoder:
    def dec(buf: Buffer, off: int, depth: int) -> tuple[Any, int]:
        end = off + n
        if end > len(buf):
            raise DecodeError("truncated fixed-width value")
        return wrap(bytes(buf[off:end])), end

    return dec


def _char(buf: Buffer, off: int, depth: int) -> tuple[Any, int]:
    code = _I.unpack_from(buf, off)[0]
    if code > 0x10FFFF:
        raise DecodeError(f"char U+{code:X} beyond Unicode")
    return Char(chr(code)), off + 4


def _uuid(buf: Buffer, off: int, depth: int) -> tuple[Any, int]:
    end = off + 16
    if end > len(buf):
        raise DecodeError("truncated uuid")
    return uuid.UUID(bytes=bytes(buf[off:end])), end


def _variable(wide: bool, kind: int) -> Decoder:
    # kind: 0 binary, 1 string, 2 symbol
    head = 4 if wide else 1

    def dec(buf: Buffer, off: int, depth: int) -> tuple[Any, int]:
        n = _I.unpack_from(buf, off)[0] if wide else buf[off]
        start = off + head
        end = start + n
        if end > len(buf):
            raise DecodeError("truncated variable-width value")
        if kind == 0:
            return bytes(buf[start:end]), end
        text = str(buf[start:end], "utf-8")
        return (text if kind == 1 else Symbol(text)), end

    return dec


def _compound_head(buf: Buffer, off: int, wide: bool) -> tuple[int, int, int]:
    # -> (count, first element offset, end offset), size checked against the buffer.
    if wide:
        size, count = _II.unpack_from(buf, off)
        start, end = off + 8, off + 4 + size
    else:
        size, count = _BB.unpack_from(buf, off)
        start, end = off + 2, off + 1 + size
    if end > len(buf) or start > end:
        raise DecodeError("compound size beyond the data")
    return count, start, end


def _list(wide: bool) -> Decoder:
    def dec(buf: Buffer, off: int, depth: int) -> tuple[Any, int]:
        if depth >= MAX_DEPTH:
            raise DecodeError("values nested too deeply")
        count, pos, end = _compound_head(buf, off, wide)
        if count > end - pos:
            raise DecodeError("list count beyond its size")
        items: list[Any] = []
        append = items.append
        d = depth + 1
        table = _DEC
        for _ in range(count):
            # _value inlined: one call per element instead of two (the performatives' path)
            dec = table[buf[pos]]
            if dec is None:
                raise DecodeError(f"invalid constructor 0x{buf[pos]:02x} at offset {pos}")
            item, pos = dec(buf, pos + 1, d)
            append(item)
        if pos != end:
            raise DecodeError("list size does not match its elements")
        return items, end

    return dec


def _map(wide: bool) -> Decoder:
    def dec(buf: Buffer, off: int, depth: int) -> tuple[Any, int]:
        if depth >= MAX_DEPTH:
            raise DecodeError("values nested too deeply")
        count, pos, end = _compound_head(buf, off, wide)
        if count & 1:
            raise DecodeError("map with an odd number of elements")
        if count > end - pos:
            raise DecodeError("map count beyond its size")
        out: dict[Any, Any] = {}
        d = depth + 1
        for _ in range(count >> 1):
            key, pos = _value(buf, pos, d)
            out[key], pos = _value(buf, pos, d)  # TypeError for an unhashable key
        if pos != end:
            raise DecodeError("map size does not match its elements")
        return out, end

    return dec


def _array(wide: bool) -> Decoder:
    def dec(buf: Buffer, off: int, depth: int) -> tuple[Any, int]:
        if depth >= MAX_DEPTH:
            raise DecodeError("values nested too deeply")
        count, pos, end = _compound_head(buf, off, wide)
        d = depth + 1
        descriptor = None
        ctor = buf[pos]
        pos += 1
        if ctor == DESCRIBED:
            descriptor, pos = _value(buf, pos, d)
            ctor = buf[pos]
            pos += 1
        name = _TYPE_NAME.get(ctor)
        el = _DEC[ctor]
        if name is None or el is None:
            raise DecodeError(f"invalid array element constructor 0x{ctor:02x}")
        # Every element takes a byte or more, but for the zero-width constructors.
        if count > (ZERO_WIDTH_ARRAY_MAX if ctor in _ZERO_WIDTH else end - pos):
            raise DecodeError("array count beyond its size")
        items: list[Any] = []
        append = items.append
        for _ in range(count):
            item, pos = el(buf, pos, d)
            append(item)
        if pos != end:
            raise DecodeError("array size does not match its elements")
        return Array(name, tuple(items), descriptor), end

    return dec


def _described(buf: Buffer, off: int, depth: int) -> tuple[Any, int]:
    if depth >= MAX_DEPTH:
        raise DecodeError("values nested too deeply")
    descriptor, off = _value(buf, off, depth + 1)
    value, off = _value(buf, off, depth + 1)
    return Described(descriptor, value), off


_DEC: Final[list[Decoder | None]] = [None] * 256
_DEC[DESCRIBED] = _described
_DEC[NULL] = _const(None)
_DEC[TRUE] = _const(True)
_DEC[FALSE] = _const(False)
_DEC[BOOLEAN] = _boolean
_DEC[UBYTE] = _fixed(_B, UByte)
_DEC[USHORT] = _fixed(_H, UShort)
_DEC[UINT] = _fixed(_I, UInt)
_DEC[SMALLUINT] = _fixed(_B, UInt)
_DEC[UINT0] = _const(UInt(0))
_DEC[ULONG] = _fixed(_Q, ULong)
_DEC[SMALLULONG] = _fixed(_B, ULong)
_DEC[ULONG0] = _const(ULong(0))
_DEC[BYTE] = _fixed(_b, Byte)
_DEC[SHORT] = _fixed(_h, Short)
_DEC[INT] = _fixed(_i, Int)
_DEC[SMALLINT] = _fixed(_b, Int)
_DEC[LONG] = _fixed(_q, None)
_DEC[SMALLLONG] = _fixed(_b, None)
_DEC[FLOAT] = _fixed(_f, Float)
_DEC[DOUBLE] = _fixed(_d, None)
_DEC[DECIMAL32] = _raw(4, Decimal32)
_DEC[DECIMAL64] = _raw(8, Decimal64)
_DEC[DECIMAL128] = _raw(16, Decimal128)
_DEC[CHAR] = _char
_DEC[TIMESTAMP] = _fixed(_q, Timestamp)
_DEC[UUID] = _uuid
_DEC[VBIN8] = _variable(False, 0)
_DEC[VBIN32] = _variable(True, 0)
_DEC[STR8] = _variable(False, 1)
_DEC[STR32] = _variable(True, 1)
_DEC[SYM8] = _variable(False, 2)
_DEC[SYM32] = _variable(True, 2)
_DEC[LIST0] = lambda buf, off, depth: ([], off)
_DEC[LIST8] = _list(False)
_DEC[LIST32] = _list(True)
_DEC[MAP8] = _map(False)
_DEC[MAP32] = _map(True)
_DEC[ARRAY8] = _array(False)
_DEC[ARRAY32] = _array(True)

_TYPE_NAME: Final[dict[int, str]] = {
    NULL: "null", TRUE: "boolean", FALSE: "boolean", BOOLEAN: "boolean", UBYTE: "ubyte",
    USHORT: "ushort", UINT: "uint", SMALLUINT: "uint", UINT0: "uint", ULONG: "ulong",
    SMALLULONG: "ulong", ULONG0: "ulong", BYTE: "byte", SHORT: "short", INT: "int",
    SMALLINT: "int", LONG: "long", SMALLLONG: "long", FLOAT: "float", DOUBLE: "double",
    DECIMAL32: "decimal32", DECIMAL64: "decimal64", DECIMAL128: "decimal128", CHAR: "char",
    TIMESTAMP: "timestamp", UUID: "uuid", VBIN8: "binary", VBIN32: "binary", STR8: "string",
    STR32: "string", SYM8: "symbol", SYM32: "symbol", LIST0: "list", LIST8: "list",
    LIST32: "list", MAP8: "map", MAP32: "map", ARRAY8: "array", ARRAY32: "array",
}  # fmt: skip
"""The spec's type name of each constructor (an `Array`'s element type)."""

ZERO_WIDTH_ARRAY_MAX: Final = 256
"""Most elements accepted in an array of a zero-width constructor (null, true, uint0 ...):
such an array costs no bytes per element, so its count alone would bound the work."""
_ZERO_WIDTH: Final = frozenset({NULL, TRUE, FALSE, UINT0, ULONG0, LIST0})


def skip(buf: Buffer, off: int) -> int:
    """The offset just after the value at ``buf[off:]``, found without decoding it (the sizes
    of variable-width and compound values are in their headers).

    Raises:
        DecodeError: an invalid constructor, or a value that runs past the end of ``buf``.
    """
    return _skip(buf, off, 0)


def _skip(buf: Buffer, off: int, depth: int) -> int:
    if depth >= MAX_DEPTH:
        raise DecodeError("descriptors nested too deeply")
    try:
        end = off
        while (code := buf[end]) == DESCRIBED:  # 0x00 descriptor [0x00 descriptor ...] value
            end = _skip(buf, end + 1, depth + 1)
        width = _WIDTH[code]
        if width < 0:
            raise DecodeError(f"invalid constructor 0x{code:02x} at offset {end}")
        if width == _SIZE8:
            end += 2 + buf[end + 1]
        elif width == _SIZE32:
            end += 5 + _I.unpack_from(buf, end + 1)[0]
        else:
            end += 1 + width
    except (struct.error, IndexError):
        raise DecodeError(f"truncated AMQP 1.0 value at offset {off}") from None
    if end > len(buf):
        raise DecodeError(f"truncated AMQP 1.0 value at offset {off}")
    return end


_SIZE8: Final = 100
_SIZE32: Final = 101
_WIDTH: Final[list[int]] = [-1] * 256
for _codes, _w in (
    ((NULL, TRUE, FALSE, UINT0, ULONG0, LIST0), 0),
    ((UBYTE, BYTE, SMALLUINT, SMALLULONG, SMALLINT, SMALLLONG, BOOLEAN), 1),
    ((USHORT, SHORT), 2),
    ((UINT, INT, FLOAT, CHAR, DECIMAL32), 4),
    ((ULONG, LONG, DOUBLE, TIMESTAMP, DECIMAL64), 8),
    ((UUID, DECIMAL128), 16),
    ((VBIN8, STR8, SYM8, LIST8, MAP8, ARRAY8), _SIZE8),
    ((VBIN32, STR32, SYM32, LIST32, MAP32, ARRAY32), _SIZE32),
):
    for _c in _codes:
        _WIDTH[_c] = _w
