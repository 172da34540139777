"""Page files that hold references to the journal, against a plain deque (issue 4 follow-ups).

A `PageQueue` given the store's `copies` writes a message that is live in the journal as a
PAGED_REF record and reads it back from the journal; a recovered backlog starts as a memory run
of seqs. This machine mixes, in random interleavings: journaled and transient messages pushed
at the back and at the front, pops of random sizes, acks of popped messages (so journal
segments die), unrelated traffic on another queue, group commits (segment deletion,
copy-forward of the oldest segment's few live entries, message-store compaction) and a
restart of the store from its recovery terms. Whatever happens to the files, every pop must
return exactly the model's next messages with their bodies, and the page queue's length must
match the model.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections import deque
from pathlib import Path

import hypothesis.strategies as st
from hypothesis import settings
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from ringmq.core.message import Message, SeqId
from ringmq.storage.paging import PageQueue
from ringmq.storage.records import Entry
from ringmq.storage.store import FileStore

OPTIONS = {"segment_bytes": 700, "msg_segment_bytes": 1500, "embed_below": 100}
QUEUE = "q"


def body(seq: int, large: bool) -> bytes:
    tag = f"{seq}:".encode()
    return tag + b"L" * 150 if large else tag + b"s" * (seq % 7)


class PagingRefsMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.dir = Path(tempfile.mkdtemp(prefix="ringmq-paging-refs-"))
        self.store = FileStore.open(self.dir / "store", **OPTIONS)
        self.store.recover()
        self.pages = PageQueue(self.dir / "pages", run_bytes=200, copies=self.store.copies(QUEUE))
        self.model: deque[tuple[int, bytes]] = deque()
        self.delivered: list[int] = []  # popped journaled seqs, not yet acked
        self.journaled: set[int] = set()
        self.next_seq = 1
        self.other = 1

    def teardown(self) -> None:
        self.store.abandon()
        shutil.rmtree(self.dir, ignore_errors=True)

    def _new(self, journaled: bool, large: bool) -> Entry:
        seq = self.next_seq
        self.next_seq += 1
        message = Message("ex", "rk", b"\x10\x00\x02", body(seq, large), persistent=journaled)
        if journaled:
            self.store.enqueue(QUEUE, SeqId(seq), message)
            self.journaled.add(seq)
        return Entry(QUEUE, SeqId(seq), message)

    @initialize(n=st.integers(0, 12), large=st.booleans())
    def recovered_backlog(self, n: int, large: bool) -> None:
        entries = [self._new(True, large) for _ in range(n)]
        self.pages.restore([e.seq for e in entries])
        self.model.extend((e.seq, e.message.body) for e in entries)

    @rule(kinds=st.lists(st.tuples(st.booleans(), st.booleans()), min_size=1, max_size=6))
    def push_back(self, kinds: list[tuple[bool, bool]]) -> None:
        entries = [self._new(j, large) for j, large in kinds]
        self.pages.push_back(entries)
        self.model.extend((e.seq, e.message.body) for e in entries)

    @rule(kinds=st.lists(st.tuples(st.booleans(), st.booleans()), min_size=1, max_size=6))
    def push_front(self, kinds: list[tuple[bool, bool]]) -> None:
        entries = [self._new(j, large) for j, large in kinds]
        self.pages.push_front(entries)
        self.model.extendleft(reversed([(e.seq, e.message.body) for e in entries]))

    @precondition(lambda self: self.model)
    @rule(k=st.integers(1, 8), max_bytes=st.sampled_from([1, 40, 10_000]))
    def pop(self, k: int, max_bytes: int) -> None:
        out = self.pages.pop_front(k, max_bytes)
        assert 1 <= len(out) <= k
        expected = [self.model.popleft() for _ in out]
        assert [(seq, m.body) for seq, m, _ in out] == expected
        self.delivered.extend(seq for seq, _, _ in out if seq in self.journaled)

    @precondition(lambda self: self.delivered)
    @rule(data=st.data())
    def ack(self, data: st.DataObject) -> None:
        n = data.draw(st.integers(1, len(self.delivered)))
        done, self.delivered = self.delivered[:n], self.delivered[n:]
        self.store.ack(QUEUE, [SeqId(s) for s in done])
        self.journaled.difference_update(done)

    @rule(n=st.integers(1, 10))
    def other_traffic(self, n: int) -> None:
        seqs = [SeqId(self.other + i) for i in range(n)]
        self.other += n
        for seq in seqs:
            self.store.enqueue("other", seq, Message("ex", "rk", b"", b"o" * 40, persistent=True))
        self.store.ack("other", seqs)

    @rule(times=st.integers(1, 12))
    def group_commits(self, times: int) -> None:
        for _ in range(times - 1):
            point = self.store.flush()  # maintenance runs at every flush; deletions wait
            for fd in point.fds:  # for a sync
                os.close(fd)
        self.store.sync()

    @rule()
    def clean_restart_of_the_store(self) -> None:
        # the page files outlive nothing in a real restart; here the store alone restarts from
        # its recovery terms and the same page queue keeps resolving through the new index
        self.store.close()
        self.store = FileStore.open(self.dir / "store", **OPTIONS)
        assert self.store.used_terms
        self.store.recover()
        self.pages.copies = self.store.copies(QUEUE)

    @invariant()
    def sizes_match(self) -> None:
        assert len(self.pages) == len(self.model)


TestPagingRefs = PagingRefsMachine.TestCase
TestPagingRefs.settings = settings(max_examples=min(settings().max_examples, 40))
