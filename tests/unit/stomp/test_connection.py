"""The STOMP connection machine: negotiation, phase rules, required headers, heart-beats."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ringmq.stomp import MIN_HEARTBEAT_MS, Phase, StompConnection, encode, negotiate
from tests.unit.stomp.server_frames import parse_server


def connected(version: str = "1.2", heart_beat: str = "0,0") -> StompConnection:
    c = StompConnection()
    c.receive_data(
        encode("CONNECT", {"accept-version": version, "heart-beat": heart_beat}, b"", "1.0")
    )
    f = c.next_frame()
    assert f is not None
    assert f.command == "CONNECT"
    c.accept({})
    c.data_to_send()
    return c


@pytest.mark.parametrize(
    ("offered", "version"),
    [(None, "1.0"), ("1.0", "1.0"), ("1.1,1.0", "1.1"), ("1.0,1.1,1.2", "1.2"), ("2.0", None)],
)
def test_negotiate(offered: str | None, version: str | None) -> None:
    assert negotiate(offered) == version


def test_connected_carries_version_and_heartbeat() -> None:
    c = StompConnection()
    c.receive_data(b"STOMP\naccept-version:1.1,1.2\nheart-beat:1000,0\n\n\x00")
    assert c.next_frame() is not None
    c.accept({"server": "x"})
    (f,) = parse_server(c.data_to_send())
    assert f.command == "CONNECTED"
    assert f.headers["version"] == "1.2"
    assert f.headers["heart-beat"] == f"0,{MIN_HEARTBEAT_MS}"


def test_no_common_version_is_an_error() -> None:
    c = StompConnection()
    c.receive_data(b"CONNECT\naccept-version:9.9\n\n\x00")
    assert c.next_frame() is None
    (f,) = parse_server(c.data_to_send())
    assert f.command == "ERROR"
    assert "1.0,1.1,1.2" in f.body.decode()
    assert c.closed


def test_frame_before_connect_is_an_error_and_closes() -> None:
    c = StompConnection()
    c.receive_data(b"SEND\ndestination:q\nreceipt:r\n\n\x00")
    assert c.next_frame() is None
    (f,) = parse_server(c.data_to_send())
    assert f.command == "ERROR"
    assert c.phase is Phase.CLOSED
    c.receive_data(b"SEND\ndestination:q\n\n\x00")  # dropped once closed
    assert c.next_frame() is None
    assert c.data_to_send() == b""


@pytest.mark.parametrize(
    ("version", "frame", "missing"),
    [
        ("1.2", b"SEND\n\n\x00", "destination"),
        ("1.1", b"SUBSCRIBE\ndestination:q\n\n\x00", "id"),
        ("1.2", b"ACK\nmessage-id:1\n\n\x00", "id"),
        ("1.1", b"ACK\nmessage-id:1\n\n\x00", "subscription"),
        ("1.0", b"BEGIN\n\n\x00", "transaction"),
        ("1.0", b"UNSUBSCRIBE\n\n\x00", "id"),
    ],
)
def test_required_headers(version: str, frame: bytes, missing: str) -> None:
    c = connected(version)
    c.receive_data(frame)
    assert c.next_frame() is None
    (f,) = parse_server(c.data_to_send(), version)
    assert f.command == "ERROR"
    assert missing in f.headers["message"]


def test_subscribe_without_id_is_fine_in_1_0() -> None:
    c = connected("1.0")
    c.receive_data(b"SUBSCRIBE\ndestination:/queue/a\n\n\x00")
    f = c.next_frame()
    assert f is not None
    assert f.command == "SUBSCRIBE"


def test_second_connect_is_an_error() -> None:
    c = connected()
    c.receive_data(b"CONNECT\n\n\x00")
    assert c.next_frame() is None
    assert c.closed


def test_error_carries_the_receipt_id() -> None:
    c = connected()
    c.receive_data(b"FOO\nreceipt:77\n\n\x00")
    assert c.next_frame() is None
    (f,) = parse_server(c.data_to_send())
    assert f.command == "ERROR"  # the codec refused it before any header was read
    c2 = connected()
    c2.receive_data(b"SEND\ndestination:q\nreceipt:77\n\n\x00")
    frame = c2.next_frame()
    assert frame is not None
    c2.fail("refused", "because", frame=frame)
    (f,) = parse_server(c2.data_to_send())
    assert f.headers["receipt-id"] == "77"
    assert f.body == b"because"


def test_disconnect_sends_its_receipt_then_closes() -> None:
    c = connected()
    c.receive_data(b"DISCONNECT\nreceipt:bye\n\n\x00")
    f = c.next_frame()
    assert f is not None
    c.disconnect(f)
    (r,) = parse_server(c.data_to_send())
    assert (r.command, r.headers["receipt-id"]) == ("RECEIPT", "bye")
    assert c.closed


def test_heartbeats_out_and_peer_timeout() -> None:
    c = connected(heart_beat=f"{MIN_HEARTBEAT_MS},{MIN_HEARTBEAT_MS}")
    assert (c.send_every_ms, c.expect_every_ms) == (MIN_HEARTBEAT_MS, MIN_HEARTBEAT_MS)
    c.tick(0)
    assert c.data_to_send() == b""
    c.tick(MIN_HEARTBEAT_MS)
    assert c.data_to_send() == b"\n"
    c.receive_data(b"\n")
    c.tick(MIN_HEARTBEAT_MS + 500)
    assert not c.closed
    c.tick(MIN_HEARTBEAT_MS + 500 + 2 * MIN_HEARTBEAT_MS + 1)
    assert c.closed


def test_no_heartbeats_when_client_asks_none() -> None:
    c = connected(heart_beat="0,0")
    for t in range(0, 100_000, 500):
        c.tick(t)
    assert c.data_to_send() == b""
    assert not c.closed


def test_bad_heartbeat_header() -> None:
    c = StompConnection()
    c.receive_data(b"CONNECT\nheart-beat:x\n\n\x00")
    assert c.next_frame() is None
    assert c.closed


@given(st.binary(max_size=120))
def test_random_bytes_after_connect_never_raise(data: bytes) -> None:
    c = connected()
    c.receive_data(data)
    while c.next_frame() is not None:
        pass
    c.data_to_send()


def test_no_connect_in_time_is_refused() -> None:
    from ringmq.stomp.connection import CONNECT_TIMEOUT_MS

    c = StompConnection()
    c.tick(1000)
    c.receive_data(b"CONN")  # a partial frame does not count
    c.tick(1000 + CONNECT_TIMEOUT_MS)
    assert c.phase is Phase.AWAIT_CONNECT
    c.tick(1001 + CONNECT_TIMEOUT_MS)
    assert c.data_to_send().startswith(b"ERROR\n")
    assert c.closed


@pytest.mark.parametrize(
    ("frames", "message"),
    [
        (
            [b"SUBSCRIBE\ndestination:q\nid:1\n\n", b"SUBSCRIBE\ndestination:r\nid:1\n\n"],
            "duplicate subscription",
        ),
        ([b"SUBSCRIBE\ndestination:q\nid:1\nack:sometimes\n\n"], "invalid ack mode"),
        ([b"UNSUBSCRIBE\nid:9\n\n"], "unknown subscription"),
        ([b"BEGIN\ntransaction:t\n\n", b"BEGIN\ntransaction:t\n\n"], "transaction already open"),
        ([b"COMMIT\ntransaction:t\n\n"], "unknown transaction"),
        ([b"SEND\ndestination:q\ntransaction:t\n\n"], "unknown transaction"),
        (
            [b"BEGIN\ntransaction:t\n\n", b"ABORT\ntransaction:t\n\n", b"ABORT\ntransaction:t\n\n"],
            "unknown transaction",
        ),
    ],
)
def test_subscription_and_transaction_names(frames: list[bytes], message: str) -> None:
    c = connected()
    for f in frames:
        c.receive_data(f + b"\x00")
        while c.next_frame() is not None:
            pass
    (err,) = parse_server(c.data_to_send())
    assert err.command == "ERROR"
    assert err.headers["message"] == message
    assert c.closed


def test_names_are_reusable_once_closed() -> None:
    c = connected()
    for f in (
        b"SUBSCRIBE\ndestination:q\nid:1\n\n",
        b"UNSUBSCRIBE\nid:1\n\n",
        b"SUBSCRIBE\ndestination:q\nid:1\n\n",
        b"BEGIN\ntransaction:t\n\n",
        b"COMMIT\ntransaction:t\n\n",
        b"BEGIN\ntransaction:t\n\n",
    ):
        c.receive_data(f + b"\x00")
        assert c.next_frame() is not None
    assert c.subscriptions == {"1": "auto"}
    assert c.transactions == {"t"}
