"""DeliverParts (the cached Basic.Deliver prefix) encodes exactly what encode_deliver does."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from ringmq.amqp.deliverframes import DeliverParts, encode_deliver
from ringmq.amqp.frames import FrameReader

_short = st.binary(max_size=255)


@given(
    channel=st.integers(1, 65535),
    consumer_tag=_short,
    exchange=_short,
    routing_key=_short,
    delivery_tag=st.integers(1, 2**64 - 1),
    redelivered=st.booleans(),
    properties_bin=st.binary(min_size=2, max_size=40),
    body=st.binary(max_size=300),
    frame_max=st.sampled_from([0, 9, 64, 4096]),
)
def test_same_bytes_as_encode_deliver(
    channel: int,
    consumer_tag: bytes,
    exchange: bytes,
    routing_key: bytes,
    delivery_tag: int,
    redelivered: bool,
    properties_bin: bytes,
    body: bytes,
    frame_max: int,
) -> None:
    parts = DeliverParts(channel, consumer_tag, exchange, routing_key)
    expected = encode_deliver(
        channel,
        consumer_tag,
        delivery_tag,
        redelivered,
        exchange,
        routing_key,
        properties_bin,
        body,
        frame_max,
    )
    for _ in range(2):  # reusable
        assert parts.encode(delivery_tag, redelivered, properties_bin, body, frame_max) == expected
    out: list[bytes] = [b"before"]
    parts.encode_into(out, delivery_tag, redelivered, properties_bin, body, frame_max)
    assert b"".join(out) == b"before" + expected


def test_frames_parse_back() -> None:
    parts = DeliverParts(4, b"ctag", b"", b"queue")
    reader = FrameReader(0)
    reader.feed(parts.encode(9, False, b"\x00\x00", b"hello", 4096))
    frames = [reader.next_frame() for _ in range(3)]
    assert reader.next_frame() is None
    assert [type(f).__name__ for f in frames] == ["MethodFrame", "HeaderFrame", "BodyFrame"]
