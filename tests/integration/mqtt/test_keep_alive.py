"""Keep-alive through the server: an open MQTT connection waits in the sweep's timer wheel, not
on every sweep; a silent client is dropped at 1.5 times its keep-alive, one that pings is not."""

from __future__ import annotations

import socket
import time

import pytest

from ringmq.mqtt import V311, ConnAck, Connect, PacketReader, PingReq, PingResp, decode, encode
from ringmq.node import BrokerThread
from tests.integration.conftest import wait_until

pytestmark = pytest.mark.integration


def _connected(b: BrokerThread, keep_alive: int) -> socket.socket:
    s = socket.create_connection(("127.0.0.1", b.port_of("mqtt")), timeout=5)
    s.sendall(encode(Connect(V311, "ka", True, keep_alive, "guest", b"guest"), V311))
    assert isinstance(_next(s), ConnAck)
    return s


def _next(s: socket.socket) -> object:
    reader = PacketReader()
    while (got := reader.next_packet()) is None:
        data = s.recv(65536)
        if not data:
            return None
        reader.feed(data)
    return decode(got[0], got[1], V311)


def _waits_in_wheel(b: BrokerThread) -> bool:
    timers = b.server.timers
    return b.call(
        lambda: len(timers.wheel) == 1 and not any(c.opened for c in timers.every.values())
    )


def test_a_silent_client_is_dropped_after_one_and_a_half_keep_alives(
    broker: BrokerThread,
) -> None:
    with _connected(broker, keep_alive=1) as s:
        start = time.monotonic()
        wait_until(lambda: _waits_in_wheel(broker))
        s.settimeout(5)
        assert s.recv(100) == b""  # dropped, no DISCONNECT in 3.1.1
        waited = time.monotonic() - start
    # 1.5 s, then at most one sweep (0.5 s) late; never early
    assert 1.5 <= waited < 2.5
    wait_until(lambda: broker.call(lambda: len(broker.server.timers.wheel) == 0))


def test_a_client_that_pings_stays_while_its_deadline_moves(broker: BrokerThread) -> None:
    with _connected(broker, keep_alive=1) as s:
        for _ in range(6):  # 3 s: twice the 1.5 s it would have without the pings
            time.sleep(0.5)
            s.sendall(encode(PingReq(), V311))
            assert isinstance(_next(s), PingResp)
        assert _waits_in_wheel(broker)
