"""The connection's channel table: open, close and feed channels 1..65535.

Theory of operation
-------------------
``ChannelTable`` is the part of ``ServerConnection`` (``protocol.connection``) that owns the
table of channels (number -> ``protocol.channel.Channel``, whose assembler turns method, header
and body frames into commands). A channel number is absent, ``OPEN`` or ``CLOSING``:

* absent: only Channel.Open is accepted (a stray Close-Ok after a simultaneous close is
  ignored); anything else is CHANNEL_ERROR (504). ``channel_max`` limits how many channels are
  open at once (NOT_ALLOWED, 530).
* ``OPEN``: channel-class methods are answered here; connection-class methods and methods only
  a server may send are COMMAND_INVALID (503); exchange, queue, basic, confirm and tx methods go
  to the assembler and come out as ``Command`` events. A content-bearing method runs
  ``publish_check`` first, so a refused publish closes its channel before any of its body is
  buffered.
* ``CLOSING`` (we sent Channel.Close, ``close_channel``): every frame is dropped until the
  client's Close-Ok (or its own Close, crossing ours), which removes the channel and emits
  ``ChannelClosed``.

The per-frame entry is ``_on_channel_frame``, called by the receive loop of
``ServerConnection`` for every channel frame that the whole-publish fast path did not take.
What it reads from the other parts (declared below, owned elsewhere): the connection state,
``publish_check``, ``max_message_size`` and the tuned ``channel_max``; it writes frames through
``FrameWriter``.

This module imports only ``ringmq.amqp`` and its siblings in ``ringmq.protocol``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import cast

from ringmq.amqp import spec
from ringmq.amqp.frames import BodyFrame, HeaderFrame, MethodFrame, encode_method_frame
from ringmq.amqp.reply_codes import AMQPError, ReplyCode
from ringmq.amqp.spec import Method
from ringmq.protocol.channel import Channel, ChannelState
from ringmq.protocol.events import ChannelClosed, ChannelOpened, Command, Event
from ringmq.protocol.states import (
    CHANNEL_CLASS,
    CLIENT_METHODS,
    CONNECTION_CLASS,
    ConnectionState,
)
from ringmq.protocol.writer import FrameWriter, reply_text


class ChannelTable(FrameWriter):
    """The channels of ``ServerConnection`` (see the module docstring)."""

    # Owned here (set by init_channels).
    _channels: dict[int, Channel]
    # Owned by ServerConnection, read here.
    publish_check: Callable[[int, Method], None] | None
    max_message_size: int

    def init_channels(self) -> None:
        self._channels = {}

    def channel_state(self, channel: int) -> ChannelState | None:
        """``OPEN``, ``CLOSING`` or None (absent) for a channel number."""
        chan = self._channels.get(channel)
        return chan.state if chan is not None else None

    @property
    def content_in_flight(self) -> int:
        """Declared body bytes of the contents partly received on this connection's channels.

        What their completion will hold in memory; the server counts it toward the memory
        watermark and blocks a connection with content in flight while an alarm is on.
        O(channels): read it per batch or per measurement, not per frame.
        """
        return sum(c.content_in_flight for c in self._channels.values())

    @property
    def content_received(self) -> int:
        """Body bytes buffered so far of those contents (at most ``content_in_flight``)."""
        return sum(c.content_received for c in self._channels.values())

    @property
    def open_channels(self) -> list[int]:
        return [n for n, c in self._channels.items() if c.state is ChannelState.OPEN]

    def _on_channel_frame(
        self, number: int, frame: MethodFrame | HeaderFrame | BodyFrame, events: list[Event]
    ) -> None:
        chan = self._channels.get(number)
        if chan is None:
            if isinstance(frame, MethodFrame):
                method = frame.method
                if isinstance(method, spec.ChannelCloseOk):
                    return  # stray Close-Ok after a simultaneous close
                self._check_channel_count()
                if isinstance(method, spec.ChannelOpen):
                    self._open_channel(number, events)
                    return
            raise AMQPError(
                ReplyCode.CHANNEL_ERROR,
                f"expected 'channel.open' on channel {number}",
                class_id=frame.method.CLASS_ID if isinstance(frame, MethodFrame) else 0,
                method_id=frame.method.METHOD_ID if isinstance(frame, MethodFrame) else 0,
            )
        if chan.state is ChannelState.CLOSING:
            if isinstance(frame, MethodFrame):
                if isinstance(frame.method, spec.ChannelCloseOk):
                    del self._channels[number]
                    events.append(ChannelClosed(number))
                elif isinstance(frame.method, spec.ChannelClose):
                    # Both sides closed at once: answer theirs and consider it done.
                    self._write(encode_method_frame(number, spec.ChannelCloseOk()))
                    del self._channels[number]
                    events.append(ChannelClosed(number))
            return
        ftype = type(frame)
        if ftype is MethodFrame:
            method = cast(MethodFrame, frame).method
            if chan.mid_content:
                chan.on_method(method)  # raises UNEXPECTED_FRAME
            cls = method.CLASS_ID
            if cls == CHANNEL_CLASS:
                self._on_channel_method(chan, method, events)
                return
            if cls == CONNECTION_CLASS or type(method) not in CLIENT_METHODS:
                raise AMQPError(
                    ReplyCode.COMMAND_INVALID,
                    f"{method.NAME} is not valid on channel {number}",
                    class_id=method.CLASS_ID,
                    method_id=method.METHOD_ID,
                )
            if method.CONTENT and self.publish_check is not None:
                # refuse before the body is buffered: the channel closes, its frames drop
                self.publish_check(number, method)
            done = chan.on_method(method)
        elif ftype is BodyFrame:
            done = chan.on_body(cast(BodyFrame, frame))
        else:
            done = chan.on_header(cast(HeaderFrame, frame), self.max_message_size)
        if done is not None:
            events.append(Command(number, done[0], done[1]))

    def _check_channel_count(self) -> None:
        # channel_max limits how many channels are open at once, not their numbers: any
        # number 1..65535 is accepted (RabbitMQ's rabbit_reader:create_channel). A channel
        # still closing counts until its Close-Ok, as its process does there; 0 is no limit.
        limit = self.tuned.channel_max
        if limit and len(self._channels) >= limit:
            raise AMQPError(
                ReplyCode.NOT_ALLOWED,
                f"number of channels opened ({len(self._channels)}) has reached the "
                f"negotiated channel_max ({limit})",
            )

    def _open_channel(self, number: int, events: list[Event]) -> None:
        self._channels[number] = Channel(number)
        self._write(encode_method_frame(number, spec.ChannelOpenOk()))
        events.append(ChannelOpened(number))

    def _on_channel_method(self, chan: Channel, method: Method, events: list[Event]) -> None:
        number = chan.number
        if isinstance(method, spec.ChannelClose):
            self._write(encode_method_frame(number, spec.ChannelCloseOk()))
            del self._channels[number]
            events.append(ChannelClosed(number))
        elif isinstance(method, spec.ChannelFlow):
            if not method.active:
                # RabbitMQ does not implement client-requested flow stop.
                raise AMQPError(
                    ReplyCode.NOT_IMPLEMENTED,
                    "active=false",
                    class_id=method.CLASS_ID,
                    method_id=method.METHOD_ID,
                )
            self._write(encode_method_frame(number, spec.ChannelFlowOk(active=True)))
        elif isinstance(method, spec.ChannelOpen):
            raise AMQPError(
                ReplyCode.CHANNEL_ERROR,
                f"second 'channel.open' seen on channel {number}",
                class_id=method.CLASS_ID,
                method_id=method.METHOD_ID,
            )
        elif isinstance(method, spec.ChannelFlowOk | spec.ChannelCloseOk):
            pass  # answers to requests we never make on an open channel: ignore
        else:
            raise AMQPError(
                ReplyCode.COMMAND_INVALID,
                f"{method.NAME} may not be sent by a client",
                class_id=method.CLASS_ID,
                method_id=method.METHOD_ID,
            )

    def close_channel(
        self, channel: int, code: int, text: str, class_id: int = 0, method_id: int = 0
    ) -> None:
        """Server-initiated channel close: queue Channel.Close; drop its frames until Close-Ok.

        ``ChannelClosed`` is emitted when the client's Close-Ok arrives. No-op if the channel is
        not open.
        """
        chan = self._channels.get(channel)
        if (
            chan is None
            or chan.state is not ChannelState.OPEN
            or self._state is not ConnectionState.OPEN
        ):
            return
        text_sent = reply_text(code, text)
        chan.state = ChannelState.CLOSING
        chan.assembly = Channel(channel).assembly
        self._write(
            encode_method_frame(
                channel, spec.ChannelClose(int(code), text_sent, class_id, method_id)
            )
        )


__all__ = ["ChannelTable"]
