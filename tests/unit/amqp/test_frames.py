"""Frame reader (whole, byte by byte, with trailing bytes) and encoders (vs pamqp)."""

from __future__ import annotations

import struct

import pytest
from hypothesis import given
from hypothesis import strategies as st
from pamqp import body as pbody
from pamqp import commands as pc
from pamqp import frame as pframe
from pamqp import header as pheader

from ringmq.amqp import spec
from ringmq.amqp.deliverframes import encode_deliver
from ringmq.amqp.frames import (
    HEARTBEAT_FRAME,
    PROTOCOL_HEADER,
    BodyFrame,
    Frame,
    FrameReader,
    HeaderFrame,
    HeartbeatFrame,
    MethodFrame,
    ProtocolHeader,
    encode_content_frames,
    encode_frame,
    encode_method_frame,
)
from ringmq.amqp.properties import BasicProperties, encode_properties
from ringmq.amqp.reply_codes import AMQPError, ReplyCode
from tests.unit.amqp.strategies import methods


def _read_all(reader: FrameReader) -> list[Frame]:
    frames: list[Frame] = []
    while (frame := reader.next_frame()) is not None:
        frames.append(frame)
    return frames


def _feed_three_ways(data: bytes, *, header: bool = False, frame_max: int = 0) -> list[Frame]:
    """h11's tr(): whole, one byte at a time, and with trailing bytes; all must agree."""
    whole = FrameReader(frame_max, expect_protocol_header=header)
    whole.feed(data)
    expected = _read_all(whole)
    assert whole.buffered == 0

    bytewise = FrameReader(frame_max, expect_protocol_header=header)
    got: list[Frame] = []
    for i in range(len(data)):
        bytewise.feed(data[i : i + 1])
        got += _read_all(bytewise)
    assert got == expected
    assert bytewise.buffered == 0

    trailing = FrameReader(frame_max, expect_protocol_header=header)
    trailing.feed(data + b"\x01\x00")  # the start of another frame
    assert _read_all(trailing) == expected
    assert trailing.buffered == 2
    return expected


def test_publish_stream_three_ways() -> None:
    props = encode_properties(BasicProperties(content_type="text/plain", headers={"a": 1}))
    data = (
        PROTOCOL_HEADER
        + encode_method_frame(0, spec.ConnectionTuneOk(2047, 4096, 60))
        + encode_content_frames(1, spec.BasicPublish(routing_key="q"), props, b"x" * 9000, 4096)
        + HEARTBEAT_FRAME
    )
    frames = _feed_three_ways(data, header=True, frame_max=4096)
    assert frames[0] == ProtocolHeader(PROTOCOL_HEADER)
    assert frames[1] == MethodFrame(0, spec.ConnectionTuneOk(2047, 4096, 60))
    assert frames[2] == MethodFrame(1, spec.BasicPublish(routing_key="q"))
    assert frames[3] == HeaderFrame(1, 60, 9000, props)
    bodies = [f for f in frames if isinstance(f, BodyFrame)]
    assert [len(b.data) for b in bodies] == [4088, 4088, 824]
    assert b"".join(b.data for b in bodies) == b"x" * 9000
    assert frames[-1] == HeartbeatFrame(0)


@given(st.lists(methods(), min_size=1, max_size=4), st.integers(0, 3))
def test_method_streams_three_ways(ms: list[spec.Method], channel: int) -> None:
    data = b"".join(encode_method_frame(channel, m) for m in ms)
    frames = _feed_three_ways(data)
    assert frames == [MethodFrame(channel, m) for m in ms]


def test_protocol_header_detection() -> None:
    reader = FrameReader(expect_protocol_header=True)
    reader.feed(b"AMQP\x00\x00\x09")
    assert reader.next_frame() is None
    reader.feed(b"\x01")
    header = reader.next_frame()
    assert isinstance(header, ProtocolHeader)
    assert header.valid
    bad = FrameReader(expect_protocol_header=True)
    bad.feed(b"GET / HTTP/1.1\r\n")
    header = bad.next_frame()
    assert isinstance(header, ProtocolHeader)
    assert not header.valid
    assert not ProtocolHeader(b"AMQP\x00\x00\x08\x00").valid


def test_oversized_frame_is_a_frame_error_before_the_payload_arrives() -> None:
    reader = FrameReader(4096)
    reader.feed(struct.pack(">BHI", 3, 1, 4096 - 8 + 1))  # one byte over frame_max
    with pytest.raises(AMQPError) as err:
        reader.next_frame()
    assert err.value.code is ReplyCode.FRAME_ERROR
    ok = FrameReader(4096)
    ok.feed(encode_frame(3, 1, b"y" * (4096 - 8)))
    assert ok.next_frame() == BodyFrame(1, b"y" * 4088)


def test_bad_frame_end() -> None:
    reader = FrameReader()
    reader.feed(encode_frame(3, 1, b"abc")[:-1] + b"\x00")
    with pytest.raises(AMQPError) as err:
        reader.next_frame()
    assert err.value.code is ReplyCode.FRAME_ERROR


@pytest.mark.parametrize(
    "raw",
    [
        encode_frame(9, 0, b""),  # unknown frame type
        encode_frame(8, 1, b""),  # heartbeat on a channel
        encode_frame(8, 0, b"x"),  # heartbeat with payload
        encode_frame(2, 1, b"\x00\x3c\x00\x00"),  # content header too short
        encode_frame(1, 1, b"\x00"),  # method payload too short
    ],
)
def test_malformed_frames(raw: bytes) -> None:
    reader = FrameReader()
    reader.feed(raw)
    with pytest.raises(AMQPError) as err:
        reader.next_frame()
    assert err.value.code is ReplyCode.FRAME_ERROR


@given(st.binary(max_size=200))
def test_random_bytes_yield_frames_none_or_amqp_errors(data: bytes) -> None:
    reader = FrameReader(4096)
    reader.feed(data)
    for _ in range(len(data) + 1):  # bounded: every frame consumes at least 8 bytes
        try:
            frame = reader.next_frame()
        except AMQPError:
            return
        if frame is None:
            return
    raise AssertionError("reader did not make progress")


@given(
    consumer_tag=st.text(max_size=30),
    delivery_tag=st.integers(0, 2**63 - 1),
    redelivered=st.booleans(),
    exchange=st.text(max_size=30),
    routing_key=st.text(max_size=30),
    body=st.binary(max_size=300),
    frame_max=st.sampled_from([0, 4096, 9, 50]),
)
def test_fast_deliver_is_identical_to_generic_encoder(
    consumer_tag: str,
    delivery_tag: int,
    redelivered: bool,
    exchange: str,
    routing_key: str,
    body: bytes,
    frame_max: int,
) -> None:
    props = encode_properties(BasicProperties(delivery_mode=2, message_id="m"))
    method = spec.BasicDeliver(consumer_tag, delivery_tag, redelivered, exchange, routing_key)
    generic = encode_content_frames(5, method, props, body, frame_max)
    fast = encode_deliver(
        5,
        consumer_tag.encode(),
        delivery_tag,
        redelivered,
        exchange.encode(),
        routing_key.encode(),
        props,
        body,
        frame_max,
    )
    assert fast == generic
    reader = FrameReader(0)
    reader.feed(fast)
    frames = _read_all(reader)
    assert frames[0] == MethodFrame(5, method)
    assert frames[1] == HeaderFrame(5, 60, len(body), props)
    data = [f.data for f in frames[2:] if isinstance(f, BodyFrame)]
    assert b"".join(data) == body
    if frame_max:
        assert all(len(d) <= frame_max - 8 for d in data)
    assert len(frames) == 2 + len(data)


def test_deliver_matches_pamqp_byte_for_byte() -> None:
    props = BasicProperties(content_type="application/json", delivery_mode=2, priority=4)
    pbin = encode_properties(props)
    body = b'{"k": 1}'
    ours = encode_deliver(1, b"ctag", 42, True, b"amq.direct", b"rk", pbin, body, 131072)
    theirs = (
        pframe.marshal(
            pc.Basic.Deliver(
                consumer_tag="ctag",
                delivery_tag=42,
                redelivered=True,
                exchange="amq.direct",
                routing_key="rk",
            ),
            1,
        )
        + pframe.marshal(
            pheader.ContentHeader(
                0,
                len(body),
                pc.Basic.Properties(content_type="application/json", delivery_mode=2, priority=4),
            ),
            1,
        )
        + pframe.marshal(pbody.ContentBody(body), 1)
    )
    assert ours == theirs


def test_pamqp_frames_decode() -> None:
    data = pframe.marshal(pc.Basic.Ack(delivery_tag=7, multiple=True), 2) + pframe.marshal(
        pc.Basic.Publish(exchange="e", routing_key="r"), 2
    )
    reader = FrameReader()
    reader.feed(data)
    assert _read_all(reader) == [
        MethodFrame(2, spec.BasicAck(7, True)),
        MethodFrame(2, spec.BasicPublish(exchange="e", routing_key="r")),
    ]


def test_fast_deliver_rejects_long_names() -> None:
    with pytest.raises(ValueError, match="255"):
        encode_deliver(1, b"c" * 256, 1, False, b"", b"", b"\x00\x00", b"", 0)


def test_frame_max_too_small_for_a_body() -> None:
    with pytest.raises(ValueError, match="no room"):
        encode_content_frames(1, spec.BasicDeliver(), b"\x00\x00", b"x", 8)


def test_large_body_frames() -> None:
    body = bytes(range(256)) * 100  # 25600 bytes: one frame, above the small-copy threshold
    data = encode_content_frames(1, spec.BasicPublish(), b"\x00\x00", body, 131072)
    frames = _feed_three_ways(data[:-1] + data[-1:], frame_max=131072)
    assert frames[-1] == BodyFrame(1, body)


def test_a_frame_trickling_in_is_joined_once_when_whole() -> None:
    # A 64 KiB body frame fed 1 KiB at a time: the pieces are kept and joined once the frame
    # can be whole (linear copying), not re-joined on every read.
    frame = encode_frame(3, 1, b"y" * 65536)  # a body frame
    reader = FrameReader(131072)
    reader.feed(frame[:5])  # too short to know the frame's size: kept as is
    assert reader.next_frame() is None
    reader.feed(frame[5:1029])  # now the size is known
    assert reader.next_frame() is None
    for i in range(1029, len(frame) - 1, 1024):
        reader.feed(frame[i : min(i + 1024, len(frame) - 1)])
        assert reader.next_frame() is None
        assert reader._buf == b""  # still collecting
        assert reader.buffered == min(i + 1024, len(frame) - 1)
    reader.feed(frame[-1:] + HEARTBEAT_FRAME)
    assert reader.next_frame() == BodyFrame(1, b"y" * 65536)
    assert reader.next_frame() == HeartbeatFrame(0)
    assert reader.buffered == 0
