"""The AMQP 1.0 type encoder: Python values (`types.py`) to encoded bytes.

Encoding picks the smallest constructor as proton does: ``uint0``/``smalluint``/``uint`` by
value, ``vbin8``/``str8``/``sym8`` below 256 bytes, ``list0``/``list8``/``map8`` when size and
count fit a byte, ``true``/``false`` for booleans. ``_ENC`` maps the exact Python type (not
``isinstance``: ``Symbol`` is a ``str``, ``UInt`` an ``int``) to its encoder. Arrays encode
every element with one constructor: the full-width one for fixed-width types (``uint`` 0x70,
``ulong`` 0x80, ``boolean`` 0x56 ...), the 8-bit size form for binary, string and symbol when
every element fits it, the 32-bit form for compound elements. ``codec`` re-exports `encode`
and `encode_into`. Pure: no I/O, no clock, nothing of ringmq outside this package.
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
from ringmq.amqp10.types import (
    Array,
    Byte,
    Char,
    Decimal32,
    Decimal64,
    Decimal128,
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

_B: Final = struct.Struct(">B")
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
