"""Ordering under paging: the queue engine with a tiny in-memory bound against a plain list.

Publish, fetch (with and without ack), ack, requeue, memory-pressure changes of the bound,
explicit page-out, a TTL tick and purge run in random interleavings; consumers must see queue
order (ascending seq, requeued messages back at their original position, flagged redelivered)
and the counters must match the model (paged messages counted in `paged` and `message_count`).
The same machine runs over the in-memory spill store and the disk one (storage/bodystore.py).
"""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path
from typing import Any

import hypothesis.strategies as st
from hypothesis import settings as hsettings
from hypothesis.stateful import (
    Bundle,
    RuleBasedStateMachine,
    consumes,
    initialize,
    invariant,
    multiple,
    precondition,
    rule,
)

from ringmq.core.message import Message, SeqId
from ringmq.core.queue import MemorySpillStore, PublishOutcome, Queue, SpillStore
from ringmq.core.settings import resolve_queue_settings
from ringmq.storage.bodystore import DiskSpillStore


class _Model:
    """Ready messages by seq (requeue restores the position) plus unacked ones."""

    def __init__(self, max_length: int | None) -> None:
        self.ready: dict[int, tuple[bytes, bool]] = {}
        self.unacked: dict[int, bytes] = {}
        self.max_length = max_length

    def publish(self, seq: int, body: bytes) -> None:
        self.ready[seq] = (body, False)
        while self.max_length is not None and len(self.ready) > self.max_length:
            del self.ready[min(self.ready)]  # drop-head

    def fetch(self, ack_required: bool) -> tuple[int, bytes, bool] | None:
        if not self.ready:
            return None
        seq = min(self.ready)
        body, redelivered = self.ready.pop(seq)
        if ack_required:
            self.unacked[seq] = body
        return seq, body, redelivered

    def requeue(self, seq: int) -> None:
        self.ready[seq] = (self.unacked.pop(seq), True)
        while self.max_length is not None and len(self.ready) > self.max_length:
            del self.ready[min(self.ready)]


class PagingMachine(RuleBasedStateMachine):
    tags = Bundle("tags")

    def __init__(self) -> None:
        super().__init__()
        self.tmp: Path | None = None
        self.q: Queue | None = None
        self.model = _Model(None)
        self.next_body = 0

    @initialize(
        disk=st.booleans(),
        max_length=st.sampled_from([None, None, 6]),
        bound=st.integers(1, 4),
    )
    def start(self, disk: bool, max_length: int | None, bound: int) -> None:
        store: SpillStore
        if disk:
            self.tmp = Path(tempfile.mkdtemp(prefix="ringmq-paging-"))
            store = DiskSpillStore(self.tmp / "q", run_bytes=64)
        else:
            store = MemorySpillStore()
        args: dict[str, Any] = {}
        if max_length is not None:
            args["x-max-length"] = max_length
        self.q = Queue("q", resolve_queue_settings("q", args), spill=store)
        self.q.set_memory_bound(bound, 1 << 20)
        self.model = _Model(max_length)

    def teardown(self) -> None:
        if self.q is not None:
            self.q.close()
        if self.tmp is not None:
            shutil.rmtree(self.tmp, ignore_errors=True)

    @rule(n=st.integers(1, 6))
    @precondition(lambda self: self.q is not None)
    def publish(self, n: int) -> None:
        assert self.q is not None
        for _ in range(n):
            body = b"m%d" % self.next_body
            self.next_body += 1
            out = self.q.publish(Message("", "q", b"", body), 0)
            assert out is PublishOutcome.ENQUEUED
            self.model.publish(self.q.last_seq, body)

    @rule(target=tags, ack_required=st.booleans())
    @precondition(lambda self: self.q is not None)
    def fetch(self, ack_required: bool) -> Any:
        assert self.q is not None
        got = self.q.fetch(0, ack_required)
        want = self.model.fetch(ack_required)
        if want is None:
            assert got is None
            return multiple()
        assert got is not None
        assert (got.seq, got.message.body, got.redelivered) == want
        return multiple(got.seq) if ack_required else multiple()

    @rule(seq=consumes(tags))
    def ack(self, seq: SeqId) -> None:
        assert self.q is not None
        self.q.ack([seq])
        del self.model.unacked[seq]

    @rule(seqs=st.lists(consumes(tags), max_size=3, unique=True))
    def requeue(self, seqs: list[SeqId]) -> None:
        assert self.q is not None
        self.q.requeue(seqs, 0)
        for seq in seqs:
            self.model.requeue(seq)

    @rule(count=st.integers(1, 5))
    @precondition(lambda self: self.q is not None)
    def pressure(self, count: int) -> None:
        """Memory pressure changes the bound (lower: pages out now; higher: pages in later)."""
        assert self.q is not None
        self.q.set_memory_bound(count, 1 << 20)

    @rule()
    @precondition(lambda self: self.q is not None)
    def bytes_pressure(self) -> None:
        """A byte bound smaller than any body: one message in memory at most."""
        assert self.q is not None
        self.q.set_memory_bound(1000, 1)

    @rule()
    @precondition(lambda self: self.q is not None)
    def tick(self) -> None:
        assert self.q is not None
        self.q.tick(0)

    @rule(data=st.data())
    @precondition(lambda self: self.q is not None)
    def purge_sometimes(self, data: st.DataObject) -> None:
        assert self.q is not None
        if data.draw(st.integers(0, 9)) == 0:
            assert self.q.purge() == len(self.model.ready)
            self.model.ready.clear()

    @invariant()
    def counters_agree(self) -> None:
        if self.q is None:
            return
        c = self.q.counters
        m = self.model
        assert c.ready + c.paged == len(m.ready)
        assert c.ready_bytes + c.paged_bytes == sum(len(b) for b, _ in m.ready.values())
        assert c.unacked == len(m.unacked)
        assert self.q.message_count == len(m.ready) + len(m.unacked)
        assert self.q.spilled <= c.paged
        bound_n, _ = self.q.memory_bound
        # memory holds at most the bound of never-delivered messages (requeued ones may add)
        redelivered = sum(1 for _, r in m.ready.values() if r)
        assert c.ready <= max(bound_n, 1) + redelivered or self.q.spilled == 0


TestPaging = PagingMachine.TestCase
TestPaging.settings = hsettings(TestPaging.settings, max_examples=60, deadline=None)
