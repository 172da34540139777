"""Recovery beyond the replay: clean-stop recovery terms, lazy (bounded-memory) recovery of a
long backlog, and paged persistent messages kept as references to their journal copy."""

from __future__ import annotations

import logging
import os
from pathlib import Path

import pytest

from ringmq.amqp.properties import BasicProperties, encode_properties
from ringmq.core.broker import Broker
from ringmq.core.config import BrokerConfig
from ringmq.core.durability import restore_recovered
from ringmq.core.message import Message, SeqId
from ringmq.core.queue import Queue
from ringmq.core.settings import QueueSettings
from ringmq.storage import terms
from ringmq.storage.bodystore import DiskSpillStore
from ringmq.storage.store import FileStore, RecoveredQueue, RecoveredState

PROPS = encode_properties(BasicProperties(delivery_mode=2))


def msg(body: bytes, **kw: object) -> Message:
    return Message("ex", "rk", PROPS, body, persistent=True, **kw)  # type: ignore[arg-type]


def summary(state: RecoveredState) -> dict[str, list[tuple[int, bytes, bool, int, object]]]:
    return {
        q: [(m.seq, m.message.body, m.redelivered, m.delivery_count, m.due_ms) for m in ms]
        for q, ms in state.queues.items()
    }


def fill(store: FileStore) -> None:
    """Two queues, small and large bodies, acks, deliveries, a scheduled message."""
    for seq in range(1, 41):
        body = b"L" * 5000 if seq % 7 == 0 else f"m{seq}".encode()
        m = msg(body)  # one Message for both queues: a large body is stored once
        store.enqueue("a", SeqId(seq), m, due_ms=123 if seq == 5 else None)
        if seq % 3 == 0:
            store.enqueue("b", SeqId(seq), m)
    store.ack("a", [SeqId(s) for s in range(2, 41, 4)])
    store.delivered("a", SeqId(3), 2)
    store.delivered("b", SeqId(6), 1)
    store.sync()


# -- clean-stop recovery terms -------------------------------------------------------------------


def test_clean_stop_writes_terms_and_the_next_start_uses_them(tmp_path: Path) -> None:
    s = FileStore.open(tmp_path, segment_bytes=2000)
    s.recover()
    fill(s)
    expected_stats = s.stats()
    s.close()
    assert (tmp_path / terms.NAME).exists()
    reopened = FileStore.open(tmp_path, segment_bytes=2000)
    assert reopened.used_terms
    assert not (tmp_path / terms.NAME).exists(), "terms are consumed at open"
    state = reopened.recover()
    assert state.clean
    got = summary(state)
    # the same state a replay of the same files gives
    reopened.close()
    (tmp_path / terms.NAME).unlink()
    replayed = FileStore.open(tmp_path, segment_bytes=2000)
    assert not replayed.used_terms
    replay_state = replayed.recover()
    assert got == summary(replay_state)
    assert state.next_seq == replay_state.next_seq == {"a": 41, "b": 40}
    for key in ("messages", "shared_bodies"):
        assert replayed.stats()[key] == expected_stats[key]
    assert got["a"][0] == (1, b"m1", False, 0, None)
    assert (3, b"m3", True, 2, None) in got["a"]
    assert (5, b"m5", False, 0, 123) in got["a"]
    assert (6, b"m6", True, 1, None) in got["b"]


def test_store_keeps_working_after_a_start_from_terms(tmp_path: Path) -> None:
    s = FileStore.open(tmp_path, segment_bytes=2000)
    s.recover()
    fill(s)
    s.close()
    s = FileStore.open(tmp_path, segment_bytes=2000)
    assert s.used_terms
    state = s.recover()
    big = next(m for m in state.queues["a"] if m.seq == 21)
    # refcounts came back: acking one holder keeps the body for the other queue
    assert s.body_refcount(big.message.store_ref) == 2
    s.ack("a", [big.seq])
    s.enqueue("a", SeqId(41), msg(b"new"))
    s.delivered("a", SeqId(1), 1)
    for _ in range(12):
        s.flush()  # maintenance: reclamation and copy-forward over the adopted bookkeeping
    s.sync()
    s.abandon()  # then a crash: the replay must agree with what the writer did
    after = summary(FileStore.open(tmp_path, segment_bytes=2000).recover())
    seqs_a = [m[0] for m in after["a"]]
    assert big.seq not in seqs_a
    assert seqs_a[-1] == 41
    assert after["a"][0][:4] == (1, b"m1", True, 1)
    assert [m[0] for m in after["b"]] == [m.seq for m in state.queues["b"]]


@pytest.mark.parametrize("damage", ["flip", "truncate", "missing", "stale"])
def test_damaged_or_stale_terms_fall_back_to_the_replay(
    tmp_path: Path, damage: str, caplog: pytest.LogCaptureFixture
) -> None:
    s = FileStore.open(tmp_path, segment_bytes=2000)
    s.recover()
    fill(s)
    s.close()
    old_terms = (tmp_path / terms.NAME).read_bytes()
    s = FileStore.open(tmp_path, segment_bytes=2000)
    s.recover()
    s.enqueue("a", SeqId(50), msg(b"after"))
    s.ack("b", [SeqId(3)])
    s.close()
    path = tmp_path / terms.NAME
    if damage == "flip":
        data = bytearray(path.read_bytes())
        data[len(data) // 2] ^= 0x40
        path.write_bytes(bytes(data))
    elif damage == "truncate":
        path.write_bytes(path.read_bytes()[:-3])
    elif damage == "missing":
        path.unlink()
    else:
        path.write_bytes(old_terms)  # a well-formed file describing older journal files
    with caplog.at_level(logging.WARNING, logger="ringmq.storage.store"):
        reopened = FileStore.open(tmp_path, segment_bytes=2000)
    assert not reopened.used_terms
    assert "replaying the journal" in caplog.text
    state = reopened.recover()
    assert state.clean
    got = summary(state)
    assert got["a"][-1] == (50, b"after", False, 0, None)
    assert 3 not in [m[0] for m in got["b"]]


def test_terms_are_never_used_after_a_crash(tmp_path: Path) -> None:
    s = FileStore.open(tmp_path)
    s.recover()
    fill(s)
    s.close()
    kept = (tmp_path / terms.NAME).read_bytes()
    s = FileStore.open(tmp_path)
    s.recover()
    s.sync()
    s.abandon()
    (tmp_path / terms.NAME).write_bytes(kept)  # even if a file were left behind
    again = FileStore.open(tmp_path)
    assert not again.used_terms
    state = again.recover()
    assert not state.clean
    assert all(m.redelivered for ms in state.queues.values() for m in ms)


# -- lazy recovery ------------------------------------------------------------------------------


def _backlog(path: Path, n: int, *, clean: bool) -> None:
    s = FileStore.open(path, segment_bytes=4096)
    s.recover()
    for seq in range(1, n + 1):
        s.enqueue("q", SeqId(seq), msg(f"body-{seq}".encode(), expiration_ms=None))
    s.delivered("q", SeqId(3), 1)
    s.delivered("q", SeqId(n - 1), 4)  # in the part left on disk
    s.ack("q", [SeqId(2)])
    s.sync()
    if clean:
        s.close()
    else:
        s.abandon()


@pytest.mark.parametrize("clean", [True, False])
def test_a_backlog_beyond_the_head_bound_stays_on_disk_and_drains_in_order(
    tmp_path: Path, clean: bool
) -> None:
    n = 300
    _backlog(tmp_path, n, clean=clean)
    store = FileStore.open(tmp_path, segment_bytes=4096)
    state = store.recover()
    recovered = state.queues["q"]
    assert isinstance(recovered, RecoveredQueue)
    assert len(recovered) == n - 1
    engine = Queue("q", QueueSettings())
    engine.set_memory_bound(20, 1 << 20)
    head, tail = recovered.split(*engine.memory_bound)
    assert len(head) == 20
    assert tail is not None
    assert tail.count == n - 1 - 20
    assert tail.nbytes == sum(len(f"body-{s}") for s in range(3, n + 1)) - sum(
        len(m.message.body) for m in head[1:]
    )
    restore_recovered(engine, head, tail)
    c = engine.counters
    assert c.ready == 20
    assert c.paged == tail.count
    assert c.message_count == n - 1
    seen: list[tuple[int, bytes, bool, int]] = []
    most_in_memory = 0
    while (d := engine.fetch(0)) is not None:
        most_in_memory = max(most_in_memory, c.ready + c.unacked)
        seen.append((d.seq, d.message.body, d.redelivered, d.delivery_count))
        engine.ack([d.seq])
    assert most_in_memory <= 20 + 1
    expected = [s for s in range(1, n + 1) if s != 2]
    assert [s[0] for s in seen] == expected
    assert all(body == f"body-{seq}".encode() for seq, body, _, _ in seen)
    counts = {seq: count for seq, _, _, count in seen if count != 1}
    assert counts == {3: 2, n - 1: 5}  # recorded count + this delivery
    if clean:
        assert [seq for seq, _, red, _ in seen if red] == [3, n - 1]
    else:
        assert all(red for _, _, red, _ in seen)
    assert c.paged == c.paged_bytes == c.ready == c.ready_bytes == 0


def test_broker_recovery_keeps_only_the_head_of_a_long_backlog_in_memory(tmp_path: Path) -> None:
    # 300 bodies of 40 KiB = 12 MiB, over the 8 MiB default head: the rest stays on disk
    data = tmp_path / "data"
    store = FileStore.open(data)
    broker = Broker(BrokerConfig(), store=store, now_ms=0)
    q = broker.topology.create_queue("/", "big", durable=True)
    broker.definitions_changed()
    dur = broker.durability
    assert dur is not None
    bodies = [bytes([65 + i % 26]) * 40960 for i in range(300)]
    for body in bodies:
        m = Message("", "big", PROPS, body, persistent=True)
        dur.published(q, m, q.queue.publish(m, 0), 0)
    store.sync()
    store.abandon()
    broker2 = Broker(BrokerConfig(), store=FileStore.open(data), now_ms=0)
    engine = broker2.vhosts["/"].queues["big"].queue
    c = engine.counters
    assert c.message_count == 300
    assert c.ready_bytes <= engine.memory_bound[1] + 40960
    assert c.paged > 0
    assert c.paged_bytes == 300 * 40960 - c.ready_bytes
    got = []
    while (d := engine.fetch(0)) is not None:
        assert d.redelivered  # dirty stop
        got.append(d.message.body)
        engine.ack([d.seq])
    assert got == bodies


# -- paged persistent messages by reference -------------------------------------------------------


def test_paged_persistent_messages_are_references_read_back_from_the_journal(
    tmp_path: Path,
) -> None:
    store = FileStore.open(tmp_path / "store", segment_bytes=4096)
    store.recover()
    spill = DiskSpillStore(tmp_path / "spill", copies=store.copies("q"))
    journaled = {SeqId(s): msg(f"persistent-{s}".encode() * 20) for s in range(1, 31)}
    for seq, m in journaled.items():
        store.enqueue("q", seq, m, expiry_ms=999 if seq == 4 else None)
    transient = {SeqId(s): Message("", "q", b"", f"transient-{s}".encode()) for s in (31, 32)}
    items = [(seq, m, 999 if seq == 4 else None) for seq, m in (journaled | transient).items()]
    spill.push_back(items[:10])
    spill.push_front([])
    spill.push_back(items[10:])
    pages = spill.pages
    assert pages.refs_written == 30
    assert pages.pages_written == 32
    assert pages.bytes_paged < 30 * 30 + 2 * 200  # no second copy of the persistent bodies
    out = spill.pop_front(7, 1 << 20) + spill.pop_front(100, 1 << 20)
    assert [(s, m.body, e) for s, m, e in out] == [(s, m.body, e) for s, m, e in items]
    assert all(m.exchange == "ex" and m.persistent for _, m, _ in out[:30])


def test_a_segment_is_not_reclaimed_while_a_paged_message_refers_to_it(tmp_path: Path) -> None:
    store = FileStore.open(tmp_path / "store", segment_bytes=1024)
    store.recover()
    spill = DiskSpillStore(tmp_path / "spill", copies=store.copies("q"))
    for seq in range(1, 201):
        store.enqueue("q", SeqId(seq), msg(f"m{seq:04d}".encode() * 10))
    store.sync()
    first_segments = store.stats()["segments"]
    kept = [SeqId(s) for s in range(1, 201, 50)]  # one paged message in every few segments
    spill.push_back([(s, msg(f"m{s:04d}".encode() * 10), None) for s in kept])
    store.ack("q", [SeqId(s) for s in range(1, 201) if SeqId(s) not in kept])
    for _ in range(30):  # reclamation + copy-forward (after its quiet period) + fsyncs
        store.sync()
    assert store.stats()["messages"] == len(kept)
    assert store.stats()["segments"] < first_segments  # the dead segments did go
    out = spill.pop_front(100, 1 << 20)
    assert [(s, m.body) for s, m, _ in out] == [(s, f"m{s:04d}".encode() * 10) for s in kept]


def test_copies_only_cover_live_journal_entries(tmp_path: Path) -> None:
    store = FileStore.open(tmp_path, segment_bytes=4096)
    store.recover()
    copies = store.copies("q")
    store.enqueue("q", SeqId(1), msg(b"x"))
    assert copies.holds(1)
    assert not copies.holds(2)
    assert not store.copies("other").holds(1)
    store.ack("q", [SeqId(1)])
    assert not copies.holds(1)
    with pytest.raises(LookupError):
        copies.read([1])


def test_read_entries_detects_a_damaged_record(tmp_path: Path) -> None:
    store = FileStore.open(tmp_path, segment_bytes=1 << 20)
    store.recover()
    store.enqueue("q", SeqId(1), msg(b"intact body"))
    store.sync()
    [seg] = [p for p in (tmp_path / "journal").iterdir() if p.stat().st_size]
    with open(seg, "r+b") as f:
        f.seek(-3, os.SEEK_END)
        f.write(b"XYZ")
    with pytest.raises(RuntimeError, match="damaged"):
        store.read_entries("q", [1])


def test_broker_paging_writes_persistent_messages_by_reference(tmp_path: Path) -> None:
    from ringmq.node import spill_directory

    store = FileStore.open(tmp_path / "store")
    broker = Broker(BrokerConfig(), store=store, now_ms=0)
    spill = spill_directory(broker, tmp_path / "paging")
    made: dict[str, DiskSpillStore] = {}

    def factory(vhost: str, name: str) -> DiskSpillStore:
        made[name] = spill(vhost, name)
        return made[name]

    broker.enable_paging(factory, 16, 1 << 20)
    q = broker.topology.create_queue("/", "durable", durable=True)
    t = broker.topology.create_queue("/", "transient", durable=False)
    dur = broker.durability
    assert dur is not None
    bodies = [bytes([48 + i % 10]) * 1024 for i in range(300)]
    for entity in (q, t):
        for body in bodies:
            m = Message("", entity.name, PROPS, body, persistent=True)
            outcome = entity.queue.publish(m, 0)
            dur.published(entity, m, outcome, 0)
        entity.queue.page_out()
    assert q.queue.spilled > 250
    assert t.queue.spilled > 250
    spilled_bytes = sum(len(b) for b in bodies[16:])
    transient, durable = made["transient"].pages, made["durable"].pages
    assert transient.refs_written == 0
    assert transient.bytes_paged > spilled_bytes / 2  # whole messages
    # durable queue: references only, but for the newest of each batch of spilled publishes,
    # pushed before its own `enqueue` reached the store
    assert durable.refs_written > 250
    assert durable.bytes_paged < spilled_bytes / 5
    for entity in (q, t):
        got = []
        while (d := entity.queue.fetch(0)) is not None:
            got.append(d.message.body)
            entity.queue.ack([d.seq])
        assert got == bodies


def test_a_recovered_tail_keeps_order_through_publish_requeue_and_page_out(
    tmp_path: Path,
) -> None:
    _backlog(tmp_path, 120, clean=True)
    store = FileStore.open(tmp_path, segment_bytes=4096)
    recovered = store.recover().queues["q"]
    assert isinstance(recovered, RecoveredQueue)
    engine = Queue("q", QueueSettings())
    engine.set_memory_bound(10, 1 << 20)
    head, tail = recovered.split(*engine.memory_bound)
    assert tail is not None
    restore_recovered(engine, head, tail)
    engine.resume_seqs(121)
    for i in range(15):  # new publishes go behind the recovered tail
        fresh = msg(f"new-{i}".encode())
        engine.publish(fresh, 0)
        store.enqueue("q", engine.last_seq, fresh)
    first = [d.seq for _ in range(5) if (d := engine.fetch(0)) is not None]
    assert first == [1, 3, 4, 5, 6]
    engine.requeue([SeqId(3), SeqId(4)], 0)
    engine.set_memory_bound(3, 1 << 20)  # memory pressure: the head's rear pages out
    engine.set_memory_bound(10, 1 << 20)
    seen: list[tuple[int, bool]] = []
    while (d := engine.fetch(0)) is not None:
        seen.append((d.seq, d.redelivered))
        engine.ack([d.seq])
    assert [seq for seq, _ in seen] == [3, 4, *range(7, 136)]
    assert [seq for seq, red in seen if red] == [3, 4, 119]
    assert engine.counters.paged == 0
    assert sorted(engine.unacked_seqs()) == [1, 5, 6]
