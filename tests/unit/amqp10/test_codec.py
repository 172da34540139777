"""The AMQP 1.0 type codec: round trips, smallest constructors, proton as the oracle, and
hostile input that may only raise DecodeError."""

from __future__ import annotations

import uuid
from typing import Any

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from ringmq.amqp10.codec import MAX_DEPTH, decode, decode_all, encode
from ringmq.amqp10.types import (
    Array,
    Char,
    Decimal32,
    DecodeError,
    Described,
    Float,
    Int,
    Symbol,
    Timestamp,
    UByte,
    UInt,
    ULong,
)
from tests.unit.amqp10.strategies import SCALARS, VALUES, proton_decode, proton_encode, same


@given(VALUES)
def test_round_trip_every_type(v: Any) -> None:
    data = encode(v)
    got, end = decode(data)
    assert end == len(data)
    assert same(got, v)
    # memoryview input and an offset give the same
    got2, end2 = decode(memoryview(b"xyz" + data), 3)
    assert end2 == len(data) + 3
    assert same(got2, v)


@pytest.mark.parametrize("name", sorted(SCALARS))
@given(data=st.data())
def test_scalar_bytes_equal_protons(name: str, data: st.DataObject) -> None:
    """Scalars: our encoding is byte for byte proton's (proton picks the smallest)."""
    v = data.draw(SCALARS[name])
    assert encode(v) == proton_encode(v)


@given(VALUES)
def test_proton_decodes_ours(v: Any) -> None:
    assert same(proton_decode(encode(v)), v)


@given(VALUES)
def test_we_decode_protons(v: Any) -> None:
    data = proton_encode(v)
    got, end = decode(data)
    assert end == len(data)
    assert same(got, v)


# Byte vectors from the spec's tables (part 1, 1.6), independent of proton.
VECTORS: list[tuple[Any, bytes]] = [
    (None, b"\x40"),
    (True, b"\x41"),
    (False, b"\x42"),
    (UInt(0), b"\x43"),
    (UInt(7), b"\x52\x07"),
    (UInt(256), b"\x70\x00\x00\x01\x00"),
    (ULong(0), b"\x44"),
    (ULong(0x10), b"\x53\x10"),
    (ULong(2**64 - 1), b"\x80" + b"\xff" * 8),
    (Int(-1), b"\x54\xff"),
    (Int(128), b"\x71\x00\x00\x00\x80"),
    (-2, b"\x55\xfe"),
    (2**40, b"\x81\x00\x00\x01\x00\x00\x00\x00\x00"),
    (UByte(3), b"\x50\x03"),
    (Float(1.0), b"\x72\x3f\x80\x00\x00"),
    (1.0, b"\x82\x3f\xf0" + b"\x00" * 6),
    (Char("A"), b"\x73\x00\x00\x00\x41"),
    (Timestamp(1), b"\x83" + b"\x00" * 7 + b"\x01"),
    (uuid.UUID(int=1), b"\x98" + b"\x00" * 15 + b"\x01"),
    (b"ab", b"\xa0\x02ab"),
    (b"x" * 256, b"\xb0\x00\x00\x01\x00" + b"x" * 256),
    ("hé", b"\xa1\x03h\xc3\xa9"),
    (Symbol("amqp:accepted:list"), b"\xa3\x12amqp:accepted:list"),
    ([], b"\x45"),
    ([True], b"\xc0\x02\x01\x41"),
    ({Symbol("k"): None}, b"\xc1\x05\x02\xa3\x01k\x40"),
    (Array("symbol", (Symbol("a"), Symbol("bc"))), b"\xe0\x07\x02\xa3\x01a\x02bc"),
    (Array("uint", (UInt(1),)), b"\xe0\x06\x01\x70\x00\x00\x00\x01"),
    (Described(ULong(0x24), []), b"\x00\x53\x24\x45"),
    (Decimal32(b"\x01\x02\x03\x04"), b"\x74\x01\x02\x03\x04"),
]


@pytest.mark.parametrize(("value", "data"), VECTORS)
def test_spec_vectors(value: Any, data: bytes) -> None:
    assert encode(value) == data
    got, end = decode(data)
    assert same(got, value)
    assert end == len(data)


@pytest.mark.parametrize(
    ("data", "value"),
    [
        (b"\x56\x01", True),  # boolean with a byte
        (b"\x56\x00", False),
        (b"\x70\x00\x00\x00\x05", UInt(5)),  # wider forms than needed decode the same
        (b"\x80" + b"\x00" * 7 + b"\x05", ULong(5)),
        (b"\x71\x00\x00\x00\x05", Int(5)),
        (b"\x81" + b"\x00" * 7 + b"\x05", 5),
        (b"\xb1\x00\x00\x00\x01a", "a"),
        (b"\xb3\x00\x00\x00\x01a", Symbol("a")),
        (b"\xd0\x00\x00\x00\x05\x00\x00\x00\x01\x40", [None]),
        (b"\xd1\x00\x00\x00\x04\x00\x00\x00\x00", {}),
        (b"\xe0\x02\x00\x52", Array("uint", ())),
        (b"\xe0\x02\x02\x43", Array("uint", (UInt(0), UInt(0)))),
    ],
)
def test_every_constructor_decodes(data: bytes, value: Any) -> None:
    got, end = decode(data)
    assert same(got, value)
    assert end == len(data)


@given(VALUES)
def test_every_truncation_is_a_decode_error(v: Any) -> None:
    data = encode(v)
    for cut in range(len(data)):
        with pytest.raises(DecodeError):
            decode(data[:cut])


@given(st.binary(max_size=64))
@example(b"\xf0\x00\x00\x00\x05\xff\xff\xff\xff\x40")  # 4 billion zero-width elements
@example(b"\xd0\x00\x00\x00\x04\xff\xff\xff\xff")  # a count beyond the size
@example(b"\xc1\x03\x02\xc0\x01\x00\x40")  # an empty list as a map key: unhashable
@example(b"\xa1\x01\xff")  # not UTF-8
@example(b"\x56\x02")  # boolean of 2
@example(b"s\x80\x00\x00\x00")  # a char beyond Unicode
def test_random_bytes_only_decode_error(data: bytes) -> None:
    try:
        decode_all(data)
    except DecodeError:
        pass


def test_nesting_is_bounded() -> None:
    deep = b"\xc0\x02\x01" * (MAX_DEPTH + 1) + b"\x45"
    with pytest.raises(DecodeError, match="deeply"):
        decode(deep)
    described = b"\x00\x40" * 5000 + b"\x40"
    with pytest.raises(DecodeError):
        decode(described)
    ok = encode([[[[1]]]])
    assert decode(ok)[0] == [[[[1]]]]


@pytest.mark.parametrize(
    "data",
    [
        b"\xc0\x03\x01\x40\x40",  # list size says 2 bytes of items, one item of 1 byte
        b"\xc1\x02\x01\x40",  # odd map count
        b"\xe0\x02\x01\x00",  # array of a described constructor with nothing after
        b"\xe0\x03\x01\x00\x40\x00",  # described element constructor nested
        b"\x01",  # reserved constructor
    ],
)
def test_malformed_compounds(data: bytes) -> None:
    with pytest.raises(DecodeError):
        decode(data)


@pytest.mark.parametrize(
    ("value", "exc"),
    [(UInt(-1), ValueError), (UByte(256), ValueError), (object(), TypeError)],
)
def test_encode_refuses(value: Any, exc: type[Exception]) -> None:
    with pytest.raises(exc):
        encode(value)


def test_array_forms() -> None:
    big = Array("symbol", tuple(Symbol("s" * 300) for _ in range(2)))
    assert encode(big)[0] == 0xF0
    assert encode(big)[9] == 0xB3  # sym32 elements
    assert same(decode(encode(big))[0], big)
    many = Array("ubyte", tuple(UByte(1) for _ in range(300)))
    assert same(decode(encode(many))[0], many)
    assert encode(["x" * 300])[0] == 0xD0
