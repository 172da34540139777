"""Refused logins answered on the wire, with python-qpid-proton and a raw socket: a failed SASL
PLAIN gets the SASL outcome `auth`; a client that skips SASL while anonymous logins are off
gets the broker's open and a close with `amqp:unauthorized-access` and a description (as
RabbitMQ 4 and Artemis answer it), never a bare closed socket. (rhea: test_rhea.py.)"""

from __future__ import annotations

import socket
from typing import Any

import pytest
from proton import ConnectionException
from proton.utils import BlockingConnection, ConnectionClosed

from ringmq.amqp10 import performatives as p
from ringmq.amqp10.frames import AMQP_HEADER, SASL_HEADER, Frame, FrameReader, encode_frame
from ringmq.node import BrokerThread
from tests.integration.conftest import BrokerFactory

pytestmark = pytest.mark.integration

OFF = '[amqp10]\nanonymous_user = "off"\n'


def read_until(s: socket.socket, last: type) -> list[Any]:
    """What the broker sends, decoded, up to a frame of type `last` (or the socket's end)."""
    reader = FrameReader(1 << 20)
    out: list[Any] = []
    while not out or not isinstance(out[-1], last):
        data = s.recv(65536)
        if not data:
            return out
        reader.feed(data)
        while (frame := reader.next_frame()) is not None:
            if isinstance(frame, Frame):
                out.append(p.decode_performative(frame.body)[0] if frame.body else None)
            else:
                out.append(frame.raw)
    return out


def test_proton_sees_a_failed_plain_login(broker: BrokerThread) -> None:
    with pytest.raises(ConnectionException) as exc:
        BlockingConnection(f"amqp://guest:wrong@127.0.0.1:{broker.port}", timeout=5)
    assert "amqp:unauthorized-access" in str(exc.value)


def test_proton_without_sasl_sees_the_refusal(broker_factory: BrokerFactory) -> None:
    b = broker_factory(OFF)
    with pytest.raises(ConnectionClosed) as exc:
        BlockingConnection(f"amqp://127.0.0.1:{b.port}", timeout=5, sasl_enabled=False)
    assert "amqp:unauthorized-access" in str(exc.value)
    assert "anonymous logins are off" in str(exc.value)


def test_raw_plain_failure_gets_the_auth_outcome(broker: BrokerThread) -> None:
    with socket.create_connection((broker.host, broker.port), timeout=5) as s:
        init = p.SaslInit(mechanism="PLAIN", initial_response=b"\x00guest\x00wrong")
        s.sendall(SASL_HEADER + encode_frame(0, init))
        got = read_until(s, p.SaslOutcome)
        assert got[0] == SASL_HEADER
        assert isinstance(got[-1], p.SaslOutcome)
        assert got[-1].code == p.SASL_AUTH
        assert s.recv(1) == b""  # then the broker closes the socket


def test_raw_no_sasl_gets_open_then_close(broker_factory: BrokerFactory) -> None:
    b = broker_factory(OFF)
    with socket.create_connection((b.host, b.port), timeout=5) as s:
        s.sendall(AMQP_HEADER + encode_frame(0, p.Open(container_id="raw")))
        got = read_until(s, p.Close)
        assert got[0] == AMQP_HEADER
        assert isinstance(got[1], p.Open)
        close = got[-1]
        assert isinstance(close, p.Close)
        assert close.error is not None
        assert close.error.condition == "amqp:unauthorized-access"
        assert close.error.description
        s.sendall(encode_frame(0, p.Close()))  # the peer's close ends the connection
        assert s.recv(1) == b""
