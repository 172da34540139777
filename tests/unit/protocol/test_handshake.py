"""Connection handshake: header, SASL PLAIN/AMQPLAIN, tune negotiation, open, close, heartbeats."""

from __future__ import annotations

import pytest

from ringmq.amqp import spec
from ringmq.amqp.frames import HEARTBEAT_FRAME, PROTOCOL_HEADER, HeartbeatFrame, encode_frame
from ringmq.protocol import ConnectionState, ServerConnection, TuneParams
from ringmq.protocol.events import (
    ChannelOpened,
    Command,
    ConnectionClosed,
    LoginRequested,
    OpenRequested,
    ProtocolError,
    SecretUpdated,
)
from tests.unit.protocol.client import CLIENT_PROPERTIES, Client, amqplain, m, plain, publish


def _start_ok(mechanism: str = "PLAIN", response: bytes | None = None) -> bytes:
    return m(
        0,
        spec.ConnectionStartOk(
            CLIENT_PROPERTIES, mechanism, plain() if response is None else response, "en_US"
        ),
    )


def test_plain_handshake_step_by_step() -> None:
    c = Client()
    assert c.state() is ConnectionState.AWAIT_HEADER
    assert c.send(PROTOCOL_HEADER) == []
    [(channel, start)] = c.methods()
    assert channel == 0
    assert isinstance(start, spec.ConnectionStart)
    assert (start.version_major, start.version_minor) == (0, 9)
    assert start.mechanisms == b"PLAIN AMQPLAIN"
    props = start.server_properties
    assert props["product"] == "ringmq"
    assert "version" in props
    caps = props["capabilities"]
    for cap in (
        "publisher_confirms",
        "exchange_exchange_bindings",
        "basic.nack",
        "consumer_cancel_notify",
        "connection.blocked",
        "authentication_failure_close",
        "per_consumer_qos",
        "direct_reply_to",
    ):
        assert caps[cap] is True, cap

    events = c.send(_start_ok(response=plain("alice", "s3cret")))
    assert events == [
        LoginRequested("PLAIN", plain("alice", "s3cret"), "alice", "s3cret", CLIENT_PROPERTIES)
    ]
    assert c.state() is ConnectionState.AUTHENTICATING
    assert c.conn.accept_login() == []
    assert c.methods() == [(0, spec.ConnectionTune(2047, 131072, 60))]

    assert c.send(m(0, spec.ConnectionTuneOk(2047, 65536, 30))) == []
    assert c.state() is ConnectionState.AWAIT_OPEN
    assert (c.conn.channel_max, c.conn.frame_max, c.conn.heartbeat_s) == (2047, 65536, 30)
    assert c.send(m(0, spec.ConnectionOpen("vh"))) == [OpenRequested("vh")]
    assert c.conn.accept_open() == []
    assert c.methods() == [(0, spec.ConnectionOpenOk())]
    assert c.state() is ConnectionState.OPEN
    assert (c.conn.username, c.conn.vhost) == ("alice", "vh")


def test_amqplain() -> None:
    c = Client()
    c.send(PROTOCOL_HEADER)
    [event] = c.send(_start_ok("AMQPLAIN", amqplain("bob", "pw")))
    assert isinstance(event, LoginRequested)
    assert (event.mechanism, event.username, event.password) == ("AMQPLAIN", "bob", "pw")


@pytest.mark.parametrize(
    ("mechanism", "response", "code"),
    [
        ("EXTERNAL", b"", 503),
        ("PLAIN", b"no-nuls", 403),
        ("AMQPLAIN", b"\xff\xff", 403),
        ("AMQPLAIN", amqplain()[:-3], 403),
    ],
)
def test_bad_sasl(mechanism: str, response: bytes, code: int) -> None:
    c = Client()
    c.send(PROTOCOL_HEADER)
    c.received()
    [event] = c.send(_start_ok(mechanism, response))
    assert isinstance(event, ProtocolError)
    assert (event.channel, event.reply_code) == (0, code)
    [(_, close)] = c.methods()
    assert isinstance(close, spec.ConnectionClose)
    assert close.reply_code == code
    assert c.state() is ConnectionState.CLOSING
    assert c.send(m(0, spec.ConnectionCloseOk())) == [
        ConnectionClosed(code, close.reply_text, by_peer=False)
    ]
    assert c.conn.closed


def test_reject_login_closes_with_access_refused() -> None:
    c = Client()
    c.send(PROTOCOL_HEADER)
    c.send(_start_ok())
    c.received()
    c.conn.reject_login()
    [(_, close)] = c.methods()
    assert isinstance(close, spec.ConnectionClose)
    assert close.reply_code == 403
    assert close.reply_text.startswith("ACCESS_REFUSED - Login was refused using authentication")
    assert (close.class_id, close.method_id) == (10, 11)
    with pytest.raises(RuntimeError):
        c.conn.accept_login()


def test_bad_protocol_header_gets_ours_and_closes() -> None:
    c = Client()
    events = c.send(b"GET / HTTP/1.1\r\n\r\n")
    assert events == [ConnectionClosed(0, "bad protocol header", by_peer=True)]
    assert c.conn.data_to_send() == PROTOCOL_HEADER
    assert c.conn.closed
    assert c.send(b"more") == []


def test_header_split_across_reads() -> None:
    c = Client()
    for byte in PROTOCOL_HEADER[:-1]:
        assert c.send(bytes([byte])) == []
        assert c.received() == []
    c.send(PROTOCOL_HEADER[-1:])
    assert isinstance(c.methods()[0][1], spec.ConnectionStart)


def _tuned(channel_max: int, frame_max: int, heartbeat: int) -> Client:
    c = Client()
    c.send(PROTOCOL_HEADER)
    c.send(_start_ok())
    c.conn.accept_login()
    c.received()
    c.send(m(0, spec.ConnectionTuneOk(channel_max, frame_max, heartbeat)))
    return c


@pytest.mark.parametrize(
    ("sent", "final"),
    [
        ((2047, 131072, 60), (2047, 131072, 60)),
        ((10, 4096, 5), (10, 4096, 5)),  # lower values from the client win
        ((0, 0, 0), (2047, 131072, 0)),  # 0 = no limit of the client's; heartbeat 0 disables
    ],
)
def test_tune_negotiation(sent: tuple[int, int, int], final: tuple[int, int, int]) -> None:
    c = _tuned(*sent)
    assert c.state() is ConnectionState.AWAIT_OPEN
    assert (c.conn.channel_max, c.conn.frame_max, c.conn.heartbeat_s) == final


@pytest.mark.parametrize("sent", [(4000, 131072, 60), (10, 2048, 60), (10, 200000, 60)])
def test_tune_values_out_of_range_are_not_allowed(sent: tuple[int, int, int]) -> None:
    c = _tuned(*sent)
    [(_, close)] = c.methods()
    assert isinstance(close, spec.ConnectionClose)
    assert close.reply_code == 530
    assert c.state() is ConnectionState.CLOSING


def test_custom_tune_offer() -> None:
    c = Client(ServerConnection(TuneParams(channel_max=8, frame_max=8192, heartbeat_s=0)))
    c.send(PROTOCOL_HEADER)
    c.send(_start_ok())
    c.conn.accept_login()
    assert c.methods()[-1] == (0, spec.ConnectionTune(8, 8192, 0))


def test_channel_max_limits_open_channels_not_their_numbers() -> None:
    c = Client()
    c.send(PROTOCOL_HEADER)
    c.send(_start_ok())
    c.conn.accept_login()
    c.send(m(0, spec.ConnectionTuneOk(2, 131072, 0)) + m(0, spec.ConnectionOpen("/")))
    c.conn.accept_open()
    c.received()
    # any number is accepted (RabbitMQ): channel_max 2 still opens channel 65535
    assert c.send(m(65535, spec.ChannelOpen())) == [ChannelOpened(65535)]
    assert c.send(m(7, spec.ChannelOpen())) == [ChannelOpened(7)]
    # a closed channel frees its place
    c.send(m(7, spec.ChannelClose(200, "", 0, 0)))
    assert c.send(m(3, spec.ChannelOpen())) == [ChannelOpened(3)]
    c.received()
    # the third open at once is NOT_ALLOWED, a connection error, as RabbitMQ words it
    [event] = c.send(m(9, spec.ChannelOpen()))
    assert isinstance(event, ProtocolError)
    assert (event.channel, event.reply_code) == (0, 530)
    [(channel, close)] = c.methods()
    assert channel == 0
    assert close == spec.ConnectionClose(
        530,
        "NOT_ALLOWED - number of channels opened (2) has reached the negotiated channel_max (2)",
        0,
        0,
    )


def test_frame_max_is_enforced_after_tune() -> None:
    c = Client()
    c.handshake(frame_max=4096)
    c.open_channel()
    events = c.send(publish(1, b"x" * 5000, frame_max=8192))
    assert isinstance(events[0], ProtocolError)
    assert events[0].reply_code == 501
    assert isinstance(events[-1], ConnectionClosed)
    assert c.conn.closed
    [(_, close)] = c.methods()
    assert isinstance(close, spec.ConnectionClose)
    assert close.reply_code == 501


def test_pipelined_frames_wait_for_the_decisions() -> None:
    c = Client()
    c.send(PROTOCOL_HEADER)
    c.send(_start_ok())
    # Everything below arrives before we accepted the login.
    pipelined = (
        m(0, spec.ConnectionTuneOk(2047, 131072, 60))
        + m(0, spec.ConnectionOpen("/"))
        + m(1, spec.ChannelOpen())
        + publish(1, b"hello")
    )
    assert c.send(pipelined) == []
    assert c.conn.accept_login() == [OpenRequested("/")]
    events = c.conn.accept_open()
    assert events[0] == ChannelOpened(1)
    assert isinstance(events[1], Command)
    assert events[1].content is not None
    assert events[1].content.body == b"hello"


def test_unexpected_methods_during_handshake() -> None:
    c = Client()
    c.send(PROTOCOL_HEADER)
    c.received()
    [event] = c.send(m(0, spec.ConnectionOpen("/")))  # Open before Start-Ok
    assert isinstance(event, ProtocolError)
    assert event.reply_code == 504  # RabbitMQ: unexpected method in connection state
    c2 = Client()
    c2.send(PROTOCOL_HEADER)
    [event] = c2.send(m(0, spec.ConnectionStart()))  # a server-only method
    assert isinstance(event, ProtocolError)
    assert event.reply_code == 503
    c3 = Client()
    c3.send(PROTOCOL_HEADER)
    [event] = c3.send(m(1, spec.ChannelOpen()))  # channel frames before open
    assert isinstance(event, ProtocolError)
    assert event.reply_code == 505


def test_client_close() -> None:
    c = Client()
    c.handshake()
    c.open_channel()
    events = c.send(m(0, spec.ConnectionClose(200, "bye", 0, 0)))
    assert events == [ConnectionClosed(200, "bye", by_peer=True)]
    assert c.methods() == [(0, spec.ConnectionCloseOk())]
    assert c.conn.closed
    assert c.conn.open_channels == []


def test_client_close_during_handshake() -> None:
    c = Client()
    c.send(PROTOCOL_HEADER)
    events = c.send(m(0, spec.ConnectionClose(200, "never mind", 0, 0)))
    assert events == [ConnectionClosed(200, "never mind", by_peer=True)]
    assert c.conn.closed


def test_server_close_drops_everything_but_close_ok() -> None:
    c = Client()
    c.handshake()
    c.open_channel()
    c.conn.close(320, "broker shutting down")
    [(_, close)] = c.methods()
    assert close == spec.ConnectionClose(320, "CONNECTION_FORCED - broker shutting down", 0, 0)
    assert c.conn.send_method(1, spec.BasicQosOk()) is False
    assert c.send(publish(1, b"dropped") + m(2, spec.ChannelOpen())) == []
    assert c.received() == []
    events = c.send(m(0, spec.ConnectionCloseOk()))
    assert events == [ConnectionClosed(320, close.reply_text, by_peer=False)]
    assert c.conn.closed


def test_simultaneous_connection_close() -> None:
    c = Client()
    c.handshake()
    c.conn.close(320, "going")
    c.received()
    events = c.send(m(0, spec.ConnectionClose(200, "me too", 0, 0)))
    assert c.methods() == [(0, spec.ConnectionCloseOk())]
    assert events == [ConnectionClosed(320, "CONNECTION_FORCED - going", by_peer=False)]


def test_update_secret() -> None:
    c = Client()
    c.handshake()
    events = c.send(m(0, spec.ConnectionUpdateSecret(b"token", "refresh")))
    assert events == [SecretUpdated(b"token", "refresh")]
    assert c.methods() == [(0, spec.ConnectionUpdateSecretOk())]


def test_blocked_needs_the_client_capability() -> None:
    c = Client()
    c.handshake()
    assert not c.conn.send_unblocked()  # not blocked: nothing to undo
    assert c.conn.send_blocked("low on memory")
    assert not c.conn.send_blocked("still low")  # once per transition
    assert c.conn.send_unblocked()
    assert not c.conn.send_unblocked()
    assert c.methods() == [
        (0, spec.ConnectionBlocked("low on memory")),
        (0, spec.ConnectionUnblocked()),
    ]
    bare = Client()
    bare.send(PROTOCOL_HEADER)
    bare.send(m(0, spec.ConnectionStartOk({}, "PLAIN", plain(), "en_US")))
    bare.conn.accept_login()
    bare.send(m(0, spec.ConnectionTuneOk(0, 0, 0)) + m(0, spec.ConnectionOpen("/")))
    bare.conn.accept_open()
    bare.received()
    assert not bare.conn.send_blocked("x")
    assert bare.received() == []


def test_heartbeats() -> None:
    c = Client()
    c.handshake(heartbeat=10)
    conn = c.conn
    conn.data_to_send(now_ms=0)
    conn.receive_data(b"", now_ms=0)
    assert not conn.heartbeat_due(0)  # first call only records the time
    assert not conn.peer_timed_out(0)
    assert not conn.heartbeat_due(4999)
    assert conn.heartbeat_due(5000)  # half the interval without sending
    conn.send_heartbeat()
    assert conn.data_to_send(now_ms=5000) == HEARTBEAT_FRAME
    assert not conn.heartbeat_due(9999)
    assert conn.heartbeat_due(10000)
    assert not conn.peer_timed_out(20000)
    assert conn.peer_timed_out(20001)  # two intervals of silence
    # any received bytes count as liveness, including a heartbeat
    assert conn.receive_data(encode_frame(8, 0, b""), now_ms=20500) == []
    assert not conn.peer_timed_out(40500)
    assert conn.peer_timed_out(40501)


def test_heartbeat_liveness_without_explicit_times() -> None:
    c = Client()
    c.handshake(heartbeat=10)
    conn = c.conn
    assert not conn.peer_timed_out(0)
    assert conn.peer_timed_out(30000)
    conn.receive_data(HEARTBEAT_FRAME)  # no now_ms: the next check takes its own time
    assert not conn.peer_timed_out(30001)
    assert not conn.peer_timed_out(50001)
    assert conn.peer_timed_out(50002)
    conn.send_heartbeat()
    assert isinstance(c.received()[0], HeartbeatFrame)


def test_heartbeat_disabled() -> None:
    c = Client()
    c.handshake(heartbeat=0)
    assert not c.conn.heartbeat_due(0)
    assert not c.conn.heartbeat_due(10**9)
    assert not c.conn.peer_timed_out(0)
    assert not c.conn.peer_timed_out(10**9)


def test_close_with_a_code_outside_the_enum_keeps_the_text() -> None:
    c = Client()
    c.handshake()
    c.conn.close(599, "x" * 300)
    [(_, close)] = c.methods()
    assert isinstance(close, spec.ConnectionClose)
    assert close.reply_code == 599
    assert close.reply_text == "x" * 255
