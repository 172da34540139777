"""Basic-class content properties: the flags word and the property list of a content header.

``data`` everywhere below is the content header payload *after* class-id, weight and body-size:
the 16-bit property flags followed by the present properties in flag order. The broker keeps
that blob raw (``RawContent.properties_bin``) and re-sends it verbatim on delivery; it decodes
only when routing or TTL needs a property, and ``property_flags`` lets it check for presence
without decoding anything (``property_flags(data) & FLAG_HEADERS``).

Value types follow pika: strings are ``str``, ``delivery_mode``/``priority`` ``int``,
``timestamp`` ``int`` seconds since the epoch, ``headers`` a ``dict`` (``ringmq.amqp.tables``).
``encode_properties`` is byte-identical to pika's and to pamqp's encoding (for headers, pamqp
sorts keys and picks the smallest integer type, pika does neither; ours matches pika there).
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, fields
from typing import Any, Final

from ringmq.amqp.reply_codes import AMQPError, ReplyCode
from ringmq.amqp.tables import Buffer, decode_table, encode_table

FLAG_CONTENT_TYPE: Final = 0x8000
FLAG_CONTENT_ENCODING: Final = 0x4000
FLAG_HEADERS: Final = 0x2000
FLAG_DELIVERY_MODE: Final = 0x1000
FLAG_PRIORITY: Final = 0x0800
FLAG_CORRELATION_ID: Final = 0x0400
FLAG_REPLY_TO: Final = 0x0200
FLAG_EXPIRATION: Final = 0x0100
FLAG_MESSAGE_ID: Final = 0x0080
FLAG_TIMESTAMP: Final = 0x0040
FLAG_TYPE: Final = 0x0020
FLAG_USER_ID: Final = 0x0010
FLAG_APP_ID: Final = 0x0008
FLAG_CLUSTER_ID: Final = 0x0004
FLAGS_INVALID: Final = 0x0003
"""The two low flag bits, never valid for the basic class: bit 1 names no property, and bit 0
(continuation: another flags word follows) is refused because the class's 14 properties fit in
one word (RabbitMQ's decoder reads no continuation word either, so such a header fails there)."""

_U16: Final = struct.Struct(">H")
_U64: Final = struct.Struct(">Q")

EMPTY_PROPERTIES: Final = b"\x00\x00"
"""Encoded properties with no property present."""


@dataclass(slots=True)
class BasicProperties:
    """The 14 basic-class properties; ``None`` means absent (not sent)."""

    content_type: str | None = None
    content_encoding: str | None = None
    headers: dict[str, Any] | None = None
    delivery_mode: int | None = None
    priority: int | None = None
    correlation_id: str | None = None
    reply_to: str | None = None
    expiration: str | None = None
    message_id: str | None = None
    timestamp: int | None = None
    type: str | None = None
    user_id: str | None = None
    app_id: str | None = None
    cluster_id: str | None = None


# (attribute, flag, kind) in wire order; kind: s=shortstr, t=table, o=octet, q=u64.
_LAYOUT: Final = tuple(
    zip(
        [f.name for f in fields(BasicProperties)],
        [1 << (15 - i) for i in range(14)],
        "sstoossssqssss",
        strict=True,
    )
)


def property_flags(data: Buffer) -> int:
    """The 16-bit property flags of ``data`` (0 if ``data`` is shorter than two bytes)."""
    if len(data) < 2:
        return 0
    return int((data[0] << 8) | data[1])


def encode_properties(props: BasicProperties) -> bytes:
    """Encode properties as flags + property list.

    Raises:
        ValueError: a shortstr is longer than 255 bytes or an octet/u64 is out of range.
        TypeError: a header value has no AMQP field type.
    """
    flags = 0
    pieces: list[bytes] = [b""]
    for name, flag, kind in _LAYOUT:
        value = getattr(props, name)
        if value is None:
            continue
        flags |= flag
        if kind == "s":
            raw = value.encode("utf-8")
            if len(raw) > 255:
                raise ValueError(f"property {name} is {len(raw)} bytes long, the maximum is 255")
            pieces.append(bytes((len(raw),)))
            pieces.append(raw)
        elif kind == "t":
            pieces.append(encode_table(value))
        elif kind == "o":
            if not 0 <= value <= 255:
                raise ValueError(f"property {name}={value} does not fit an octet")
            pieces.append(bytes((value,)))
        else:
            pieces.append(_U64.pack(value))
    pieces[0] = _U16.pack(flags)
    return b"".join(pieces)


def decode_properties(data: Buffer) -> BasicProperties:
    """Decode flags + property list.

    Raises:
        AMQPError: FRAME_ERROR when truncated, over-long or setting a bit of `FLAGS_INVALID`;
            SYNTAX_ERROR for invalid UTF-8 or bad header field types. Nothing else.
    """
    try:
        return _decode(data)
    except (struct.error, IndexError):
        raise AMQPError(ReplyCode.FRAME_ERROR, "truncated content header properties") from None
    except UnicodeDecodeError:
        raise AMQPError(ReplyCode.SYNTAX_ERROR, "invalid UTF-8 in a content property") from None


def _decode(data: Buffer) -> BasicProperties:
    (flags,) = _U16.unpack_from(data, 0)
    off = 2
    if flags & FLAGS_INVALID:
        bits = "continuation" if flags & 0x0001 else "unknown property"
        raise AMQPError(ReplyCode.FRAME_ERROR, f"content header sets the {bits} flag bit")
    props = BasicProperties()
    if flags & 0xFFFC:
        n = len(data)
        for name, flag, kind in _LAYOUT:
            if not flags & flag:
                continue
            value: Any
            if kind == "s":
                end = off + 1 + data[off]
                if end > n:
                    raise struct.error("truncated shortstr property")
                value = str(data[off + 1 : end], "utf-8")
                off = end
            elif kind == "t":
                value, off = decode_table(data, off)
            elif kind == "o":
                value = data[off]
                off += 1
            else:
                (value,) = _U64.unpack_from(data, off)
                off += 8
            setattr(props, name, value)
    if off != len(data):
        raise AMQPError(
            ReplyCode.FRAME_ERROR, f"{len(data) - off} unexpected bytes after content properties"
        )
    return props


__all__ = [
    "EMPTY_PROPERTIES",
    "FLAGS_INVALID",
    "FLAG_APP_ID",
    "FLAG_CLUSTER_ID",
    "FLAG_CONTENT_ENCODING",
    "FLAG_CONTENT_TYPE",
    "FLAG_CORRELATION_ID",
    "FLAG_DELIVERY_MODE",
    "FLAG_EXPIRATION",
    "FLAG_HEADERS",
    "FLAG_MESSAGE_ID",
    "FLAG_PRIORITY",
    "FLAG_REPLY_TO",
    "FLAG_TIMESTAMP",
    "FLAG_TYPE",
    "FLAG_USER_ID",
    "BasicProperties",
    "decode_properties",
    "encode_properties",
    "property_flags",
]
