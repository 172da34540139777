"""Scheduled delivery: messages held back until their due time (Artemis' scheduled-delivery
handler, RabbitMQ's delayed-message plugin headers).

Theory of operation
-------------------
A `Scheduler` owns one queue's scheduled entries: a heap of `(due_ms, seq, entry)`. An entry in
it is SCHEDULED; it is counted in `counters.scheduled`/`scheduled_bytes` (which the scheduler
keeps) and is subject to no limit until the queue releases it to the head of its lane
(`pop_due`, `take`). Removal is lazy: an entry whose state is no longer SCHEDULED (purged,
taken) is dropped when it reaches the top of the heap.

Invariants: `counters.scheduled` equals the number of SCHEDULED entries in the heap, and
`scheduled_bytes` the sum of their sizes. The scheduler never touches lanes or limits: what it
releases (`release_due`, `release_now`) goes to the `release` step it is given
(`Overflow.release`, which admits it at the head under the limit).
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Iterable
from typing import Any, Final

from ringmq.core.message import SeqId
from ringmq.core.queue.lanes import GONE, SCHEDULED, Entry
from ringmq.core.queue.records import (
    SCHEDULED_RELEASE_BATCH,
    PublishOutcome,
    QueueCounters,
    ScheduledMessage,
)

__all__ = ["Release", "Scheduler", "future_due", "schedule_due"]

Release = Callable[[Entry, int], PublishOutcome]
"""Where released entries go: `(entry, now_ms) -> outcome` (`Overflow.release`)."""


MAX_DUE_MS: Final = 1 << 62
"""The latest due time kept (about 146 million years): a later one, however far, is "never"
in effect, and stays in the signed 64-bit fields of the journal and page records (a delay of
2^63 - 1 ms overflowed them)."""


def clamp_due(due_ms: int) -> int:
    """`due_ms` bounded by `MAX_DUE_MS` (the one bound of every scheduled or held message)."""
    return due_ms if due_ms <= MAX_DUE_MS else MAX_DUE_MS


def schedule_due(headers: dict[str, Any], now_ms: int) -> int | None:
    """The due time (epoch ms) `headers` ask for, or None.

    The absolute Artemis time wins over the relative RabbitMQ delay; malformed values are
    ignored; a due time past `MAX_DUE_MS` is `MAX_DUE_MS`."""
    absolute = headers.get("_AMQ_SCHED_DELIVERY")
    if type(absolute) is int or type(absolute) is float:
        return clamp_due(int(absolute))
    delay = headers.get("x-delay")
    if type(delay) is int or type(delay) is float:
        return clamp_due(now_ms + int(delay))
    return None


def future_due(headers: dict[str, Any], now_ms: int) -> int | None:
    """The due time `headers` ask for if it is after `now_ms` (the message is scheduled),
    else None (it is enqueued at once)."""
    due = schedule_due(headers, now_ms)
    return due if due is not None and due > now_ms else None


class Scheduler:
    """One queue's scheduled messages by due time (see the module docstring)."""

    __slots__ = ("_counters", "_heap")

    def __init__(self, counters: QueueCounters) -> None:
        self._counters = counters
        self._heap: list[tuple[int, SeqId, Entry]] = []

    def add(self, due_ms: int, e: Entry) -> None:
        """Hold `e` until `due_ms`."""
        e.state = SCHEDULED
        heapq.heappush(self._heap, (due_ms, e.seq, e))
        c = self._counters
        c.scheduled += 1
        c.scheduled_bytes += e.size

    def pop_due(self, now_ms: int) -> Entry | None:
        """The earliest entry due at `now_ms`, taken out of the schedule (uncounted; its
        state is still SCHEDULED: the caller places it), or None."""
        heap = self._heap
        while heap:
            due, _seq, e = heap[0]
            if e.state != SCHEDULED:
                heapq.heappop(heap)
                continue
            if due > now_ms:
                return None
            heapq.heappop(heap)
            self._uncount(e)
            return e
        return None

    def next_due_ms(self) -> int | None:
        """The earliest due time, or None when nothing is scheduled."""
        heap = self._heap
        while heap and heap[0][2].state != SCHEDULED:
            heapq.heappop(heap)
        return heap[0][0] if heap else None

    def entries(self) -> list[Entry]:
        """Every scheduled entry (any order)."""
        return [e for _, _, e in self._heap if e.state == SCHEDULED]

    def listing(self) -> list[ScheduledMessage]:
        """Scheduled messages by due time (Artemis `listScheduledMessages`)."""
        live = sorted((due, seq, e) for due, seq, e in self._heap if e.state == SCHEDULED)
        out = []
        for due, seq, e in live:
            assert e.msg is not None
            out.append(ScheduledMessage(seq, e.msg, due))
        return out

    def release_due(self, now_ms: int, release: Release) -> None:
        """Release the entries due at `now_ms`, at most `SCHEDULED_RELEASE_BATCH` of them
        (a backlog after downtime does not starve live traffic)."""
        for _ in range(SCHEDULED_RELEASE_BATCH):
            e = self.pop_due(now_ms)
            if e is None:
                return
            release(e, now_ms)

    def release_now(self, seqs: Iterable[SeqId] | None, now_ms: int, release: Release) -> int:
        """Release the given scheduled entries (all when None) now, by due time; returns how
        many were released (accepted or not)."""
        picked = self.take(seqs)
        for e in picked:
            release(e, now_ms)
        return len(picked)

    def purge(self, on_remove: Callable[[SeqId], None] | None) -> int:
        """Drop every scheduled entry (GONE, reported to `on_remove`, counted `purged`);
        returns how many."""
        n = 0
        for _, _, e in self._heap:
            if e.state == SCHEDULED:
                e.state = GONE
                if on_remove is not None:
                    on_remove(e.seq)
                n += 1
        self._heap.clear()
        c = self._counters
        c.scheduled = c.scheduled_bytes = 0
        c.purged += n
        return n

    def take(self, seqs: Iterable[SeqId] | None) -> list[Entry]:
        """Take the given scheduled entries (all when None) out of the schedule, by due time;
        they are uncounted and left GONE until the caller places them."""
        wanted = None if seqs is None else set(seqs)
        picked = sorted(
            (due, seq, e)
            for due, seq, e in self._heap
            if e.state == SCHEDULED and (wanted is None or seq in wanted)
        )
        out = []
        for _, _, e in picked:
            e.state = GONE  # leaves the heap lazily
            self._uncount(e)
            out.append(e)
        return out

    def _uncount(self, e: Entry) -> None:
        c = self._counters
        c.scheduled -= 1
        c.scheduled_bytes -= e.size
