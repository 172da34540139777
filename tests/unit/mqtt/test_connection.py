"""The MQTT connection machine alone: CONNECT first, keep-alive, packet ids both ways, topic
aliases, and the answer each violation gets."""

from __future__ import annotations

from ringmq.mqtt import (
    V5,
    V311,
    ConnAck,
    Connect,
    Disconnect,
    MqttConnection,
    PacketReader,
    PingReq,
    PingResp,
    Properties,
    PubAck,
    PubComp,
    Publish,
    PubRec,
    PubRel,
    Reason,
    State,
    Violation,
    decode,
    encode,
)
from ringmq.mqtt.packets import Packet


def connected(version: int = V5, **kw: int) -> MqttConnection:
    m = MqttConnection(**kw)
    m.feed(encode(Connect(version, "c", keep_alive=10), version), 0)
    assert isinstance(m.next_event(), Connect)
    m.accept(ConnAck())
    m.data_to_send()
    return m


def sent(m: MqttConnection) -> list[Packet]:
    reader = PacketReader()
    reader.feed(m.data_to_send())
    out = []
    while (got := reader.next_packet()) is not None:
        out.append(decode(got[0], got[1], m.version))
    return out


def feed(m: MqttConnection, *packets: Packet, now_ms: int = 0) -> list[object]:
    m.feed(b"".join(encode(p, m.version) for p in packets), now_ms)
    out: list[object] = []
    while (e := m.next_event()) is not None:
        out.append(e)
    return out


def test_first_packet_must_be_connect() -> None:
    m = MqttConnection()
    m.feed(encode(PingReq(), V311), 0)
    event = m.next_event()
    assert isinstance(event, Violation)
    assert m.state is State.CLOSED
    assert m.data_to_send() == b""


def test_ping_is_answered_and_keep_alive_expires_after_one_and_a_half() -> None:
    m = connected(V311)
    assert feed(m, PingReq(), now_ms=1000) == []
    assert sent(m) == [PingResp()]
    assert not m.keep_alive_expired(1000 + 15_000)
    assert m.keep_alive_expired(1000 + 15_001)


def test_inbound_qos2_exactly_once() -> None:
    m = connected()
    p = Publish("t", b"x", 2, packet_id=9, properties=Properties())
    assert feed(m, p) == [p]
    m.settle_publish(9)
    assert sent(m) == [PubRec(9)]
    assert feed(m, Publish("t", b"x", 2, dup=True, packet_id=9)) == []  # a repeat
    assert sent(m) == [PubRec(9)]
    assert feed(m, PubRel(9)) == []
    assert sent(m) == [PubComp(9)]
    assert feed(m, PubRel(9)) == []  # unknown now
    got = sent(m)
    assert isinstance(got[0], PubComp)
    assert got[0].reason_code == Reason.PACKET_IDENTIFIER_NOT_FOUND


def test_outbound_ids_and_stages() -> None:
    m = connected(V311)
    p1, p2 = Publish("t", b"1", 1), Publish("t", b"2", 2)
    assert m.send_publish(p1)
    assert m.send_publish(p2)
    assert p1.packet_id != p2.packet_id
    sent(m)
    assert feed(m, PubAck(p1.packet_id)) == [PubAck(p1.packet_id)]
    assert feed(m, PubRec(p2.packet_id)) == [PubRec(p2.packet_id)]
    assert sent(m) == [PubRel(p2.packet_id)]
    assert feed(m, PubComp(p2.packet_id)) == []
    assert m.outbound == {}
    assert feed(m, PubAck(999)) == []  # unknown: ignored


def test_client_maximum_packet_size_drops_what_is_too_big() -> None:
    m = MqttConnection()
    props = Properties(maximum_packet_size=50)
    m.feed(encode(Connect(V5, "c", properties=props), V5), 0)
    m.next_event()
    m.accept(ConnAck())
    assert not m.send_publish(Publish("t", b"x" * 100, 1))
    assert m.outbound == {}


def test_receive_maximum_exceeded() -> None:
    m = connected(receive_maximum=1)
    feed(m, Publish("t", b"1", 1, packet_id=1))
    events = feed(m, Publish("t", b"2", 1, packet_id=2))
    assert isinstance(events[0], Violation)
    assert events[0].reason is Reason.RECEIVE_MAXIMUM_EXCEEDED
    got = sent(m)
    assert isinstance(got[0], Disconnect)
    assert got[0].reason_code == Reason.RECEIVE_MAXIMUM_EXCEEDED


def test_topic_aliases() -> None:
    m = connected(topic_alias_maximum=2)
    a = feed(m, Publish("long/topic", b"1", properties=Properties(topic_alias=2)))
    b = feed(m, Publish("", b"2", properties=Properties(topic_alias=2)))
    assert [e.topic for e in (*a, *b) if isinstance(e, Publish)] == ["long/topic", "long/topic"]
    bad = feed(m, Publish("x", b"3", properties=Properties(topic_alias=3)))
    assert isinstance(bad[0], Violation)
    assert bad[0].reason is Reason.TOPIC_ALIAS_INVALID


def test_second_connect_is_a_protocol_error() -> None:
    m = connected()
    events = feed(m, Connect(V5, "again"))
    assert isinstance(events[0], Violation)
    assert events[0].reason is Reason.PROTOCOL_ERROR
    assert m.state is State.CLOSED
