"""AMQP 1.0 values as Python values (spec part 1, "Types").

Python's own types stand for the AMQP types they match exactly, and a small wrapper (a subclass
of the Python type, so it costs one object and compares as its value) stands for each AMQP type
Python has no distinct type for:

=================  =====================  ===================================================
AMQP type          Python                 note
=================  =====================  ===================================================
null               ``None``
boolean            ``bool``
ubyte, ushort      ``UByte``, ``UShort``  ``int`` subclasses
uint, ulong        ``UInt``, ``ULong``    ``int`` subclasses
byte, short, int   ``Byte``, ``Short``,   ``int`` subclasses
                   ``Int``
long               ``int``                a plain ``int`` encodes as a long (as in proton)
float              ``Float``              a ``float`` subclass holding a float32 value
double             ``float``
decimal32/64/128   ``Decimal32`` ...      ``bytes`` subclasses: the raw IEEE 754 bytes
char               ``Char``               a ``str`` subclass of one code point
timestamp          ``Timestamp``          an ``int`` subclass: ms since the Unix epoch
uuid               ``uuid.UUID``
binary             ``bytes``
string             ``str``
symbol             ``Symbol``             a ``str`` subclass (ASCII)
list               ``list``               a ``tuple`` encodes as a list too
map                ``dict``
array              ``Array``              element type by name, items, optional descriptor
described          ``Described``          descriptor and value
=================  =====================  ===================================================

Decoding gives back exactly these types, so ``decode(encode(v))`` has the type and the value of
``v`` for every ``v`` built from them (except that a ``tuple`` comes back as a ``list``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Final


class DecodeError(ValueError):
    """Malformed or truncated AMQP 1.0 encoded data (the condition ``amqp:decode-error``)."""


class Symbol(str):
    """An AMQP symbol (ASCII text used for names and keys)."""

    __slots__ = ()

    def __repr__(self) -> str:
        return f"Symbol({str.__repr__(self)})"


class Char(str):
    """An AMQP char: one Unicode code point."""

    __slots__ = ()


class UByte(int):
    """An AMQP ubyte (0..255)."""

    __slots__ = ()


class UShort(int):
    """An AMQP ushort (0..65535)."""

    __slots__ = ()


class UInt(int):
    """An AMQP uint (0..2**32-1)."""

    __slots__ = ()


class ULong(int):
    """An AMQP ulong (0..2**64-1)."""

    __slots__ = ()


class Byte(int):
    """An AMQP byte (-128..127)."""

    __slots__ = ()


class Short(int):
    """An AMQP short (-32768..32767)."""

    __slots__ = ()


class Int(int):
    """An AMQP int (-2**31..2**31-1)."""

    __slots__ = ()


class Timestamp(int):
    """An AMQP timestamp: milliseconds since the Unix epoch (signed 64-bit)."""

    __slots__ = ()


class Float(float):
    """An AMQP float (IEEE 754 binary32); a plain ``float`` is a double."""

    __slots__ = ()


class Decimal32(bytes):
    """An AMQP decimal32, kept as its 4 raw bytes (IEEE 754 decimal32)."""

    __slots__ = ()


class Decimal64(bytes):
    """An AMQP decimal64, kept as its 8 raw bytes."""

    __slots__ = ()


class Decimal128(bytes):
    """An AMQP decimal128, kept as its 16 raw bytes."""

    __slots__ = ()


@dataclass(frozen=True, slots=True)
class Described:
    """A described type: a descriptor (usually a ``ULong`` code or a ``Symbol`` name) and a
    value."""

    descriptor: Any
    value: Any


ARRAY_TYPES: Final = frozenset(
    {
        "null", "boolean", "ubyte", "ushort", "uint", "ulong", "byte", "short", "int", "long",
        "float", "double", "decimal32", "decimal64", "decimal128", "char", "timestamp", "uuid",
        "binary", "string", "symbol", "list", "map", "array",
    }
)  # fmt: skip
"""The names an `Array`'s element type may take (the spec's type names)."""


@dataclass(frozen=True, slots=True)
class Array:
    """An AMQP array: items of one type (by its spec name, e.g. ``"symbol"``).

    Attributes:
        type: the element type's name (one of `ARRAY_TYPES`).
        items: the elements, as the decoder gives them (``Symbol``, ``UInt``...).
        descriptor: for an array of described values, their common descriptor (the items are
            then the undescribed values).
    """

    type: str
    items: tuple[Any, ...]
    descriptor: Any = None

    def __post_init__(self) -> None:
        if self.type not in ARRAY_TYPES:
            raise ValueError(f"unknown AMQP array element type {self.type!r}")


def symbols(value: Any) -> tuple[Symbol, ...] | None:
    """A multiple-symbol field as a tuple: the spec lets a peer send one symbol or an array.

    Raises:
        DecodeError: a value that is neither.
    """
    if value is None:
        return None
    if isinstance(value, Symbol):
        return (value,)
    if isinstance(value, Array) and value.type == "symbol" and value.descriptor is None:
        return value.items
    raise DecodeError(f"expected a symbol or an array of symbols, got {type(value).__name__}")


def symbol_array(values: tuple[Symbol, ...] | None) -> Array | None:
    """A multiple-symbol field for encoding (None stays None)."""
    if values is None:
        return None
    return Array("symbol", tuple(values))
