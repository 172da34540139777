"""The sans-IO AMQP 0-9-1 server connection: bytes in, events out; calls in, bytes out.

Theory of operation
-------------------
``ServerConnection`` owns one client connection's protocol state: the frame reader, the
handshake state machine, the open channels (``protocol.channel``) and the output buffer. It does
no I/O and reads no clock: the server feeds received bytes to ``receive_data`` and writes
``data_to_send()`` once per read batch; times are passed in as ``now_ms``.

Connection states and the methods that move them are one table, ``TRANSITIONS``
(``(state, method type) -> next state``), read by ``_process0``. A channel-0 method that is not in
the table for the current state is CHANNEL_ERROR (504, "unexpected method in connection state",
as RabbitMQ). The handshake::

    AWAIT_HEADER --header--> START_SENT --Start-Ok--> AUTHENTICATING --accept_login()-->
    TUNE_SENT --Tune-Ok--> AWAIT_OPEN --Open--> OPENING --accept_open()--> OPEN
    any --Close--> CLOSED (Close-Ok sent);  close()/error --> CLOSING --Close-Ok--> CLOSED

Authentication and vhost access are delegated: Start-Ok yields ``LoginRequested`` (PLAIN or
AMQPLAIN already parsed) and Open yields ``OpenRequested``; the caller answers with
``accept_login()``/``reject_login()`` and ``accept_open()``/``close(...)``. While such a decision
is pending, ``receive_data`` leaves later bytes buffered; ``accept_login()`` and ``accept_open()``
process them and return their events. This keeps the machine synchronous without callbacks.

Errors follow RabbitMQ's ``map_exception`` rule at one boundary (``_fail``): an ``AMQPError``
with a hard code, or on channel 0, queues Connection.Close and moves to ``CLOSING`` (all frames
but Close/Close-Ok are then dropped); a soft one queues Channel.Close on that channel, which
drops its frames until Close-Ok. Framing errors (the byte stream can no longer be trusted) queue
Connection.Close and end the connection at once (``ConnectionClosed``). Any other exception is a
bug: it is logged with its traceback and becomes INTERNAL_ERROR (541) for this connection only.
``receive_data`` therefore never raises.

A Basic.Publish whose content has not fully arrived takes the per-frame path; when its method
frame arrives, ``publish_check`` (the broker's exchange and write-permission checks) runs first,
so a refused publish closes its channel before any of its body is buffered (the channel is then
``CLOSING`` and drops the header and body frames that follow). ``content_in_flight`` is the
declared size of the contents being received, for the server's memory accounting.

The connection and channel classes are handled here; exchange, queue, basic, confirm and tx
methods become ``Command`` events for the broker, with content assembled into ``RawContent``.
Methods only a server may send (Deliver, Declare-Ok, ...) arriving from the client are
COMMAND_INVALID (503). Outgoing methods for channels that are not open are dropped (the send
calls return False), so late deliveries to a closing channel never reach the wire.

This module imports only ``ringmq.amqp`` and its siblings in ``ringmq.protocol``.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from enum import Enum
from typing import Any, Final, cast

from ringmq.amqp import spec
from ringmq.amqp.frames import (
    FRAME_MIN_SIZE,
    HEARTBEAT_FRAME,
    PROTOCOL_HEADER,
    BodyFrame,
    DeliverParts,
    Frame,
    FrameReader,
    HeaderFrame,
    HeartbeatFrame,
    MethodFrame,
    ProtocolHeader,
    RawContent,
    encode_content_frames,
    encode_method_frame,
)
from ringmq.amqp.reply_codes import AMQPError, ReplyCode
from ringmq.amqp.spec import Method
from ringmq.protocol.channel import (
    DEFAULT_MAX_MESSAGE_SIZE,
    EXPECT_METHOD,
    Channel,
    ChannelState,
)
from ringmq.protocol.events import (
    ChannelClosed,
    ChannelOpened,
    Command,
    ConnectionClosed,
    Event,
    LoginRequested,
    OpenRequested,
    ProtocolError,
    SecretUpdated,
)
from ringmq.protocol.handshake import (
    MECHANISMS,
    TuneParams,
    client_capability,
    negotiate,
    parse_sasl,
    server_properties,
)

log = logging.getLogger(__name__)

VERSION: Final = "0.1.0"


class ConnectionState(Enum):
    #: waiting for the 8-byte protocol header.
    AWAIT_HEADER = "await_header"
    #: Connection.Start sent, waiting for Start-Ok.
    START_SENT = "start_sent"
    #: LoginRequested emitted; waiting for accept_login()/reject_login().
    AUTHENTICATING = "authenticating"
    #: Connection.Tune sent, waiting for Tune-Ok.
    TUNE_SENT = "tune_sent"
    #: tuned, waiting for Connection.Open.
    AWAIT_OPEN = "await_open"
    #: OpenRequested emitted; waiting for accept_open() or close().
    OPENING = "opening"
    #: open: channels and commands flow.
    OPEN = "open"
    #: we sent Connection.Close; waiting for Close-Ok.
    CLOSING = "closing"
    #: finished; write data_to_send() and close the transport.
    CLOSED = "closed"


S = ConnectionState

TRANSITIONS: Final[dict[tuple[ConnectionState, type[Method]], ConnectionState]] = {
    (S.START_SENT, spec.ConnectionStartOk): S.AUTHENTICATING,
    (S.TUNE_SENT, spec.ConnectionTuneOk): S.AWAIT_OPEN,
    (S.AWAIT_OPEN, spec.ConnectionOpen): S.OPENING,
    (S.OPEN, spec.ConnectionUpdateSecret): S.OPEN,
    (S.START_SENT, spec.ConnectionClose): S.CLOSED,
    (S.TUNE_SENT, spec.ConnectionClose): S.CLOSED,
    (S.AWAIT_OPEN, spec.ConnectionClose): S.CLOSED,
    (S.OPEN, spec.ConnectionClose): S.CLOSED,
    (S.CLOSING, spec.ConnectionClose): S.CLOSED,
    (S.CLOSING, spec.ConnectionCloseOk): S.CLOSED,
}
"""Channel-0 methods accepted in each connection state, and the state they lead to."""

# States in which receive_data stops and leaves bytes buffered. (Tuples, not frozensets:
# membership is then an identity test, while hashing an Enum member runs Python code.)
_PAUSED: Final = (S.AUTHENTICATING, S.OPENING, S.CLOSED)

CLIENT_METHODS: Final[frozenset[type[Method]]] = frozenset(
    {
        spec.ConnectionStartOk,
        spec.ConnectionSecureOk,
        spec.ConnectionTuneOk,
        spec.ConnectionOpen,
        spec.ConnectionClose,
        spec.ConnectionCloseOk,
        spec.ConnectionUpdateSecret,
        spec.ChannelOpen,
        spec.ChannelFlow,
        spec.ChannelFlowOk,
        spec.ChannelClose,
        spec.ChannelCloseOk,
        spec.ExchangeDeclare,
        spec.ExchangeDelete,
        spec.ExchangeBind,
        spec.ExchangeUnbind,
        spec.QueueDeclare,
        spec.QueueBind,
        spec.QueuePurge,
        spec.QueueDelete,
        spec.QueueUnbind,
        spec.BasicQos,
        spec.BasicConsume,
        spec.BasicCancel,
        spec.BasicPublish,
        spec.BasicGet,
        spec.BasicAck,
        spec.BasicReject,
        spec.BasicRecoverAsync,
        spec.BasicRecover,
        spec.BasicNack,
        spec.ConfirmSelect,
        spec.TxSelect,
        spec.TxCommit,
        spec.TxRollback,
    }
)
"""Methods a client may send; any other method from the client is COMMAND_INVALID."""

# States in which heartbeats have been negotiated and run.
_TUNED: Final = (S.AWAIT_OPEN, S.OPENING, S.OPEN, S.CLOSING)

_DELIVER_PARTS_CACHE_SIZE: Final = 1024
"""Distinct (channel, consumer tag, exchange, routing key) deliver prefixes kept per connection."""

_CONNECTION_CLASS: Final = 10
_CHANNEL_CLASS: Final = 20


class ServerConnection:
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
        self.offered: Final = tune or TuneParams()
        self.tuned: TuneParams = self.offered
        self.max_message_size = max_message_size
        self.publish_check = publish_check
        self._server_properties = server_properties(version, cluster_name)
        self._state = S.AWAIT_HEADER
        self._reader = FrameReader(FRAME_MIN_SIZE, expect_protocol_header=True)
        self._out: list[bytes] = []
        self._channels: dict[int, Channel] = {}
        self.client_properties: dict[str, Any] = {}
        self.mechanism = ""
        self.username = ""
        self.vhost = ""
        self._close_code = 0
        self._close_text = ""
        self._blocked = False
        self._last_recv_ms: int | None = None
        self._last_sent_ms: int | None = None
        self._recv_unseen = False
        self._sent_unseen = False
        self._deliver_parts: dict[tuple[int, str, str, str], DeliverParts] = {}

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
        while self._state not in _PAUSED:
            if self._state is S.OPEN:
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
            if self._state in _PAUSED:
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

    def _on_protocol_header(self, header: ProtocolHeader, events: list[Event]) -> None:
        if not header.valid:
            # AMQP §4.2.2: answer a bad header with ours, then close the socket.
            self._write(PROTOCOL_HEADER)
            self._state = S.CLOSED
            events.append(ConnectionClosed(0, "bad protocol header", by_peer=True))
            return
        self._send0(
            spec.ConnectionStart(
                version_major=0,
                version_minor=9,
                server_properties=self._server_properties,
                mechanisms=" ".join(MECHANISMS).encode(),
                locales=b"en_US",
            )
        )
        self._state = S.START_SENT

    # ----------------------------------------------------------------------- channel 0

    def _process0(self, method: Method, events: list[Event]) -> None:
        nxt = TRANSITIONS.get((self._state, type(method)))
        if nxt is None:
            if type(method) not in CLIENT_METHODS:
                raise AMQPError(
                    ReplyCode.COMMAND_INVALID,
                    f"{method.NAME} may not be sent by a client",
                    class_id=method.CLASS_ID,
                    method_id=method.METHOD_ID,
                )
            raise AMQPError(
                ReplyCode.CHANNEL_ERROR,
                f"unexpected method {method.NAME} in connection state {self._state.value}",
                class_id=method.CLASS_ID,
                method_id=method.METHOD_ID,
            )
        _HANDLERS0[type(method)](self, method, events)
        if self._state is not S.CLOSED:
            self._state = nxt

    def _on_start_ok(self, method: Method, events: list[Event]) -> None:
        assert isinstance(method, spec.ConnectionStartOk)
        if method.mechanism not in MECHANISMS:
            raise AMQPError(
                ReplyCode.COMMAND_INVALID,
                f"unknown authentication mechanism {method.mechanism!r}",
                class_id=method.CLASS_ID,
                method_id=method.METHOD_ID,
            )
        creds = parse_sasl(method.mechanism, method.response)
        self.client_properties = method.client_properties
        self.mechanism = method.mechanism
        self.username = creds.username
        events.append(
            LoginRequested(
                mechanism=method.mechanism,
                response=method.response,
                username=creds.username,
                password=creds.password,
                client_properties=method.client_properties,
                locale=method.locale,
            )
        )

    def _on_tune_ok(self, method: Method, events: list[Event]) -> None:
        assert isinstance(method, spec.ConnectionTuneOk)
        self.tuned = negotiate(self.offered, method.channel_max, method.frame_max, method.heartbeat)
        self._reader.frame_max = self.tuned.frame_max

    def _on_open(self, method: Method, events: list[Event]) -> None:
        assert isinstance(method, spec.ConnectionOpen)
        self.vhost = method.virtual_host
        events.append(OpenRequested(method.virtual_host))

    def _on_close(self, method: Method, events: list[Event]) -> None:
        assert isinstance(method, spec.ConnectionClose)
        by_peer = self._state is not S.CLOSING
        self._send0(spec.ConnectionCloseOk())
        if by_peer:
            self._close_code, self._close_text = method.reply_code, method.reply_text
        self._finish(events, by_peer=by_peer)

    def _on_close_ok(self, method: Method, events: list[Event]) -> None:
        self._finish(events, by_peer=False)

    def _on_update_secret(self, method: Method, events: list[Event]) -> None:
        assert isinstance(method, spec.ConnectionUpdateSecret)
        self._send0(spec.ConnectionUpdateSecretOk())
        events.append(SecretUpdated(method.new_secret, method.reason))

    def _finish(self, events: list[Event], *, by_peer: bool) -> None:
        self._state = S.CLOSED
        self._channels.clear()
        events.append(ConnectionClosed(self._close_code, self._close_text, by_peer=by_peer))

    # ------------------------------------------------------------------------- channels

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
            if cls == _CHANNEL_CLASS:
                self._on_channel_method(chan, method, events)
                return
            if cls == _CONNECTION_CLASS or type(method) not in CLIENT_METHODS:
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

    # --------------------------------------------------------------------------- output

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

    def accept_login(self) -> list[Event]:
        """Accept the login of ``LoginRequested``: send Tune; process pipelined bytes."""
        if self._state is not S.AUTHENTICATING:
            raise RuntimeError(f"accept_login() in state {self._state.value}")
        o = self.offered
        self._send0(spec.ConnectionTune(o.channel_max, o.frame_max, o.heartbeat_s))
        self._state = S.TUNE_SENT
        events: list[Event] = []
        self._drain(events)
        return events

    def reject_login(self, explanation: str | None = None) -> None:
        """Refuse the login: Connection.Close with ACCESS_REFUSED (403), as RabbitMQ does."""
        if self._state is not S.AUTHENTICATING:
            raise RuntimeError(f"reject_login() in state {self._state.value}")
        text = explanation or (
            f"Login was refused using authentication mechanism {self.mechanism}. "
            "For details see the broker logfile."
        )
        self.close(ReplyCode.ACCESS_REFUSED, text, 10, 11)

    def accept_open(self) -> list[Event]:
        """Accept ``OpenRequested``: send Open-Ok, move to OPEN; process pipelined bytes."""
        if self._state is not S.OPENING:
            raise RuntimeError(f"accept_open() in state {self._state.value}")
        self._send0(spec.ConnectionOpenOk())
        self._state = S.OPEN
        events: list[Event] = []
        self._drain(events)
        return events

    def close(self, code: int, text: str, class_id: int = 0, method_id: int = 0) -> None:
        """Server-initiated close: queue Connection.Close and wait for Close-Ok (``CLOSING``).

        ``text`` is the explanation; the reply text sent is "CODE_NAME - text" (<= 255 bytes).
        Before the protocol header was accepted there is nobody to tell: the connection just
        ends. The caller should arm a timeout and drop the transport if Close-Ok never comes.
        """
        if self._state in (S.CLOSING, S.CLOSED):
            return
        if self._state is S.AWAIT_HEADER:
            self._state = S.CLOSED
            return
        reply_text = _reply_text(code, text)
        self._close_code, self._close_text = int(code), reply_text
        self._send0(spec.ConnectionClose(int(code), reply_text, class_id, method_id))
        self._state = S.CLOSING

    def close_channel(
        self, channel: int, code: int, text: str, class_id: int = 0, method_id: int = 0
    ) -> None:
        """Server-initiated channel close: queue Channel.Close; drop its frames until Close-Ok.

        ``ChannelClosed`` is emitted when the client's Close-Ok arrives. No-op if the channel is
        not open.
        """
        chan = self._channels.get(channel)
        if chan is None or chan.state is not ChannelState.OPEN or self._state is not S.OPEN:
            return
        reply_text = _reply_text(code, text)
        chan.state = ChannelState.CLOSING
        chan.assembly = Channel(channel).assembly
        self._write(
            encode_method_frame(
                channel, spec.ChannelClose(int(code), reply_text, class_id, method_id)
            )
        )

    def _can_send(self, channel: int) -> bool:
        if self._state is not S.OPEN:
            return False
        if channel == 0:
            return True
        chan = self._channels.get(channel)
        return chan is not None and chan.state is ChannelState.OPEN

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
        if self._state is not S.OPEN:
            return False
        chan = self._channels.get(channel)
        if chan is None or chan.state is not ChannelState.OPEN:
            return False
        key = (channel, consumer_tag, exchange, routing_key)
        parts = self._deliver_parts.get(key)
        if parts is None:
            if len(self._deliver_parts) >= _DELIVER_PARTS_CACHE_SIZE:
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

    # ------------------------------------------------------------------------ heartbeats

    def heartbeat_due(self, now_ms: int) -> bool:
        """True when nothing was sent for half the heartbeat interval (RabbitMQ's cadence).

        Call ``send_heartbeat()`` when it is. Output taken by ``data_to_send()`` counts.
        """
        if self._sent_unseen or self._last_sent_ms is None:
            self._sent_unseen = False
            self._last_sent_ms = now_ms
            return False
        hb = self.tuned.heartbeat_s
        if hb == 0 or self._state not in _TUNED:
            return False
        return now_ms - self._last_sent_ms >= hb * 500

    def send_heartbeat(self) -> None:
        """Queue a heartbeat frame."""
        if self._state is not S.CLOSED:
            self._out.append(HEARTBEAT_FRAME)

    def peer_timed_out(self, now_ms: int) -> bool:
        """True when no byte arrived for two heartbeat intervals (the peer is gone)."""
        if self._recv_unseen or self._last_recv_ms is None:
            self._recv_unseen = False
            self._last_recv_ms = now_ms
            return False
        hb = self.tuned.heartbeat_s
        if hb == 0 or self._state not in _TUNED:
            return False  # before Tune-Ok the server's handshake timeout applies
        return now_ms - self._last_recv_ms > 2 * hb * 1000


def _reply_text(code: int, text: str) -> str:
    """RabbitMQ-style "CODE_NAME - text" (<= 255 bytes); codes outside ReplyCode keep text."""
    try:
        return AMQPError(ReplyCode(code), text).reply_text
    except ValueError:
        return text.encode("utf-8")[:255].decode("utf-8", "ignore")


_Handler = Callable[[ServerConnection, Method, list[Event]], None]

_HANDLERS0: Final[dict[type[Method], _Handler]] = {
    spec.ConnectionStartOk: ServerConnection._on_start_ok,
    spec.ConnectionTuneOk: ServerConnection._on_tune_ok,
    spec.ConnectionOpen: ServerConnection._on_open,
    spec.ConnectionClose: ServerConnection._on_close,
    spec.ConnectionCloseOk: ServerConnection._on_close_ok,
    spec.ConnectionUpdateSecret: ServerConnection._on_update_secret,
}

__all__ = ["CLIENT_METHODS", "TRANSITIONS", "ConnectionState", "ServerConnection"]
