"""ringmq.amqp10: the AMQP 1.0 wire codec (types, frames, performatives, message sections).

Sans-IO and self-contained: bytes in, values out; it imports nothing of ringmq outside itself.
``types`` holds the Python representation of the AMQP types, ``codec`` the type codec,
``composite`` the encoding of composite types by field kinds, ``performatives`` the frame bodies
and the types they carry (errors, termini, delivery states, transactions), ``frames`` the
protocol headers, the frame reader and the frame encoders, ``sections`` the message sections.
"""

from __future__ import annotations

from ringmq.amqp10.codec import decode, decode_all, encode, encode_into
from ringmq.amqp10.frames import Frame, FrameReader, FramingError, ProtocolHeader, encode_frame
from ringmq.amqp10.performatives import decode_performative
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
    "Frame",
    "FrameReader",
    "FramingError",
    "Int",
    "ProtocolHeader",
    "Short",
    "Symbol",
    "Timestamp",
    "UByte",
    "UInt",
    "ULong",
    "UShort",
    "decode",
    "decode_all",
    "decode_performative",
    "encode",
    "encode_frame",
    "encode_into",
]
