"""The MQTT codec: every packet type round-trips at 3.1.1 and 5.0 (Hypothesis), streams cut
anywhere reassemble, and malformed input raises MQTTError with the right reason code."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ringmq.mqtt import (
    V5,
    V311,
    Auth,
    ConnAck,
    Connect,
    Disconnect,
    MQTTError,
    Packet,
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
    SubAck,
    Subscribe,
    Subscription,
    UnsubAck,
    Unsubscribe,
    Will,
    decode,
    encode,
)
from ringmq.mqtt.properties import decode_varint, encode_varint

text = st.text(st.characters(exclude_categories=["Cs"], exclude_characters="\x00"), max_size=20)
pid = st.integers(1, 0xFFFF)
user_props = st.lists(st.tuples(text, text), max_size=3)


@st.composite
def publish_properties(draw: st.DrawFn) -> Properties:
    return Properties(
        payload_format_indicator=draw(st.none() | st.integers(0, 1)),
        message_expiry_interval=draw(st.none() | st.integers(0, 2**32 - 1)),
        content_type=draw(st.none() | text),
        response_topic=draw(st.none() | text),
        correlation_data=draw(st.none() | st.binary(max_size=16)),
        user_properties=draw(user_props),
        topic_alias=draw(st.none() | st.integers(1, 0xFFFF)),
    )


@st.composite
def packets(draw: st.DrawFn, version: int) -> Packet:
    v5 = version == V5
    reason = st.sampled_from([0, 0x10, 0x80, 0x87, 0x97]) if v5 else st.just(0)
    simple = st.builds(Properties, reason_string=st.none() | text, user_properties=user_props)
    kind = draw(st.integers(0, 13))
    if kind == 0:
        will = draw(
            st.none()
            | st.builds(
                Will,
                text.filter(bool),
                st.binary(max_size=20),
                st.integers(0, 2),
                st.booleans(),
                st.just(Properties(will_delay_interval=5)) if v5 else st.none(),
            )
        )
        user = draw(st.none() | text)
        return Connect(
            version,
            draw(text),
            draw(st.booleans()),
            draw(st.integers(0, 0xFFFF)),
            user,
            draw(st.none() | st.binary(max_size=10)) if (user is not None or v5) else None,
            will,
            Properties(session_expiry_interval=draw(st.integers(0, 100))) if v5 else None,
        )
    if kind == 1:
        return ConnAck(draw(st.integers(0, 5)), draw(st.booleans()), draw(simple) if v5 else None)
    if kind == 2:
        qos = draw(st.integers(0, 2))
        return Publish(
            draw(text),
            draw(st.binary(max_size=50)),
            qos,
            draw(st.booleans()),
            draw(st.booleans()) if qos else False,
            draw(pid) if qos else 0,
            draw(publish_properties()) if v5 else None,
        )
    if kind in (3, 4, 5, 6):
        cls = (PubAck, PubRec, PubRel, PubComp)[kind - 3]
        return cls(draw(pid), draw(reason), draw(st.none() | simple) if v5 else None)
    if kind == 7:
        subs = draw(
            st.lists(
                st.builds(
                    Subscription,
                    text,
                    st.integers(0, 2),
                    st.booleans() if v5 else st.just(False),
                    st.booleans() if v5 else st.just(False),
                    st.integers(0, 2) if v5 else st.just(0),
                ),
                min_size=1,
                max_size=3,
            )
        )
        sid = Properties(subscription_identifiers=[draw(st.integers(1, 268_435_455))])
        return Subscribe(draw(pid), subs, sid if v5 else None)
    if kind == 8:
        codes = draw(st.lists(st.sampled_from([0, 1, 2, 0x80]), min_size=1, max_size=4))
        return SubAck(draw(pid), codes, draw(simple) if v5 else None)
    if kind == 9:
        filters = draw(st.lists(text, min_size=1, max_size=3))
        return Unsubscribe(draw(pid), filters, Properties() if v5 else None)
    if kind == 10:
        codes = draw(st.lists(st.sampled_from([0, 0x11]), max_size=3)) if v5 else []
        return UnsubAck(draw(pid), codes, draw(simple) if v5 else None)
    if kind == 11:
        return PingReq() if draw(st.booleans()) else PingResp()
    if kind == 12:
        if not v5:
            return Disconnect()
        return Disconnect(draw(st.sampled_from([0, 4, 0x8E])), draw(simple))
    if v5:
        return Auth(0x18, Properties(authentication_method="X", authentication_data=b"d"))
    return PingReq()


def _roundtrip(packet: Packet, version: int) -> Packet:
    data = encode(packet, version)
    reader = PacketReader()
    reader.feed(data)
    got = reader.next_packet()
    assert got is not None
    assert reader.next_packet() is None
    return decode(got[0], got[1], version)


@given(st.sampled_from([V311, V5]).flatmap(lambda v: st.tuples(st.just(v), packets(v))))
def test_every_packet_round_trips(case: tuple[int, Packet]) -> None:
    version, packet = case
    got = _roundtrip(packet, version)
    if version == V5 and getattr(packet, "properties", 1) is None and hasattr(got, "properties"):
        # an absent property section and an empty one are the same on the wire
        assert got.properties in (None, Properties())
        object.__setattr__(got, "properties", None)
    assert got == packet


@given(st.lists(packets(V5), min_size=1, max_size=5), st.data())
def test_a_stream_cut_anywhere_reassembles(batch: list[Packet], data: st.DataObject) -> None:
    stream = b"".join(encode(p, V5) for p in batch)
    cuts = sorted(data.draw(st.lists(st.integers(0, len(stream)), max_size=6)))
    reader = PacketReader()
    got: list[bytes] = []
    prev = 0
    for cut in [*cuts, len(stream)]:
        reader.feed(stream[prev:cut])
        prev = cut
        while (one := reader.next_packet()) is not None:
            got.append(bytes((one[0],)) + encode_varint(len(one[1])) + one[1])
    assert b"".join(got) == stream


@given(st.integers(0, 268_435_455))
def test_varint_round_trips(n: int) -> None:
    data = encode_varint(n)
    assert len(data) <= 4
    assert decode_varint(data, 0, len(data)) == (n, len(data))


@given(st.binary(max_size=64), st.sampled_from([V311, V5]))
def test_random_bytes_give_packets_or_mqtt_errors(data: bytes, version: int) -> None:
    reader = PacketReader(max_packet_size=1024)
    reader.feed(data)
    reason: Reason | None = None
    try:
        while (got := reader.next_packet()) is not None:
            decode(got[0], got[1], version)
    except MQTTError as exc:  # anything else escaping is a bug
        reason = exc.reason
    assert reason is None or isinstance(reason, Reason)


@pytest.mark.parametrize(
    ("raw", "version", "reason"),
    [
        (b"\x30\x03\x00\x01a", V311, None),  # fine: QoS 0 publish to "a"
        (b"\x36\x03\x00\x01a", V311, Reason.MALFORMED_PACKET),  # QoS 3
        (b"\x38\x03\x00\x01a", V311, Reason.MALFORMED_PACKET),  # DUP on QoS 0
        (b"\x80\x05\x00\x01\x00\x01a", V311, Reason.MALFORMED_PACKET),  # SUBSCRIBE flags 0
        (b"\x82\x02\x00\x01", V311, Reason.PROTOCOL_ERROR),  # SUBSCRIBE without filters
        (b"\x82\x06\x00\x01\x00\x01a\x03", V311, Reason.MALFORMED_PACKET),  # QoS 3 filter
        (b"\x82\x06\x00\x00\x00\x01a\x01", V311, Reason.MALFORMED_PACKET),  # packet id 0
        (b"\x30\x05\x00\x03a\x00b", V311, Reason.MALFORMED_PACKET),  # U+0000 in topic
        (b"\x30\x04\x00\x02\xc3\x28", V311, Reason.MALFORMED_PACKET),  # not UTF-8
        (b"\x30\x05\x00\x01a\x02\x99", V5, Reason.MALFORMED_PACKET),  # unknown property
        (b"\x30\x07\x00\x01a\x04\x11\x00\x00", V5, Reason.MALFORMED_PACKET),  # truncated
        (b"\x30\x08\x00\x01a\x04\x11\x00\x00\x00", V5, Reason.PROTOCOL_ERROR),  # not allowed
        (b"\xe0\x01\x00", V311, Reason.MALFORMED_PACKET),  # 3.1.1 DISCONNECT with a body
        (b"\x00\x00", V311, Reason.MALFORMED_PACKET),  # reserved type 0
    ],
)
def test_malformed_packets(raw: bytes, version: int, reason: Reason | None) -> None:
    reader = PacketReader()
    reader.feed(raw)
    got = reader.next_packet()
    assert got is not None
    if reason is None:
        decode(got[0], got[1], version)
        return
    with pytest.raises(MQTTError) as exc:
        decode(got[0], got[1], version)
    assert exc.value.reason is reason


def test_remaining_length_over_four_bytes_and_too_large() -> None:
    reader = PacketReader()
    reader.feed(b"\x30\xff\xff\xff\xff\x01")
    with pytest.raises(MQTTError) as exc:
        reader.next_packet()
    assert exc.value.reason is Reason.MALFORMED_PACKET
    small = PacketReader(max_packet_size=100)
    small.feed(b"\x30\x80\x01")  # announces 128 bytes: refused before they arrive
    with pytest.raises(MQTTError) as too_big:
        small.next_packet()
    assert too_big.value.reason is Reason.PACKET_TOO_LARGE


def test_unsupported_protocol_level() -> None:
    body = b"\x00\x04MQTT\x06\x02\x00\x1e\x00\x01x"
    with pytest.raises(MQTTError) as exc:
        decode(0x10, body, V311)
    assert exc.value.reason is Reason.UNSUPPORTED_PROTOCOL_VERSION
