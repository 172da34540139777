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
    assert isinstance(got, sc.Publish)
    assert (got.publisher_id, got.messages(), got.refused) == (2, messages, [])
    # the entries as a chunk holds them, in order, viewed in place
    assert b"".join(got.entries) == b"".join(len(d).to_bytes(4, "big") + d for _, d in messages)


# An entry of a hand-built publish frame: a simple one (id, message), an uncompressed sub-entry
# batch (id, messages) or a compressed one (id, None: refused, its records unread).
_Entry = tuple[int, bytes | list[bytes] | None]
_entries = st.lists(
    st.tuples(
        st.integers(0, 2**64 - 1),
        st.one_of(
            st.binary(max_size=30),
            st.lists(st.binary(max_size=10), max_size=4),
            st.none(),
        ),
    ),
    max_size=6,
)


def _publish_content(pid: int, entries: list[_Entry], version: int) -> bytes:
    out = [bytes([pid]), len(entries).to_bytes(4, "big")]
    for pub_id, what in entries:
        out.append(pub_id.to_bytes(8, "big"))
        if version >= 2:
            out.append(b"\xff\xff")  # a null filter value
        if isinstance(what, bytes):
            out += (len(what).to_bytes(4, "big"), what)
            continue
        records = b"".join(len(m).to_bytes(4, "big") + m for m in what or [])
        kind = 0x80 | (0 if what is not None else 1) << 4  # 1: gzip
        n = len(what or [])
        out += (bytes([kind]), n.to_bytes(2, "big"), len(records).to_bytes(4, "big"))
        out += (len(records).to_bytes(4, "big"), records)
    return b"".join(out)


@given(_entries, st.sampled_from([1, 2]))
def test_publish_frames_of_any_entries_decode_as_their_messages(
    entries: list[_Entry], version: int
) -> None:
    got = decode(2, version, _publish_content(5, entries, version))
    assert isinstance(got, sc.Publish)
    want: list[tuple[int, bytes]] = []
    for pub_id, what in entries:
        if isinstance(what, bytes):
            want.append((pub_id, what))
        elif what is not None:
            want += [(pub_id, m) for m in what]
    assert got.messages() == want
    assert got.ids == [i for i, _ in want]
    assert got.refused == [i for i, what in entries if what is None]
    simple = all(isinstance(what, bytes) for _, what in entries)
    if simple:  # the chunk's entries, as they arrived
        assert b"".join(got.entries) == b"".join(len(m).to_bytes(4, "big") + m for _, m in want)
    else:
        assert got.entries == []  # batches: message by message


@given(st.lists(st.binary(max_size=20), min_size=1, max_size=5), st.data())
def test_a_cut_publish_frame_is_a_protocol_error(msgs: list[bytes], data: st.DataObject) -> None:
    content = _publish_content(1, [(i, m) for i, m in enumerate(msgs)], 1)
    cut = data.draw(st.integers(0, len(content) - 1))
    with pytest.raises(ProtocolError):
        decode(2, 1, content[:cut])
    with pytest.raises(ProtocolError):  # and one byte too many
        decode(2, 1, content + b"\x00")


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
