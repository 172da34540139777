"""What a durable copy of a queue needs of the engine, and its recovery: `QueueRecovery`.

Theory of operation
-------------------
`QueueRecovery` is a base class of `Queue` (engine.py) and holds no state of its own: the
attributes it names below are `Queue`'s (its owners: `Contents`, `Scheduler`, `Expiry`,
`Overflow`, the paged tail, the browse index and the seq counter), set by `Queue.__init__`. It
holds the calls that only durability and recovery make: the timing a stored copy records
(`timing_of`), putting recovered messages back at the tail or in the schedule in ascending seq
order (`restore`), a long recovered backlog left on disk (`restore_spilled`), and new seqs
issued above the recovered ones (`resume_seqs`). None of them runs on a client's publish or
fetch.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from typing import cast

from ringmq.core.message import Message, SeqId
from ringmq.core.queue.contents import Contents
from ringmq.core.queue.expiry import Expiry
from ringmq.core.queue.lanes import Entry
from ringmq.core.queue.overflow import Overflow
from ringmq.core.queue.paging import PagedTail
from ringmq.core.queue.ports import SpillStore
from ringmq.core.queue.records import QueueCounters
from ringmq.core.queue.scheduler import Scheduler, future_due

__all__ = ["QueueRecovery"]


class QueueRecovery:
    """Recovery calls of one queue (see the module docstring)."""

    counters: QueueCounters
    _contents: Contents
    _scheduler: Scheduler
    _expiry: Expiry
    _overflow: Overflow
    _paging: PagedTail
    _index: list[Entry] | None
    _seq_counter: itertools.count[int]
    _next_seq: Callable[[], SeqId]

    def _entry(self, seq: SeqId, msg: Message) -> Entry:
        raise NotImplementedError  # Queue's

    def _apply_bound(self) -> None:
        raise NotImplementedError  # QueueMemoryBound's (membound.py)

    @property
    def pageable(self) -> bool:
        raise NotImplementedError  # QueueMemoryBound's (membound.py)

    @property
    def last_seq(self) -> SeqId:
        raise NotImplementedError  # Queue's

    def timing_of(self, msg: Message, now_ms: int) -> tuple[int | None, int | None]:
        """`(expiry_ms, due_ms)` the engine gives `msg` published at `now_ms` (to persist)."""
        due = future_due(msg.headers, now_ms) if msg.headers else None
        return self._expiry.expires_at(msg, now_ms), due

    def restore(
        self,
        seq: SeqId,
        msg: Message,
        *,
        redelivered: bool,
        delivery_count: int,
        expiry_ms: int | None,
        due_ms: int | None,
    ) -> None:
        """Put a recovered message back at the tail (in ascending seq order; no limit: what
        was stored fitted), or with `due_ms` in the schedule, whatever its due time (`tick`
        releases overdue ones in batches, to the head as any scheduled message). Then
        `resume_seqs` so new seqs are higher.

        A scheduled message that was delivered before (`delivery_count` > 0: a delayed
        redelivery) keeps `expiry_ms`, as it does when it waits without a restart
        (`Overflow.admit` does not stamp a returning redelivered message again)."""
        e = self._entry(seq, msg)
        e.redelivered = redelivered
        e.deliveries = delivery_count
        self.counters.added += 1
        if self._index is not None:
            self._index.append(e)
        if due_ms is not None:
            if delivery_count > 0 and expiry_ms is not None:
                e.expires_at = expiry_ms
                self._expiry.note()
            self._scheduler.add(due_ms, e)
            return
        if expiry_ms is not None:
            e.expires_at = expiry_ms
            self._expiry.note()
        self._contents.restore_ready(e)
        self._overflow.track(e)

    def restore_spilled(
        self,
        spill: SpillStore,
        count: int,
        nbytes: int,
        *,
        redelivered: bool,
        delivery_counts: dict[SeqId, int],
        expiring: bool,
        below: SeqId,
    ) -> None:
        """Recovery of a long backlog whose rest stays on disk in `spill` (after `restore`
        put the head in memory; `PagedTail.restore` states the rest). `expiring`: some of them
        carry an expiry time. Needs `pageable`."""
        assert self.pageable, "restore_spilled needs a pageable queue"
        self._paging.restore(
            spill, count, nbytes, redelivered=redelivered, counts=delivery_counts, below=below
        )
        if expiring:
            self._expiry.note()
        self._apply_bound()

    def resume_seqs(self, next_seq: int) -> None:
        """Issue seqs from `next_seq` on (never lower than what was issued already)."""
        start = max(next_seq, self.last_seq + 1)
        self._seq_counter = itertools.count(start)
        self._next_seq = cast("Callable[[], SeqId]", self._seq_counter.__next__)
