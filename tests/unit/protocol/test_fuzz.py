"""Fuzz: random and mutated byte streams into ServerConnection yield only events, never an
exception and never a hang (every loop here is bounded)."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from ringmq.amqp import spec
from ringmq.amqp.frames import HEARTBEAT_FRAME, PROTOCOL_HEADER
from ringmq.protocol import ConnectionState, ServerConnection
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
from tests.unit.amqp.strategies import methods
from tests.unit.protocol.client import CLIENT_PROPERTIES, m, plain, publish

EVENT_TYPES = (
    LoginRequested,
    OpenRequested,
    ChannelOpened,
    ChannelClosed,
    Command,
    SecretUpdated,
    ProtocolError,
    ConnectionClosed,
)
AMQP_CODES = {320, 402, 403, 404, 405, 406, 501, 502, 503, 504, 505, 506, 530, 540}

HANDSHAKE = (
    PROTOCOL_HEADER
    + m(0, spec.ConnectionStartOk(CLIENT_PROPERTIES, "PLAIN", plain(), "en_US"))
    + m(0, spec.ConnectionTuneOk(2047, 4096, 60))
    + m(0, spec.ConnectionOpen("/"))
)

SESSION = (
    m(1, spec.ChannelOpen())
    + m(1, spec.QueueDeclare(queue="q", arguments={"x-max-length": 5}))
    + publish(1, b"hello world" * 50)
    + m(1, spec.BasicAck(1, True))
    + HEARTBEAT_FRAME
    + m(2, spec.ChannelOpen())
    + publish(2, b"")
    + m(1, spec.ChannelClose(200, "", 0, 0))
    + m(0, spec.ConnectionClose(200, "", 0, 0))
)
VALID = HANDSHAKE + SESSION


def _drive(chunks: list[bytes]) -> list[Event]:
    """Feed chunks, accepting logins and opens as a server would; check every event."""
    conn = ServerConnection()
    events: list[Event] = []
    for chunk in chunks:
        pending = conn.receive_data(chunk)
        for _ in range(10):  # bounded: each accept moves the state forward
            if not pending:
                break
            events += pending
            last = pending[-1]
            if isinstance(last, LoginRequested) and conn.state is ConnectionState.AUTHENTICATING:
                pending = conn.accept_login()
            elif isinstance(last, OpenRequested) and conn.state is ConnectionState.OPENING:
                pending = conn.accept_open()
            else:
                pending = []
        conn.data_to_send()
    for event in events:
        assert isinstance(event, EVENT_TYPES)
        if isinstance(event, ProtocolError):
            assert event.reply_code in AMQP_CODES
            assert len(event.reply_text.encode()) <= 255
    closes = [e for e in events if isinstance(e, ConnectionClosed)]
    assert len(closes) <= 1
    if closes:
        assert conn.closed
        assert events[-1] is closes[0]
    return events


def _chunked(data: bytes, cuts: list[int]) -> list[bytes]:
    points = sorted({c % (len(data) + 1) for c in cuts})
    out, prev = [], 0
    for p in [*points, len(data)]:
        out.append(data[prev:p])
        prev = p
    return out


def test_valid_session_end_to_end() -> None:
    events = _drive([VALID])
    assert [type(e).__name__ for e in events] == [
        "LoginRequested",
        "OpenRequested",
        "ChannelOpened",
        "Command",
        "Command",
        "Command",
        "ChannelOpened",
        "Command",
        "ChannelClosed",
        "ConnectionClosed",
    ]


@given(st.lists(st.integers(0, len(VALID)), max_size=12))
def test_any_chunking_gives_the_same_events(cuts: list[int]) -> None:
    assert _drive(_chunked(VALID, cuts)) == _drive([VALID])


@settings(max_examples=200)
@given(
    st.lists(
        st.tuples(st.integers(0, len(VALID) - 1), st.integers(0, 255)), min_size=1, max_size=6
    ),
    st.lists(st.integers(0, len(VALID)), max_size=4),
)
def test_mutated_streams(mutations: list[tuple[int, int]], cuts: list[int]) -> None:
    data = bytearray(VALID)
    for pos, value in mutations:
        data[pos] = value
    _drive(_chunked(bytes(data), cuts))


@given(st.binary(max_size=300), st.integers(0, len(VALID)))
def test_truncated_and_spliced_streams(junk: bytes, cut: int) -> None:
    _drive([VALID[:cut] + junk])


@given(st.binary(max_size=300))
def test_random_bytes_after_the_handshake(junk: bytes) -> None:
    _drive([HANDSHAKE, m(1, spec.ChannelOpen()), junk])


@given(st.lists(methods(), max_size=6), st.integers(0, 3))
def test_random_valid_methods_on_a_channel(ms: list[spec.Method], channel: int) -> None:
    _drive([HANDSHAKE, m(1, spec.ChannelOpen()), *(m(channel, x) for x in ms)])


@given(st.binary(max_size=64))
def test_random_bytes_from_the_start(junk: bytes) -> None:
    _drive([junk])
    _drive([PROTOCOL_HEADER + junk])
