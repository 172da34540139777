"""Partly received publishes: refused at the method, counted toward the watermark (issue 16).

A raw socket sends a publish method, a content header declaring a large body and some of the
body, so the test controls exactly what the broker has received; assertions read the broker's
own accounting (`BrokerServer.content_in_flight`, the memory monitor), never RSS.
"""

from __future__ import annotations

import socket
from typing import Any

import pytest

from ringmq.amqp import spec
from ringmq.amqp.frames import (
    PROTOCOL_HEADER,
    FrameReader,
    MethodFrame,
    encode_frame,
    encode_method_frame,
)
from ringmq.amqp.properties import BasicProperties, encode_properties
from ringmq.node import BrokerThread
from ringmq.server.memory import MemoryLimits
from tests.integration.conftest import BrokerFactory, wait_until

pytestmark = pytest.mark.integration

MiB = 1024 * 1024

USERS = """
[[users]]
name = "rw"
password = "rw"
tags = []

[[users]]
name = "ro"
password = "ro"
tags = []

[[permissions]]
user = "rw"
vhost = "/"
configure = ".*"
write = ".*"
read = ".*"

[[permissions]]
user = "ro"
vhost = "/"
configure = "^$"
write = "^$"
read = ".*"
"""


class Raw:
    """A minimal AMQP client over a socket: handshake, channel 1, frames in and out."""

    def __init__(self, b: BrokerThread, user: str, password: str) -> None:
        self.sock = socket.create_connection((b.host, b.port), timeout=5)
        self.reader = FrameReader(0, expect_protocol_header=False)
        self.sock.sendall(PROTOCOL_HEADER)
        self.expect(spec.ConnectionStart)
        response = b"\x00" + user.encode() + b"\x00" + password.encode()
        caps = {"capabilities": {"connection.blocked": True}}
        self.send(0, spec.ConnectionStartOk(caps, "PLAIN", response, "en_US"))
        self.expect(spec.ConnectionTune)
        self.send(0, spec.ConnectionTuneOk(2047, 131072, 0))
        self.send(0, spec.ConnectionOpen("/"))
        self.expect(spec.ConnectionOpenOk)
        self.send(1, spec.ChannelOpen())
        self.expect(spec.ChannelOpenOk)

    def send(self, channel: int, method: spec.Method) -> None:
        self.sock.sendall(encode_method_frame(channel, method))

    def start_publish(self, channel: int, exchange: str, size: int) -> None:
        """Basic.Publish and a content header declaring `size` bytes (no body yet)."""
        props = encode_properties(BasicProperties())
        header = (60).to_bytes(2, "big") + b"\0\0" + size.to_bytes(8, "big") + props
        self.send(channel, spec.BasicPublish(exchange=exchange, routing_key="k"))
        self.sock.sendall(encode_frame(2, channel, header))

    def body(self, channel: int, nbytes: int, frame: int = 65536) -> None:
        while nbytes:
            n = min(nbytes, frame)
            self.sock.sendall(encode_frame(3, channel, b"x" * n))
            nbytes -= n

    def expect(self, kind: type[spec.Method]) -> Any:
        while True:
            frame = self.reader.next_frame()
            if frame is None:
                data = self.sock.recv(65536)
                if not data:
                    raise ConnectionError("closed by the broker")
                self.reader.feed(data)
                continue
            if isinstance(frame, MethodFrame) and isinstance(frame.method, kind):
                return frame.method

    def close(self) -> None:
        self.sock.close()


def test_a_read_only_users_body_is_refused_at_the_method_and_never_buffered(
    broker_factory: BrokerFactory,
) -> None:
    b = broker_factory(USERS)
    ro = Raw(b, "ro", "ro")
    rw = Raw(b, "rw", "rw")
    try:
        # the write-permitted user's declared 10 MiB is in flight once its header is read...
        rw.start_publish(1, "amq.direct", 10 * MiB)
        rw.body(1, 256 * 1024)
        wait_until(lambda: b.call(b.server.content_in_flight) == 10 * MiB)
        # ...the read-only user's is refused at its method: 403 at once, nothing held
        ro.start_publish(1, "amq.direct", 10 * MiB)
        close = ro.expect(spec.ChannelClose)
        assert close.reply_code == 403
        assert (close.class_id, close.method_id) == (60, 40)
        assert "write access to exchange 'amq.direct'" in close.reply_text
        ro.body(1, 2 * MiB)  # the body keeps coming: dropped frame by frame
        ro.send(1, spec.ChannelCloseOk())
        ro.send(1, spec.ChannelOpen())  # the connection is alive and reads on
        ro.expect(spec.ChannelOpenOk)
        assert b.call(b.server.content_in_flight) == 10 * MiB  # rw's alone
        assert b.call(b.broker.memory_held_bytes) == 0
    finally:
        ro.close()
        rw.close()


def test_bodies_in_flight_raise_the_memory_alarm_and_block_their_connection(
    broker_factory: BrokerFactory,
) -> None:
    # the monitor counts only the broker's own accounting here (no RSS, no start-up baseline),
    # against an 8 MiB watermark: the queues hold nothing, so in-flight bytes alone decide
    b = broker_factory(USERS, memory=MemoryLimits(high_watermark=8 * MiB, interval_s=3600))
    mon = b.server.memory
    assert mon is not None

    def measure_accounting_only() -> None:
        mon._read_memory = lambda: None
        mon._baseline = 0

    b.call(measure_accounting_only)

    def alarm() -> str | None:
        return mon.governor.memory_alarm

    b.call(mon.check)  # the start-up reading (real RSS) raised it; nothing holds memory now
    assert alarm() is None
    pub = Raw(b, "rw", "rw")
    try:
        pub.send(2, spec.ChannelOpen())
        pub.expect(spec.ChannelOpenOk)
        pub.start_publish(1, "amq.direct", 6 * MiB)
        pub.body(1, 128 * 1024)
        pub.start_publish(2, "amq.direct", 6 * MiB)
        pub.body(2, 128 * 1024)
        # the read that brings the second header measures at once (large bodies arriving):
        # 12 MiB declared crosses the 8 MiB watermark, and that connection is blocked
        blocked = pub.expect(spec.ConnectionBlocked)
        assert blocked.reason.startswith("memory alarm")
        assert mon.in_flight == 12 * MiB
        assert set(b.call(lambda: b.broker.alarms)) == {"memory"}
        (info,) = b.call(b.server.connections)
        assert info.state == "blocked"
        # blocked, it counts only what it sent (nothing more arrives): the alarm can clear
        b.call(mon.check)
        assert 128 * 1024 <= mon.in_flight <= 2 * 128 * 1024
        assert alarm() is None
        pub.expect(spec.ConnectionUnblocked)
    finally:
        pub.close()
