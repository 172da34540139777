"""The WebSocket wrapper (`adapters/websocket.py`) around a carried protocol's handler, driven
by wsproto's client side: upgrade, messages in and out, pings, closes either way."""

from __future__ import annotations

from typing import Any

from wsproto import ConnectionType, WSConnection
from wsproto.events import (
    AcceptConnection,
    BytesMessage,
    CloseConnection,
    Ping,
    Pong,
    Request,
    TextMessage,
)

from ringmq.adapters.handler import HandlerInfo
from ringmq.adapters.websocket import WebSocketHandler
from ringmq.core.effects import Effect
from ringmq.core.errors import Condition


class Echo:
    """A carried protocol that answers each chunk with "ok:" + chunk; "bye" closes it."""

    def __init__(self) -> None:
        self.got: list[bytes] = []
        self.out = b""
        self.closed = False
        self.opened = True

    def receive_data(self, data: bytes, now_ms: int) -> list[Effect]:
        self.got.append(data)
        self.out += b"ok:" + data
        self.closed = data == b"bye"
        return []

    def data_to_send(self) -> bytes:
        out, self.out = self.out, b""
        return out

    def apply(self, effect: Effect) -> None: ...
    def tick(self, now_ms: int, mono_ms: int) -> list[Effect]:
        return []

    def close(self, condition: Condition, text: str) -> None:
        self.closed = True

    def connection_lost(self, now_ms: int) -> list[Effect]:
        return []

    def info(self) -> HandlerInfo:
        return HandlerInfo(protocol="STOMP 1.2")


def _pair(text: bool = True) -> tuple[WebSocketHandler, Echo, WSConnection, list[Any]]:
    inner = Echo()
    server = WebSocketHandler(None, inner, ("v12.stomp",), text=text)  # type: ignore[arg-type]
    client = WSConnection(ConnectionType.CLIENT)
    upgrade = client.send(Request(host="x", target="/ws", subprotocols=["v12.stomp"]))
    return server, inner, client, [upgrade]


def _to_client(server: WebSocketHandler, client: WSConnection) -> list[Any]:
    client.receive_data(server.data_to_send())
    return list(client.events())


def _frame(event: Any) -> bytes:
    """`event` as an open client's (masked) frame bytes."""
    client, server = WSConnection(ConnectionType.CLIENT), WSConnection(ConnectionType.SERVER)
    server.receive_data(client.send(Request(host="x", target="/ws")))
    next(server.events())
    client.receive_data(server.send(AcceptConnection()))
    next(client.events())
    return client.send(event)


def test_frames_sent_behind_the_upgrade_are_taken() -> None:
    server, inner, client, (upgrade,) = _pair()
    server.receive_data(upgrade + _frame(TextMessage(data="CONNECT\n\n\x00")), 0)
    assert inner.got == [b"CONNECT\n\n\x00"]
    accepted, reply = _to_client(server, client)
    assert isinstance(accepted, AcceptConnection)
    assert accepted.subprotocol == "v12.stomp"
    assert isinstance(reply, TextMessage)


def test_messages_fragments_pings_and_the_carried_close() -> None:
    server, inner, client, (upgrade,) = _pair()
    server.receive_data(upgrade, 0)
    _to_client(server, client)
    first = client.send(TextMessage(data="he", message_finished=False))
    server.receive_data(first + client.send(TextMessage(data="llo")), 0)
    assert inner.got == [b"hello"]  # one message, whatever its fragments
    (reply,) = _to_client(server, client)
    assert isinstance(reply, TextMessage)
    assert reply.data == "ok:hello"
    server.receive_data(client.send(Ping(payload=b"p")), 0)
    (pong,) = _to_client(server, client)
    assert isinstance(pong, Pong)
    server.receive_data(client.send(BytesMessage(data=b"bye")), 0)
    events = _to_client(server, client)
    assert [type(e) for e in events] == [TextMessage, CloseConnection]
    assert server.closed


def test_binary_frames_for_binary_protocols_and_the_peer_close() -> None:
    server, _, client, (upgrade,) = _pair(text=False)
    server.receive_data(upgrade, 0)
    _to_client(server, client)
    server.receive_data(client.send(BytesMessage(data=b"\x10\x00")), 0)
    (reply,) = _to_client(server, client)
    assert isinstance(reply, BytesMessage)
    server.receive_data(client.send(CloseConnection(code=1000)), 0)
    (close,) = _to_client(server, client)
    assert isinstance(close, CloseConnection)
    assert server.closed
    assert server.info().protocol == "Web STOMP 1.2"
