"""Hypothesis strategies for AMQP 1.0 values, and the bridge to proton's types (the oracle)."""

from __future__ import annotations

import struct
import uuid
from typing import Any

from hypothesis import strategies as st

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

_TEXT = st.text(max_size=20) | st.text(min_size=256, max_size=300)
_ASCII = st.text(st.characters(max_codepoint=127), max_size=20)
_BIN = st.binary(max_size=20) | st.binary(min_size=256, max_size=300)

SCALARS: dict[str, st.SearchStrategy[Any]] = {
    "null": st.none(),
    "boolean": st.booleans(),
    "ubyte": st.integers(0, 2**8 - 1).map(UByte),
    "ushort": st.integers(0, 2**16 - 1).map(UShort),
    "uint": st.sampled_from([0, 1, 255, 256, 2**32 - 1]).map(UInt)
    | st.integers(0, 2**32 - 1).map(UInt),
    "ulong": st.sampled_from([0, 1, 255, 256, 2**64 - 1]).map(ULong)
    | st.integers(0, 2**64 - 1).map(ULong),
    "byte": st.integers(-(2**7), 2**7 - 1).map(Byte),
    "short": st.integers(-(2**15), 2**15 - 1).map(Short),
    "int": st.integers(-(2**31), 2**31 - 1).map(Int),
    "long": st.integers(-(2**63), 2**63 - 1),
    "float": st.floats(width=32, allow_nan=False).map(Float),
    "double": st.floats(allow_nan=False),
    "decimal32": st.binary(min_size=4, max_size=4).map(Decimal32),
    "decimal64": st.binary(min_size=8, max_size=8).map(Decimal64),
    "decimal128": st.binary(min_size=16, max_size=16).map(Decimal128),
    "char": st.characters().map(Char),
    "timestamp": st.integers(-(2**63), 2**63 - 1).map(Timestamp),
    "uuid": st.uuids(),
    "binary": _BIN,
    "string": _TEXT,
    "symbol": _ASCII.map(Symbol),
}

_KEYS = st.one_of(_ASCII.map(Symbol), st.integers(0, 2**64 - 1).map(ULong), st.text(max_size=8))


def _arrays(children: st.SearchStrategy[Any]) -> st.SearchStrategy[Array]:
    simple = st.sampled_from(sorted(SCALARS)).flatmap(
        lambda name: st.lists(SCALARS[name], max_size=5).map(
            lambda items: Array(name, tuple(items))
        )
    )
    # Lists of scalars only: proton's Python layer reads an array of lists holding nested
    # described values back with element type 0 (its bug, not the encoding's).
    of_lists = st.lists(st.lists(st.one_of(*SCALARS.values()), max_size=3), max_size=3).map(
        lambda items: Array("list", tuple(items))
    )
    described = st.lists(SCALARS["symbol"], max_size=3).map(
        lambda items: Array("symbol", tuple(items), ULong(0x77))
    )
    return simple | of_lists | described


def _compound(children: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    return st.one_of(
        st.lists(children, max_size=5),
        st.dictionaries(_KEYS, children, max_size=5),
        _arrays(children),
        # A described value directly inside another is a constructor with two descriptors,
        # which proton's Python layer reads back wrongly: kept out of the oracle's inputs.
        st.builds(
            Described,
            st.integers(0, 2**64 - 1).map(ULong) | SCALARS["symbol"],
            children.filter(lambda x: not isinstance(x, Described)),
        ),
    )


VALUES: st.SearchStrategy[Any] = st.recursive(
    st.one_of(*SCALARS.values()), _compound, max_leaves=12
)
"""Any AMQP 1.0 value (every type, nested)."""


def same(a: Any, b: Any) -> bool:
    """Equal values of the same types, all the way down (1 == UInt(1) is not enough)."""
    if type(a) is not type(b):
        return False
    if isinstance(a, list):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, dict):
        return list(a) == list(b) and all(
            same(k1, k2) and same(a[k1], b[k2]) for k1, k2 in zip(a, b, strict=True)
        )
    if isinstance(a, Array):
        return (
            a.type == b.type
            and same(a.descriptor, b.descriptor)
            and len(a.items) == len(b.items)
            and all(same(x, y) for x, y in zip(a.items, b.items, strict=True))
        )
    if isinstance(a, Described):
        return same(a.descriptor, b.descriptor) and same(a.value, b.value)
    if isinstance(a, float):
        return struct.pack(">d", a) == struct.pack(">d", b)
    return bool(a == b)


# --- proton, the reference codec --------------------------------------------------------------


def to_proton(v: Any) -> Any:
    """The proton value of one of ours."""
    import proton

    t = type(v)
    simple = {
        UByte: proton.ubyte,
        UShort: proton.ushort,
        UInt: proton.uint,
        ULong: proton.ulong,
        Byte: proton.byte,
        Short: proton.short,
        Int: proton.int32,
        Float: proton.float32,
        Char: proton.char,
        Timestamp: proton.timestamp,
        Symbol: proton.symbol,
    }
    if t in simple:
        return simple[t](v)
    if t in (Decimal32, Decimal64, Decimal128):
        cls = {Decimal32: proton.decimal32, Decimal64: proton.decimal64}.get(t)
        if cls is None:
            return proton.decimal128(bytes(v))
        return cls(int.from_bytes(v, "big"))
    if t is list:
        return [to_proton(x) for x in v]
    if t is dict:
        return {to_proton(k): to_proton(x) for k, x in v.items()}
    if t is Described:
        return proton.Described(to_proton(v.descriptor), to_proton(v.value))
    if t is Array:
        desc: Any = proton.UNDESCRIBED if v.descriptor is None else to_proton(v.descriptor)
        code = getattr(proton.Data, _PROTON_TYPE[v.type])
        return proton.Array(desc, code, *[to_proton(x) for x in v.items])
    return v


_PROTON_TYPE = {
    "null": "NULL",
    "boolean": "BOOL",
    "ubyte": "UBYTE",
    "ushort": "USHORT",
    "uint": "UINT",
    "ulong": "ULONG",
    "byte": "BYTE",
    "short": "SHORT",
    "int": "INT",
    "long": "LONG",
    "float": "FLOAT",
    "double": "DOUBLE",
    "decimal32": "DECIMAL32",
    "decimal64": "DECIMAL64",
    "decimal128": "DECIMAL128",
    "char": "CHAR",
    "timestamp": "TIMESTAMP",
    "uuid": "UUID",
    "binary": "BINARY",
    "string": "STRING",
    "symbol": "SYMBOL",
    "list": "LIST",
    "map": "MAP",
    "array": "ARRAY",
}


def from_proton(v: Any) -> Any:
    """Our value of one of proton's."""
    import proton

    simple = {
        proton.ubyte: UByte,
        proton.ushort: UShort,
        proton.uint: UInt,
        proton.ulong: ULong,
        proton.byte: Byte,
        proton.short: Short,
        proton.int32: Int,
        proton.float32: Float,
        proton.char: Char,
        proton.timestamp: Timestamp,
        proton.symbol: Symbol,
    }
    t = type(v)
    if t in simple:
        return simple[t](v)
    if t is proton.decimal32:
        return Decimal32(int(v).to_bytes(4, "big"))
    if t is proton.decimal64:
        return Decimal64(int(v).to_bytes(8, "big"))
    if t is proton.decimal128:
        return Decimal128(bytes(v))
    if isinstance(v, memoryview | bytes):
        return bytes(v)
    if t is list:
        return [from_proton(x) for x in v]
    if t is dict:
        return {from_proton(k): from_proton(x) for k, x in v.items()}
    if t is proton.Described:
        return Described(from_proton(v.descriptor), from_proton(v.value))
    if t is proton.Array:
        names = {getattr(proton.Data, code): name for name, code in _PROTON_TYPE.items()}
        desc = None if v.descriptor is proton.UNDESCRIBED else from_proton(v.descriptor)
        return Array(names[v.type], tuple(from_proton(x) for x in v.elements), desc)
    if isinstance(v, uuid.UUID):
        return v
    return v


def proton_encode(v: Any) -> bytes:
    import proton

    d = proton.Data()
    d.put_object(to_proton(v))
    return bytes(d.encode())


def proton_decode(b: bytes) -> Any:
    import proton

    d = proton.Data()
    d.decode(b)
    d.rewind()
    d.next()
    return from_proton(d.get_object())
