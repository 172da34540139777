"""The shard log sees every write of a `FileStore`; a `Replica` built from it recovers the same.

The leader's store runs with small segments so that segments roll and are reclaimed (DELETE)
and the dedup log is rewritten (REPLACE); every operation of the log is applied to a replica
directory, and a `FileStore` opened there (a promotion) must recover exactly what a
`FileStore` reopened on the leader's directory after a crash recovers.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from ringmq.core.message import Message, SeqId
from ringmq.storage.replica import Replica, ShardState, read_state
from ringmq.storage.shardlog import FileEntry, OpKind, ShardLog, file_index
from ringmq.storage.store import FileStore, RecoveredState


def _msg(body: bytes) -> Message:
    return Message("ex", "rk", b"\x80\x00\x02", body, persistent=True)


def _summary(state: RecoveredState) -> object:
    return (
        {q: [(m.seq, m.message.body) for m in msgs] for q, msgs in state.queues.items()},
        state.definitions,
        {scope: dict(ids) for scope, ids in state.dedup.items()},
    )


def _store(path: Path) -> FileStore:
    return FileStore.open(path, segment_bytes=4096, msg_segment_bytes=8192, embed_below=512)


def test_a_replica_fed_by_the_log_recovers_what_the_leader_holds(tmp_path: Path) -> None:
    leader_dir, copy_dir = tmp_path / "leader", tmp_path / "copy"
    store = _store(leader_dir)
    store.recover()
    store.put_definition("queue", "/|q0", {"durable": True})
    store.sync()
    log = ShardLog(leader_dir, "s0", epoch=1)
    # what was written before the log started reaches the copy by a bulk sync
    replica = Replica(copy_dir)
    for entry in file_index(leader_dir):
        replica.write_chunk(entry.path, 0, (leader_dir / entry.path).read_bytes())
    store.attach_log(log)
    for i in range(300):
        q = f"q{i % 3}"
        store.enqueue(q, SeqId(i), _msg(bytes([i % 251]) * (100 if i % 4 else 900)))
        if i % 5 == 0:
            store.ack(q, [SeqId(i - 3)])
        if i % 7 == 0:
            store.dedup_record("queue\x1f/\x1fq0", f"id{i}", i)
        if i % 50 == 0:
            store.put_definition("binding", f"b{i}", {"i": i})
        if i % 20 == 0:
            store.sync()
    for i in range(0, 300, 3):  # drain q0 so that its segments are reclaimed
        store.ack("q0", [SeqId(i)])
    store.sync()
    store.dedup_rewrite({"queue\x1f/\x1fq0": [("id7", 7)]})
    store.enqueue("q1", SeqId(1000), _msg(b"last"))
    store.sync()
    store.sync()  # reclamation runs inside flush(): one more round deletes what it freed

    kinds = {op.kind for op in log.since(0) or []}
    assert kinds == {OpKind.APPEND, OpKind.DELETE, OpKind.REPLACE}
    for op in log.since(0) or []:
        replica.apply(op)
    replica.save(ShardState("s0", 1, log.position))
    replica.close()
    assert read_state(copy_dir) == ShardState("s0", 1, log.position)

    def index(root: Path) -> list[FileEntry]:
        return [e for e in file_index(root) if e.size]

    assert index(copy_dir) == index(leader_dir)
    store.abandon()  # the leader dies (kill -9: what reached the OS stays)
    on_leader = _store(leader_dir)
    on_copy = _store(copy_dir)  # the promotion
    try:
        assert _summary(on_copy.recover()) == _summary(on_leader.recover())
    finally:
        on_leader.abandon()
        on_copy.abandon()


def test_backlog_is_bounded_and_says_what_it_no_longer_holds(tmp_path: Path) -> None:
    log = ShardLog(tmp_path, "s0", 2, start=5, backlog_bytes=10)
    assert log.since(5) == []
    assert log.since(4) is None
    for i in range(6):
        log.append(tmp_path / "journal" / "1.seg", i * 4, b"abcd")
    assert log.position == 11
    assert log.since(11) == []
    assert log.since(12) is None
    held = log.since(log.first)
    assert held is not None
    assert sum(len(op.data) for op in held) <= 10 + 4
    assert log.since(log.first - 1) is None
    assert [op.offset for op in log.since(9) or []] == [16, 20]


def test_records_the_backlog_let_go_of_are_freed_at_once(tmp_path: Path) -> None:
    # They used to stay referenced until 4096 had piled up: with a group commit's write per
    # record, hundreds of MiB past `backlog_bytes` on a replicating leader.
    log = ShardLog(tmp_path, "s0", 1, backlog_bytes=10)
    first = bytes(bytearray(b"a" * 8))  # an object of its own, referenced by this frame only
    alone = sys.getrefcount(first)
    log.append(tmp_path / "journal" / "1.seg", 0, first)
    assert sys.getrefcount(first) == alone + 1  # the backlog holds it
    for i in range(1, 4):
        log.append(tmp_path / "journal" / "1.seg", i * 8, b"b" * 8)
    assert log.since(0) is None  # trimmed...
    assert sys.getrefcount(first) == alone  # ...and no longer referenced


def test_a_copy_cut_short_in_a_bulk_sync_is_refused(tmp_path: Path) -> None:
    replica = Replica(tmp_path)
    replica.save(ShardState("s0", 2, 0, syncing=True))
    replica.close()
    with pytest.raises(ValueError, match="bulk sync did not finish"):
        FileStore.open(tmp_path)


def test_a_batch_wakes_the_followers_once_at_its_end(tmp_path: Path) -> None:
    log = ShardLog(tmp_path, "s0", epoch=1)
    woken: list[int] = []
    log.on_append = lambda: woken.append(log.position)
    log.append(tmp_path / "a", 0, b"x")
    assert woken == [1]  # outside a batch: at once
    with log.batch():
        log.append(tmp_path / "a", 1, b"y")
        with log.batch():  # nested: still the outer batch's end
            log.append(tmp_path / "b", 0, b"z")
        log.delete(tmp_path / "c")
        assert woken == [1]
    assert woken == [1, 4]
    with log.batch():
        pass  # nothing added: nobody woken
    assert woken == [1, 4]


def test_a_store_write_out_of_several_files_wakes_the_followers_once(tmp_path: Path) -> None:
    store = FileStore.open(tmp_path)
    store.recover()
    log = ShardLog(tmp_path, "s0", epoch=1)
    store.attach_log(log)
    woken: list[int] = []
    log.on_append = lambda: woken.append(log.position)
    store.put_definition("queue", "/|q", {"durable": True})  # the definitions file
    store.enqueue("/|q", SeqId(1), Message("", "q", b"", b"x" * 10_000))  # journal and body
    start = log.position
    store.write_out()
    assert log.position - start >= 2  # several files written ...
    assert woken == [log.position]  # ... one wake
    store.close()
