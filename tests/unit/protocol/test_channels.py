"""Channel bookkeeping, the command assembler and the error-mapping rule."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ringmq.amqp import spec
from ringmq.amqp.frames import RawContent, encode_frame
from ringmq.amqp.properties import BasicProperties, encode_properties
from ringmq.amqp.reply_codes import AMQPError, ReplyCode
from ringmq.protocol import ChannelState, ConnectionState, ServerConnection
from ringmq.protocol.connection import CLIENT_METHODS
from ringmq.protocol.events import (
    ChannelClosed,
    ChannelOpened,
    Command,
    ConnectionClosed,
    Event,
    ProtocolError,
)
from tests.unit.protocol.client import Client, m, publish

PROPS = encode_properties(BasicProperties(delivery_mode=2))


def _open(channels: int = 1, **kwargs: int) -> Client:
    c = Client(ServerConnection(**kwargs))  # type: ignore[arg-type]
    c.handshake()
    for n in range(1, channels + 1):
        c.open_channel(n)
    return c


def _header(channel: int, size: int, class_id: int = 60) -> bytes:
    return encode_frame(2, channel, spec_header(class_id, size))


def spec_header(class_id: int, size: int) -> bytes:
    return class_id.to_bytes(2, "big") + b"\x00\x00" + size.to_bytes(8, "big") + PROPS


def _body(channel: int, data: bytes) -> bytes:
    return encode_frame(3, channel, data)


def _error(events: list[Event]) -> ProtocolError:
    errors = [e for e in events if isinstance(e, ProtocolError)]
    assert len(errors) == 1, events
    return errors[0]


def test_open_and_client_close() -> None:
    c = Client()
    c.handshake()
    assert c.send(m(1, spec.ChannelOpen())) == [ChannelOpened(1)]
    assert c.methods() == [(1, spec.ChannelOpenOk())]
    assert c.conn.channel_state(1) is ChannelState.OPEN
    assert c.send(m(1, spec.ChannelClose(200, "bye", 0, 0))) == [ChannelClosed(1)]
    assert c.methods() == [(1, spec.ChannelCloseOk())]
    assert c.conn.channel_state(1) is None
    assert c.send(m(1, spec.ChannelOpen())) == [ChannelOpened(1)]  # numbers are reusable


def test_publish_is_assembled() -> None:
    c = _open()
    body = bytes(range(256)) * 40
    events = c.send(publish(1, body, frame_max=4096))
    assert events == [
        Command(1, spec.BasicPublish(routing_key="q"), RawContent(60, len(body), PROPS, body))
    ]


def test_publish_three_ways() -> None:
    data = publish(1, b"a" * 5000, frame_max=4096) + m(1, spec.BasicAck(3, True))
    whole = _open()
    expected = whole.send(data)
    assert len(expected) == 2
    bytewise = _open()
    got: list[Event] = []
    for i in range(len(data)):
        got += bytewise.send(data[i : i + 1])
    assert got == expected
    trailing = _open()
    assert trailing.send(data + b"\x01\x00\x01") == expected


def test_empty_body_completes_at_the_header() -> None:
    c = _open()
    events = c.send(m(1, spec.BasicPublish()) + _header(1, 0))
    assert events == [Command(1, spec.BasicPublish(), RawContent(60, 0, PROPS, b""))]


def test_content_less_methods_are_commands() -> None:
    c = _open()
    assert c.send(m(1, spec.BasicAck(5, True))) == [Command(1, spec.BasicAck(5, True))]
    decl = spec.QueueDeclare(queue="q", durable=True, arguments={"x-max-length": 3})
    assert c.send(m(1, decl)) == [Command(1, decl)]


@pytest.mark.parametrize(
    ("data", "code"),
    [
        (m(1, spec.BasicPublish()) + m(1, spec.BasicAck()), 505),  # method instead of header
        (_header(1, 3), 505),  # header without a method
        (_body(1, b"abc"), 505),  # body without a header
        (m(1, spec.BasicPublish()) + _header(1, 3) + _body(1, b"abcd"), 505),  # too much body
        (m(1, spec.BasicPublish()) + _header(1, 3, class_id=50), 505),  # wrong class
        (m(1, spec.BasicPublish()) + _header(1, 3) + m(1, spec.BasicAck()), 505),
        (m(1, spec.BasicPublish()) + _header(1, 3) + m(1, spec.ChannelClose()), 505),
        (m(1, spec.ChannelOpen()), 504),  # reopen of an open channel
        (m(2, spec.BasicAck()), 504),  # channel never opened
        (_body(2, b"x"), 504),
        (_header(0, 1), 505),  # content on channel 0
        (m(1, spec.BasicDeliver()), 503),  # a server-only method
        (m(1, spec.QueueDeclareOk()), 503),
        (m(1, spec.ChannelOpenOk()), 503),
        (m(1, spec.ConnectionClose()), 503),  # connection class on a channel
        (m(0, spec.BasicAck()), 504),  # a channel method on channel 0
        (m(1, spec.ChannelFlow(active=False)), 540),  # RabbitMQ: not implemented
    ],
)
def test_hard_errors_close_the_connection(data: bytes, code: int) -> None:
    c = _open()
    events = c.send(data)
    error = _error(events)
    assert (error.channel, error.reply_code) == (0, code)
    closes = [meth for ch, meth in c.methods() if isinstance(meth, spec.ConnectionClose)]
    assert [cl.reply_code for cl in closes] == [code]
    assert c.state() is ConnectionState.CLOSING
    # after the close only Close-Ok matters
    assert c.send(m(1, spec.BasicAck()) + publish(1, b"zz")) == []
    assert c.send(m(0, spec.ConnectionCloseOk()))[-1] == ConnectionClosed(
        code, closes[0].reply_text, by_peer=False
    )


def test_reply_text_and_ids() -> None:
    c = _open()
    c.send(m(1, spec.ChannelOpen()))
    [(_, close)] = c.methods()
    assert isinstance(close, spec.ConnectionClose)
    assert close.reply_text == "CHANNEL_ERROR - second 'channel.open' seen on channel 1"
    assert (close.class_id, close.method_id) == (20, 10)


def test_message_larger_than_max_message_size_closes_the_channel() -> None:
    c = _open(max_message_size=100)
    events = c.send(m(1, spec.BasicPublish()) + _header(1, 101) + _body(1, b"x" * 101))
    error = _error(events)
    assert (error.channel, error.reply_code) == (1, 406)
    assert error.reply_text == (
        "PRECONDITION_FAILED - message size 101 is larger than configured max size 100"
    )
    [(channel, close)] = c.methods()
    assert channel == 1
    assert close == spec.ChannelClose(406, error.reply_text, 60, 40)
    assert c.conn.channel_state(1) is ChannelState.CLOSING
    assert c.state() is ConnectionState.OPEN
    # the channel's frames are dropped until Close-Ok; then it can be reopened
    assert c.send(publish(1, b"ok")) == []
    assert c.send(m(1, spec.ChannelCloseOk())) == [ChannelClosed(1)]
    assert c.send(m(1, spec.ChannelOpen())) == [ChannelOpened(1)]
    assert c.send(publish(1, b"x" * 100))[0] == Command(
        1, spec.BasicPublish(routing_key="q"), RawContent(60, 100, PROPS, b"x" * 100)
    )


def test_other_channels_keep_working_while_one_closes() -> None:
    c = _open(channels=2)
    c.conn.close_channel(1, 404, "no queue 'q' in vhost '/'", 50, 10)
    [(channel, close)] = c.methods()
    assert channel == 1
    assert close == spec.ChannelClose(404, "NOT_FOUND - no queue 'q' in vhost '/'", 50, 10)
    assert c.conn.send_method(1, spec.BasicQosOk()) is False
    assert c.conn.send_method(2, spec.BasicQosOk()) is True
    assert c.send(m(1, spec.BasicAck(1))) == []
    assert c.send(m(2, spec.BasicAck(1))) == [Command(2, spec.BasicAck(1))]
    assert c.send(m(1, spec.ChannelCloseOk())) == [ChannelClosed(1)]


def test_simultaneous_channel_close() -> None:
    c = _open()
    c.conn.close_channel(1, 406, "bad")
    c.received()
    assert c.send(m(1, spec.ChannelClose(200, "", 0, 0))) == [ChannelClosed(1)]
    assert c.methods() == [(1, spec.ChannelCloseOk())]
    assert c.send(m(1, spec.ChannelCloseOk())) == []  # the stray answer to ours is ignored
    assert c.state() is ConnectionState.OPEN


def test_flow() -> None:
    c = _open()
    assert c.send(m(1, spec.ChannelFlow(active=True))) == []
    assert c.methods() == [(1, spec.ChannelFlowOk(active=True))]


def test_send_error_applies_the_mapping_rule() -> None:
    c = _open(channels=2)
    c.conn.send_error(1, AMQPError(ReplyCode.NOT_FOUND, "no queue 'q'", class_id=50, method_id=10))
    assert c.conn.channel_state(1) is ChannelState.CLOSING
    assert c.state() is ConnectionState.OPEN
    c.conn.send_error(2, AMQPError(ReplyCode.NOT_ALLOWED, "vhost gone"))
    assert c.state() is ConnectionState.CLOSING
    codes = [meth.reply_code for _, meth in c.methods() if hasattr(meth, "reply_code")]
    assert codes == [404, 530]


def test_send_deliver_equals_send_content() -> None:
    a, b = _open(), _open()
    assert a.conn.send_deliver(1, "ctag", 9, True, "ex", "rk", PROPS, b"body")
    deliver = spec.BasicDeliver("ctag", 9, True, "ex", "rk")
    assert b.conn.send_content(1, deliver, PROPS, b"body")
    assert a.conn.data_to_send() == b.conn.data_to_send()
    assert not a.conn.send_deliver(7, "ctag", 9, True, "ex", "rk", PROPS, b"body")


# --------------------------------------------------------------------------------------
# h2-style state machine test: every (channel situation, method) either does what the rule
# says or fails with the right code and closes the right thing.

SITUATIONS = ["absent", "open", "closing", "expect_header", "expect_body"]


def _situation(name: str) -> Client:
    c = _open()
    if name == "absent":
        c.send(m(1, spec.ChannelClose()))
    elif name == "closing":
        c.conn.close_channel(1, 406, "x")
    elif name == "expect_header":
        c.send(m(1, spec.BasicPublish()))
    elif name == "expect_body":
        c.send(m(1, spec.BasicPublish()) + _header(1, 10))
    c.received()
    return c


@given(
    situation=st.sampled_from(SITUATIONS),
    method=st.sampled_from([cls() for cls in spec.METHODS.values()]),
)
def test_channel_state_machine(situation: str, method: spec.Method) -> None:
    c = _situation(situation)
    events = c.send(m(1, method))
    cls = type(method)
    errors = [e for e in events if isinstance(e, ProtocolError)]
    if situation == "closing":
        expected_closed = cls in (spec.ChannelClose, spec.ChannelCloseOk)
        assert events == ([ChannelClosed(1)] if expected_closed else [])
        return
    if situation == "absent":
        if cls is spec.ChannelOpen:
            assert events == [ChannelOpened(1)]
        elif cls is spec.ChannelCloseOk:
            assert events == []
        else:
            assert [e.reply_code for e in errors] == [504]
        return
    if situation in ("expect_header", "expect_body"):
        assert [(e.channel, e.reply_code) for e in errors] == [(0, 505)]
        assert c.state() is ConnectionState.CLOSING
        return
    # open
    if method.CLASS_ID == 10 or cls not in CLIENT_METHODS:
        assert [(e.channel, e.reply_code) for e in errors] == [(0, 503)]
    elif cls is spec.ChannelOpen:
        assert [(e.channel, e.reply_code) for e in errors] == [(0, 504)]
    elif cls is spec.ChannelFlow:
        assert [(e.channel, e.reply_code) for e in errors] == [(0, 540)]  # active=False
    elif cls is spec.ChannelClose:
        assert events == [ChannelClosed(1)]
    elif cls in (spec.ChannelFlowOk, spec.ChannelCloseOk):
        assert events == []
    elif method.CONTENT:
        assert events == []
        assert c.conn.channel_state(1) is ChannelState.OPEN
    else:
        assert events == [Command(1, method)]
    if errors:
        assert c.state() is ConnectionState.CLOSING
