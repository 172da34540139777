"""AMQP 1.0 message sections (spec part 3, 3.2): decoding and encoding a message's payload.

Theory of operation
-------------------
A message on the wire is a sequence of described sections, in this order, each optional but
the body: header, delivery-annotations, message-annotations, properties, application-
properties, the body (one or more data sections, one or more amqp-sequence sections, or one
amqp-value section), footer. `Header` and `Properties` are composite types (``composite.py``);
the other sections are a map, binary, list or any value behind their descriptor.

Two readers:

* `decode_message` decodes everything into a `Message10` (tests, management, conversions);
* `scan` is the broker's hot path: it decodes only the small sections a broker reads (header,
  message-annotations, properties, application-properties) and records where the others are,
  stepping over delivery-annotations, body and footer with ``codec.skip``, so a body is never
  decoded or copied. It checks the section order and that nothing but sections is there.

Both raise only `DecodeError`. `encode_message` writes a `Message10`; `encode_section` one
section. No I/O, no clock, nothing of ringmq outside this package.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import Any, Final, NamedTuple

from ringmq.amqp10.codec import Buffer, decode, encode, skip
from ringmq.amqp10.composite import Composite, composite, from_fields
from ringmq.amqp10.types import DecodeError, Described, Symbol, ULong

HEADER: Final = 0x70
DELIVERY_ANNOTATIONS: Final = 0x71
MESSAGE_ANNOTATIONS: Final = 0x72
PROPERTIES: Final = 0x73
APPLICATION_PROPERTIES: Final = 0x74
DATA: Final = 0x75
AMQP_SEQUENCE: Final = 0x76
AMQP_VALUE: Final = 0x77
FOOTER: Final = 0x78
BODY_CODES: Final = frozenset({DATA, AMQP_SEQUENCE, AMQP_VALUE})
_NAMES: Final[dict[str, int]] = {
    "amqp:header:list": HEADER,
    "amqp:delivery-annotations:map": DELIVERY_ANNOTATIONS,
    "amqp:message-annotations:map": MESSAGE_ANNOTATIONS,
    "amqp:properties:list": PROPERTIES,
    "amqp:application-properties:map": APPLICATION_PROPERTIES,
    "amqp:data:binary": DATA,
    "amqp:amqp-sequence:list": AMQP_SEQUENCE,
    "amqp:amqp-value:*": AMQP_VALUE,
    "amqp:footer:map": FOOTER,
}
_LISTS: Final = frozenset({0x45, 0xC0, 0xD0})
_MAPS: Final = frozenset({0x40, 0xC1, 0xD1})  # a map, or null for an absent one
_ULONGS: Final = {code: ULong(code) for code in range(HEADER, FOOTER + 1)}


@composite(0x70, "amqp:header:list", ("bool", "ubyte", "uint", "bool", "uint"))
@dataclass(frozen=True, slots=True)
class Header(Composite):
    """The header section: transport headers (3.2.1)."""

    durable: bool = False
    priority: int | None = None
    ttl: int | None = None
    first_acquirer: bool = False
    delivery_count: int = 0


@composite(
    0x73,
    "amqp:properties:list",
    (
        *("any", "binary", "string", "string", "string", "any", "symbol", "symbol"),
        *("timestamp", "timestamp", "string", "uint", "string"),
    ),
)
@dataclass(frozen=True, slots=True)
class Properties(Composite):
    """The properties section: immutable properties of the bare message (3.2.4).

    ``message_id`` and ``correlation_id`` are a ``ULong``, ``uuid.UUID``, ``bytes`` or ``str``;
    the times are ms since the epoch.
    """

    message_id: Any = None
    user_id: bytes | None = None
    to: str | None = None
    subject: str | None = None
    reply_to: str | None = None
    correlation_id: Any = None
    content_type: str | None = None
    content_encoding: str | None = None
    absolute_expiry_time: int | None = None
    creation_time: int | None = None
    group_id: str | None = None
    group_sequence: int | None = None
    reply_to_group_id: str | None = None


@dataclass(frozen=True, slots=True)
class Message10:
    """A whole message, every section decoded.

    Attributes:
        body: the body sections as ``(code, value)`` pairs: ``(DATA, bytes)``...,
            ``(AMQP_SEQUENCE, list)``... or one ``(AMQP_VALUE, value)``.
    """

    header: Header | None = None
    delivery_annotations: dict[Any, Any] | None = None
    message_annotations: dict[Any, Any] | None = None
    properties: Properties | None = None
    application_properties: dict[Any, Any] | None = None
    body: tuple[tuple[int, Any], ...] = ()
    footer: dict[Any, Any] | None = None


_NO_PROPERTIES: Final = Properties()
_HEADERS: Final[dict[bytes, Composite]] = {}
_HEADERS_MAX: Final = 256
_HEADER_LIST8: Final = b"\x00\x53\x70\xc0"
_DATA8: Final = b"\x00\x53\x75\xa0"
_DATA32: Final = b"\x00\x53\x75\xb0"
_U32: Final = struct.Struct(">I")
"""Decoded header sections by their encoding (immutable, so shared); cleared when full."""


class Scan(NamedTuple):
    """What `scan` found in a payload (offsets are into the payload).

    Attributes:
        header: the decoded header section, or None.
        message_annotations: its map, or None.
        properties: the decoded properties section, or None.
        application_properties: its map, or None.
        header_end: where the header section ends (0 without one).
        annotations_start: where the sections after the header and delivery-annotations
            start (message-annotations, properties, application-properties, then the body).
        body_start: where the body sections start (the payload's length without a body).
        body_end: where they end (the footer starts there, if any).
        data: ``(start, end)`` of the bytes of the body when it is exactly one data section,
            else None.
    """

    header: Header | None
    message_annotations: dict[Any, Any] | None
    properties: Properties | None
    application_properties: dict[Any, Any] | None
    header_end: int
    annotations_start: int
    body_start: int
    body_end: int
    data: tuple[int, int] | None


def _section_code(buf: Buffer, off: int) -> tuple[int, int]:
    """The section code at ``off`` and the offset of its value."""
    if buf[off] != 0:
        raise DecodeError(f"a message section expected at offset {off}")
    if buf[off + 1] == 0x53:  # smallulong: the usual form
        return buf[off + 2], off + 3
    descriptor, pos = decode(buf, off + 1)
    if type(descriptor) is ULong:
        return int(descriptor), pos
    if type(descriptor) is Symbol:
        return _NAMES.get(descriptor, -1), pos
    raise DecodeError(f"a section descriptor is a ulong or a symbol, not {descriptor!r}")


def _map(value: Any, what: str) -> dict[Any, Any] | None:
    if value is None or type(value) is dict:
        return value
    raise DecodeError(f"{what}: a map expected, got {type(value).__name__}")


def usual_form(payload: Buffer) -> tuple[Any, int] | None:
    """The usual publish: an optional header in the form publishers repeat (one already met,
    so decoded once), then one data section and nothing else; as (the header or None, where
    the data section starts), read at once. None for any other form: `scan` reads it."""
    if type(payload) is not bytes:
        return None
    n = len(payload)
    off = 0
    header: Any = None
    if payload.startswith(_HEADER_LIST8) and n > 4:
        off = 5 + payload[4]
        header = _HEADERS.get(payload[3:off])
        if header is None:
            return None
    if payload.startswith(_DATA8, off):
        if n > off + 4 and payload[off + 4] + off + 5 == n:
            return header, off
    elif (
        payload.startswith(_DATA32, off)
        and n >= off + 8
        and _U32.unpack_from(payload, off + 4)[0] + off + 8 == n
    ):
        return header, off
    return None


def _data_span(payload: Buffer, off: int) -> tuple[int, int]:
    # the binary of the data section at `off` (of `usual_form`)
    return (off + 5 if payload[off + 3] == 0xA0 else off + 8), len(payload)


def scan(payload: Buffer) -> Scan:
    """Read the sections a broker needs from ``payload`` (see the module docstring).

    Raises:
        DecodeError: anything but well-ordered sections, or a malformed one.
    """
    n = len(payload)
    usual = usual_form(payload)
    if usual is not None:  # what the loop finds, read at once
        head, off = usual
        return Scan(head, None, None, None, off, off, off, n, _data_span(payload, off))
    header: Any = None
    props: Any = None
    ma = ap = None
    header_end = annotations_start = 0
    body_start = body_end = -1
    body_code = 0
    data: tuple[int, int] | None = None
    last = 0
    off = 0
    try:
        while off < n:
            code, pos = _section_code(payload, off)
            if code < last or (code == last and code not in (DATA, AMQP_SEQUENCE)):
                raise DecodeError(f"message section 0x{code:02x} out of order")
            if code in BODY_CODES:
                if body_code and code != body_code:
                    raise DecodeError("a message body of several kinds of section")
                end = skip(payload, pos)
                if code == AMQP_SEQUENCE and payload[pos] not in _LISTS:
                    raise DecodeError("an amqp-sequence section holds a list")
                if body_start < 0:
                    body_start, body_code = off, code
                    if code == DATA and payload[pos] in (0xA0, 0xB0):
                        data = (pos + (2 if payload[pos] == 0xA0 else 5), end)
                    elif code == DATA:
                        raise DecodeError("a data section holds binary")
                else:
                    data = None  # several data sections
                body_end = end
            elif code == HEADER:
                # Publishers repeat a few headers (durable, a priority...): one decode each.
                end = skip(payload, pos)
                raw = payload[pos:end]
                if type(raw) is not bytes:
                    raw = bytes(raw)
                header = _HEADERS.get(raw)
                if header is None:
                    header = from_fields(Header, decode(raw)[0])
                    if len(_HEADERS) >= _HEADERS_MAX:
                        _HEADERS.clear()
                    _HEADERS[raw] = header
                header_end = annotations_start = end
            elif code == DELIVERY_ANNOTATIONS:
                if payload[pos] not in _MAPS:
                    raise DecodeError("delivery-annotations: a map expected")
                end = skip(payload, pos)
                annotations_start = end
            elif code == MESSAGE_ANNOTATIONS:
                value, end = decode(payload, pos)
                ma = _map(value, "message-annotations")
            elif code == PROPERTIES:
                if payload[pos] == 0x45:  # list0: proton sends an empty one by default
                    props, end = _NO_PROPERTIES, pos + 1
                else:
                    value, end = decode(payload, pos)
                    props = from_fields(Properties, value)
            elif code == APPLICATION_PROPERTIES:
                value, end = decode(payload, pos)
                ap = _map(value, "application-properties")
            elif code == FOOTER:
                if payload[pos] not in _MAPS:
                    raise DecodeError("footer: a map expected")
                end = skip(payload, pos)
            else:
                raise DecodeError(f"unknown message section 0x{code:02x}")
            last, off = code, end
    except IndexError:
        raise DecodeError("truncated message section") from None
    if body_start < 0:
        body_start = body_end = n
    return Scan(header, ma, props, ap, header_end, annotations_start, body_start, body_end, data)


def decode_message(payload: Buffer) -> Message10:
    """Every section of ``payload``, decoded.

    Raises:
        DecodeError: as `scan`.
    """
    found: dict[int, Any] = {}
    body: list[tuple[int, Any]] = []
    last = 0
    off, n = 0, len(payload)
    try:
        while off < n:
            code, pos = _section_code(payload, off)
            if code < last or (code == last and code not in (DATA, AMQP_SEQUENCE)):
                raise DecodeError(f"message section 0x{code:02x} out of order")
            value, off = decode(payload, pos)
            if code in BODY_CODES:
                if body and body[0][0] != code:
                    raise DecodeError("a message body of several kinds of section")
                if code == DATA and type(value) is not bytes:
                    raise DecodeError("a data section holds binary")
                if code == AMQP_SEQUENCE and type(value) is not list:
                    raise DecodeError("an amqp-sequence section holds a list")
                body.append((code, value))
            elif code == HEADER:
                found[code] = from_fields(Header, value)
            elif code == PROPERTIES:
                found[code] = from_fields(Properties, value)
            elif HEADER < code < FOOTER + 1:
                found[code] = _map(value, f"section 0x{code:02x}")
            else:
                raise DecodeError(f"unknown message section 0x{code:02x}")
            last = code
    except IndexError:
        raise DecodeError("truncated message section") from None
    return Message10(
        found.get(HEADER),
        found.get(DELIVERY_ANNOTATIONS),
        found.get(MESSAGE_ANNOTATIONS),
        found.get(PROPERTIES),
        found.get(APPLICATION_PROPERTIES),
        tuple(body),
        found.get(FOOTER),
    )


def encode_section(code: int, value: Any) -> bytes:
    """One section: ``value`` (a `Header`, `Properties`, map, bytes, list or any value, as
    ``code`` wants) behind its descriptor."""
    if isinstance(value, Composite):
        return value.encode()
    if code in (DELIVERY_ANNOTATIONS, MESSAGE_ANNOTATIONS, FOOTER):
        value = {Symbol(k) if type(k) is str else k: v for k, v in value.items()}
    return encode(Described(_ULONGS[code], value))


def encode_message(m: Message10) -> bytes:
    """The payload of a whole message (sections in the spec's order; absent ones left out)."""
    parts = []
    for code, value in (
        (HEADER, m.header),
        (DELIVERY_ANNOTATIONS, m.delivery_annotations),
        (MESSAGE_ANNOTATIONS, m.message_annotations),
        (PROPERTIES, m.properties),
        (APPLICATION_PROPERTIES, m.application_properties),
    ):
        if value is not None:
            parts.append(encode_section(code, value))
    parts += (encode_section(code, value) for code, value in m.body)
    if m.footer is not None:
        parts.append(encode_section(FOOTER, m.footer))
    return b"".join(parts)
