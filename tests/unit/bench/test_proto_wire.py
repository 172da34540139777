"""The MQTT and STOMP load generator's hand-encoded frames (benchmarks/proto_wire.py)."""

from __future__ import annotations

import pytest
from benchmarks import proto_wire as w


@pytest.mark.parametrize(
    ("n", "encoded"),
    [
        (0, b"\x00"),
        (127, b"\x7f"),
        (128, b"\x80\x01"),
        (16_383, b"\xff\x7f"),
        (16_384, b"\x80\x80\x01"),
        (268_435_455, b"\xff\xff\xff\x7f"),  # MQTT 3.1.1 §2.2.3's table
    ],
)
def test_remaining_length_as_the_spec_tabulates_it(n: int, encoded: bytes) -> None:
    assert w.varint(n) == encoded


def test_mqtt_packets_are_split_whole_byte_by_byte_and_with_a_partial_tail() -> None:
    big = b"y" * 300  # a two-byte remaining length
    stream = (
        w.mqtt_publish("a/b", b"x", 0)
        + w.mqtt_publish("a/b", big, 1, 7)
        + w.mqtt_puback(7)
        + w.MQTT_DISCONNECT
    )
    whole = w.MqttReader().feed(stream)
    r = w.MqttReader()
    split = [p for i in range(len(stream)) for p in r.feed(stream[i : i + 1])]
    assert whole == split
    assert [(kind, flags) for kind, flags, _ in whole] == [(3, 0), (3, 2), (4, 0), (14, 0)]
    assert w.publish_packet_id(whole[1][1], whole[1][2]) == 7
    assert whole[1][2].endswith(big)
    assert w.MqttReader().feed(stream[:-1])[-1][0] == w.PUBACK  # DISCONNECT's last byte missing


def test_a_qos1_publish_is_its_two_parts_around_the_packet_id() -> None:
    head, tail = w.mqtt_publish_parts("t", b"payload", 1)
    assert head + b"\x01\x02" + tail == w.mqtt_publish("t", b"payload", 1, 0x0102)


def test_connect_carries_the_flags_of_what_it_holds() -> None:
    packet = w.mqtt_connect("c", username="u", password="p", clean=True, keepalive_s=30)
    ((kind, _flags, body),) = w.MqttReader().feed(packet)
    assert kind == 1
    assert body[:6] == b"\x00\x04MQTT"
    assert body[6] == 4
    assert body[7] == 0x80 | 0x40 | 0x02
    assert body[8:10] == b"\x00\x1e"


def test_stomp_frames_honour_content_length_and_skip_heartbeats() -> None:
    body = b"nul\x00inside"
    stream = (
        b"\n\n"
        + w.stomp_send("/queue/q", body, receipt="r1")
        + b"\n"
        + w.stomp_frame("MESSAGE", {"ack": "a:1", "message-id": "m"}, b"plain")
    )
    frames = w.StompReader().feed(stream)
    r = w.StompReader()
    assert frames == [f for i in range(len(stream)) for f in r.feed(stream[i : i + 1])]
    (cmd1, h1, b1), (cmd2, h2, b2) = frames
    assert (cmd1, b1, w.header(h1, b"receipt")) == (b"SEND", body, b"r1")
    assert (cmd2, b2, w.header(h2, b"ack")) == (b"MESSAGE", b"plain", b"a:1")
    assert w.header(h2, b"missing") is None
