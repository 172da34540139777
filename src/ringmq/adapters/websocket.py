"""STOMP, MQTT and AMQP 1.0 over WebSockets: a transport wrapper in front of their handlers.

Theory of operation: `WebSocketHandler` is a `Handler` (adapters/handler.py) that owns a
sans-IO WebSocket server connection (wsproto) and the handler of the protocol it carries
(`inner`, the ordinary STOMP, MQTT or AMQP 1.0 handler of the same `HandlerContext`, so the
same limits, logins, throttle and authorisation apply as on the TCP listeners). Bytes in:

    socket bytes -> wsproto -> the HTTP upgrade request (answered here) | messages
    -> message payloads, in order -> inner.receive_data -> core effects

and out: whatever `inner` queued is sent as one WebSocket message per `data_to_send` (text
frames for STOMP when the bytes are UTF-8, as RabbitMQ's Web STOMP sends by default; binary
for MQTT, which RFC 6455 MQTT requires, and for AMQP 1.0, whose WebSocket binding requires
them too).

The upgrade: the request's path must be `path` ("/ws", RabbitMQ's Web STOMP and Web MQTT
default), else 404; of the client's subprotocols the first one we speak is chosen (STOMP:
v12.stomp, v11.stomp, v10.stomp; MQTT: mqtt, mqttv3.1; AMQP 1.0: amqp, AMQPWSB10); a client
that offers only others is refused (400), one that offers none is accepted without one. A
malformed request is answered 400 and the connection closed; a malformed frame gets wsproto's
close (1002), then the close. Pings are answered. The carried protocol's own close
(`inner.closed`) becomes a WebSocket close (1000), and a peer's close is answered and ends the
connection.

A cluster follower that does not relay (`[cluster] proxy = false`) answers on these ports with
`WebSocketRefuser`: the same upgrade rules (`upgrade_answer`), then the carried protocol's own
refusal naming the leader, in WebSocket messages.

Pure: no I/O; owned by the loop thread like the handler it wraps.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Final, Protocol

from wsproto import ConnectionType, WSConnection
from wsproto.connection import ConnectionState
from wsproto.events import (
    AcceptConnection,
    BytesMessage,
    CloseConnection,
    Message,
    Ping,
    RejectConnection,
    Request,
    TextMessage,
)
from wsproto.utilities import RemoteProtocolError

from ringmq.adapters.handler import Handler, HandlerContext, HandlerFactory, HandlerInfo
from ringmq.core.effects import Effect
from ringmq.core.errors import Condition

DEFAULT_PATH: Final = "/ws"
STOMP_SUBPROTOCOLS: Final = ("v12.stomp", "v11.stomp", "v10.stomp")
MQTT_SUBPROTOCOLS: Final = ("mqtt", "mqttv3.1")
AMQP_SUBPROTOCOLS: Final = ("amqp", "AMQPWSB10")
"""AMQP 1.0: the WebSocket binding's `amqp` (Qpid JMS's `amqpws://`, Artemis, rhea) and its
drafts' `AMQPWSB10`, which older clients still offer."""
MAX_REQUEST_BYTES: Final = 16 * 1024
"""The largest upgrade request taken (a browser's is well under 2 KiB)."""
_BAD_REQUEST: Final = b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"


class WebSocketHandler:
    """One WebSocket connection carrying STOMP or MQTT (see the module docstring)."""

    def __init__(
        self,
        ctx: HandlerContext,
        inner: Handler,
        subprotocols: tuple[str, ...],
        *,
        text: bool,
        path: str = DEFAULT_PATH,
    ) -> None:
        self.ctx = ctx
        self.inner = inner
        self.subprotocols = subprotocols
        self.text = text
        self.path = path
        self.ws = WSConnection(ConnectionType.SERVER)
        self.subprotocol: str | None = None
        self._out = bytearray()
        self._message = bytearray()
        self._head = bytearray()
        self._closed = False
        self._ended = False  # no more WebSocket frames: after a close either way

    # ------------------------------------------------------------------ Handler
    @property
    def opened(self) -> bool:
        return self.inner.opened

    @property
    def closed(self) -> bool:
        return self._closed

    def receive_data(self, data: bytes, now_ms: int) -> list[Effect]:
        if self._closed:
            return []
        rest = b""
        if self.ws.state is ConnectionState.CONNECTING:
            # the upgrade request alone goes to the handshake; frames a client sent right
            # behind it wait for the accept (wsproto would keep them in its HTTP parser)
            self._head += data
            end = self._head.find(b"\r\n\r\n")
            if end < 0:
                if len(self._head) > MAX_REQUEST_BYTES:
                    self._fail_handshake()
                return []
            data, rest = bytes(self._head[: end + 4]), bytes(self._head[end + 4 :])
            self._head = bytearray()
        out: list[Effect] = []
        for chunk in (data, rest):
            if not chunk or self._closed:
                continue
            try:
                self.ws.receive_data(chunk)
                events = list(self.ws.events())
            except RemoteProtocolError:
                self._fail_handshake()
                return out
            self._events(events, out, now_ms)
        return out

    def _events(self, events: Sequence[object], out: list[Effect], now_ms: int) -> None:
        for e in events:
            if self._closed:
                return
            match e:
                case Request():
                    self._upgrade(e)
                case Message():
                    payload = e.data.encode() if isinstance(e, TextMessage) else bytes(e.data)
                    self._message += payload
                    if e.message_finished:
                        chunk, self._message = bytes(self._message), bytearray()
                        out += self.inner.receive_data(chunk, now_ms)
                case Ping():
                    self._send(e.response())
                case CloseConnection():
                    if self.ws.state is ConnectionState.REMOTE_CLOSING:
                        self._send(e.response())  # the peer's close, answered
                    elif self.ws.state is ConnectionState.OPEN:
                        # wsproto's verdict on a malformed frame (1002, 1007...): ours to send
                        self._send(CloseConnection(code=e.code, reason=e.reason))
                    self._ended = self._closed = True
                case _:
                    pass

    def apply(self, effect: Effect) -> None:
        self.inner.apply(effect)

    def data_to_send(self) -> bytes:
        carried = self.inner.data_to_send()
        if not self._ended and self.ws.state is ConnectionState.OPEN:
            if carried:
                self._send(self._frame(carried))
            if self.inner.closed:
                self._send(CloseConnection(code=1000))
                self._ended = self._closed = True
        elif self.inner.closed and not self._ended:
            self._closed = True  # the upgrade never completed: nothing to frame
        out, self._out = bytes(self._out), bytearray()
        return out

    def tick(self, now_ms: int, mono_ms: int) -> list[Effect]:
        return self.inner.tick(now_ms, mono_ms)

    def tick_idle_ms(self, now_ms: int, mono_ms: int) -> int | None:
        # `TickDeadline` is the inner protocol's (the tick is all its); 0 keeps an inner
        # handler without it on every sweep
        idle: Callable[[int, int], int | None] | None = getattr(self.inner, "tick_idle_ms", None)
        return 0 if idle is None else idle(now_ms, mono_ms)

    def close(self, condition: Condition, text: str) -> None:
        self.inner.close(condition, text)
        if self.ws.state is not ConnectionState.OPEN:
            self._closed = True

    def connection_lost(self, now_ms: int) -> list[Effect]:
        return self.inner.connection_lost(now_ms)

    def info(self) -> HandlerInfo:
        return replace(self.inner.info(), protocol=f"Web {self.inner.info().protocol}")

    # ------------------------------------------------------------------ WebSocket
    def _upgrade(self, request: Request) -> None:
        answer = upgrade_answer(request, self.path, self.subprotocols)
        self._send(answer)
        if isinstance(answer, RejectConnection):
            self._ended = self._closed = True
            return
        self.subprotocol = answer.subprotocol

    def _frame(self, payload: bytes) -> Message:  # type: ignore[type-arg]
        return message_of(payload, text=self.text)

    def _send(self, event: object) -> None:
        self._out += self.ws.send(event)  # type: ignore[arg-type]

    def _fail_handshake(self) -> None:
        if self.ws.state is ConnectionState.CONNECTING:
            self._out += _BAD_REQUEST
        self._ended = self._closed = True


def upgrade_answer(
    request: Request, path: str, subprotocols: Sequence[str]
) -> AcceptConnection | RejectConnection:
    """The answer to an upgrade request: 404 on another path, 400 when the client offers
    subprotocols and none of ours, else accepted with the first of its offers we speak."""
    if request.target.split("?", 1)[0] != path:
        return RejectConnection(status_code=404)
    offered = list(request.subprotocols)
    chosen = next((p for p in offered if p in subprotocols), None)
    if offered and chosen is None:
        return RejectConnection(status_code=400)
    return AcceptConnection(subprotocol=chosen)


def message_of(payload: bytes, *, text: bool) -> Message:  # type: ignore[type-arg]
    """One carried protocol's bytes as a WebSocket message (text when asked and UTF-8)."""
    if text:
        try:
            return TextMessage(data=payload.decode("utf-8"))
        except UnicodeDecodeError:
            pass  # a binary body: a binary frame (stomp.js takes both)
    return BytesMessage(data=payload)


def websocket_handler(
    inner: HandlerFactory,
    subprotocols: tuple[str, ...],
    *,
    text: bool,
    path: str = DEFAULT_PATH,
) -> HandlerFactory:
    """The `HandlerFactory` of `inner`'s protocol carried over WebSockets."""

    def make(ctx: HandlerContext) -> Handler:
        return WebSocketHandler(ctx, inner(ctx), subprotocols, text=text, path=path)

    return make


class CarriedRefuser(Protocol):
    """A protocol's refusal by a follower (as `server/refusal.py`'s `Refuser`)."""

    def receive(self, data: bytes) -> tuple[bytes, bool]: ...


class WebSocketRefuser:
    """A follower's refusal on a WebSocket port (`[cluster] proxy = false`): the upgrade is
    answered as the listener answers it (`upgrade_answer`), then the carried protocol's own
    refusal (STOMP's ERROR, MQTT's CONNACK, AMQP 1.0's redirecting close, each naming the
    leader) goes back in WebSocket messages, then a close (1000). Sans-IO, as `Refuser`."""

    def __init__(
        self,
        inner: CarriedRefuser,
        subprotocols: tuple[str, ...],
        *,
        text: bool,
        path: str = DEFAULT_PATH,
    ) -> None:
        self.inner = inner
        self.subprotocols = subprotocols
        self.text = text
        self.path = path
        self.ws = WSConnection(ConnectionType.SERVER)
        self._head = bytearray()
        self._message = bytearray()

    def receive(self, data: bytes) -> tuple[bytes, bool]:
        chunks = [data]
        if self.ws.state is ConnectionState.CONNECTING:
            # the request alone first (as `WebSocketHandler`): frames behind it after the accept
            self._head += data
            end = self._head.find(b"\r\n\r\n")
            if end < 0:
                return b"", False
            chunks = [bytes(self._head[: end + 4]), bytes(self._head[end + 4 :])]
        out = bytearray()
        for chunk in chunks:
            try:
                self.ws.receive_data(chunk)
                events = list(self.ws.events())
            except RemoteProtocolError:
                connecting = self.ws.state is ConnectionState.CONNECTING
                return bytes(out) + (_BAD_REQUEST if connecting else b""), True
            for e in events:
                if self._event(e, out):
                    return bytes(out), True
        return bytes(out), False

    def _event(self, e: object, out: bytearray) -> bool:
        # True: done, close the connection after `out`
        match e:
            case Request():
                answer = upgrade_answer(e, self.path, self.subprotocols)
                out += self.ws.send(answer)
                return isinstance(answer, RejectConnection)
            case Message():
                self._message += e.data.encode() if isinstance(e, TextMessage) else bytes(e.data)
                if not e.message_finished:
                    return False
                reply, done = self.inner.receive(bytes(self._message))
                self._message = bytearray()
                if reply:
                    out += self.ws.send(message_of(reply, text=self.text))
                if done:
                    out += self.ws.send(CloseConnection(code=1000))
                return done
            case Ping():
                out += self.ws.send(e.response())
            case CloseConnection():
                if self.ws.state is ConnectionState.REMOTE_CLOSING:
                    out += self.ws.send(e.response())
                return True
        return False


def websocket_refuser(
    inner: Callable[[str, int], CarriedRefuser], subprotocols: tuple[str, ...], *, text: bool
) -> Callable[[str, int], WebSocketRefuser]:
    """`(leader_host, leader_port) -> WebSocketRefuser` carrying `inner`'s refusal."""

    def make(host: str, port: int) -> WebSocketRefuser:
        return WebSocketRefuser(inner(host, port), subprotocols, text=text)

    return make


__all__ = [
    "AMQP_SUBPROTOCOLS",
    "DEFAULT_PATH",
    "MQTT_SUBPROTOCOLS",
    "STOMP_SUBPROTOCOLS",
    "WebSocketHandler",
    "WebSocketRefuser",
    "websocket_handler",
    "websocket_refuser",
]
