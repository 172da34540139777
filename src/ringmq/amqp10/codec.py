"""The AMQP 1.0 type codec: encoded bytes to Python values (`types.py`) and back.

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

Encoding picks the smallest constructor as proton does: ``uint0``/``smalluint``/``uint`` by
value, ``vbin8``/``str8``/``sym8`` below 256 bytes, ``list0``/``list8``/``map8`` when size and
count fit a byte, ``true``/``false`` for booleans. ``_ENC`` maps the exact Python type (not
``isinstance``: ``Symbol`` is a ``str``, ``UInt`` an ``int``) to its encoder. Arrays encode
every element with one constructor: the full-width one for fixed-width types (``uint`` 0x70,
``ulong`` 0x80, ``boolean`` 0x56 ...), the 8-bit size form for binary, string and symbol when
every element fits it, the 32-bit form for compound elements.

The module is pure: no I/O, no clock, nothing of ringmq outside this package.
"""

from __future__ import annotations

import struct
import uuid
from collections.abc import Callable
from typing import Any, Final

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

# Constructor codes (spec part 1, 1.6).
NULL: Final = 0x40
TRUE: Final = 0x41
FALSE: Final = 0x42
BOOLEAN: Final = 0x56
UBYTE: Final = 0x50
USHORT: Final = 0x60
UINT: Final = 0x70
SMALLUINT: Final = 0x52
UINT0: Final = 0x43
ULONG: Final = 0x80
SMALLULONG: Final = 0x53
ULONG0: Final = 0x44
BYTE: Final = 0x51
SHORT: Final = 0x61
INT: Final = 0x71
SMALLINT: Final = 0x54
LONG: Final = 0x81
SMALLLONG: Final = 0x55
FLOAT: Final = 0x72
DOUBLE: Final = 0x82
DECIMAL32: Final = 0x74
DECIMAL64: Final = 0x84
DECIMAL128: Final = 0x94
CHAR: Final = 0x73
TIMESTAMP: Final = 0x83
UUID: Final = 0x98
VBIN8: Final = 0xA0
VBIN32: Final = 0xB0
STR8: Final = 0xA1
STR32: Final = 0xB1
SYM8: Final = 0xA3
SYM32: Final = 0xB3
LIST0: Final = 0x45
LIST8: Final = 0xC0
LIST32: Final = 0xD0
MAP8: Final = 0xC1
MAP32: Final = 0xD1
ARRAY8: Final = 0xE0
ARRAY32: Final = 0xF0
DESCRIBED: Final = 0x00

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

# ---------------------------------------------------------------------------------------------
# Encoding

Encoder = Callable[[Any, bytearray], None]


def encode(value: Any) -> bytes:
    """The encoding of ``value`` with the smallest constructors.

    Raises:
        TypeError: a value of no AMQP type (see ``types.py``).
        ValueError: a value out of its type's range.
    """
    out = bytearray()
    encode_into(value, out)
    return bytes(out)


def encode_into(value: Any, out: bytearray) -> None:
    """Append the encoding of ``value`` to ``out`` (errors as `encode`)."""
    try:
        _enc(value, out)
    except struct.error as exc:
        raise ValueError(f"value out of range for its AMQP type: {exc}") from None


def _enc(value: Any, out: bytearray) -> None:
    f = _ENC.get(type(value))
    if f is None:
        raise TypeError(f"no AMQP 1.0 encoding for {type(value).__name__}")
    f(value, out)


def _e_null(v: Any, out: bytearray) -> None:
    out.append(NULL)


def _e_bool(v: bool, out: bytearray) -> None:
    out.append(TRUE if v else FALSE)


def _e_fixed(code: int, s: struct.Struct) -> Encoder:
    pack = s.pack

    def enc(v: Any, out: bytearray) -> None:
        out.append(code)
        out += pack(v)

    return enc


def _e_small(code0: int | None, small: int, code: int, s: struct.Struct, lo: int) -> Encoder:
    # uint/ulong (code0: the zero-width form) and int/long (lo: -128): a one-byte form when
    # the value fits a (signed when lo < 0) byte.
    pack = s.pack

    def enc(v: Any, out: bytearray) -> None:
        if v == 0 and code0 is not None:
            out.append(code0)
        elif lo <= v <= 127 or (lo == 0 and 0 <= v <= 255):
            out.append(small)
            out.append(v & 0xFF)
        else:
            out.append(code)
            out += pack(v)

    return enc


def _e_variable(small: int, wide: int, text: bool) -> Encoder:
    def enc(v: Any, out: bytearray) -> None:
        data = v.encode() if text else v
        n = len(data)
        if n < 256:
            out.append(small)
            out.append(n)
        else:
            out.append(wide)
            out += _I.pack(n)
        out += data

    return enc


def _e_raw(code: int, n: int) -> Encoder:
    def enc(v: bytes, out: bytearray) -> None:
        if len(v) != n:
            raise ValueError(f"a {n}-byte value expected, got {len(v)} bytes")
        out.append(code)
        out += v

    return enc


def _e_char(v: str, out: bytearray) -> None:
    out.append(CHAR)
    out += _I.pack(ord(v))


def _e_uuid(v: uuid.UUID, out: bytearray) -> None:
    out.append(UUID)
    out += v.bytes


def _compound(out: bytearray, count: int, body: bytes | bytearray, small: int, wide: int) -> None:
    size = len(body) + 1
    if size < 256 and count < 256:
        out.append(small)
        out.append(size)
        out.append(count)
    else:
        out.append(wide)
        out += _II.pack(size + 3, count)
    out += body


def _e_list(v: list[Any] | tuple[Any, ...], out: bytearray) -> None:
    if not v:
        out.append(LIST0)
        return
    body = bytearray()
    for item in v:
        _enc(item, body)
    _compound(out, len(v), body, LIST8, LIST32)


def _e_map(v: dict[Any, Any], out: bytearray) -> None:
    body = bytearray()
    for key, item in v.items():
        _enc(key, body)
        _enc(item, body)
    _compound(out, 2 * len(v), body, MAP8, MAP32)


def _e_described(v: Described, out: bytearray) -> None:
    out.append(DESCRIBED)
    _enc(v.descriptor, out)
    _enc(v.value, out)


def _bodies(fmt: str, code: int) -> Callable[[tuple[Any, ...]], tuple[bytes, bytes]]:
    def bodies(items: tuple[Any, ...]) -> tuple[bytes, bytes]:
        return bytes((code,)), struct.pack(f">{len(items)}{fmt}", *items)

    return bodies


def _raw_bodies(code: int, n: int) -> Callable[[tuple[Any, ...]], tuple[bytes, bytes]]:
    def bodies(items: tuple[Any, ...]) -> tuple[bytes, bytes]:
        if any(len(x) != n for x in items):
            raise ValueError(f"{n}-byte array elements expected")
        return bytes((code,)), b"".join(items)

    return bodies


def _var_bodies(
    small: int, wide: int, text: bool
) -> Callable[[tuple[Any, ...]], tuple[bytes, bytes]]:
    def bodies(items: tuple[Any, ...]) -> tuple[bytes, bytes]:
        datas = [x.encode() for x in items] if text else list(items)
        if all(len(x) < 256 for x in datas):
            return bytes((small,)), b"".join(bytes((len(x),)) + x for x in datas)
        return bytes((wide,)), b"".join(_I.pack(len(x)) + x for x in datas)

    return bodies


def _compound_bodies(code: int) -> Callable[[tuple[Any, ...]], tuple[bytes, bytes]]:
    # Elements of a list, map or array array all take the 32-bit form (one constructor).
    def bodies(items: tuple[Any, ...]) -> tuple[bytes, bytes]:
        parts = []
        for x in items:
            one = bytearray()
            _enc(x, one)
            parts.append(_widen(one, code))
        return bytes((code,)), b"".join(parts)

    return bodies


def _widen(enc: bytearray, code: int) -> bytes:
    # The 32-bit body (size, count, rest) of an encoded list, map or array.
    ctor = enc[0]
    if ctor == LIST0:
        return _II.pack(4, 0)
    if ctor in (LIST32, MAP32, ARRAY32):
        return bytes(enc[1:])
    size, count = enc[1], enc[2]
    return _II.pack(size + 3, count) + bytes(enc[3:])


_ARRAY_BODIES: Final[dict[str, Callable[[tuple[Any, ...]], tuple[bytes, bytes]]]] = {
    "null": lambda items: (bytes((NULL,)), b""),
    "boolean": lambda items: (bytes((BOOLEAN,)), bytes(1 if x else 0 for x in items)),
    "ubyte": _bodies("B", UBYTE),
    "ushort": _bodies("H", USHORT),
    "uint": _bodies("I", UINT),
    "ulong": _bodies("Q", ULONG),
    "byte": _bodies("b", BYTE),
    "short": _bodies("h", SHORT),
    "int": _bodies("i", INT),
    "long": _bodies("q", LONG),
    "float": _bodies("f", FLOAT),
    "double": _bodies("d", DOUBLE),
    "timestamp": _bodies("q", TIMESTAMP),
    "char": lambda items: (bytes((CHAR,)), b"".join(_I.pack(ord(c)) for c in items)),
    "uuid": lambda items: (bytes((UUID,)), b"".join(u.bytes for u in items)),
    "decimal32": _raw_bodies(DECIMAL32, 4),
    "decimal64": _raw_bodies(DECIMAL64, 8),
    "decimal128": _raw_bodies(DECIMAL128, 16),
    "binary": _var_bodies(VBIN8, VBIN32, False),
    "string": _var_bodies(STR8, STR32, True),
    "symbol": _var_bodies(SYM8, SYM32, True),
    "list": _compound_bodies(LIST32),
    "map": _compound_bodies(MAP32),
    "array": _compound_bodies(ARRAY32),
}


def _e_array(v: Array, out: bytearray) -> None:
    ctor, body = _ARRAY_BODIES[v.type](v.items)
    if v.descriptor is not None:
        head = bytearray((DESCRIBED,))
        _enc(v.descriptor, head)
        ctor = bytes(head) + ctor
    count = len(v.items)
    size = len(ctor) + len(body) + 1
    if size < 256 and count < 256:
        out.append(ARRAY8)
        out.append(size)
        out.append(count)
    else:
        out.append(ARRAY32)
        out += _II.pack(size + 3, count)
    out += ctor
    out += body


_ENC: Final[dict[type, Encoder]] = {
    type(None): _e_null,
    bool: _e_bool,
    UByte: _e_fixed(UBYTE, _B),
    UShort: _e_fixed(USHORT, _H),
    UInt: _e_small(UINT0, SMALLUINT, UINT, _I, 0),
    ULong: _e_small(ULONG0, SMALLULONG, ULONG, _Q, 0),
    Byte: _e_fixed(BYTE, _b),
    Short: _e_fixed(SHORT, _h),
    Int: _e_small(None, SMALLINT, INT, _i, -128),
    int: _e_small(None, SMALLLONG, LONG, _q, -128),
    Float: _e_fixed(FLOAT, _f),
    float: _e_fixed(DOUBLE, _d),
    Decimal32: _e_raw(DECIMAL32, 4),
    Decimal64: _e_raw(DECIMAL64, 8),
    Decimal128: _e_raw(DECIMAL128, 16),
    Char: _e_char,
    Timestamp: _e_fixed(TIMESTAMP, _q),
    uuid.UUID: _e_uuid,
    bytes: _e_variable(VBIN8, VBIN32, False),
    bytearray: _e_variable(VBIN8, VBIN32, False),
    memoryview: _e_variable(VBIN8, VBIN32, False),
    str: _e_variable(STR8, STR32, True),
    Symbol: _e_variable(SYM8, SYM32, True),
    list: _e_list,
    tuple: _e_list,
    dict: _e_map,
    Array: _e_array,
    Described: _e_described,
}
