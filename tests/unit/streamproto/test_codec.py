"""The stream protocol codec against rstream's own encoder and decoder (a differential test):
client frames rstream encodes decode to the same fields, whole, byte by byte and back to back;
the chunks this broker delivers pass rstream's checks (CRC-32, lengths) and give back the
messages; truncated frames are protocol errors, never crashes."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from rstream import OffsetType, schema
from rstream.encoding import decode_frame, encode_frame, encode_publish

from ringmq.streamproto import FrameReader, ProtocolError, chunk, decode, deliver_frame
from ringmq.streamproto import commands as sc

FRAMES: list[tuple[Any, Any]] = [
    (
        schema.PeerProperties(1, [schema.Property("product", "rstream")]),
        sc.PeerProperties(1, {"product": "rstream"}),
    ),
    (schema.SaslHandshake(2), sc.SaslHandshake(2)),
    (schema.SaslAuthenticate(3, "PLAIN", b"\0u\0p"), sc.SaslAuthenticate(3, "PLAIN", b"\0u\0p")),
    (schema.Tune(1048576, 60), sc.Tune(1048576, 60)),
    (schema.Open(4, "/"), sc.Open(4, "/")),
    (
        schema.Create(5, "s", [schema.Property("max-age", "1h")]),
        sc.Create(5, "s", {"max-age": "1h"}),
    ),
    (schema.Metadata(6, ["a", "b"]), sc.Metadata(6, ["a", "b"])),
    (schema.DeclarePublisher(7, 3, "ref", "s"), sc.DeclarePublisher(7, 3, "ref", "s")),
    (
        schema.Subscribe(8, 1, "s", schema.OffsetSpecOffset(OffsetType.OFFSET, 42), 10, []),
        sc.Subscribe(8, 1, "s", 4, 42, 10, {}),
    ),
    (
        schema.Subscribe(9, 2, "s", schema.OffsetSpec(OffsetType.FIRST), 5, []),
        sc.Subscribe(9, 2, "s", 1, 0, 5, {}),
    ),
    (schema.Credit(1, 3), sc.Credit(1, 3)),
    (schema.StoreOffset("r", "s", 7), sc.StoreOffset("r", "s", 7)),
    (schema.QueryOffset(10, "r", "s"), sc.QueryOffset(10, "r", "s")),
    (schema.Close(11, 1, "bye"), sc.Close(11, 1, "bye")),
    (schema.Heartbeat(), sc.Heartbeat()),
    (schema.SuperStreamRoute(12, "k", "ss"), sc.Route(12, "k", "ss")),
    (schema.SuperStreamPartitions(13, "ss"), sc.Partitions(13, "ss")),
    (
        schema.CreateSuperStream(14, "ss", ["ss-0", "ss-1"], ["0", "1"], []),
        sc.CreateSuperStream(14, "ss", ["ss-0", "ss-1"], ["0", "1"], {}),
    ),
    (schema.DeleteSuperStream(15, "ss"), sc.DeleteSuperStream(15, "ss")),
]


def _frames(wire: bytes, step: int) -> list[Any]:
    reader = FrameReader(1 << 20)
    out = []
    for i in range(0, len(wire), step):
        reader.feed(wire[i : i + step])
        while (f := reader.next_frame()) is not None:
            out.append(decode(*f))
    return out


@pytest.mark.parametrize("step", [1, 3, 1 << 20])
def test_client_frames_decode_whole_byte_by_byte_and_back_to_back(step: int) -> None:
    wire = b"".join(encode_frame(f) for f, _ in FRAMES)
    assert _frames(wire, step) == [want for _, want in FRAMES]


@given(st.lists(st.tuples(st.integers(0, 2**64 - 1), st.binary(max_size=40)), max_size=8))
def test_publish_frames_decode_to_their_messages(messages: list[tuple[int, bytes]]) -> None:
    frame = schema.Publish(2, [schema.Message(i, None, d) for i, d in messages])
    (got,) = _frames(encode_publish(frame), 1 << 20)
    assert got == sc.Publish(2, messages)


@given(
    st.integers(0, 2**63),
    st.integers(0, 2**62),
    st.lists(st.binary(max_size=50), min_size=1, max_size=10),
)
def test_delivered_chunks_pass_rstream_checks(first: int, ts: int, msgs: list[bytes]) -> None:
    frame = deliver_frame(9, chunk(first, ts, msgs))
    got = decode_frame(frame[4:])  # rstream checks the CRC and the data length
    assert isinstance(got, schema.Deliver)
    assert (got.subscription_id, got.chunk_first_offset, got.timestamp) == (9, first, ts)
    assert [bytes(m) for m in got.get_messages()] == msgs


def test_truncated_and_oversized_frames_are_protocol_errors() -> None:
    wire = encode_frame(schema.Open(4, "/"))
    body = wire[4:]
    with pytest.raises(ProtocolError):
        decode(*_head(body[:-2]))
    reader = FrameReader(16)
    reader.feed(b"\x00\x00\x01\x00")
    with pytest.raises(ProtocolError):
        reader.next_frame()


def _head(content: bytes) -> tuple[int, int, bytes]:
    return int.from_bytes(content[:2], "big"), int.from_bytes(content[2:4], "big"), content[4:]
