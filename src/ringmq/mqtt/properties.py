"""MQTT 5.0 properties (§2.2.2): one table of identifiers, one slotted record, both ways.

Each property has an identifier, a wire type and the packets it may appear in; `decode`
refuses an unknown identifier, a property repeated where only User Property and
Subscription Identifier may repeat, and a property in a packet it does not belong to
(MALFORMED_PACKET / PROTOCOL_ERROR, §2.2.2.2).
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field, fields
from enum import Enum
from typing import Any, Final

from ringmq.mqtt.reasons import MQTTError, Reason


class Kind(Enum):
    """The wire types of property values (§1.5)."""

    BYTE = "byte"
    U16 = "u16"
    U32 = "u32"
    VARINT = "varint"
    UTF8 = "utf8"
    BINARY = "binary"
    PAIR = "pair"


@dataclass(slots=True)
class Properties:
    """The properties of one packet (None / empty: absent)."""

    payload_format_indicator: int | None = None
    message_expiry_interval: int | None = None
    content_type: str | None = None
    response_topic: str | None = None
    correlation_data: bytes | None = None
    subscription_identifiers: list[int] = field(default_factory=list)
    session_expiry_interval: int | None = None
    assigned_client_identifier: str | None = None
    server_keep_alive: int | None = None
    authentication_method: str | None = None
    authentication_data: bytes | None = None
    request_problem_information: int | None = None
    will_delay_interval: int | None = None
    request_response_information: int | None = None
    response_information: str | None = None
    server_reference: str | None = None
    reason_string: str | None = None
    receive_maximum: int | None = None
    topic_alias_maximum: int | None = None
    topic_alias: int | None = None
    maximum_qos: int | None = None
    retain_available: int | None = None
    user_properties: list[tuple[str, str]] = field(default_factory=list)
    maximum_packet_size: int | None = None
    wildcard_subscription_available: int | None = None
    subscription_identifier_available: int | None = None
    shared_subscription_available: int | None = None


_REPEATABLE: Final = frozenset({"subscription_identifiers", "user_properties"})

# identifier -> (attribute, kind)
TABLE: Final[dict[int, tuple[str, Kind]]] = {
    0x01: ("payload_format_indicator", Kind.BYTE),
    0x02: ("message_expiry_interval", Kind.U32),
    0x03: ("content_type", Kind.UTF8),
    0x08: ("response_topic", Kind.UTF8),
    0x09: ("correlation_data", Kind.BINARY),
    0x0B: ("subscription_identifiers", Kind.VARINT),
    0x11: ("session_expiry_interval", Kind.U32),
    0x12: ("assigned_client_identifier", Kind.UTF8),
    0x13: ("server_keep_alive", Kind.U16),
    0x15: ("authentication_method", Kind.UTF8),
    0x16: ("authentication_data", Kind.BINARY),
    0x17: ("request_problem_information", Kind.BYTE),
    0x18: ("will_delay_interval", Kind.U32),
    0x19: ("request_response_information", Kind.BYTE),
    0x1A: ("response_information", Kind.UTF8),
    0x1C: ("server_reference", Kind.UTF8),
    0x1F: ("reason_string", Kind.UTF8),
    0x21: ("receive_maximum", Kind.U16),
    0x22: ("topic_alias_maximum", Kind.U16),
    0x23: ("topic_alias", Kind.U16),
    0x24: ("maximum_qos", Kind.BYTE),
    0x25: ("retain_available", Kind.BYTE),
    0x26: ("user_properties", Kind.PAIR),
    0x27: ("maximum_packet_size", Kind.U32),
    0x28: ("wildcard_subscription_available", Kind.BYTE),
    0x29: ("subscription_identifier_available", Kind.BYTE),
    0x2A: ("shared_subscription_available", Kind.BYTE),
}
_BY_NAME: Final = {name: (ident, kind) for ident, (name, kind) in TABLE.items()}
_ORDER: Final = tuple(f.name for f in fields(Properties))

_U16: Final = struct.Struct(">H")
_U32: Final = struct.Struct(">I")


# ---------------------------------------------------------------------- primitives
def encode_varint(n: int) -> bytes:
    """A Variable Byte Integer (§1.5.5): 1 to 4 bytes, 0 to 268,435,455."""
    if not 0 <= n <= 268_435_455:
        raise ValueError(f"variable byte integer out of range: {n}")
    out = bytearray()
    while True:
        byte, n = n & 0x7F, n >> 7
        if n:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def decode_varint(buf: bytes | memoryview, pos: int, end: int) -> tuple[int, int]:
    """Read a Variable Byte Integer at `pos`; returns (value, next position).

    Raises MQTTError(MALFORMED_PACKET) when it runs past `end` or over four bytes.
    """
    value = 0
    for i in range(4):
        if pos >= end:
            raise MQTTError(Reason.MALFORMED_PACKET, "truncated variable byte integer")
        byte = buf[pos]
        pos += 1
        value |= (byte & 0x7F) << (7 * i)
        if not byte & 0x80:
            return value, pos
    raise MQTTError(Reason.MALFORMED_PACKET, "variable byte integer over four bytes")


def encode_utf8(text: str) -> bytes:
    """A UTF-8 Encoded String (§1.5.4): a two-byte length, then the bytes."""
    data = text.encode("utf-8")
    if len(data) > 0xFFFF:
        raise ValueError("string over 65,535 bytes")
    return _U16.pack(len(data)) + data


def encode_binary(data: bytes) -> bytes:
    """Binary Data (§1.5.6): a two-byte length, then the bytes."""
    if len(data) > 0xFFFF:
        raise ValueError("binary data over 65,535 bytes")
    return _U16.pack(len(data)) + data


def decode_binary(buf: bytes | memoryview, pos: int, end: int) -> tuple[bytes, int]:
    """Read Binary Data at `pos` (MALFORMED_PACKET when it runs past `end`)."""
    if pos + 2 > end:
        raise MQTTError(Reason.MALFORMED_PACKET, "truncated length prefix")
    (n,) = _U16.unpack_from(buf, pos)
    pos += 2
    if pos + n > end:
        raise MQTTError(Reason.MALFORMED_PACKET, "truncated string or binary data")
    return bytes(buf[pos : pos + n]), pos + n


def decode_utf8(buf: bytes | memoryview, pos: int, end: int) -> tuple[str, int]:
    """Read a UTF-8 Encoded String at `pos`: well-formed UTF-8 without U+0000 (§1.5.4)."""
    data, pos = decode_binary(buf, pos, end)
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        raise MQTTError(Reason.MALFORMED_PACKET, "string is not valid UTF-8") from None
    if "\x00" in text:
        raise MQTTError(Reason.MALFORMED_PACKET, "string contains U+0000")
    return text, pos


# ---------------------------------------------------------------------- properties
def _encode_value(kind: Kind, value: Any) -> bytes:
    match kind:
        case Kind.BYTE:
            return bytes((value,))
        case Kind.U16:
            return _U16.pack(value)
        case Kind.U32:
            return _U32.pack(value)
        case Kind.VARINT:
            return encode_varint(value)
        case Kind.UTF8:
            return encode_utf8(value)
        case Kind.BINARY:
            return encode_binary(value)
        case Kind.PAIR:
            return encode_utf8(value[0]) + encode_utf8(value[1])


def encode_properties(props: Properties | None) -> bytes:
    """The property section: its length as a Variable Byte Integer, then each property."""
    if props is None:
        return b"\x00"
    out = bytearray()
    for name in _ORDER:
        value = getattr(props, name)
        if value is None or (name in _REPEATABLE and not value):
            continue
        ident, kind = _BY_NAME[name]
        for v in value if name in _REPEATABLE else (value,):
            out.append(ident)
            out += _encode_value(kind, v)
    return encode_varint(len(out)) + bytes(out)


def _decode_value(kind: Kind, buf: bytes | memoryview, pos: int, end: int) -> tuple[Any, int]:
    match kind:
        case Kind.BYTE:
            if pos + 1 > end:
                raise MQTTError(Reason.MALFORMED_PACKET, "truncated property")
            return buf[pos], pos + 1
        case Kind.U16:
            if pos + 2 > end:
                raise MQTTError(Reason.MALFORMED_PACKET, "truncated property")
            return _U16.unpack_from(buf, pos)[0], pos + 2
        case Kind.U32:
            if pos + 4 > end:
                raise MQTTError(Reason.MALFORMED_PACKET, "truncated property")
            return _U32.unpack_from(buf, pos)[0], pos + 4
        case Kind.VARINT:
            return decode_varint(buf, pos, end)
        case Kind.UTF8:
            return decode_utf8(buf, pos, end)
        case Kind.BINARY:
            return decode_binary(buf, pos, end)
        case Kind.PAIR:
            k, pos = decode_utf8(buf, pos, end)
            v, pos = decode_utf8(buf, pos, end)
            return (k, v), pos


def decode_properties(
    buf: bytes | memoryview, pos: int, end: int, allowed: frozenset[int]
) -> tuple[Properties, int]:
    """Read a property section at `pos`; `allowed` names the identifiers this packet may carry.

    Returns (properties, next position). Raises MQTTError: MALFORMED_PACKET for a truncated or
    unknown property, PROTOCOL_ERROR for one repeated or not allowed in this packet.
    """
    length, pos = decode_varint(buf, pos, end)
    stop = pos + length
    if stop > end:
        raise MQTTError(Reason.MALFORMED_PACKET, "property length past the packet's end")
    props = Properties()
    seen: set[int] = set()
    while pos < stop:
        ident, pos = decode_varint(buf, pos, stop)
        entry = TABLE.get(ident)
        if entry is None:
            raise MQTTError(Reason.MALFORMED_PACKET, f"unknown property 0x{ident:02x}")
        if ident not in allowed:
            raise MQTTError(Reason.PROTOCOL_ERROR, f"property 0x{ident:02x} not allowed here")
        name, kind = entry
        value, pos = _decode_value(kind, buf, pos, stop)
        if name in _REPEATABLE:
            getattr(props, name).append(value)
        elif ident in seen:
            raise MQTTError(Reason.PROTOCOL_ERROR, f"property 0x{ident:02x} repeated")
        else:
            seen.add(ident)
            setattr(props, name, value)
    return props, stop


def ids(*names: str) -> frozenset[int]:
    """The identifiers of the named properties (user properties are allowed everywhere)."""
    return frozenset({_BY_NAME[n][0] for n in names} | {0x26})
