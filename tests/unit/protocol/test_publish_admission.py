"""A publish is judged at its method and header, before its body is buffered (issue 16, 1.3)."""

from __future__ import annotations

from collections.abc import Callable

from ringmq.amqp import spec
from ringmq.amqp.frames import RawContent, encode_frame
from ringmq.amqp.reply_codes import AMQPError, ReplyCode
from ringmq.protocol import ChannelState, ConnectionState, ServerConnection
from ringmq.protocol.channel import DEFAULT_MAX_MESSAGE_SIZE
from ringmq.protocol.events import ChannelClosed, Command, ProtocolError
from tests.unit.protocol.client import Client, m
from tests.unit.protocol.test_channels import PROPS, spec_header

MiB = 1024 * 1024


def _header(channel: int, size: int) -> bytes:
    return encode_frame(2, channel, spec_header(60, size))


def _body(channel: int, data: bytes) -> bytes:
    return encode_frame(3, channel, data)


def _open(conn: ServerConnection, channels: int = 1) -> Client:
    c = Client(conn)
    c.handshake()
    for n in range(1, channels + 1):
        c.open_channel(n)
    return c


def _refuse_exchange(name: str, seen: list[tuple[int, str]]) -> Callable[[int, spec.Method], None]:
    def check(channel: int, method: spec.Method) -> None:
        assert isinstance(method, spec.BasicPublish)
        seen.append((channel, method.exchange))
        if method.exchange == name:
            raise AMQPError(
                ReplyCode.ACCESS_REFUSED,
                f"write access to exchange '{name}' in vhost '/' refused for user 'ro'",
                class_id=60,
                method_id=40,
            )

    return check


def test_a_refused_publish_closes_its_channel_at_the_method_and_drops_its_content() -> None:
    seen: list[tuple[int, str]] = []
    c = _open(ServerConnection(publish_check=_refuse_exchange("secret", seen)), channels=2)
    events = c.send(m(1, spec.BasicPublish(exchange="secret", routing_key="k")))
    assert seen == [(1, "secret")]
    [error] = events
    assert isinstance(error, ProtocolError)
    assert (error.channel, error.reply_code) == (1, 403)
    [(channel, close)] = c.methods()
    assert channel == 1
    assert isinstance(close, spec.ChannelClose)
    assert (close.reply_code, close.class_id, close.method_id) == (403, 60, 40)
    assert c.conn.channel_state(1) is ChannelState.CLOSING
    # the 10 MiB content that follows is dropped frame by frame: nothing is held for it
    assert c.send(_header(1, 10 * MiB)) == []
    assert c.conn.content_in_flight == 0
    for _ in range(4):
        assert c.send(_body(1, b"x" * 65536)) == []
        assert c.conn.content_in_flight == 0
    # the other channel and the connection are untouched
    assert c.state() is ConnectionState.OPEN
    assert c.send(m(2, spec.BasicPublish(exchange="ok")) + _header(2, 2) + _body(2, b"hi")) == [
        Command(2, spec.BasicPublish(exchange="ok"), RawContent(60, 2, PROPS, b"hi"))
    ]
    assert c.send(m(1, spec.ChannelCloseOk())) == [ChannelClosed(1)]


def test_an_accepted_publish_is_assembled_as_before() -> None:
    seen: list[tuple[int, str]] = []
    c = _open(ServerConnection(publish_check=_refuse_exchange("secret", seen)))
    assert c.send(m(1, spec.BasicPublish(exchange="x")) + _header(1, 5)) == []
    assert seen == [(1, "x")]
    assert c.send(_body(1, b"hello")) == [
        Command(1, spec.BasicPublish(exchange="x"), RawContent(60, 5, PROPS, b"hello"))
    ]


def test_content_in_flight_is_the_declared_size_of_partly_received_contents() -> None:
    c = _open(ServerConnection(), channels=3)
    assert c.conn.content_in_flight == 0
    c.send(m(1, spec.BasicPublish()) + _header(1, 3 * MiB) + _body(1, b"a" * 1000))
    c.send(m(2, spec.BasicPublish()) + _header(2, 5 * MiB))
    c.send(m(3, spec.BasicPublish()))  # no header yet: nothing declared
    assert c.conn.content_in_flight == 8 * MiB
    rest = 3 * MiB - 1000
    while rest:  # completes channel 1, in frames within frame_max
        n = min(rest, 65536)
        c.send(_body(1, b"a" * n))
        rest -= n
    assert c.conn.content_in_flight == 5 * MiB
    c.conn.close_channel(2, 406, "test")  # a server-side close discards the partial content
    assert c.conn.content_in_flight == 0


def test_the_default_size_cap_is_16_mib_and_refused_at_the_header() -> None:
    assert 16 * MiB == DEFAULT_MAX_MESSAGE_SIZE
    c = _open(ServerConnection())
    events = c.send(m(1, spec.BasicPublish()) + _header(1, 16 * MiB + 1))
    [error] = events
    assert isinstance(error, ProtocolError)
    assert (error.channel, error.reply_code) == (1, 406)
    assert error.reply_text == (
        f"PRECONDITION_FAILED - message size {16 * MiB + 1} is larger than configured max "
        f"size {16 * MiB}"
    )
    assert c.conn.content_in_flight == 0
    # exactly the cap is accepted (declared; the body would follow)
    c2 = _open(ServerConnection())
    assert c2.send(m(1, spec.BasicPublish()) + _header(1, 16 * MiB)) == []
    assert c2.conn.content_in_flight == 16 * MiB
