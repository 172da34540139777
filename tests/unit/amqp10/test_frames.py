"""AMQP 1.0 framing: a stream fed whole, byte by byte and with trailing bytes; framing errors;
multi-frame transfers; random bytes only ever give frames, DecodeError or FramingError."""

from __future__ import annotations

import itertools
from typing import Any

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from ringmq.amqp10 import performatives as pf
from ringmq.amqp10.frames import (
    AMQP_HEADER,
    EMPTY_FRAME,
    FRAME_AMQP,
    FRAME_SASL,
    SASL_HEADER,
    Frame,
    FrameReader,
    FramingError,
    ProtocolHeader,
    encode_frame,
    encode_transfer_frames,
)
from ringmq.amqp10.types import DecodeError

STREAM = (
    SASL_HEADER
    + encode_frame(0, pf.SaslInit("PLAIN", b"\x00guest\x00guest", "localhost"))
    + AMQP_HEADER
    + encode_frame(0, pf.Open("c"))
    + EMPTY_FRAME
    + encode_frame(3, pf.Transfer(0, 1, b"t", 0, False), b"payload" * 50)
    + encode_frame(3, pf.Close())
)


def _read(chunks: list[bytes], reader: FrameReader | None = None) -> list[Any]:
    reader = reader or FrameReader()
    out: list[Any] = []
    for chunk in chunks:
        reader.feed(chunk)
        while (f := reader.next_frame()) is not None:
            if isinstance(f, Frame) and f.type == FRAME_SASL:
                reader.expect_header()  # the AMQP header follows the SASL exchange here
            out.append(f)
    return out


def _expected() -> list[Any]:
    return [
        ProtocolHeader(SASL_HEADER),
        Frame(FRAME_SASL, 0, pf.SaslInit("PLAIN", b"\x00guest\x00guest", "localhost").encode()),
        ProtocolHeader(AMQP_HEADER),
        Frame(FRAME_AMQP, 0, pf.Open("c").encode()),
        Frame(FRAME_AMQP, 0, b""),
        Frame(FRAME_AMQP, 3, pf.Transfer(0, 1, b"t", 0, False).encode() + b"payload" * 50),
        Frame(FRAME_AMQP, 3, pf.Close().encode()),
    ]


def test_whole() -> None:
    assert _read([STREAM]) == _expected()


def test_byte_by_byte() -> None:
    reader = FrameReader()
    assert _read([STREAM[i : i + 1] for i in range(len(STREAM))], reader) == _expected()
    assert reader.buffered == 0


@given(st.lists(st.integers(1, len(STREAM)), max_size=12))
def test_any_split(cuts: list[int]) -> None:
    points = sorted({0, len(STREAM), *cuts})
    chunks = [STREAM[a:b] for a, b in itertools.pairwise(points)]
    assert _read(chunks) == _expected()


def test_trailing_bytes_wait() -> None:
    reader = FrameReader()
    got = _read([STREAM + EMPTY_FRAME[:5]], reader)
    assert got == _expected()
    assert reader.buffered == 5
    reader.feed(EMPTY_FRAME[5:])
    assert reader.next_frame() == Frame(FRAME_AMQP, 0, b"")


def test_extended_header_is_skipped() -> None:
    body = pf.End().encode()
    frame = (12 + len(body)).to_bytes(4, "big") + b"\x03\x00\x00\x07" + b"XXXX" + body
    reader = FrameReader(expect_header=False)
    reader.feed(frame)
    assert reader.next_frame() == Frame(FRAME_AMQP, 7, body)


@pytest.mark.parametrize(
    ("frame", "match"),
    [
        (b"\x00\x00\x01\x01\x02\x00\x00\x00", "exceeds max-frame-size"),
        (b"\x00\x00\x00\x08\x01\x00\x00\x00", "data offset 1"),
        (b"\x00\x00\x00\x07\x02\x00\x00\x00", "frame size 7"),
        (b"\x00\x00\x00\x0c\x04\x00\x00\x00", "frame size 12 with data offset 4"),
        (b"\x00\x00\x00\x08\x02\x05\x00\x00", "unknown frame type 5"),
    ],
)
def test_framing_errors(frame: bytes, match: str) -> None:
    reader = FrameReader(256, expect_header=False)
    reader.feed(frame)
    with pytest.raises(FramingError, match=match):
        reader.next_frame()


def test_max_frame_size_is_settable() -> None:
    big = encode_frame(0, pf.Transfer(0, 0, b"t", 0, False), b"x" * 1000)
    reader = FrameReader(512, expect_header=False)
    reader.feed(big)
    with pytest.raises(FramingError):
        reader.next_frame()
    reader = FrameReader(512, expect_header=False)
    reader.max_frame_size = 2048
    reader.feed(big)
    assert isinstance(reader.next_frame(), Frame)


@given(
    payload=st.binary(max_size=3000),
    max_frame_size=st.integers(80, 1200),
    tag=st.binary(min_size=1, max_size=32),
    settled=st.booleans(),
)
@example(payload=b"x" * 471, max_frame_size=512, tag=b"t", settled=False)
@example(payload=b"x" * 472, max_frame_size=512, tag=b"t", settled=False)
@example(payload=b"x" * 473, max_frame_size=512, tag=b"t", settled=False)
def test_transfer_frames_reassemble(
    payload: bytes, max_frame_size: int, tag: bytes, settled: bool
) -> None:
    data = encode_transfer_frames(
        5, 2, 9, tag, payload, settled=settled, max_frame_size=max_frame_size
    )
    frames = _read([data], FrameReader(max_frame_size, expect_header=False))
    assert all(len(f.body) + 8 <= max_frame_size for f in frames)
    parts = [pf.decode_performative(f.body) for f in frames]
    first = parts[0][0]
    assert isinstance(first, pf.Transfer)
    assert (first.handle, first.delivery_id, first.delivery_tag, first.settled) == (
        2,
        9,
        tag,
        settled,
    )
    assert [p.more for p, _ in parts] == [True] * (len(parts) - 1) + [False]  # type: ignore[union-attr]
    assert all(p.handle == 2 for p, _ in parts)  # type: ignore[union-attr]
    got = b"".join(f.body[off:] for f, (_, off) in zip(frames, parts, strict=True))
    assert got == payload


def test_heartbeat_and_sasl_frame_types() -> None:
    assert encode_frame(0, None) == EMPTY_FRAME
    assert encode_frame(0, pf.SaslOutcome(0))[5] == FRAME_SASL
    assert encode_frame(0, pf.Open("x"))[5] == FRAME_AMQP


@given(st.binary(max_size=200), st.booleans())
@example(b"\x00\x00\x00\x0a\x02\x00\x00\x00\x00\x53", False)
@example(b"\x00\x00\x00\x0b\x02\x00\x00\x00\x00\x53\x10", False)
@example(b"\x00\x00\x00\x0c\x02\x00\x00\x00\x00\x53\x14\x45", False)
def test_random_bytes_give_frames_or_errors(data: bytes, header: bool) -> None:
    reader = FrameReader(expect_header=header)
    reader.feed(data)
    try:
        while (f := reader.next_frame()) is not None:
            if isinstance(f, Frame) and f.body:
                pf.decode_performative(f.body)
    except (DecodeError, FramingError):
        pass


@given(st.binary(max_size=120))
def test_random_bodies_behind_a_valid_header(body: bytes) -> None:
    reader = FrameReader(expect_header=False)
    reader.feed((8 + len(body)).to_bytes(4, "big") + b"\x02\x00\x00\x00" + body)
    f = reader.next_frame()
    assert isinstance(f, Frame)
    if body:
        try:
            pf.decode_performative(f.body)
        except DecodeError:
            pass


@given(st.integers(0, len(STREAM) - 1), st.integers(0, 255))
def test_a_corrupted_stream_gives_frames_or_errors(at: int, byte: int) -> None:
    data = STREAM[:at] + bytes((byte,)) + STREAM[at + 1 :]
    reader = FrameReader()
    reader.feed(data)
    try:
        while (f := reader.next_frame()) is not None:
            if isinstance(f, Frame) and f.body:
                pf.decode_performative(f.body)
                if f.type == FRAME_SASL:
                    reader.expect_header()
    except (DecodeError, FramingError):
        pass
