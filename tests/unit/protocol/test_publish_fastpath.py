"""The whole-publish fast path (FrameReader.next_publish) gives the frame-by-frame outcome.

Feeding a stream in one piece lets ``next_publish`` take whole Basic.Publish commands; feeding
it one byte at a time never has a whole command buffered, so every frame takes the ordinary
per-frame path. Both must produce the same events and the same output bytes.
"""

from __future__ import annotations

from ringmq.amqp import spec
from ringmq.amqp.frames import FrameReader, RawContent, encode_content_frames, encode_frame
from ringmq.amqp.properties import BasicProperties, encode_properties
from ringmq.protocol import ServerConnection
from ringmq.protocol.events import Command, Event

from .client import Client, m, publish


def _opened(max_message_size: int = 0) -> Client:
    client = Client(ServerConnection(max_message_size=max_message_size))
    client.handshake(frame_max=4096)
    client.open_channel(1)
    client.open_channel(2)
    client.conn.data_to_send()
    return client


def _both_ways(stream: bytes, max_message_size: int = 0) -> tuple[list[Event], bytes]:
    whole = _opened(max_message_size)
    events_whole = whole.send(stream)
    out_whole = whole.conn.data_to_send()
    split = _opened(max_message_size)
    events_split: list[Event] = []
    for i in range(len(stream)):
        events_split += split.send(stream[i : i + 1])
    assert events_whole == events_split
    assert out_whole == split.conn.data_to_send()
    return events_whole, out_whole


def test_reader_takes_a_whole_publish_and_reuses_the_method() -> None:
    one = publish(3, b"hello", routing_key="rk")
    reader = FrameReader(4096)
    reader.feed(one + one + publish(3, b"", routing_key="rk"))
    first = reader.next_publish()
    second = reader.next_publish()
    empty = reader.next_publish()
    assert first is not None
    assert second is not None
    assert empty is not None
    assert first[0] == 3
    assert first[1] == spec.BasicPublish(routing_key="rk")
    assert second[1] is first[1]  # decoded once per distinct argument list
    props = encode_properties(BasicProperties(delivery_mode=2))
    assert first[2] == RawContent(60, 5, props, b"hello")
    assert empty[2] == RawContent(60, 0, props, b"")
    assert reader.next_publish() is None
    assert reader.buffered == 0


def test_reader_leaves_anything_else_to_next_frame() -> None:
    one = publish(1, b"hello")
    cases = [
        one[:-1],  # incomplete
        m(1, spec.BasicAck(delivery_tag=1)),  # another method
        publish(1, b"x" * 5000, frame_max=4096),  # body in two frames
        one.replace(b"hello\xce", b"hello\x00"),  # bad frame end
        encode_frame(1, 1, one[7 : 7 + 13] + b"!") + one[7 + 14 :],  # publish + stray byte
    ]
    for data in cases:
        reader = FrameReader(4096)
        reader.feed(data)
        assert reader.next_publish() is None
        assert reader.buffered == len(data)


def test_plain_publishes_match_the_frame_path() -> None:
    stream = b"".join(publish(1 + i % 2, bytes([i]) * i, routing_key=f"k{i}") for i in range(20))
    events, _ = _both_ways(stream)
    assert len(events) == 20
    assert all(isinstance(e, Command) for e in events)


def test_edge_cases_match_the_frame_path() -> None:
    big = publish(1, b"y" * 9000, frame_max=4096)
    streams = [
        publish(5, b"never opened"),  # channel not open: connection error
        publish(0, b"channel zero"),
        m(1, spec.BasicPublish(routing_key="q")) + publish(1, b"mid content"),
        big + publish(1, b"after fragments"),
        publish(1, b"ok") + m(1, spec.ChannelClose(200, "bye", 0, 0)) + publish(1, b"closed"),
    ]
    for stream in streams:
        _both_ways(stream)


def test_oversized_and_server_closed_channels_match_the_frame_path() -> None:
    events, out = _both_ways(publish(1, b"z" * 100) + publish(2, b"small"), max_message_size=50)
    assert [type(e).__name__ for e in events] == ["ProtocolError", "Command"]
    assert out  # Channel.Close for channel 1

    def closing_stream() -> bytes:
        return publish(1, b"dropped") + publish(2, b"kept")

    def close_channel(c: Client) -> None:
        c.conn.close_channel(1, 406, "test")

    def close_connection(c: Client) -> None:
        c.conn.close(320, "test")

    for make in (close_channel, close_connection):
        whole, split = _opened(), _opened()
        make(whole)
        make(split)
        ev_whole = whole.send(closing_stream())
        ev_split: list[Event] = []
        for b in closing_stream():
            ev_split += split.send(bytes([b]))
        assert ev_whole == ev_split
        assert whole.conn.data_to_send() == split.conn.data_to_send()


def test_content_header_of_another_class_matches_the_frame_path() -> None:
    one = encode_content_frames(
        1,
        spec.BasicPublish(routing_key="q"),
        encode_properties(BasicProperties()),
        b"ab",
        4096,
        class_id=70,
    )
    events, _ = _both_ways(one)
    assert not any(isinstance(e, Command) for e in events)
