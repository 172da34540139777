"""The machinery of AMQP 1.0 composite types: encoding by field kinds, a registry, decoding.

Theory of operation
-------------------
Every composite type of the spec (``performatives.py`` defines them all) is a frozen slotted
dataclass whose fields are the spec's fields in the spec's order, each with the spec's default
(a mandatory field defaults to a placeholder and is checked on decode), registered here by
`composite` with its descriptor code, its symbolic name and one *kind* per field. The kind says
how a field is encoded (``"uint"`` wraps the value in ``UInt``, ``"symbols"`` turns a tuple into
an array of symbols, ``"state"`` encodes a delivery state as its described list...) and how a
decoded value is checked (an ``int`` for ``"uint"``, ``bytes`` for ``"binary"``, one of the
named composite types for ``"state"``...); a kind ending in ``!`` is mandatory.

On the wire a composite is ``Described(code, [fields])``. ``encode()`` writes a field equal to
its default as null and drops trailing nulls (the spec: null means the default). Decoding
accepts the descriptor as a code or as the symbolic name and a list shorter than the spec's
(the rest take their defaults) or longer (later versions' fields, ignored); a wrong field type,
a missing mandatory field or an unknown descriptor is `DecodeError`. The decoded values are the
codec's (``UInt`` for a uint...), ``int``/``str`` subclasses that read as plain values.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import fields
from typing import Any, ClassVar, Final

from ringmq.amqp10.codec import Buffer, decode, encode
from ringmq.amqp10.types import (
    Array,
    DecodeError,
    Described,
    Symbol,
    Timestamp,
    UByte,
    UInt,
    ULong,
    UShort,
    symbol_array,
    symbols,
)


class Composite:
    """Base of every composite type: encoding, and what the decoder needs to build one."""

    __slots__ = ()

    DESCRIPTOR: ClassVar[int]
    NAME: ClassVar[str]
    FIELDS: ClassVar[tuple[str, ...]]
    """The kind of each field, in order."""
    WRITERS: ClassVar[tuple[tuple[str, Callable[[Any], Any], Any, bool], ...]]
    """Per field: name, to-wire conversion, default, mandatory."""
    MANDATORY: ClassVar[tuple[int, ...]]
    """The positions of the mandatory fields."""
    READERS: ClassVar[tuple[tuple[Callable[[Any], Any], Any], ...]]
    """Per field: from-wire check, default (`MISSING` for a mandatory field)."""

    def described(self) -> Described:
        """This value as the codec's ``Described`` (code, trimmed field list)."""
        values: list[Any] = []
        for name, conv, default, mandatory in self.WRITERS:
            v = getattr(self, name)
            if v is None or (not mandatory and v == default):
                values.append(None)
            else:
                values.append(conv(v))
        while values and values[-1] is None:
            values.pop()
        return Described(CODES[self.DESCRIPTOR], values)

    def encode(self) -> bytes:
        """The encoded described list (a frame body without payload)."""
        return encode(self.described())


def _same(v: Any) -> Any:
    return v


def _symbol_map(v: dict[Any, Any]) -> dict[Any, Any]:
    # fields / annotations maps: keys are symbols; a plain str key is taken as one.
    return {Symbol(k) if type(k) is str else k: x for k, x in v.items()}


def _symbols_out(v: tuple[str, ...]) -> Array | None:
    return symbol_array(tuple(x if type(x) is Symbol else Symbol(x) for x in v))


def _wrap(cls: Callable[[Any], Any]) -> Callable[[Any], Any]:
    def conv(v: Any) -> Any:
        return v if type(v) is cls else cls(v)

    return conv


def _composite_out(v: Composite) -> Described:
    return v.described()


_TO_WIRE: Final[dict[str, Callable[[Any], Any]]] = {
    "uint": _wrap(UInt),
    "ulong": _wrap(ULong),
    "ushort": _wrap(UShort),
    "ubyte": _wrap(UByte),
    "timestamp": _wrap(Timestamp),
    "symbol": _wrap(Symbol),
    "symbols": _symbols_out,
    "map": _symbol_map,
    "error": _composite_out,
    "state": _composite_out,
    "outcome": _composite_out,
    "source": _composite_out,
    "target": _composite_out,
}

MISSING: Final = object()
"""The decoder's default of a mandatory field: its presence in the decoded fields is an error."""
CODES: Final[dict[int, ULong]] = {}
BY_CODE: Final[dict[int, type[Composite]]] = {}
BY_NAME: Final[dict[str, type[Composite]]] = {}


def composite(code: int, name: str, kinds: tuple[str, ...]) -> Callable[[type[Any]], Any]:
    """Register a composite dataclass: its descriptor ``code``, symbolic ``name`` and the kind
    of each of its fields (see the module docstring)."""

    def register(cls: type[Any]) -> Any:
        cls.DESCRIPTOR = code
        cls.NAME = name
        cls.FIELDS = kinds
        flds = fields(cls)
        assert len(flds) == len(kinds), cls
        cls.WRITERS = tuple(
            (f.name, _TO_WIRE.get(k.rstrip("!"), _same), f.default, k.endswith("!"))
            for f, k in zip(flds, kinds, strict=True)
        )
        cls.READERS = tuple(
            (_FROM_WIRE[k.rstrip("!")], MISSING if k.endswith("!") else f.default)
            for f, k in zip(flds, kinds, strict=True)
        )
        cls.MANDATORY = tuple(i for i, k in enumerate(kinds) if k.endswith("!"))
        CODES[code] = ULong(code)
        BY_CODE[code] = cls
        BY_NAME[name] = cls
        return cls

    return register


# ---------------------------------------------------------------------------------------------
# Decoding

_COMPOSITE_KINDS: Final[dict[str, tuple[str, ...]]] = {
    "error": ("Error",),
    "outcome": ("Accepted", "Rejected", "Released", "Modified", "Declared"),
    "state": (
        "Received", "Accepted", "Rejected", "Released", "Modified", "Declared",
        "TransactionalState",
    ),
    "source": ("Source",),
    "target": ("Target", "Coordinator"),
}  # fmt: skip
"""The composite types a field of each composite kind may hold, by class name."""


def _composite_in(kind: str) -> Callable[[Any], Any]:
    allowed = frozenset(_COMPOSITE_KINDS[kind])

    def conv(v: Any) -> Any:
        got = from_described(v)
        if type(got).__name__ not in allowed:
            raise DecodeError(f"{type(got).__name__} where {kind} was expected")
        return got

    return conv


def _check(*types: type) -> Callable[[Any], Any]:
    def conv(v: Any) -> Any:
        if not isinstance(v, types):
            raise DecodeError(f"{type(v).__name__} where {types[0].__name__} was expected")
        return v

    return conv


def _number(exact: type, lo: int, hi: int) -> Callable[[Any], Any]:
    # The field's own type is in range by construction (the common case: one test). Any other
    # integer type in range is taken too: peers send a wider type than the field's now and
    # then (a long for a uint); out of range, or a boolean, it is malformed.
    def conv(v: Any) -> Any:
        if type(v) is exact:
            return v
        if not isinstance(v, int) or isinstance(v, bool) or not lo <= v <= hi:
            raise DecodeError(f"{v!r} where an integer in [{lo}, {hi}] was expected")
        return v

    return conv


def _boolean(v: Any) -> Any:
    if v is True or v is False:
        return v
    raise DecodeError(f"{type(v).__name__} where bool was expected")


def _symbols_in(v: Any) -> Any:
    return symbols(v)


_FROM_WIRE: Final[dict[str, Callable[[Any], Any]]] = {
    "uint": _number(UInt, 0, 2**32 - 1),
    "ulong": _number(ULong, 0, 2**64 - 1),
    "ushort": _number(UShort, 0, 2**16 - 1),
    "ubyte": _number(UByte, 0, 2**8 - 1),
    "timestamp": _number(Timestamp, -(2**63), 2**63 - 1),
    "bool": _boolean,
    "string": _check(str),
    "symbol": _check(str),
    "binary": _check(bytes),
    "map": _check(dict),
    "symbols": _symbols_in,
    "any": _same,
    **{kind: _composite_in(kind) for kind in _COMPOSITE_KINDS},
}


def from_described(v: Any) -> Composite:
    """The composite dataclass of a decoded ``Described`` value (DecodeError as the module
    docstring says)."""
    if type(v) is not Described:
        raise DecodeError(f"a described type expected, got {type(v).__name__}")
    d = v.descriptor
    cls = BY_CODE.get(d) if isinstance(d, int) else BY_NAME.get(d) if type(d) is Symbol else None
    if cls is None:
        raise DecodeError(f"unknown descriptor {d!r}")
    return from_fields(cls, v.value)


def from_fields(cls: type[Composite], items: Any) -> Composite:
    """A ``cls`` from its decoded field list (DecodeError as the module docstring says)."""
    if type(items) is not list:
        raise DecodeError(f"{cls.NAME}: a list expected")
    readers = cls.READERS
    k = len(readers)
    if len(items) != k:
        # Fewer: the rest are null. More: fields of a later version of the spec, ignored.
        items = (items + [None] * k)[:k]
    args = [d if x is None else conv(x) for (conv, d), x in zip(readers, items, strict=True)]
    for i in cls.MANDATORY:
        if args[i] is MISSING:
            raise DecodeError(f"{cls.NAME}: mandatory field {cls.WRITERS[i][0]} is null")
    return cls(*args)


def decode_composite(buf: Buffer, off: int = 0) -> tuple[Composite, int]:
    """Decode any composite type of the spec at ``buf[off:]``.

    Returns:
        The dataclass and the offset just after it.

    Raises:
        DecodeError: malformed data, an unknown descriptor, a wrong field type or a missing
            mandatory field.
    """
    v, end = decode(buf, off)
    return from_described(v), end
