"""Bad input over a raw socket gets MQTT's answer on that connection only; the broker keeps
serving the others."""

from __future__ import annotations

import socket

import pytest

from ringmq.mqtt import (
    V5,
    V311,
    ConnAck,
    Connect,
    Disconnect,
    Packet,
    PacketReader,
    SubAck,
    Subscribe,
    Subscription,
    decode,
    encode,
)
from ringmq.node import BrokerThread
from tests.integration.mqtt.conftest import MakePaho

pytestmark = pytest.mark.integration


def _open(b: BrokerThread) -> socket.socket:
    return socket.create_connection(("127.0.0.1", b.port_of("mqtt")), timeout=5)


def _read_until_closed(s: socket.socket, version: int) -> list[Packet]:
    reader = PacketReader()
    out: list[Packet] = []
    while True:
        data = s.recv(65536)
        if not data:
            return out
        reader.feed(data)
        while (got := reader.next_packet()) is not None:
            out.append(decode(got[0], got[1], version))


def _connected(b: BrokerThread, version: int) -> socket.socket:
    s = _open(b)
    s.sendall(encode(Connect(version, "raw", True, 30, "guest", b"guest"), version))
    reader = PacketReader()
    while (got := reader.next_packet()) is None:
        reader.feed(s.recv(65536))
    ack = decode(got[0], got[1], version)
    assert isinstance(ack, ConnAck)
    assert ack.reason_code == 0
    return s


def _still_serving(b: BrokerThread, paho: MakePaho) -> None:
    sub = paho(b, "after-sub")
    sub.subscribe("ok", 1)
    paho(b, "after-pub").publish("ok", b"still here", 1)
    assert sub.get().payload == b"still here"


def test_garbage_before_connect_closes_that_connection(
    broker: BrokerThread, paho: MakePaho
) -> None:
    with _open(broker) as s:
        s.sendall(b"GET / HTTP/1.1\r\n\r\n")
        assert s.recv(100) == b""
    _still_serving(broker, paho)


def test_unsupported_protocol_level_gets_connack_1(broker: BrokerThread, paho: MakePaho) -> None:
    with _open(broker) as s:
        body = b"\x00\x04MQTT\x07\x02\x00\x1e\x00\x01x"
        s.sendall(b"\x10" + bytes((len(body),)) + body)
        assert _read_until_closed(s, V311) == [ConnAck(1)]
    _still_serving(broker, paho)


def test_malformed_packet_after_connect_gets_disconnect_0x81(
    broker: BrokerThread, paho: MakePaho
) -> None:
    with _connected(broker, V5) as s:
        s.sendall(b"\x82\x03\x00\x01\x05")  # SUBSCRIBE: properties past its end
        got = _read_until_closed(s, V5)
        assert len(got) == 1
        assert isinstance(got[0], Disconnect)
        assert got[0].reason_code == 0x81
    _still_serving(broker, paho)


def test_oversized_packet_gets_disconnect_0x95(broker: BrokerThread, paho: MakePaho) -> None:
    with _connected(broker, V5) as s:
        s.sendall(b"\x30\xff\xff\xff\x7f")  # PUBLISH announcing 256 MB
        got = _read_until_closed(s, V5)
        assert isinstance(got[0], Disconnect)
        assert got[0].reason_code == 0x95
    _still_serving(broker, paho)


def test_invalid_topic_filter_is_refused_in_suback(broker: BrokerThread, paho: MakePaho) -> None:
    with _connected(broker, V311) as s:
        s.sendall(encode(Subscribe(1, [Subscription("a/#/b", 1), Subscription("a/+", 1)]), V311))
        reader = PacketReader()
        while (got := reader.next_packet()) is None:
            reader.feed(s.recv(65536))
        assert decode(got[0], got[1], V311) == SubAck(1, [0x80, 1])
    _still_serving(broker, paho)


def test_invalid_topic_name_closes_a_311_connection(broker: BrokerThread, paho: MakePaho) -> None:
    with _connected(broker, V311) as s:
        s.sendall(b"\x30\x05\x00\x03a/+")  # PUBLISH to a wildcard topic
        assert _read_until_closed(s, V311) == []
    _still_serving(broker, paho)
