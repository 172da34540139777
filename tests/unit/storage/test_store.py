from __future__ import annotations

import logging
import os
from pathlib import Path

import pytest

from ringmq.core.message import Message, SeqId
from ringmq.storage.store import (
    FileStore,
    MemoryStore,
    RecoveredState,
    Store,
    is_persistent,
)


def msg(body: bytes, **kw: object) -> Message:
    return Message("ex", "rk", b"\x80\x00\x02", body, persistent=True, **kw)  # type: ignore[arg-type]


def summary(state: RecoveredState) -> dict[str, list[tuple[int, bytes, bool, int]]]:
    return {
        q: [(m.seq, m.message.body, m.redelivered, m.delivery_count) for m in ms]
        for q, ms in state.queues.items()
    }


def test_is_persistent() -> None:
    assert is_persistent(True, msg(b"x"))
    assert not is_persistent(False, msg(b"x"))
    assert not is_persistent(True, Message("", "q", b"", b"x"))


@pytest.mark.parametrize("factory", ["memory", "file"])
def test_port_contract(tmp_path: Path, factory: str) -> None:
    store: Store = MemoryStore() if factory == "memory" else FileStore.open(tmp_path)
    store.recover()
    p1 = store.enqueue("q", SeqId(1), msg(b"a"), expiry_ms=50, due_ms=7)
    p2 = store.enqueue("q", SeqId(2), msg(b"b"))
    assert p2 > p1 > 0
    assert store.durable_position < p2
    point = store.flush()
    assert point.position >= p2
    assert store.fsync(point) == point.position
    assert store.durable_position >= p2
    store.delivered("q", SeqId(2), 1)
    store.ack("q", [SeqId(1)])
    store.put_definition("queue", "/|q", {"durable": True})
    store.sync()
    if isinstance(store, FileStore):
        store.close()
        store = FileStore.open(tmp_path)
    state = store.recover()
    assert summary(state) == {"q": [(2, b"b", True, 1)]}
    assert state.definitions == {"queue": {"/|q": {"durable": True}}}
    assert state.next_seq["q"] == 3


def test_clean_vs_dirty_redelivered_flag(tmp_path: Path) -> None:
    s = FileStore.open(tmp_path)
    assert not s.recover().clean  # a fresh directory has no clean marker
    s.enqueue("q", SeqId(0), msg(b"never delivered"))
    s.enqueue("q", SeqId(1), msg(b"delivered"))
    s.delivered("q", SeqId(1), 2)
    s.close()
    clean = FileStore.open(tmp_path)
    state = clean.recover()
    assert state.clean
    assert summary(state) == {"q": [(0, b"never delivered", False, 0), (1, b"delivered", True, 2)]}
    clean.sync()
    # no close(): a dirty stop flags everything redelivered
    dirty = FileStore.open(tmp_path).recover()
    assert not dirty.clean
    assert [m.redelivered for m in dirty.queues["q"]] == [True, True]


def test_unsynced_writes_may_be_lost_synced_survive(tmp_path: Path) -> None:
    s = FileStore.open(tmp_path)
    s.recover()
    s.enqueue("q", SeqId(0), msg(b"synced"))
    s.sync()
    s.enqueue("q", SeqId(1), msg(b"buffered only"))  # never flushed: lost on a crash
    state = FileStore.open(tmp_path).recover()
    assert [m.message.body for m in state.queues["q"]] == [b"synced"]


def test_segments_deleted_after_acks(tmp_path: Path) -> None:
    s = FileStore.open(tmp_path, segment_bytes=2048)
    s.recover()
    for i in range(200):
        s.enqueue("q", SeqId(i), msg(bytes(100)))
    s.sync()
    assert s.stats()["segments"] > 10
    s.ack("q", [SeqId(i) for i in range(200)])
    s.sync()
    s.sync()
    st = s.stats()
    assert st["segments"] <= 2
    assert st["journal_bytes"] < 4096
    s.close()
    assert FileStore.open(tmp_path).recover().queues == {}


def test_ack_never_outlives_its_enqueue(tmp_path: Path) -> None:
    # seg 1: A, X (X stays live).  seg 2: B, ACK A, ACK B, C.  seg 3: D, ACK C.
    # Segment 2 then holds no live enqueue, but its ACK of A must stay while segment 1 exists,
    # or A would come back on replay. (X outweighs segment 2, so it is not copied forward to
    # free it: reclaim.py.)
    s = FileStore.open(tmp_path, segment_bytes=500)
    s.recover()
    s.enqueue("q", SeqId(0), msg(bytes(200)))  # A
    s.enqueue("q", SeqId(1), msg(b"X" * 2000))  # X
    s.enqueue("q", SeqId(2), msg(bytes(200)))  # B (rolls to seg 2)
    s.ack("q", [SeqId(0)])
    s.ack("q", [SeqId(2)])
    s.enqueue("q", SeqId(3), msg(bytes(200)))  # C
    s.enqueue("q", SeqId(4), msg(b"D" * 200))  # D (rolls to seg 3)
    s.ack("q", [SeqId(3)])
    for _ in range(3):
        s.sync()
    assert s.stats()["segments"] == 3
    state = FileStore.open(tmp_path).recover()
    assert [m.seq for m in state.queues["q"]] == [1, 4]


def test_copy_forward_reclaims_segments_pinned_by_one_message(tmp_path: Path) -> None:
    s = FileStore.open(tmp_path, segment_bytes=4096)
    s.recover()
    s.enqueue("q", SeqId(0), msg(b"long lived"))
    s.delivered("q", SeqId(0), 3)
    seq = 1
    for _ in range(30):
        batch = [SeqId(seq + i) for i in range(40)]
        for sq in batch:
            s.enqueue("q", sq, msg(bytes(100)))
        s.ack("q", batch)
        seq += 40
        s.sync()
        # bounded: the pinned segment is copied forward once no ack has touched it for a
        # few group commits (without that, every segment written would stay: ~60 of them)
        assert s.stats()["segments"] <= 10
    assert s.stats()["journal_bytes"] < 40 * 1024
    state = FileStore.open(tmp_path).recover()  # dirty reopen
    assert summary(state) == {"q": [(0, b"long lived", True, 3)]}
    assert state.next_seq["q"] == seq


def test_shared_store_dedup_refcount_and_reclaim(tmp_path: Path) -> None:
    s = FileStore.open(tmp_path, embed_below=1000, msg_segment_bytes=20_000)
    s.recover()
    big = msg(b"B" * 5000)
    for q in ("q1", "q2", "q3"):
        s.enqueue(q, SeqId(0), big)
    small = msg(b"s" * 999)
    s.enqueue("q1", SeqId(1), small)
    assert big.store_ref != 0
    assert small.store_ref == 0
    assert s.body_refcount(big.store_ref) == 3
    s.sync()
    st = s.stats()
    assert st["shared_bodies"] == 1
    assert 5000 <= st["msgstore_bytes"] < 6000  # stored once
    s.ack("q1", [SeqId(0)])
    assert s.body_refcount(big.store_ref) == 2
    s.close()

    s2 = FileStore.open(tmp_path, embed_below=1000, msg_segment_bytes=20_000)
    state = s2.recover()
    m2, m3 = state.queues["q2"][0].message, state.queues["q3"][0].message
    assert m2 is m3  # one Message per shared body
    assert m2.body == b"B" * 5000
    assert s2.body_refcount(m2.store_ref) == 2
    # many large bodies fill several files; acking them all reclaims the files
    for i in range(2, 30):
        s2.enqueue("q1", SeqId(i), msg(bytes([i]) * 5000))
    s2.sync()
    files_before = s2.stats()["msgstore_files"]
    assert files_before >= 5
    s2.ack("q1", [SeqId(i) for i in range(2, 30)])
    s2.ack("q2", [SeqId(0)])
    s2.ack("q3", [SeqId(0)])
    s2.sync()
    s2.sync()
    assert s2.stats()["shared_bodies"] == 0
    assert s2.stats()["msgstore_files"] <= 1
    s2.close()
    assert summary(FileStore.open(tmp_path).recover()) == {"q1": [(1, b"s" * 999, False, 0)]}


def test_msgstore_compaction_keeps_live_bodies(tmp_path: Path) -> None:
    s = FileStore.open(tmp_path, embed_below=100, msg_segment_bytes=10_000)
    s.recover()
    for i in range(40):
        s.enqueue("q", SeqId(i), msg(bytes([i]) * 1000))
    s.sync()
    keep = [i for i in range(40) if i % 7 == 0]
    s.ack("q", [SeqId(i) for i in range(40) if i % 7])
    for _ in range(3):
        s.sync()
    assert s.stats()["msgstore_bytes"] < 12_000
    state = FileStore.open(tmp_path).recover()
    assert [(m.seq, m.message.body) for m in state.queues["q"]] == [
        (i, bytes([i]) * 1000) for i in keep
    ]


def test_lost_body_drops_unconfirmed_enqueue(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    s = FileStore.open(tmp_path, embed_below=10)
    s.recover()
    s.enqueue("q", SeqId(0), msg(b"x" * 50))
    s.sync()
    s.close()
    for f in (tmp_path / "msgstore").iterdir():
        os.truncate(f, 5)
    with caplog.at_level(logging.WARNING):
        state = FileStore.open(tmp_path).recover()
    assert state.queues == {}
    assert "without their body" in caplog.text


def test_transactions_all_or_nothing(tmp_path: Path) -> None:
    s = FileStore.open(tmp_path)
    s.recover()
    s.enqueue("q", SeqId(0), msg(b"before"))
    s.tx_begin()
    s.enqueue("q", SeqId(1), msg(b"tx1"))
    s.ack("q", [SeqId(0)])
    s.tx_commit()
    s.sync()
    s.tx_begin()
    s.enqueue("q", SeqId(2), msg(b"torn tx"))
    s.ack("q", [SeqId(1)])
    s.sync()  # the tx records are on disk but its commit is not
    s2 = FileStore.open(tmp_path)
    assert summary(s2.recover()) == {"q": [(1, b"tx1", True, 0)]}
    # new writes after the dropped transaction are not mistaken for its continuation
    s2.enqueue("q", SeqId(3), msg(b"after"))
    s2.sync()
    assert [m.seq for m in FileStore.open(tmp_path).recover().queues["q"]] == [1, 3]


def test_drop_queue_and_reuse_name(tmp_path: Path) -> None:
    s = FileStore.open(tmp_path)
    s.recover()
    for i in range(5):
        s.enqueue("q", SeqId(i), msg(b"old"))
    s.drop_queue("q")
    s.enqueue("q", SeqId(0), msg(b"new"))
    s.sync()
    state = FileStore.open(tmp_path).recover()
    assert [m.message.body for m in state.queues["q"]] == [b"new"]
    assert state.next_seq["q"] == 5  # never below a seq ever journaled


def test_message_fields_survive(tmp_path: Path) -> None:
    s = FileStore.open(tmp_path)
    s.recover()
    m = Message(
        "amq.topic",
        "a.b",
        b"\x90\x00props",
        b"body",
        priority=7,
        expiration_ms=1500,
        persistent=True,
        message_id="id-1",
        timestamp_ms=1_700_000_000_000,
    )
    s.enqueue("q", SeqId(9), m, expiry_ms=1_700_000_001_500, due_ms=1_700_000_000_900)
    s.close()
    (r,) = FileStore.open(tmp_path).recover().queues["q"]
    assert (r.seq, r.expiry_ms, r.due_ms) == (9, 1_700_000_001_500, 1_700_000_000_900)
    got = r.message
    assert (got.exchange, got.routing_key, got.properties_bin, got.body) == (
        "amq.topic",
        "a.b",
        b"\x90\x00props",
        b"body",
    )
    assert (got.priority, got.expiration_ms, got.message_id, got.timestamp_ms) == (
        7,
        1500,
        "id-1",
        1_700_000_000_000,
    )
    assert got.persistent


def test_definitions_through_store(tmp_path: Path) -> None:
    s = FileStore.open(tmp_path)
    s.recover()
    s.put_definition("exchange", "/|logs", {"type": "fanout", "durable": True})
    s.put_definition("binding", "/|logs|q|", {"source": "logs"})
    s.delete_definition("binding", "/|logs|q|")
    s.sync()
    assert FileStore.open(tmp_path).recover().definitions == {
        "exchange": {"/|logs": {"type": "fanout", "durable": True}}
    }


def test_delivery_count_outlives_the_segment_it_was_written_in(tmp_path: Path) -> None:
    # The DELIVERY_COUNT record sits in a segment whose enqueues all get acked: that segment
    # must stay while the counted message's ENQUEUE does (found by the storage machine).
    s = FileStore.open(tmp_path, segment_bytes=280)
    s.recover()
    s.enqueue("q", SeqId(0), msg(b"K" * 210))  # seg 1, full
    s.delivered("q", SeqId(0), 4)  # seg 2
    s.enqueue("q", SeqId(1), msg(b"e1"))  # seg 2
    s.ack("q", [SeqId(1)])  # seg 2
    s.enqueue("q", SeqId(2), msg(bytes(210)))  # seg 2, now full
    s.enqueue("q", SeqId(3), msg(b"e3"))  # seg 3
    s.ack("q", [SeqId(2)])  # seg 3: segment 2 holds no live enqueue any more
    for _ in range(3):
        s.sync()
    s.close()
    state = FileStore.open(tmp_path, segment_bytes=280).recover()
    assert summary(state)["q"] == [(0, b"K" * 210, True, 4), (3, b"e3", False, 0)]


def test_refs_named_by_the_journal_are_never_reused(tmp_path: Path) -> None:
    # An ENQUEUE whose body was lost stays in the journal (its segment is kept alive by another
    # message); a new body must not take its ref, or the old enqueue would come back with the
    # new body (found by the storage machine).
    s = FileStore.open(tmp_path, embed_below=10)
    s.recover()
    s.enqueue("q", SeqId(0), msg(b"small"))
    s.sync()
    s.enqueue("q", SeqId(1), msg(b"old body" * 5))
    s.flush()
    s.abandon()
    for f in (tmp_path / "msgstore").iterdir():
        os.truncate(f, 0)
    s2 = FileStore.open(tmp_path, embed_below=10)
    assert [m.seq for m in s2.recover().queues["q"]] == [0]
    s2.enqueue("q", SeqId(2), msg(b"new body" * 5))
    s2.sync()
    s2.abandon()
    state = FileStore.open(tmp_path, embed_below=10).recover()
    assert [(m.seq, m.message.body) for m in state.queues["q"]] == [
        (0, b"small"),
        (2, b"new body" * 5),
    ]


def test_fsync_off_thread_while_the_owner_keeps_writing(tmp_path: Path) -> None:
    # the server's pattern: flush() on the loop, fsync(point) in an executor, appends go on
    from concurrent.futures import ThreadPoolExecutor

    s = FileStore.open(tmp_path, segment_bytes=4096)
    s.recover()
    released: list[int] = []
    with ThreadPoolExecutor(max_workers=1) as pool:
        pending = []
        for i in range(300):
            s.enqueue("q", SeqId(i), msg(bytes(100)))
            if i % 50 == 49:
                s.ack("q", [SeqId(j) for j in range(i - 49, i - 20)])
            if i % 25 == 24:
                pending.append(pool.submit(s.fsync, s.flush()))
        released = [f.result() for f in pending]
    assert released == sorted(released)
    assert s.durable_position == released[-1]
    s.abandon()
    state = FileStore.open(tmp_path).recover()
    acked = {j for i in range(49, 300, 50) for j in range(i - 49, i - 20)}
    # everything enqueued before the last flush+fsync (i <= 299) is there unless acked
    assert [m.seq for m in state.queues["q"]] == [i for i in range(300) if i not in acked]
