"""AMQP 1.0 errors as clients see them: a malformed frame over a raw socket closes only its
connection with the right condition; refused logins and attaches carry their conditions."""

from __future__ import annotations

import socket
from typing import Any

import pytest
from proton import ConnectionException, Message
from proton.utils import BlockingConnection, LinkDetached

from ringmq.amqp10 import performatives as p
from ringmq.amqp10.frames import AMQP_HEADER, SASL_HEADER, Frame, FrameReader, encode_frame
from ringmq.node import BrokerThread

pytestmark = pytest.mark.integration


def read_until_closed(s: socket.socket) -> list[Any]:
    """Everything the broker sends until it closes the socket, decoded."""
    reader = FrameReader(1 << 20)
    out: list[Any] = []
    while True:
        data = s.recv(65536)
        if not data:
            return out
        reader.feed(data)
        while (frame := reader.next_frame()) is not None:
            if isinstance(frame, Frame):
                out.append(p.decode_performative(frame.body)[0] if frame.body else None)
            else:
                out.append(frame.raw)


def open_raw(b: BrokerThread) -> socket.socket:
    s = socket.create_connection((b.host, b.port), timeout=5)
    # no SASL: an anonymous login (guest, from loopback)
    s.sendall(AMQP_HEADER + encode_frame(0, p.Open(container_id="raw")))
    return s


def hello(b: BrokerThread) -> None:
    c = BlockingConnection(f"amqp://guest:guest@127.0.0.1:{b.port}", timeout=5)
    c.create_sender("still-serving").send(Message(body="ok"))
    c.close()


@pytest.mark.parametrize(
    ("garbage", "condition"),
    [
        # a frame whose body is no performative
        (b"\x00\x00\x00\x0c\x02\x00\x00\x00\xff\xff\xff\xff", "amqp:decode-error"),
        # a data offset below 2
        (b"\x00\x00\x00\x0c\x01\x00\x00\x00\x00\x00\x00\x00", "amqp:connection:framing-error"),
        # a frame above the max-frame-size the broker announced
        (b"\x7f\x00\x00\x00\x02\x00\x00\x00", "amqp:connection:framing-error"),
    ],
)
def test_malformed_frame_closes_only_that_connection(
    broker: BrokerThread, garbage: bytes, condition: str
) -> None:
    with open_raw(broker) as s:
        s.sendall(garbage)
        got = read_until_closed(s)
    assert got[0] == AMQP_HEADER
    assert isinstance(got[1], p.Open)
    close = got[-1]
    assert isinstance(close, p.Close)
    assert close.error is not None
    assert close.error.condition == condition
    assert close.error.description
    hello(broker)


def test_begin_before_open_is_illegal(broker: BrokerThread) -> None:
    with socket.create_connection((broker.host, broker.port), timeout=5) as s:
        s.sendall(AMQP_HEADER + encode_frame(0, p.Begin(next_outgoing_id=0)))
        got = read_until_closed(s)
    close = got[-1]
    assert isinstance(close, p.Close)
    assert close.error is not None
    assert close.error.condition == "amqp:illegal-state"


def test_bad_password_is_refused_by_sasl(broker: BrokerThread) -> None:
    with socket.create_connection((broker.host, broker.port), timeout=5) as s:
        init = p.SaslInit(mechanism="PLAIN", initial_response=b"\x00guest\x00wrong")
        s.sendall(SASL_HEADER + encode_frame(0, init))
        got = read_until_closed(s)
    assert got[0] == SASL_HEADER
    assert isinstance(got[-1], p.SaslOutcome)
    assert got[-1].code == p.SASL_AUTH
    with pytest.raises(ConnectionException):
        BlockingConnection(f"amqp://guest:nope@127.0.0.1:{broker.port}", timeout=5)


def test_refused_attach_carries_the_condition(broker: BrokerThread) -> None:
    c = BlockingConnection(f"amqp://guest:guest@127.0.0.1:{broker.port}", timeout=5)
    try:
        with pytest.raises(LinkDetached) as exc:
            c.create_receiver("/queues/nope")
        assert "amqp:not-found" in str(exc.value)
    finally:
        c.close()


def test_permissions_are_checked_on_attach(broker: BrokerThread) -> None:
    def add_user() -> None:
        auth = broker.broker.auth
        auth.add_user("reader", password="pw")
        # may read 'open.*' queues, write nothing, create nothing
        auth.set_permissions("reader", "/", configure="^$", write="^$", read="^open")

    broker.call(add_user)
    admin = BlockingConnection(f"amqp://guest:guest@127.0.0.1:{broker.port}", timeout=5)
    admin.create_sender("open-q").send(Message(body="x"))
    admin.create_sender("closed-q").send(Message(body="y"))
    admin.close()
    c = BlockingConnection(f"amqp://reader:pw@127.0.0.1:{broker.port}", timeout=5)
    try:
        rcv = c.create_receiver("open-q")
        assert rcv.receive(timeout=5).body == "x"
        rcv.accept()
        for attach in (
            lambda: c.create_receiver("closed-q"),  # read
            lambda: c.create_sender("open-q"),  # write on the default exchange
            lambda: c.create_receiver("new-q"),  # configure: the queue would be created
        ):
            with pytest.raises(LinkDetached) as exc:
                attach()
            assert "amqp:unauthorized-access" in str(exc.value)
    finally:
        c.close()
