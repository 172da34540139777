"""The replication codec round-trips; the sessions authenticate, fence and resume as documented."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ringmq.replication.codec import (
    Ack,
    Chunk,
    Frame,
    FrameReader,
    Hello,
    Index,
    NeedSync,
    ProtocolError,
    Records,
    Refuse,
    Synced,
    Want,
    Welcome,
    encode,
    hello_mac,
)
from ringmq.replication.follower import FollowerSession
from ringmq.replication.leader import (
    Acked,
    Authenticated,
    Closed,
    FrameCache,
    LeaderSession,
    NeedIndex,
)
from ringmq.replication.leader import State as LState
from ringmq.storage.replica import ShardState
from ringmq.storage.shardlog import FileEntry, FileOp, OpKind, ShardLog
from tests.unit.replication.test_model import DictReplica

ROOT = Path("/r")
u64 = st.integers(0, 2**64 - 1)
text = st.text(max_size=20)
ops = st.builds(FileOp, st.sampled_from(OpKind), text, u64, st.binary(max_size=50))
frames: st.SearchStrategy[Frame] = st.one_of(
    st.builds(Hello, text, text, u64, u64, st.binary(max_size=16), st.binary(max_size=32)),
    st.builds(Welcome, u64, u64, u64),
    st.builds(Refuse, text),
    st.builds(
        Index,
        u64,
        u64,
        st.lists(st.builds(FileEntry, text, u64, st.integers(0, 2**32 - 1))).map(tuple),
    ),
    st.builds(Want, st.lists(text).map(tuple)),
    st.builds(Chunk, text, u64, st.binary(max_size=50)),
    st.just(Synced()),
    st.builds(Records, u64, u64, st.lists(ops, max_size=5).map(tuple)),
    st.builds(Ack, u64, u64, u64),
    st.just(NeedSync()),
)


@given(st.lists(frames, max_size=6), st.integers(1, 64))
def test_frames_round_trip_whole_and_in_pieces(batch: list[Frame], step: int) -> None:
    data = b"".join(encode(f) for f in batch)
    for pieces in ([data], [data[i : i + step] for i in range(0, len(data), step)]):
        reader = FrameReader()
        got: list[Frame] = []
        for piece in pieces:
            reader.feed(piece)
            while (frame := reader.next_frame()) is not None:
                got.append(frame)
        assert got == batch


def test_garbage_is_a_protocol_error() -> None:
    reader = FrameReader()
    reader.feed(b"\x00\x00\x00\x02\x63\x00")
    with pytest.raises(ProtocolError):
        reader.next_frame()
    reader = FrameReader()
    reader.feed(b"\xff\xff\xff\xff\x01")
    with pytest.raises(ProtocolError):
        reader.next_frame()


def _log(epoch: int = 3) -> ShardLog:
    log = ShardLog(ROOT, "s0", epoch, 10)
    log.append(ROOT / "journal/1.seg", 0, b"abc")
    return log


def _hello(secret: bytes, shard: str = "s0", epoch: int = 3, position: int = 10) -> bytes:
    nonce = b"n" * 16
    mac = hello_mac(secret, shard, "f", epoch, position, nonce)
    return encode(Hello(shard, "f", epoch, position, nonce, mac))


def test_leader_refuses_a_wrong_secret_another_shard_and_a_newer_epoch() -> None:
    for hello, why in (
        (_hello(b"wrong"), "authentication failed"),
        (_hello(b"k", shard="s9"), "leads shard 's0'"),
        (_hello(b"k", epoch=4), "stale leader"),
    ):
        leader = LeaderSession(_log(), b"k")
        events = leader.receive_data(hello)
        assert leader.state is LState.CLOSED
        assert isinstance(events[-1], Closed)
        assert why in events[-1].reason
        reader = FrameReader()
        reader.feed(leader.data_to_send())
        frame = reader.next_frame()
        assert isinstance(frame, Refuse)
        assert why in frame.reason


def test_leader_resumes_its_epoch_from_the_backlog_and_counts_acks() -> None:
    log = _log()
    leader = LeaderSession(log, b"k")
    events = leader.receive_data(_hello(b"k"))
    assert events == [Authenticated("f")]
    assert leader.state is LState.STREAMING
    reader = FrameReader()
    reader.feed(leader.data_to_send())
    assert reader.next_frame() == Welcome(3, 10, 11)
    assert reader.next_frame() == Records(
        3, 11, (FileOp(OpKind.APPEND, "journal/1.seg", 0, b"abc"),)
    )
    assert leader.receive_data(encode(Ack(3, 11, 10))) == [Acked(11, 10)]
    # an ack of a position never sent is a protocol violation
    assert isinstance(leader.receive_data(encode(Ack(3, 12, 0)))[-1], Closed)


def test_an_unknown_epoch_or_a_trimmed_position_gets_a_bulk_sync() -> None:
    leader = LeaderSession(_log(), b"k")
    assert leader.receive_data(_hello(b"k", epoch=2, position=10)) == [
        Authenticated("f"),
        NeedIndex(),
    ]
    leader = LeaderSession(_log(), b"k")
    assert NeedIndex() in leader.receive_data(_hello(b"k", position=5))


def test_follower_refuses_an_older_epoch() -> None:
    replica = DictReplica()
    follower = FollowerSession(replica, ShardState("s0", 5, 7), "f", b"k", b"n" * 16)
    events = follower.receive_data(encode(Welcome(4, 0, 9)))
    assert follower.closed
    assert events[-1].fenced  # type: ignore[union-attr]
    follower = FollowerSession(replica, ShardState("s0", 5, 7), "f", b"k", b"n" * 16)
    follower.receive_data(encode(Welcome(5, 0, 9)))
    assert not follower.closed
    stale = Records(4, 8, (FileOp(OpKind.APPEND, "journal/1.seg", 0, b"x"),))
    follower.receive_data(encode(stale))
    assert follower.state.value == "closed"
    assert replica.files == {}  # nothing of the stale leader was applied


def test_follower_cuts_back_a_divergent_tail_for_a_newer_epoch() -> None:
    replica = DictReplica()
    follower = FollowerSession(replica, ShardState("s0", 0, 0), "f", b"k", b"n" * 16)
    follower.tail.exact = True  # an empty copy holds exactly nothing
    follower.receive_data(encode(Welcome(1, 0, 0)))
    one = FileOp(OpKind.APPEND, "journal/1.seg", 0, b"aa")
    two = FileOp(OpKind.APPEND, "journal/1.seg", 2, b"bb")
    three = FileOp(OpKind.APPEND, "journal/2.seg", 0, b"cc")
    follower.receive_data(encode(Records(1, 1, (one, two, three))))
    assert replica.snapshot() == {"journal/1.seg": b"aabb", "journal/2.seg": b"cc"}
    # epoch 2 began after position 1: positions 2 and 3 of epoch 1 are a divergent tail
    other = FileOp(OpKind.APPEND, "journal/1.seg", 2, b"ZZ")
    follower.receive_data(encode(Records(2, 2, (other,))))
    assert (follower.epoch, follower.position) == (2, 2)
    assert replica.snapshot() == {"journal/1.seg": b"aaZZ"}
    assert replica.saved == ShardState("s0", 2, 1)


def test_sessions_sharing_a_frame_cache_send_the_same_records_encoded_once() -> None:
    log = _log()
    frames = FrameCache()
    a, b = (LeaderSession(log, b"k", frames=frames) for _ in range(2))
    for s in (a, b):
        s.receive_data(_hello(b"k"))
        s.data_to_send()  # the welcome and the first record
    log.append(ROOT / "journal/1.seg", 3, b"def")
    log.append(ROOT / "journal/1.seg", 6, b"ghi")
    a.pump()
    b.pump()
    sent_a, sent_b = a.data_to_send(), b.data_to_send()
    assert sent_a is sent_b  # one encoding, handed to both
    reader = FrameReader()
    reader.feed(sent_a)
    assert reader.next_frame() == Records(
        3,
        12,
        (
            FileOp(OpKind.APPEND, "journal/1.seg", 3, b"def"),
            FileOp(OpKind.APPEND, "journal/1.seg", 6, b"ghi"),
        ),
    )
    # a session behind the others is sent its own batch, from where it is
    c = LeaderSession(log, b"k", frames=frames)
    c.receive_data(_hello(b"k", position=11))
    reader = FrameReader()
    reader.feed(c.data_to_send())
    assert reader.next_frame() == Welcome(3, 10, 13)
    frame = reader.next_frame()
    assert isinstance(frame, Records)
    assert (frame.first, [op.data for op in frame.ops]) == (12, [b"def", b"ghi"])
