"""AMQP 1.0 messages and AMQP 0-9-1 content, each as the other protocol's consumers read it.

The rules are docs/dev/messages.md §3 (1.0 to 0-9-1), §4 (0-9-1 to 1.0) and §5 (value types),
RabbitMQ's (``mc_amqpl.erl``): each row of those tables is one line below. The 0-9-1 field
table types matter both ways (a 1.0 ``uint`` is a 0-9-1 ``i``, a 0-9-1 ``B`` a 1.0 ``ubyte``),
and the 0-9-1 table codec (``ringmq.amqp.tables``) gives Python values without their type
letters, so this module reads and writes the headers table itself, with the letters
(`typed_table`, `encode_typed_table`); everything else goes through the 0-9-1 property codec.

`neutral` is the third direction: a 1.0 value as the engine's ``Message.headers`` hold it
(the Python value a 0-9-1 table decode gives for the §5 type).

Pure functions; the adapter (``message.py``) registers the two conversions with the core.
"""

from __future__ import annotations

import struct
import uuid
from datetime import UTC, datetime
from typing import Any, Final

from ringmq.amqp.properties import (
    FLAG_CONTENT_ENCODING,
    FLAG_CONTENT_TYPE,
    FLAG_HEADERS,
    BasicProperties,
    decode_properties,
    encode_properties,
)
from ringmq.amqp10 import sections as sec
from ringmq.amqp10.sections import Header, Properties, Scan
from ringmq.amqp10.types import (
    Array,
    Byte,
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

LONG_MAX: Final = 2**63 - 1
TIMESTAMP_MAX_MS: Final = 253_402_300_799_999
"""The last millisecond of year 9999: later 1.0 timestamps have no 0-9-1 (or Python) form."""
URN_UUID: Final = "urn:uuid:"
AMQP10_TYPE: Final = "amqp-1.0"
"""The 0-9-1 `type` of a converted message whose body is not one data section (§3)."""


def shortstr(v: str | bytes) -> str | None:
    """``v`` as a 0-9-1 shortstr: valid UTF-8, under 256 bytes, no NUL; else None."""
    if isinstance(v, bytes):
        raw = v
        try:
            text = raw.decode()
        except UnicodeDecodeError:
            return None
    else:
        text = str(v)
        raw = text.encode()
    if len(raw) > 255 or "\x00" in text:
        return None
    return text


# ---------------------------------------------------------------------------------------------
# §5, 1.0 to 0-9-1: (type letter, value) of a 1.0 value, None when not carried.

_LETTER: Final[dict[type, str]] = {
    bool: "t",
    UByte: "B",
    UShort: "u",
    UInt: "i",
    Byte: "b",
    Short: "s",
    Int: "I",
    int: "l",
    Float: "f",
    float: "d",
}


def to_091(v: Any) -> tuple[str, Any] | None:
    """The 0-9-1 field (type letter, value) of a 1.0 value (§5), None when it is not carried."""
    t = type(v)
    letter = _LETTER.get(t)
    if letter is not None:
        return letter, v
    if v is None:
        return "V", None
    if t is ULong:
        return ("l", int(v)) if v <= LONG_MAX else None
    if t is Timestamp:
        return ("T", v // 1000) if 0 <= v <= TIMESTAMP_MAX_MS else None
    if t is str or t is Symbol:
        return "S", v.encode()
    if t is bytes:
        return "S", v
    if t is list or t is Array:
        items = v if t is list else v.items
        return "A", [f for f in map(to_091, items) if f is not None]
    if t is dict:
        return "F", table_entries(v.items())
    return None  # uuid, char, decimals, described values: no 0-9-1 type


def table_entries(pairs: Any) -> list[tuple[str, str, Any]]:
    """(key, letter, value) of each carried pair: keys must be text that is a shortstr."""
    out = []
    for k, v in pairs:
        if type(k) is not str and type(k) is not Symbol:
            continue
        key = shortstr(k)
        f = to_091(v) if key is not None else None
        if f is not None:
            out.append((str(key), f[0], f[1]))
    return out


_FIXED: Final[dict[str, struct.Struct]] = {
    "b": struct.Struct(">b"),
    "B": struct.Struct(">B"),
    "s": struct.Struct(">h"),
    "u": struct.Struct(">H"),
    "I": struct.Struct(">i"),
    "i": struct.Struct(">I"),
    "l": struct.Struct(">q"),
    "f": struct.Struct(">f"),
    "d": struct.Struct(">d"),
    "T": struct.Struct(">Q"),
}
_U32: Final = struct.Struct(">I")


def _encode_field(out: list[bytes], letter: str, v: Any) -> None:
    out.append(letter.encode())
    s = _FIXED.get(letter)
    if s is not None:
        out.append(s.pack(v))
    elif letter == "t":
        out.append(b"\x01" if v else b"\x00")
    elif letter == "S":
        out += (_U32.pack(len(v)), v)
    elif letter == "A":
        inner: list[bytes] = []
        for item_letter, item in v:
            _encode_field(inner, item_letter, item)
        data = b"".join(inner)
        out += (_U32.pack(len(data)), data)
    elif letter == "F":
        data = encode_typed_table(v)
        out.append(data)
    # "V": nothing follows the letter


def encode_typed_table(entries: list[tuple[str, str, Any]]) -> bytes:
    """A 0-9-1 field table (u32 size, then the fields) of (key, letter, value) entries."""
    out: list[bytes] = []
    for key, letter, v in entries:
        k = key.encode()
        out += (bytes((len(k),)), k)
        _encode_field(out, letter, v)
    data = b"".join(out)
    return _U32.pack(len(data)) + data


# ---------------------------------------------------------------------------------------------
# §5, 0-9-1 to 1.0: a headers table read with its type letters.

_FROM_FIXED: Final[dict[int, tuple[struct.Struct, Any]]] = {
    ord("b"): (_FIXED["b"], Byte),
    ord("B"): (_FIXED["B"], UByte),
    ord("s"): (_FIXED["s"], Short),
    ord("u"): (_FIXED["u"], UShort),
    ord("I"): (_FIXED["I"], Int),
    ord("i"): (_FIXED["i"], UInt),
    ord("l"): (_FIXED["l"], int),
    ord("f"): (_FIXED["f"], Float),
    ord("d"): (_FIXED["d"], float),
    ord("T"): (_FIXED["T"], lambda s: Timestamp(s * 1000)),
}
_NOT_CARRIED: Final = object()


def _read_value(buf: bytes, pos: int) -> tuple[Any, int]:
    letter = buf[pos]
    pos += 1
    fixed = _FROM_FIXED.get(letter)
    if fixed is not None:
        s, wrap = fixed
        return wrap(s.unpack_from(buf, pos)[0]), pos + s.size
    if letter == ord("t"):
        return buf[pos] != 0, pos + 1
    if letter in (ord("S"), ord("x")):
        n = _U32.unpack_from(buf, pos)[0]
        raw = buf[pos + 4 : pos + 4 + n]
        text = shortstr(raw) if letter == ord("S") else None
        return (raw if text is None else text), pos + 4 + n
    if letter == ord("A"):
        n = _U32.unpack_from(buf, pos)[0]
        end = pos + 4 + n
        items = []
        pos += 4
        while pos < end:
            item, pos = _read_value(buf, pos)
            if item is not _NOT_CARRIED:
                items.append(item)
        return items, end
    if letter == ord("F"):
        n = _U32.unpack_from(buf, pos)[0]
        return dict(typed_table(buf[pos : pos + 4 + n])), pos + 4 + n
    if letter == ord("V"):
        return None, pos
    if letter == ord("D"):
        return _NOT_CARRIED, pos + 5  # decimal: no 1.0 row in §5
    raise ValueError(f"unknown field table type {chr(letter)!r}")


def typed_table(table: bytes) -> list[tuple[str, Any]]:
    """The (key, 1.0 value) pairs of an encoded 0-9-1 field table (u32 size first), in order.

    The table was checked when the message was published; ValueError for one that is not.
    """
    n = _U32.unpack_from(table, 0)[0]
    pos, end = 4, 4 + n
    out = []
    while pos < end:
        k = table[pos + 1 : pos + 1 + table[pos]].decode()
        v, pos = _read_value(table, pos + 1 + table[pos])
        if v is not _NOT_CARRIED:
            out.append((k, v))
    return out


def headers_table(pb: bytes) -> bytes | None:
    """The raw headers table (size included) of a 0-9-1 property list, None without one."""
    flags = (pb[0] << 8) | pb[1]
    if not flags & FLAG_HEADERS:
        return None
    pos = 2
    if flags & FLAG_CONTENT_TYPE:
        pos += 1 + pb[pos]
    if flags & FLAG_CONTENT_ENCODING:
        pos += 1 + pb[pos]
    n = _U32.unpack_from(pb, pos)[0]
    return pb[pos : pos + 4 + n]


def with_headers(pb: bytes, table: bytes) -> bytes:
    """A 0-9-1 property list without headers, given the encoded headers ``table``."""
    flags = ((pb[0] << 8) | pb[1]) | FLAG_HEADERS
    pos = 2
    if flags & FLAG_CONTENT_TYPE:
        pos += 1 + pb[pos]
    if flags & FLAG_CONTENT_ENCODING:
        pos += 1 + pb[pos]
    return bytes(((flags >> 8) & 0xFF, flags & 0xFF)) + pb[2:pos] + table + pb[pos:]


# ---------------------------------------------------------------------------------------------
# The engine's view: a 1.0 value as a 0-9-1 table decode gives it.


def neutral(v: Any) -> Any:
    """A 1.0 value as ``Message.headers`` holds it (None for null, and for a value with no
    0-9-1 type, which callers leave out: `carried`)."""
    t = type(v)
    if t is bool or v is None:
        return v
    if t is Timestamp:
        return datetime.fromtimestamp(v // 1000, UTC)
    if isinstance(v, int):
        return int(v)
    if isinstance(v, float):
        return float(v)
    if isinstance(v, str):
        return str(v)
    if t is bytes:
        return v
    if t is list or t is Array:
        return [neutral(x) for x in (v if t is list else v.items) if carried(x)]
    if t is dict:
        return {str(k): neutral(x) for k, x in v.items() if isinstance(k, str) and carried(x)}
    return None


def carried(v: Any) -> bool:
    """Whether a 1.0 value has a 0-9-1 type (§5)."""
    return to_091(v) is not None


def id_text(v: Any) -> str | None:
    """A 1.0 message-id or correlation-id as text (§3: utf8 as is, uuid as ``urn:uuid:``,
    ulong in decimal); None for binary."""
    if isinstance(v, str):
        return str(v)
    if isinstance(v, uuid.UUID):
        return URN_UUID + str(v)
    if isinstance(v, int) and not isinstance(v, bool):
        return str(int(v))
    return None


def id_value(text: str) -> Any:
    """A 0-9-1 message_id or correlation_id as a 1.0 id (§4): a ``urn:uuid:`` as uuid."""
    if text.startswith(URN_UUID):
        try:
            return uuid.UUID(text[len(URN_UUID) :])
        except ValueError:
            pass
    return text


# ---------------------------------------------------------------------------------------------
# §3: a 1.0 message as 0-9-1 content.


def to_amqp091(
    sc: Scan, payload: bytes, expiration_ms: int | None, *, body: bool = True
) -> tuple[bytes, bytes]:
    """``(properties_bin, body)`` of a scanned 1.0 message for a 0-9-1 consumer (§3).

    ``expiration_ms`` is the message's TTL as the engine holds it (the header's ttl, or the
    absolute-expiry-time counted from arrival: §8). Without ``body`` only the properties are
    made (and ``type`` is not set).
    """
    props = BasicProperties()
    extra: list[tuple[str, str, Any]] = []
    h = sc.header
    props.delivery_mode = 2 if h is not None and h.durable else 1
    if h is not None and h.priority is not None:
        props.priority = int(h.priority)
    if expiration_ms is not None:
        props.expiration = str(expiration_ms)
    p = sc.properties
    if p is not None:
        _ids(p, props, extra)
        if p.user_id is not None:
            props.user_id = shortstr(p.user_id)
        if p.reply_to is not None:
            props.reply_to = shortstr(p.reply_to)
        if p.content_type is not None:
            props.content_type = shortstr(p.content_type)
        if p.content_encoding is not None:
            props.content_encoding = shortstr(p.content_encoding)
        if p.creation_time is not None and 0 <= p.creation_time <= TIMESTAMP_MAX_MS:
            props.timestamp = p.creation_time // 1000
        if p.group_id is not None:
            props.app_id = shortstr(p.group_id)
    entries = table_entries((sc.application_properties or {}).items())
    for k, v in (sc.message_annotations or {}).items():
        if k == "x-cc":
            entries += table_entries([("CC", v)])
        elif isinstance(k, str) and k.startswith("x-"):
            entries += table_entries([(k, v)])
    entries += extra
    data = b""
    if body:
        if sc.data is not None:
            data = payload[sc.data[0] : sc.data[1]]
        elif sc.body_start < sc.body_end:
            data = payload[sc.body_start : sc.body_end]
            props.type = AMQP10_TYPE
    pb = encode_properties(props)
    if entries:
        pb = with_headers(pb, encode_typed_table(entries))
    return pb, data


def _ids(p: Properties, props: BasicProperties, extra: list[tuple[str, str, Any]]) -> None:
    for value, name, header in (
        (p.message_id, "message_id", "x-message-id"),
        (p.correlation_id, "correlation_id", "x-correlation-id"),
    ):
        if value is None:
            continue
        text = id_text(value)
        if text is not None and shortstr(text) is not None:
            setattr(props, name, text)
        elif text is not None:
            extra.append((header, "S", text.encode()))  # utf8, longer: a longstr header
        elif isinstance(value, bytes):
            extra.append((header, "S", value))  # binary: a longstr header of its bytes


# ---------------------------------------------------------------------------------------------
# §4: 0-9-1 content as a 1.0 message.


def from_amqp091(
    pb: bytes, body: bytes, expiration_ms: int | None
) -> tuple[tuple[bool, int | None, int | None], bytes]:
    """A 0-9-1 message as 1.0 sections (§4): the header's fields (durable, priority, ttl) and
    the encoded sections after the header (message-annotations, properties,
    application-properties, one data section)."""
    props = decode_properties(pb)
    ma: dict[Any, Any] = {}
    ap: dict[Any, Any] = {}
    if props.type is not None:
        ma[Symbol("x-basic-type")] = props.type
    table = headers_table(pb)
    if table is not None:
        for k, v in typed_table(table):
            if k.startswith("x-"):
                ma[Symbol(k)] = v
            elif type(v) is not list and type(v) is not dict:
                ap[k] = v
    p = Properties(
        message_id=None if props.message_id is None else id_value(props.message_id),
        user_id=None if props.user_id is None else props.user_id.encode(),
        reply_to=props.reply_to,
        correlation_id=None if props.correlation_id is None else id_value(props.correlation_id),
        content_type=None if props.content_type is None else Symbol(props.content_type),
        content_encoding=(
            None if props.content_encoding is None else Symbol(props.content_encoding)
        ),
        creation_time=None if props.timestamp is None else Timestamp(props.timestamp * 1000),
        group_id=props.app_id,
    )
    parts = []
    if ma:
        parts.append(sec.encode_section(sec.MESSAGE_ANNOTATIONS, ma))
    if p != _NO_PROPERTIES:
        parts.append(p.encode())
    if ap:
        parts.append(sec.encode_section(sec.APPLICATION_PROPERTIES, ap))
    parts.append(sec.encode_section(sec.DATA, body))
    fields = (props.delivery_mode == 2, props.priority, expiration_ms)
    return fields, b"".join(parts)


_NO_PROPERTIES: Final = Properties()


def header_bytes(
    fields: tuple[bool, int | None, int | None], first_acquirer: bool, delivery_count: int
) -> bytes:
    """The header section of (durable, priority, ttl) and the delivery's state; empty when
    every field is the default."""
    durable, priority, ttl = fields
    if not (durable or priority is not None or ttl is not None or first_acquirer or delivery_count):
        return b""
    return Header(durable, priority, ttl, first_acquirer, delivery_count).encode()
