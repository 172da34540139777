"""A Hypothesis state machine over `FileStore` with crashes (STYLE §10, RabbitMQ
`classic_queue_prop_SUITE` spirit).

The model tracks, per queue and seq, what the writer did and what the last completed sync
covered. `crash()` drops the store without flushing its buffers, may cut the newest journal and
message-store file at a random byte *past what was synced*, and reopens:

* every message enqueued before the last completed sync and not acked comes back, with its
  body, in seq order;
* nothing whose ack was synced comes back; nothing never enqueued appears;
* a dirty restart flags every message redelivered; a clean restart flags exactly those with a
  recorded delivery;
* a transaction comes back whole or not at all.

A clean restart starts from the recovery terms written by `close()` (checked: no replay); a
crash may find the terms of an earlier clean stop planted back in the directory (a stale
snapshot), which must be ignored.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
)

from ringmq.core.message import Message, SeqId
from ringmq.storage import reclaim, terms
from ringmq.storage.store import FileStore, RecoveredState

QUEUES = ("a", "b")
OPTIONS = {"segment_bytes": 600, "msg_segment_bytes": 1500, "embed_below": 100}


def make_body(queue: str, seq: int, large: bool) -> bytes:
    tag = f"{queue}:{seq}:".encode()
    return tag + b"L" * 150 if large else tag


class StorageMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.dir = Path(tempfile.mkdtemp(prefix="ringmq-storage-machine-"))
        self.store = FileStore.open(self.dir, **OPTIONS)
        self.store.recover()
        self.next_seq = dict.fromkeys(QUEUES, 0)
        # (queue, seq) -> body, for everything currently live from the writer's point of view
        self.live: dict[tuple[str, int], bytes] = {}
        self.counts: dict[tuple[str, int], int] = {}
        self.ever: dict[tuple[str, int], bytes] = {}
        self.durable: set[tuple[str, int]] = set()  # enqueued before the last completed sync
        self.pending_acks: set[tuple[str, int]] = set()  # acked since the last sync
        self.synced_acks: set[tuple[str, int]] = set()
        self.txs: list[list[tuple[str, int]]] = []  # committed transactions' enqueues
        self.synced_sizes: dict[Path, int] = {}
        self.restarts = 0
        self.old_terms: bytes | None = None  # the terms of an earlier clean stop

    def teardown(self) -> None:
        self.store.abandon()
        shutil.rmtree(self.dir, ignore_errors=True)

    @initialize()
    def start(self) -> None:
        assert self.store.stats()["messages"] == 0

    # -- writes ------------------------------------------------------------------------------

    def _enqueue(self, queue: str, message: Message | None, large: bool) -> Message:
        seq = self.next_seq[queue]
        self.next_seq[queue] += 1
        body = make_body(queue, seq, large)
        if message is None:
            message = Message("ex", queue, b"\x10\x00\x02", body, persistent=True)
        else:
            body = message.body
        self.store.enqueue(queue, SeqId(seq), message)
        self.live[(queue, seq)] = body
        self.ever[(queue, seq)] = body
        return message

    @rule(queue=st.sampled_from(QUEUES), large=st.booleans(), fanout=st.booleans())
    def enqueue(self, queue: str, large: bool, fanout: bool) -> None:
        message = self._enqueue(queue, None, large)
        if fanout:
            other = next(q for q in QUEUES if q != queue)
            self._enqueue(other, message, large)  # one shared Message, stored once when large

    @precondition(lambda self: self.live)
    @rule(data=st.data(), n=st.integers(1, 4))
    def ack(self, data: st.DataObject, n: int) -> None:
        keys = sorted(self.live)
        picked = data.draw(st.lists(st.sampled_from(keys), min_size=1, max_size=n, unique=True))
        for queue in QUEUES:
            seqs = [SeqId(s) for q, s in picked if q == queue]
            if seqs:
                self.store.ack(queue, seqs)
        for key in picked:
            del self.live[key]
            self.counts.pop(key, None)
            self.pending_acks.add(key)

    @precondition(lambda self: self.live)
    @rule(data=st.data())
    def deliver(self, data: st.DataObject) -> None:
        """A delivery (or a requeue after one): the count goes up and is journaled."""
        key = data.draw(st.sampled_from(sorted(self.live)))
        count = self.counts.get(key, 0) + 1
        self.counts[key] = count
        self.store.delivered(key[0], SeqId(key[1]), count)

    @rule(n=st.integers(1, 4), ack_one=st.booleans())
    def transaction(self, n: int, ack_one: bool) -> None:
        self.store.tx_begin()
        keys = []
        for _ in range(n):
            self._enqueue("a", None, False)
            keys.append(("a", self.next_seq["a"] - 1))
        self.store.tx_commit()
        self.txs.append(keys)
        if ack_one:
            self.store.tx_begin()
            self.store.ack("a", [SeqId(keys[0][1])])
            del self.live[keys[0]]
            self.pending_acks.add(keys[0])
            self.store.tx_commit()

    @rule()
    def sync(self) -> None:
        self.store.sync()
        self.durable |= set(self.live)
        self.synced_acks |= self.pending_acks
        self.pending_acks.clear()
        self._record_synced_sizes()

    def _record_synced_sizes(self) -> None:
        self.synced_sizes = {
            p: p.stat().st_size
            for sub in ("journal", "msgstore")
            for p in (self.dir / sub).iterdir()
        }

    @rule()
    def flush_without_fsync(self) -> None:
        # handed to the OS but not fsynced: survives a process crash, proves nothing
        point = self.store.flush()
        for fd in point.fds:
            os.close(fd)

    # -- restarts ----------------------------------------------------------------------------

    def _cut_newest(self, sub: str, data: st.DataObject) -> None:
        files = sorted((self.dir / sub).iterdir())
        if not files:
            return
        newest = files[-1]
        size = newest.stat().st_size
        synced = self.synced_sizes.get(newest, 0)
        if size > synced:
            cut = data.draw(st.integers(synced, size), label=f"cut {sub}")
            with open(newest, "r+b") as f:
                f.truncate(cut)

    @rule(cut=st.booleans(), stale_terms=st.booleans(), data=st.data())
    def crash(self, cut: bool, stale_terms: bool, data: st.DataObject) -> None:
        self.store.abandon()
        if cut:
            self._cut_newest("journal", data)
            self._cut_newest("msgstore", data)
        if stale_terms and self.old_terms is not None:
            (self.dir / terms.NAME).write_bytes(self.old_terms)
        self.store = FileStore.open(self.dir, **OPTIONS)
        assert not self.store.used_terms
        state = self.store.recover()
        assert not state.clean
        got = self._check_recovered(state)
        for seqs in state.queues.values():
            assert all(m.redelivered for m in seqs), "a dirty restart flags every message"
        self._adopt(state, got)

    @rule()
    def restart_clean(self) -> None:
        self.store.close()
        self.old_terms = (self.dir / terms.NAME).read_bytes()
        self.store = FileStore.open(self.dir, **OPTIONS)
        assert self.store.used_terms, "a clean stop is followed by a start from the terms"
        state = self.store.recover()
        assert state.clean
        got = self._check_recovered(state)
        assert got == self.live, "a clean stop loses nothing and resurrects nothing"
        for queue, msgs in state.queues.items():
            for m in msgs:
                count = self.counts.get((queue, m.seq), 0)
                assert m.delivery_count == count
                assert m.redelivered == (count > 0)
        self._adopt(state, got)

    def _check_recovered(self, state: RecoveredState) -> dict[tuple[str, int], bytes]:
        got: dict[tuple[str, int], bytes] = {}
        for queue, msgs in state.queues.items():
            seqs = [m.seq for m in msgs]
            assert seqs == sorted(set(seqs)), "per-queue seq order, no duplicates"
            for m in msgs:
                got[(queue, m.seq)] = m.message.body
        must = (self.durable & set(self.live)) - self.pending_acks
        missing = must - set(got)
        assert not missing, f"confirmed messages lost: {sorted(missing)}"
        resurrected = set(got) & self.synced_acks
        assert not resurrected, f"acked messages came back: {sorted(resurrected)}"
        for key, body in got.items():
            assert key in self.ever, f"unknown message {key}"
            assert body == self.ever[key], f"wrong body for {key}"
        for keys in self.txs:
            present = [k in got for k in keys if k in self.live]  # acked ones are uncertain
            assert all(present) or not any(present), "transactions are all or nothing"
        for queue in QUEUES:
            assert state.next_seq.get(queue, 0) <= self.next_seq[queue]
        return got

    def _adopt(self, state: RecoveredState, got: dict[tuple[str, int], bytes]) -> None:
        self.restarts += 1
        self.live = dict(got)
        self.counts = {(q, m.seq): m.delivery_count for q, ms in state.queues.items() for m in ms}
        self.counts = {k: v for k, v in self.counts.items() if v}
        self.durable = set(got)  # what was read back is in the files
        self.pending_acks.clear()
        self.txs = [[k for k in keys if k in got] for keys in self.txs]
        self.txs = [keys for keys in self.txs if keys]
        for queue in QUEUES:
            # never reuse a seq id: the engine continues above state.next_seq
            self.next_seq[queue] = max(self.next_seq[queue], state.next_seq.get(queue, 0))
        self._record_synced_sizes()  # what recovery read back is on disk: never cut it

    @invariant()
    def index_matches_writer(self) -> None:
        assert self.store.stats()["messages"] == len(self.live)


TestStorage = StorageMachine.TestCase
# every step touches files: cap the example count of heavier profiles to keep the suite short
TestStorage.settings = settings(max_examples=min(settings().max_examples, 120))


STANDING = "s"
"""The backlog queue of `BacklogStorageMachine`: filled at the start, never acked."""


class BacklogStorageMachine(StorageMachine):
    """The same machine behind a standing backlog that no rule acks: dead segments chain
    behind it (acks straddle segments), so `reclaim.py` copies it forward whatever its live
    share, and by windows smaller than one record, between crashes that may cut what was not
    synced. The same checks hold: nothing synced is lost, nothing acked comes back."""

    def __init__(self) -> None:
        super().__init__()
        self.next_seq[STANDING] = 0
        self._patch = pytest.MonkeyPatch()
        self._patch.setattr(reclaim, "_COPY_WINDOW_BYTES", 150)

    def teardown(self) -> None:
        self._patch.undo()
        super().teardown()

    @initialize(n=st.integers(4, 12), large=st.booleans())
    def start(self, n: int, large: bool) -> None:
        for _ in range(n):
            self._enqueue(STANDING, None, large)
        self.sync()

    def _ackable(self) -> list[tuple[str, int]]:
        return sorted(k for k in self.live if k[0] != STANDING)

    @precondition(lambda self: self._ackable())
    @rule(data=st.data(), n=st.integers(1, 4))
    def ack(self, data: st.DataObject, n: int) -> None:
        keys = self._ackable()
        picked = data.draw(st.lists(st.sampled_from(keys), min_size=1, max_size=n, unique=True))
        for queue in QUEUES:
            seqs = [SeqId(s) for q, s in picked if q == queue]
            if seqs:
                self.store.ack(queue, seqs)
        for key in picked:
            del self.live[key]
            self.counts.pop(key, None)
            self.pending_acks.add(key)

    @rule(n=st.integers(2, 6))
    def churn(self, n: int) -> None:
        """Other traffic whose acks straddle segments: ack what is live of "b", enqueue `n`
        more, ack all of them but the last (a segment's worth of records), sync."""
        older = [SeqId(s) for q, s in sorted(self.live) if q == "b"]
        fresh = []
        for _ in range(n):
            self._enqueue("b", None, False)
            fresh.append(SeqId(self.next_seq["b"] - 1))
        acked = older + fresh[:-1]
        self.store.ack("b", acked)
        for seq in acked:
            del self.live[("b", seq)]
            self.counts.pop(("b", seq), None)
            self.pending_acks.add(("b", seq))
        self.sync()

    @invariant()
    def backlog_stays(self) -> None:
        assert sum(1 for q, _ in self.live if q == STANDING) == self.next_seq[STANDING]


TestBacklogStorage = BacklogStorageMachine.TestCase
TestBacklogStorage.settings = settings(max_examples=min(settings().max_examples, 120))
