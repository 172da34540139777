"""Basic.Deliver frames: the encoders of every delivery's hot path.

``encode_deliver`` builds BasicDeliver + content header + body frames for one message with a
single join. ``DeliverParts`` holds the constant parts of those frames for one (channel,
consumer, exchange, routing key) and gives byte for byte what ``encode_deliver`` gives, with
the method frame around the delivery tag assembled once instead of per message. Pure: no I/O.
"""

from __future__ import annotations

import struct
from typing import Final

from ringmq.amqp.frames import (
    CONTENT_HEAD,
    FRAME_BODY,
    FRAME_HEAD,
    FRAME_HEADER,
    FRAME_METHOD,
    FRAME_OVERHEAD,
    HEADER_HEAD,
    METHOD_HEAD,
    append_body,
)

_END: Final = b"\xce"

_DELIVER_FIXED: Final = struct.Struct(">QB")


def encode_deliver(
    channel: int,
    consumer_tag: bytes,
    delivery_tag: int,
    redelivered: bool,
    exchange: bytes,
    routing_key: bytes,
    properties_bin: bytes,
    body: bytes,
    frame_max: int,
) -> bytes:
    """The hot path: BasicDeliver + header + body frames for one message, as one ``bytes``.

    String arguments are already-encoded UTF-8 (callers cache them per consumer/message) and
    must each be at most 255 bytes. Output is byte-identical to ``encode_content_frames`` with
    ``BasicDeliver(...)``.
    """
    ctag_len = len(consumer_tag)
    ex_len = len(exchange)
    rk_len = len(routing_key)
    if ctag_len > 255 or ex_len > 255 or rk_len > 255:
        raise ValueError("consumer tag, exchange and routing key are limited to 255 bytes")
    method_size = 4 + 1 + ctag_len + 9 + 1 + ex_len + 1 + rk_len
    size = len(body)
    parts = [
        METHOD_HEAD.pack(FRAME_METHOD, channel, method_size, 60, 60),
        bytes((ctag_len,)),
        consumer_tag,
        _DELIVER_FIXED.pack(delivery_tag, 1 if redelivered else 0),
        bytes((ex_len,)),
        exchange,
        bytes((rk_len,)),
        routing_key,
        _END,
        FRAME_HEAD.pack(FRAME_HEADER, channel, 12 + len(properties_bin)),
        CONTENT_HEAD.pack(60, 0, size),
        properties_bin,
        _END,
    ]
    append_body(parts, channel, body, frame_max)
    return b"".join(parts)


class DeliverParts:
    """The constant parts of Basic.Deliver frames for one (channel, consumer, exchange, key).

    ``encode(...)`` returns exactly what ``encode_deliver`` returns for the same arguments, but
    the method frame around the delivery tag is assembled once, here, instead of per message.
    """

    __slots__ = ("_channel", "_head", "_tail")

    def __init__(self, channel: int, consumer_tag: bytes, exchange: bytes, routing_key: bytes):
        ctag_len = len(consumer_tag)
        ex_len = len(exchange)
        rk_len = len(routing_key)
        if ctag_len > 255 or ex_len > 255 or rk_len > 255:
            raise ValueError("consumer tag, exchange and routing key are limited to 255 bytes")
        method_size = 4 + 1 + ctag_len + 9 + 1 + ex_len + 1 + rk_len
        self._channel = channel
        self._head = b"".join(
            (
                METHOD_HEAD.pack(FRAME_METHOD, channel, method_size, 60, 60),
                bytes((ctag_len,)),
                consumer_tag,
            )
        )
        self._tail = b"".join((bytes((ex_len,)), exchange, bytes((rk_len,)), routing_key, _END))

    def encode(
        self,
        delivery_tag: int,
        redelivered: bool,
        properties_bin: bytes,
        body: bytes,
        frame_max: int,
    ) -> bytes:
        """Deliver + content header + body frames for one message, as one ``bytes``."""
        channel = self._channel
        size = len(body)
        parts = [
            self._head,
            _DELIVER_FIXED.pack(delivery_tag, 1 if redelivered else 0),
            self._tail,
            HEADER_HEAD.pack(FRAME_HEADER, channel, 12 + len(properties_bin), 60, 0, size),
            properties_bin,
            _END,
        ]
        if size and (not frame_max or size <= frame_max - FRAME_OVERHEAD):
            parts += (FRAME_HEAD.pack(FRAME_BODY, channel, size), body, _END)
        else:
            append_body(parts, channel, body, frame_max)
        return b"".join(parts)

    def encode_into(
        self,
        out: list[bytes],
        delivery_tag: int,
        redelivered: bool,
        properties_bin: bytes,
        body: bytes,
        frame_max: int,
    ) -> None:
        """Append the pieces of ``encode(...)`` to ``out`` (joined per write, not per message)."""
        channel = self._channel
        size = len(body)
        if size and (not frame_max or size <= frame_max - FRAME_OVERHEAD):
            out += (
                self._head,
                _DELIVER_FIXED.pack(delivery_tag, 1 if redelivered else 0),
                self._tail,
                HEADER_HEAD.pack(FRAME_HEADER, channel, 12 + len(properties_bin), 60, 0, size),
                properties_bin,
                _END,
                FRAME_HEAD.pack(FRAME_BODY, channel, size),
                body,
                _END,
            )
        else:
            out.append(self.encode(delivery_tag, redelivered, properties_bin, body, frame_max))


__all__ = ["DeliverParts", "encode_deliver"]
