"""ringmq.amqp10: the AMQP 1.0 wire codec (types, frames, performatives, message sections).

Sans-IO and self-contained: bytes in, values out; it imports nothing of ringmq outside itself.
``types`` holds the Python representation of the AMQP types, ``codec`` the type codec.
"""

from __future__ import annotations

from ringmq.amqp10.codec import decode, decode_all, encode, encode_into
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

__all__ = [
    "Array",
    "Byte",
    "Char",
    "Decimal32",
    "Decimal64",
    "Decimal128",
    "DecodeError",
    "Described",
    "Float",
    "Int",
    "Short",
    "Symbol",
    "Timestamp",
    "UByte",
    "UInt",
    "ULong",
    "UShort",
    "decode",
    "decode_all",
    "encode",
    "encode_into",
]
