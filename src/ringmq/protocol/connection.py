"""The sans-IO AMQP 0-9-1 server connection: bytes in, events out; calls in, bytes out.

Theory of operation
-------------------
``ServerConnection`` is one client connection's protocol state. It does no I/O and reads no
clock: the server feeds received bytes to ``receive_data`` and writes ``data_to_send()`` once
per read batch; times are passed in as ``now_ms``. It is put together from parts, each in its
own module and owning its own state:

* this module: the frame reader, the receive loop and the error boundary;
* ``protocol.opening`` (``ConnectionMethods``): the connection state, the channel-0 handshake
  (the ``TRANSITIONS`` table of ``protocol.states``), tune values and the connection close;
* ``protocol.channels`` (``ChannelTable``): the channel table and its per-channel assemblers
  (``protocol.channel``), channel open/close, commands;
* ``protocol.writer`` (``FrameWriter``): the output buffer, the send calls, Deliver encoding;
* ``protocol.heartbeat`` (``Heartbeats``): the liveness stamps and heartbeat checks.

They are mixins of one class rather than separate objects because the receive and deliver
paths are per-frame hot paths: composed objects would add a call or an attribute hop to each
frame (``benchmarks/hotpath_bench.py`` measures them). Each part declares the names it reads
from the others.

Errors follow RabbitMQ's ``map_exception`` rule at one boundary (``_fail``): an ``AMQPError``
with a hard code, or on channel 0, queues Connection.Close and moves to ``CLOSING`` (all frames
but Close/Close-Ok are then dropped); a soft one queues Channel.Close on that channel, which
drops its frames until Close-Ok. Framing errors (the byte stream can no longer be trusted) queue
Connection.Close and end the connection at once (``ConnectionClosed``). Any other exception is a
bug: it is logged with its traceback and becomes INTERNAL_ERROR (541) for this connection only.
``receive_data`` therefore never raises.

A Basic.Publish whose method, header and body are all buffered takes a fast path
(``FrameReader.next_publish``) straight to a ``Command`` when its channel is open and between
commands; otherwise its frames take the per-frame path, with the same outcome. On the channels
the server names in ``publish_runs`` (set before each read), a run of such publishes with one
method frame is read in one pass (``FrameReader.next_publish_run``) and becomes one
``PublishRun`` (columns: property lists and bodies), unless it is mandatory or immediate or its
channel is not open and between commands: then each publish goes as ``next_publish``'s would.
On the per-frame path, when its method frame arrives, ``publish_check`` (the broker's exchange
and write-permission checks) runs first, so a refused publish closes its channel before any of
its body is buffered.
``content_in_flight`` is the declared size of the contents being received, for the server's
memory accounting.

This module imports only ``ringmq.amqp`` and its siblings in ``ringmq.protocol``.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Container
from typing import Final, cast

from ringmq.amqp import spec
from ringmq.amqp.frames import (
    FRAME_MIN_SIZE,
    BodyFrame,
    Frame,
    FrameReader,
    HeaderFrame,
    HeartbeatFrame,
    MethodFrame,
    ProtocolHeader,
    RawContent,
)
from ringmq.amqp.reply_codes import AMQPError, ReplyCode
from ringmq.amqp.spec import Method
from ringmq.protocol.channel import DEFAULT_MAX_MESSAGE_SIZE, EXPECT_METHOD, ChannelState
from ringmq.protocol.channels import ChannelTable
from ringmq.protocol.events import Command, Event, ProtocolError, PublishRun
from ringmq.protocol.handshake import TuneParams, server_properties
from ringmq.protocol.heartbeat import Heartbeats
from ringmq.protocol.opening import ConnectionMethods
from ringmq.protocol.states import CLIENT_METHODS, PAUSED, TRANSITIONS, ConnectionState

log = logging.getLogger(__name__)

VERSION: Final = "0.1.0"

S = ConnectionState


class ServerConnection(ChannelTable, ConnectionMethods, Heartbeats):
    """One client connection, server side (see the module docstring).

    Args:
        tune: what we offer in Connection.Tune (channel_max 2047, frame_max 131072,
            heartbeat 60 s by default).
        max_message_size: largest body accepted (406 PRECONDITION_FAILED above it); 0: no limit.
        publish_check: called with (channel, method) when a content-bearing method (Basic.Publish)
            arrives, before its header and body; an ``AMQPError`` it raises refuses the publish
            at once (the channel closes and its header and body frames are dropped unbuffered).
        version: server version advertised in server-properties.
        cluster_name: ``cluster_name`` server property.
    """

    def __init__(
        self,
        tune: TuneParams | None = None,
        *,
        max_message_size: int = DEFAULT_MAX_MESSAGE_SIZE,
        publish_check: Callable[[int, Method], None] | None = None,
        version: str = VERSION,
        cluster_name: str = "ringmq",
    ) -> None:
        self.max_message_size = max_message_size
        self.publish_check = publish_check
        self.publish_runs: Container[int] | None = None
        """Channels whose runs of whole publishes the reader may hand over as one
        `PublishRun` event (the server sets them before each read; None: none)."""
        self._reader = FrameReader(FRAME_MIN_SIZE, expect_protocol_header=True)
        self.init_handshake(tune or TuneParams(), server_properties(version, cluster_name))
        self.init_writer()
        self.init_channels()
        self.init_heartbeats()

    # ------------------------------------------------------------------------------ state

    @property
    def state(self) -> ConnectionState:
        return self._state

    @property
    def closed(self) -> bool:
        """True once the transport should be closed (after writing ``data_to_send()``)."""
        return self._state is S.CLOSED

    @property
    def frame_max(self) -> int:
        return self.tuned.frame_max

    @property
    def channel_max(self) -> int:
        return self.tuned.channel_max

    @property
    def heartbeat_s(self) -> int:
        """Negotiated heartbeat interval in seconds (0: disabled); the offer until Tune-Ok."""
        return self.tuned.heartbeat_s

    # ------------------------------------------------------------------------------ input

    def receive_data(
        self, data: bytes | bytearray | memoryview, now_ms: int | None = None
    ) -> list[Event]:
        """Feed received bytes; return the events they complete. Never raises.

        Args:
            data: bytes from the transport (``b""`` just processes what is buffered).
            now_ms: the current time, if the caller has it; otherwise the next heartbeat check
                counts these bytes as liveness at its own ``now_ms``.
        """
        if self._state is S.CLOSED:
            return []
        if data:
            self._reader.feed(data)
            if now_ms is None:
                self._recv_unseen = True
            else:
                self._last_recv_ms = now_ms
        events: list[Event] = []
        self._drain(events)
        return events

    def _drain(self, events: list[Event]) -> None:
        reader = self._reader
        channels = self._channels
        while self._state not in PAUSED:
            if self._state is S.OPEN:
                runs = self.publish_runs
                if runs and self._publish_run(reader, runs, events):
                    continue
                # Hot path: a whole Basic.Publish (method, header, body) in one step, straight
                # to a Command when its channel is open and between commands; otherwise its
                # frames take the ordinary path, one by one, with the same outcome.
                publish = reader.next_publish()
                if publish is not None:
                    number, method, content = publish
                    chan = channels.get(number)
                    limit = self.max_message_size
                    if (
                        chan is not None
                        and chan.assembly is EXPECT_METHOD
                        and chan.state is ChannelState.OPEN
                        and (not limit or content.body_size <= limit)
                    ):
                        events.append(Command(number, method, content))
                    else:
                        self._replay_publish(number, method, content, events)
                    continue
            try:
                frame = reader.next_frame()
            except AMQPError as exc:
                # The byte stream cannot be resynchronised: close at once.
                self._fail(0, exc, events)
                self._finish(events, by_peer=False)
                return
            if frame is None:
                return
            self._handle_frame(frame, events)

    def _publish_run(self, reader: FrameReader, runs: Container[int], events: list[Event]) -> bool:
        # A run of whole publishes on a channel of `runs` (`FrameReader.next_publish_run`):
        # one `PublishRun` when its channel is open and between commands and it is not
        # mandatory or immediate, else each publish as `next_publish`'s would go. False:
        # nothing taken.
        run = reader.next_publish_run(runs, self.max_message_size)
        if run is None:
            return False
        number, method, props, bodies = run
        chan = self._channels.get(number)
        ok = chan is not None and chan.assembly is EXPECT_METHOD and chan.state is ChannelState.OPEN
        publish = cast(spec.BasicPublish, method)  # the reader takes Basic.Publish only
        if ok and not publish.mandatory and not publish.immediate:
            events.append(PublishRun(number, method, props, bodies))
            return True
        for pb, body in zip(props, bodies, strict=True):
            content = RawContent(60, len(body), pb, body)
            if ok and self._state is S.OPEN:
                events.append(Command(number, method, content))
            else:
                self._replay_publish(number, method, content, events)
        return True

    def _handle_frame(self, frame: Frame, events: list[Event]) -> None:
        try:
            self._on_frame(frame, events)
        except AMQPError as exc:
            channel = 0 if isinstance(frame, ProtocolHeader) else frame.channel
            self._fail(channel, exc, events)
        except Exception:
            log.exception("internal error handling a frame; closing the connection")
            self._fail(0, AMQPError(ReplyCode.INTERNAL_ERROR, "internal error"), events)

    def _replay_publish(
        self, number: int, method: Method, content: RawContent, events: list[Event]
    ) -> None:
        """Feed a publish taken by ``next_publish`` through the per-frame path (rare cases)."""
        frames: list[Frame] = [
            MethodFrame(number, method),
            HeaderFrame(number, content.class_id, content.body_size, content.properties_bin),
        ]
        if content.body_size:
            frames.append(BodyFrame(number, content.body))
        for frame in frames:
            if self._state in PAUSED:
                return
            self._handle_frame(frame, events)

    def _on_frame(self, frame: Frame, events: list[Event]) -> None:
        ftype = type(frame)
        # Fast path: a channel frame on an open connection (nearly every frame).
        if (ftype is MethodFrame or ftype is BodyFrame or ftype is HeaderFrame) and (
            self._state is S.OPEN
        ):
            chframe = cast(MethodFrame | HeaderFrame | BodyFrame, frame)  # by the type test
            if chframe.channel:
                self._on_channel_frame(chframe.channel, chframe, events)
                return
        if isinstance(frame, ProtocolHeader):
            self._on_protocol_header(frame, events)
            return
        if isinstance(frame, HeartbeatFrame):
            return
        channel = frame.channel
        if self._state is S.CLOSING:
            # AMQP §2.2.4 / RabbitMQ: while closing, only Close and Close-Ok matter.
            if channel == 0 and isinstance(frame, MethodFrame):
                method = frame.method
                if isinstance(method, spec.ConnectionClose | spec.ConnectionCloseOk):
                    self._process0(method, events)
            return
        if channel == 0:
            if not isinstance(frame, MethodFrame):
                raise AMQPError(
                    ReplyCode.UNEXPECTED_FRAME, "content frame on channel 0 (connection)"
                )
            self._process0(frame.method, events)
            return
        if self._state is not S.OPEN:
            raise AMQPError(
                ReplyCode.UNEXPECTED_FRAME,
                f"frame on channel {channel} before the connection is open "
                f"(state {self._state.value})",
            )
        self._on_channel_frame(channel, frame, events)

    # --------------------------------------------------------------------------- errors

    def _fail(self, channel: int, exc: AMQPError, events: list[Event]) -> None:
        """RabbitMQ's map_exception: hard code or channel 0 -> connection, else channel."""
        if exc.is_hard or channel == 0 or channel not in self._channels:
            if self._state in (S.CLOSING, S.CLOSED):
                return
            events.append(
                ProtocolError(0, int(exc.code), exc.reply_text, exc.class_id, exc.method_id)
            )
            self.close(exc.code, exc.explanation, exc.class_id, exc.method_id)
            return
        if self._channels[channel].state is ChannelState.CLOSING:
            return
        events.append(
            ProtocolError(channel, int(exc.code), exc.reply_text, exc.class_id, exc.method_id)
        )
        self.close_channel(channel, exc.code, exc.explanation, exc.class_id, exc.method_id)

    def send_error(self, channel: int, error: AMQPError) -> None:
        """Report a broker-side ``AMQPError`` for ``channel`` with the map_exception rule.

        Hard codes (or channel 0) close the connection, soft ones the channel.
        """
        if error.is_hard or channel == 0:
            self.close(error.code, error.explanation, error.class_id, error.method_id)
        else:
            self.close_channel(
                channel, error.code, error.explanation, error.class_id, error.method_id
            )


__all__ = ["CLIENT_METHODS", "TRANSITIONS", "VERSION", "ConnectionState", "ServerConnection"]
