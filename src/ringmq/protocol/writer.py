"""The connection's output side: the frame buffer, the send calls and Basic.Deliver encoding.

Theory of operation
-------------------
``FrameWriter`` is the part of ``ServerConnection`` (``protocol.connection``) that owns what
goes to the wire: the output buffer ``_out`` (encoded frames, joined and taken once per read
batch by ``data_to_send``), the per-connection cache of encoded Basic.Deliver prefixes and the
Connection.Blocked flag. It is a mixin, not a separate object, because ``send_deliver`` is the
broker's hottest output call: a separate writer would cost one more call or attribute hop per
delivery.

Outgoing methods for a connection that is not ``OPEN``, or for a channel that is not open, are
dropped (the send calls return False), so late deliveries to a closing channel never reach the
wire. What it reads from the other parts (declared below, owned elsewhere): the connection
state, the channel table, the tuned ``frame_max`` and the client's capabilities; it records
when output was taken in the heartbeat stamps (``protocol.heartbeat``).

This module imports only ``ringmq.amqp`` and its siblings in ``ringmq.protocol``.
"""

from __future__ import annotations

from typing import Any, Final

from ringmq.amqp import spec
from ringmq.amqp.deliverframes import DeliverParts
from ringmq.amqp.frames import encode_content_frames, encode_method_frame
from ringmq.amqp.reply_codes import AMQPError, ReplyCode
from ringmq.amqp.spec import Method
from ringmq.protocol.channel import Channel, ChannelState
from ringmq.protocol.handshake import TuneParams, client_capability
from ringmq.protocol.states import ConnectionState

_OPEN: Final = ConnectionState.OPEN
_CHANNEL_OPEN: Final = ChannelState.OPEN

DELIVER_PARTS_CACHE_SIZE: Final = 1024
"""Distinct (channel, consumer tag, exchange, routing key) deliver prefixes kept per connection."""


class FrameWriter:
    """Output buffer and send calls of ``ServerConnection`` (see the module docstring)."""

    # Owned here (set by init_writer).
    _out: list[bytes]
    _deliver_parts: dict[tuple[int, str, str, str], DeliverParts]
    _blocked: bool
    # Owned by the other parts of ServerConnection, read here.
    _state: ConnectionState
    _channels: dict[int, Channel]
    tuned: TuneParams
    client_properties: dict[str, Any]
    # Heartbeat stamps (protocol.heartbeat): data_to_send records when output was taken.
    _last_sent_ms: int | None
    _sent_unseen: bool

    def init_writer(self) -> None:
        self._out = []
        self._deliver_parts = {}
        self._blocked = False

    def _write(self, data: bytes) -> None:
        self._out.append(data)

    def _send0(self, method: Method) -> None:
        self._out.append(encode_method_frame(0, method))

    def data_to_send(self, now_ms: int | None = None) -> bytes:
        """Take all queued output (possibly ``b""``); write it with one transport call."""
        if not self._out:
            return b""
        data = self._out[0] if len(self._out) == 1 else b"".join(self._out)
        self._out.clear()
        if now_ms is None:
            self._sent_unseen = True
        else:
            self._last_sent_ms = now_ms
        return data

    def _can_send(self, channel: int) -> bool:
        if self._state is not _OPEN:
            return False
        if channel == 0:
            return True
        chan = self._channels.get(channel)
        return chan is not None and chan.state is _CHANNEL_OPEN

    def send_method(self, channel: int, method: Method) -> bool:
        """Queue a content-less method; False (dropped) if the channel/connection is not open."""
        if not self._can_send(channel):
            return False
        self._out.append(encode_method_frame(channel, method))
        return True

    def send_content(
        self, channel: int, method: Method, properties_bin: bytes, body: bytes
    ) -> bool:
        """Queue a content-bearing method (Deliver, Get-Ok, Return) with header and body frames.

        ``properties_bin`` is flags + property list, sent verbatim. False if dropped.
        """
        if not self._can_send(channel):
            return False
        self._out.append(
            encode_content_frames(channel, method, properties_bin, body, self.tuned.frame_max)
        )
        return True

    def send_deliver(
        self,
        channel: int,
        consumer_tag: str,
        delivery_tag: int,
        redelivered: bool,
        exchange: str,
        routing_key: str,
        properties_bin: bytes,
        body: bytes,
    ) -> bool:
        """Hot path for Basic.Deliver (same bytes as ``send_content`` with a BasicDeliver).

        The encoded consumer tag, exchange and routing key are remembered per (channel,
        consumer tag, exchange, routing key): a consumer sees the same few over and over.
        """
        if self._state is not _OPEN:
            return False
        chan = self._channels.get(channel)
        if chan is None or chan.state is not _CHANNEL_OPEN:
            return False
        key = (channel, consumer_tag, exchange, routing_key)
        parts = self._deliver_parts.get(key)
        if parts is None:
            if len(self._deliver_parts) >= DELIVER_PARTS_CACHE_SIZE:
                self._deliver_parts.clear()
            parts = self._deliver_parts[key] = DeliverParts(
                channel, consumer_tag.encode(), exchange.encode(), routing_key.encode()
            )
        parts.encode_into(
            self._out, delivery_tag, redelivered, properties_bin, body, self.tuned.frame_max
        )
        return True

    def send_blocked(self, reason: str) -> bool:
        """Queue Connection.Blocked if the client announced ``connection.blocked``.

        Sent once per transition, as RabbitMQ does: while blocked, further calls are no-ops
        (False) until ``send_unblocked()``.
        """
        if self._blocked or not client_capability(self.client_properties, "connection.blocked"):
            return False
        self._blocked = self.send_method(0, spec.ConnectionBlocked(reason[:255]))
        return self._blocked

    def send_unblocked(self) -> bool:
        """Queue Connection.Unblocked if a Blocked was sent (else a no-op returning False)."""
        if not self._blocked:
            return False
        self._blocked = False
        return self.send_method(0, spec.ConnectionUnblocked())


def reply_text(code: int, text: str) -> str:
    """RabbitMQ-style "CODE_NAME - text" (<= 255 bytes); codes outside ReplyCode keep text."""
    try:
        return AMQPError(ReplyCode(code), text).reply_text
    except ValueError:
        return text.encode("utf-8")[:255].decode("utf-8", "ignore")


__all__ = ["DELIVER_PARTS_CACHE_SIZE", "FrameWriter", "reply_text"]
