"""A delayed redelivery's due time in the store: journaled with the delivery count, recovered
with the message (after a clean stop from the recovery terms, after a kill from the journal,
on a replication follower promoted), carried by a copy forward, and ended by the next
delivery."""

from __future__ import annotations

from pathlib import Path

import pytest

from ringmq.core.message import Message, SeqId
from ringmq.storage.replica import Replica, ShardState
from ringmq.storage.shardlog import ShardLog, file_index
from ringmq.storage.store import FileStore, MemoryStore, RecoveredState, Store


def msg(body: bytes) -> Message:
    return Message("ex", "rk", b"\x80\x00\x02", body, persistent=True)


def summary(state: RecoveredState) -> list[tuple[int, bytes, bool, int, int | None]]:
    return [
        (m.seq, m.message.body, m.redelivered, m.delivery_count, m.due_ms)
        for m in state.queues.get("q", ())
    ]


def _reopen(store: Store, path: Path, how: str) -> RecoveredState:
    if isinstance(store, MemoryStore):
        return store.recover()  # the live contents
    assert isinstance(store, FileStore)
    if how == "clean":
        store.close()
        state = FileStore.open(path).recover()
        assert state.clean
        return state
    store.sync()
    store.abandon()  # killed after the sync
    state = FileStore.open(path).recover()
    assert not state.clean
    return state


@pytest.mark.parametrize(
    ("kind", "how"), [("memory", "live"), ("file", "clean"), ("file", "killed")]
)
def test_a_delayed_redelivery_comes_back_with_its_due_time_and_count(
    tmp_path: Path, kind: str, how: str
) -> None:
    store: Store = MemoryStore() if kind == "memory" else FileStore.open(tmp_path)
    store.recover()
    store.enqueue("q", SeqId(1), msg(b"waits"))
    store.enqueue("q", SeqId(2), msg(b"plain"))
    store.delivered("q", SeqId(1), 1)
    store.delivered("q", SeqId(1), 1, due_ms=123_456)
    state = _reopen(store, tmp_path, how)
    assert summary(state) == [
        (1, b"waits", True, 1, 123_456),
        (2, b"plain", how == "killed", 0, None),
    ]


@pytest.mark.parametrize("how", ["clean", "killed"])
def test_the_next_delivery_ends_the_wait(tmp_path: Path, how: str) -> None:
    # Released when due and handed out again: a restart finds it with nothing to wait for.
    store = FileStore.open(tmp_path)
    store.recover()
    store.enqueue("q", SeqId(1), msg(b"m"), due_ms=50)  # scheduled at publish
    store.delivered("q", SeqId(1), 1)
    store.delivered("q", SeqId(1), 1, due_ms=500)
    store.delivered("q", SeqId(1), 2)
    assert summary(_reopen(store, tmp_path, how)) == [(1, b"m", True, 2, None)]


def test_a_copy_forward_carries_the_due_time(tmp_path: Path) -> None:
    # The waiting message's segment is copied forward (and the original and the segment of its
    # DELIVERY_COUNT deleted): the copied ENQUEUE holds the due time.
    s = FileStore.open(tmp_path, segment_bytes=4096)
    s.recover()
    s.enqueue("q", SeqId(0), msg(b"long lived"))
    s.delivered("q", SeqId(0), 3, due_ms=987_654)
    seq = 1
    for _ in range(30):
        batch = [SeqId(seq + i) for i in range(40)]
        for sq in batch:
            s.enqueue("q", sq, msg(bytes(100)))
        s.ack("q", batch)
        seq += 40
        s.sync()
    assert s.stats()["segments"] <= 10  # copied forward, the old segments gone
    s.abandon()
    state = FileStore.open(tmp_path, segment_bytes=4096).recover()
    assert summary(state) == [(0, b"long lived", True, 3, 987_654)]


def test_a_promoted_follower_finds_the_wait(tmp_path: Path) -> None:
    # Replication ships the journal as file operations: a follower's copy, opened on
    # promotion, replays the same DELIVERY_COUNT record.
    leader_dir, copy_dir = tmp_path / "leader", tmp_path / "copy"
    store = FileStore.open(leader_dir)
    store.recover()
    store.sync()
    replica = Replica(copy_dir)
    for entry in file_index(leader_dir):
        replica.write_chunk(entry.path, 0, (leader_dir / entry.path).read_bytes())
    log = ShardLog(leader_dir, "s0", epoch=1)
    store.attach_log(log)
    store.enqueue("q", SeqId(1), msg(b"waits"))
    store.delivered("q", SeqId(1), 1)
    store.delivered("q", SeqId(1), 1, due_ms=424_242)
    store.sync()
    for op in log.since(0) or []:
        replica.apply(op)
    replica.save(ShardState("s0", 1, log.position))
    replica.close()
    store.abandon()  # the leader dies
    promoted = FileStore.open(copy_dir)
    try:
        assert summary(promoted.recover()) == [(1, b"waits", True, 1, 424_242)]
    finally:
        promoted.abandon()
