"""Raw reservations (rawtake.py) against single fetches, over queues paged to real page files.

Two identical queues, each paging to its own `DiskSpillStore` (page runs, PAGED records and,
for persistent messages with a journal copy, PAGED_REF records), get the same operations. One
is reserved through `Reservations` over `EngineAdapter` (`Queue.take_run`: page-run rows at
the head are taken raw, kept as page rows), the other through a `ReservableQueue` that fetches
one message at a time. After every step the counters, the unacked seqs, the head seq, the
leases, the reads (rows and columns), settles, expiries, purges and dead letters must agree;
only the split of waiting messages between memory and the spill may differ (a raw take leaves
unread rows where they were; N fetches page a read-ahead batch in).
"""

from __future__ import annotations

import mmap
import shutil
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from ringmq.core.message import Message, SeqId
from ringmq.core.queue import Queue
from ringmq.core.queue.columns import Columns
from ringmq.core.reservations import Reservations
from ringmq.core.reserveports import EngineAdapter, Taken
from ringmq.core.settings import resolve_queue_settings
from ringmq.storage.bodystore import DiskSpillStore
from ringmq.storage.pageruns import RunRows
from ringmq.storage.records import Entry

# Most keys of a queue's stats; the memory/spill split of waiting messages is left out.
_SPLIT = ("ready_in_memory", "paged", "paged_bytes", "memory_bytes")


class _Copies:
    """`DurableCopies` in memory: persistent messages have a journal copy (PAGED_REF)."""

    def __init__(self) -> None:
        self.entries: dict[int, Entry] = {}

    def holds(self, seq: int) -> bool:
        return seq in self.entries

    def size(self, seq: int) -> int:
        return len(self.entries[seq].message.body)

    def read(self, seqs: Sequence[int]) -> list[Entry]:
        return [self.entries[s] for s in seqs]


class _OneByOne:
    """`ReservableQueue` over the engine that is not an `EngineAdapter` (per-message take)."""

    def __init__(self, q: Queue) -> None:
        self.q = q

    def take(self, now_ms: int) -> Taken[SeqId] | None:
        d = self.q.fetch(now_ms, ack_required=True)
        return None if d is None else Taken(d.seq, d.seq, d.message, d.redelivered)

    def ack(self, tags: list[SeqId], now_ms: int) -> None:
        self.q.ack(tags)

    def requeue(self, tags: list[SeqId], now_ms: int) -> None:
        self.q.requeue(tags, now_ms, count_failure=False)


def _rows(entries: list[Any]) -> list[tuple[Any, ...]]:
    # Entries or deliveries without the message object (decoded raw rows are new objects).
    fields = ("pos", "seq", "redelivered", "tag", "delivery_count", "reason")
    m = [(e.message.body, e.message.properties_bin, e.message.persistent) for e in entries]
    return [(*(getattr(e, f, None) for f in fields), *x) for e, x in zip(entries, m, strict=True)]


def _columns(cols: Columns) -> tuple[Any, ...]:
    return (
        list(cols.seqs),
        bytes(cols.redelivered),
        list(cols.timestamps),
        *(col.values() for col in cols.var_columns()),
    )


def _state(q: Queue) -> tuple[Any, ...]:
    stats = {k: v for k, v in q.stats().items() if k not in _SPLIT}
    return stats, sorted(q.unacked_seqs()), q.unacked_count, q.head_seq()


class RawTakeMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.now = 0
        self.dir = Path(tempfile.mkdtemp(prefix="rawtake-"))
        self.copies = _Copies()
        self.seq = 0

    @initialize(
        bound=st.sampled_from([(4, 1 << 20), (16, 64), (64, 1 << 30)]),
        backlog=st.sampled_from([0, 200, 600, 600]),
    )
    def setup(self, bound: tuple[int, int], backlog: int) -> None:
        def make(name: str) -> Queue:
            spill = DiskSpillStore(self.dir / name, run_bytes=4096, copies=self.copies)
            q = Queue("q", resolve_queue_settings("q", {}), spill=spill)
            q.set_memory_bound(*bound)
            return q

        self.raw_q, self.one_q = make("raw"), make("one")
        self.raw_res: Reservations[SeqId] = Reservations(EngineAdapter(self.raw_q))
        self.one_res: Reservations[SeqId] = Reservations(_OneByOne(self.one_q))
        self.other: list[SeqId] = []  # fetched by another consumer, in both queues
        self.cursor = 0
        self.raw_rows = 0
        if backlog:  # a stream queue's backlog: paged out as page runs
            self.publish(backlog, 5, "plain")

    def _both(self) -> tuple[Queue, Queue]:
        return self.raw_q, self.one_q

    @rule(
        n=st.sampled_from([1, 3, 40, 130, 260]),
        size=st.integers(0, 9),
        kind=st.sampled_from(["plain"] * 12 + ["persistent", "headers", "other-key", "ttl"]),
    )
    def publish(self, n: int, size: int, kind: str) -> None:
        # Runs of plain messages page out as page runs once 128 are spilled (SPILL_BATCH);
        # persistent ones with a journal copy as PAGED_REF, headered ones as PAGED records.
        for i in range(n):
            self.seq += 1
            body = bytes([i % 251]) * (size + i % 3)
            msg = Message(
                "",
                "k2" if kind == "other-key" and i % 2 else "q",
                b"",
                body,
                headers={"h": i} if kind == "headers" else None,
                expiration_ms=50 if kind == "ttl" else None,
                persistent=kind == "persistent",
                timestamp_ms=i,
            )
            for q in self._both():
                q.publish(msg, self.now)
            if kind == "persistent":
                self.copies.entries[q.last_seq] = Entry("", q.last_seq, msg)

    @rule(
        n=st.sampled_from([0, 1, 7, 60, 200, 400]),
        max_bytes=st.sampled_from([None, None, None, 1, 12, 30, 600]),
    )
    def reserve(self, n: int, max_bytes: int | None) -> None:
        a = self.raw_res.reserve("c", self.cursor, n, self.now, lease_ms=40, max_bytes=max_bytes)
        b = self.one_res.reserve("c", self.cursor, n, self.now, lease_ms=40, max_bytes=max_bytes)
        assert a == b
        self.cursor = a.end
        lease = self.raw_res.lease("c")
        if lease is not None:
            self.raw_rows += sum(isinstance(m, RunRows) for m in lease.messages)

    @rule(n=st.integers(1, 5))
    def fetch_other(self, n: int) -> None:
        for _ in range(n):
            a, b = (q.fetch(self.now, ack_required=True) for q in self._both())
            assert (a and (a.seq, a.message.body, a.redelivered)) == (
                b and (b.seq, b.message.body, b.redelivered)
            )
            if a is not None:
                self.other.append(a.seq)

    @precondition(lambda self: self.other)
    @rule(data=st.data(), requeue=st.booleans())
    def settle_other(self, data: st.DataObject, requeue: bool) -> None:
        # Another consumer acks or requeues some of what it took (requeued: the returns).
        chosen = data.draw(st.lists(st.sampled_from(self.other), unique=True, max_size=6))
        for q in self._both():
            if requeue:
                q.requeue(chosen, self.now)
            else:
                q.ack(chosen)
        self.other = [s for s in self.other if s not in chosen]

    @rule(lo=st.integers(0, 600), span=st.integers(0, 400))
    def read(self, lo: int, span: int) -> None:
        a = self.raw_res.read("c", lo, lo + span, self.now, renew=False)
        b = self.one_res.read("c", lo, lo + span, self.now, renew=False)
        assert _rows(a) == _rows(b)
        rows = self.raw_res.read_rows("c", lo, lo + span, self.now, renew=False)
        assert [(p, s, r, m.body) for p, s, r, m in rows] == [
            (e.pos, e.seq, e.redelivered, e.message.body) for e in a
        ]
        ca, pa = self.raw_res.read_columns("c", lo, lo + span, self.now, renew=False)
        cb, pb = self.one_res.read_columns("c", lo, lo + span, self.now, renew=False)
        assert (_columns(ca), list(pa)) == (_columns(cb), list(pb))

    @rule(back=st.integers(0, 50))
    def settle(self, back: int) -> None:
        up = max(0, self.cursor - back)
        assert self.raw_res.settle("c", up, self.now) == self.one_res.settle("c", up, self.now)

    @rule(ms=st.sampled_from([0, 1, 30, 60]))
    def tick(self, ms: int) -> None:
        # Lease expiry: held messages (raw rows included) go back at their seqs, redelivered.
        self.now += ms
        for q in self._both():
            q.tick(self.now)
        assert self.raw_res.expire(self.now) == self.one_res.expire(self.now)

    @rule()
    def drop_lease(self) -> None:
        assert self.raw_res.drop("c", self.now) == self.one_res.drop("c", self.now)

    @rule()
    def purge(self) -> None:
        assert self.raw_q.purge() == self.one_q.purge()

    @rule()
    def delete(self) -> None:
        # What a queue's deletion does to its book: every lease gives its messages back.
        self.raw_res.release_all(self.now)
        self.one_res.release_all(self.now)
        self.cursor = 0

    @invariant()
    def agree(self) -> None:
        if not hasattr(self, "raw_res"):
            return
        assert _state(self.raw_q) == _state(self.one_q)
        a, b = self.raw_res.lease("c"), self.one_res.lease("c")
        assert (a is None) == (b is None)
        if a is not None and b is not None:
            assert _rows(a.entries) == _rows(b.entries)
            fields = ("settled", "next_pos", "skipped", "expired", "last_seq", "deadline_ms")
            assert [getattr(a, f) for f in fields] == [getattr(b, f) for f in fields]
        dead = [self.raw_q.drain_dead_letters(), self.one_q.drain_dead_letters()]
        assert _rows(dead[0]) == _rows(dead[1])

    def teardown(self) -> None:
        try:
            if hasattr(self, "raw_res"):
                # In the end, the same messages wait in the same order.
                assert _rows(self.raw_q.ready_view()) == _rows(self.one_q.ready_view())
                _SEEN.append(self.raw_rows)
        finally:
            shutil.rmtree(self.dir, ignore_errors=True)


_SEEN: list[int] = []

TestRawTake = RawTakeMachine.TestCase
TestRawTake.settings = settings(TestRawTake.settings, max_examples=200, stateful_step_count=30)


def test_the_machine_takes_raw_rows() -> None:
    # The machine is only worth its cost if some examples took raw rows (3-20 % of them in
    # runs seen so far, so a share would be flaky: at least a few of its 200). It runs here
    # when it did not run before this test (run alone, or in another order).
    if not _SEEN:
        TestRawTake("runTest").runTest()
    assert sum(1 for n in _SEEN if n) >= 3, _SEEN


def test_a_reserve_holds_page_rows_raw_and_gives_them_back_redelivered(tmp_path: Path) -> None:
    q = Queue("q", resolve_queue_settings("q", {}), spill=DiskSpillStore(tmp_path / "q"))
    q.set_memory_bound(4, 1 << 20)
    bodies = [b"m%d" % i for i in range(1000)]
    for i, body in enumerate(bodies):
        q.publish(Message("", "q", b"", body, timestamp_ms=i), 0)
    res: Reservations[SeqId] = Reservations(EngineAdapter(q))
    assert res.reserve("c", 0, 900, 0, lease_ms=10).end == 900
    lease = res.lease("c")
    assert lease is not None
    assert sum(isinstance(m, RunRows) for m in lease.messages) > 800  # held raw
    assert (q.unacked_count, q.stats()["message_count"], q.head_seq()) == (900, 1000, 1)
    cols, positions = res.read_columns("c", 0, 900, 0)
    assert (list(positions), cols.bodies.values()) == (list(range(900)), bodies[:900])
    assert list(cols.timestamps) == list(range(900))
    # The lease expires: every held message goes back at its seq, flagged redelivered.
    assert res.expire(10) == ["c"]
    assert (q.unacked_count, q.stats()["message_count"], q.stats()["requeued"]) == (0, 1000, 900)
    assert res.reserve("c", 0, 1000, 10, lease_ms=10).end == 1000
    rows = res.read_rows("c", 0, 1000, 10)
    assert [m.body for _, _, _, m in rows] == bodies
    assert [r for _, _, r, _ in rows] == [True] * 900 + [False] * 100
    assert res.settle("c", 1000, 10) == 1000
    assert (q.unacked_count, q.stats()["message_count"], q.head_seq()) == (0, 0, None)
    assert q.stats()["acknowledged"] == 1000


def test_a_raw_take_reads_the_page_file_when_it_cannot_map_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def refuse(*args: Any, **kwargs: Any) -> Any:
        raise OSError(12, "Cannot allocate memory")

    monkeypatch.setattr(mmap, "mmap", refuse)
    q = Queue("q", resolve_queue_settings("q", {}), spill=DiskSpillStore(tmp_path / "q"))
    q.set_memory_bound(4, 1 << 20)
    bodies = [b"m%d" % i for i in range(600)]
    for body in bodies:
        q.publish(Message("", "q", b"", body), 0)
    res: Reservations[SeqId] = Reservations(EngineAdapter(q))
    assert res.reserve("c", 0, 600, 0, lease_ms=10).end == 600
    lease = res.lease("c")
    assert lease is not None
    assert sum(isinstance(m, RunRows) for m in lease.messages) > 400
    assert res.read_columns("c", 0, 600, 0)[0].bodies.values() == bodies
    assert res.expire(10) == ["c"]
    assert [d.message.body for d in q.ready_view()] == bodies
