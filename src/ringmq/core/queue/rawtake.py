"""Raw reservations: head messages taken while they are still page rows, kept as such.

Theory of operation
-------------------
A reserve (`Queue.take_run`, takerun.py) whose head is in the paged tail takes the rows of the
page runs at the spill's front as they are (`SpillStore.pop_raw` -> `RawRows`): no `Message`
and no queue entry is built for them, and the cyclic GC has nothing to walk. `RawUnacked`
is the queue's second unacked table, beside the unacked map of entries: its `RawRows` in seq
order (every raw take comes from the spill's front, above everything taken raw before it), with
their count in `counters.raw_unacked` (part of `counters.unacked`) and their bytes in
`counters.unacked_bytes`, so every count of the queue sees them as delivered and unacked.

The guard (`ready`): the queue is on `fetch`'s fast path (one lane, no expiry ever seen,
destructive), nothing waits in memory (no ready entry, nothing put back or requeued), every
paged message is in the spill (no body paged on its own), the spill holds stored items, no
recovered backlog (its messages carry stored delivery counts) and keeps page records
(`spill_raw`, which the run take also asks before it skips its read-ahead). The spill decides
what is raw: only page-run rows (a PAGED_REF record is a journal copy, a PAGED record one
message: those are paged in by the ordinary step, and the run step resumes after them).

The exits are the ordinary ones, in front of the shared steps:

* `ack` (the lease's settle through `Queue.ack`): the rows leave the table; nothing is built;
* `restore` (before `Settlement` requeues or rejects): the rows are decoded (`RawRows.items`)
  into ordinary ACQUIRED entries of the unacked map with one delivery, as `fetch` would have
  left them, and the usual requeue puts them back at their seqs, flagged redelivered.

Rows leave in any subset; a `RawRows` whose middle leaves is split in parts. Imports nothing
outside core/queue.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Protocol, cast

from ringmq.core.message import Message, SeqId
from ringmq.core.queue.lanes import ACQUIRED, Entry, new_entry
from ringmq.core.queue.ports import RawRows
from ringmq.core.queue.records import QueueCounters

if TYPE_CHECKING:
    from ringmq.core.queue.lanes import Lane
    from ringmq.core.queue.paging import PagedTail

__all__ = ["RawUnacked", "ready", "spill_raw", "take"]


class RawUnacked:
    """A queue's unacked raw rows (see the module docstring)."""

    __slots__ = ("_counters", "runs")

    def __init__(self, counters: QueueCounters) -> None:
        self._counters = counters
        self.runs: list[RawRows] = []

    def add(self, rows: Sequence[RawRows]) -> tuple[int, int]:
        """Hold `rows` (seqs above every held one) as unacked; returns (rows, bytes)."""
        n = nbytes = 0
        for r in rows:
            n += len(r)
            nbytes += r.nbytes
        self.runs += rows
        c = self._counters
        c.raw_unacked += n
        c.unacked_bytes += nbytes
        return n, nbytes

    def lowest(self) -> SeqId | None:
        """The lowest held seq, or None."""
        return SeqId(self.runs[0].seqs[0]) if self.runs else None

    def seqs(self) -> list[SeqId]:
        """Every held seq, ascending."""
        out: list[int] = []
        for r in self.runs:
            out += r.seqs
        return cast("list[SeqId]", out)

    def ack(self, seqs: Iterable[SeqId]) -> list[SeqId]:
        """Acknowledge the held rows among `seqs`; returns the other seqs, in order."""
        found, rest = self._remove(seqs)
        n = nbytes = 0
        for r, i, j in found:
            n += j - i
            nbytes += sum(r.sizes[i:j])
        c = self._counters
        c.raw_unacked -= n
        c.unacked_bytes -= nbytes
        c.acknowledged += n
        return rest

    def restore(self, seqs: Iterable[SeqId], unacked: dict[SeqId, Entry]) -> None:
        """Put the held rows among `seqs` into `unacked` as the entries `fetch` leaves there
        (ACQUIRED, one delivery); their bytes stay in `counters.unacked_bytes`."""
        found, _ = self._remove(seqs)
        n = 0
        for r, i, j in found:
            for seq, msg, _exp in r.part(i, j).items():
                e = new_entry(seq, msg, len(msg.body))
                e.state = ACQUIRED
                e.deliveries = 1
                unacked[seq] = e
            n += j - i
        self._counters.raw_unacked -= n

    def _remove(self, seqs: Iterable[SeqId]) -> tuple[list[tuple[RawRows, int, int]], list[SeqId]]:
        # The held rows among `seqs` as (rows, i, j) ranges (each once), the runs left split
        # around them, and the seqs not held. A settle's seqs are whole runs in order: each
        # run is matched with one slice comparison.
        want = seqs if isinstance(seqs, list) else list(seqs)
        runs = self.runs
        firsts = [r.seqs[0] for r in runs]
        hits: dict[int, list[tuple[int, int]]] = {}
        rest: list[SeqId] = []
        i, n = 0, len(want)
        while i < n:
            s = want[i]
            x = bisect_right(firsts, s) - 1
            if x < 0:
                rest.append(s)
                i += 1
                continue
            rs = runs[x].seqs
            a = bisect_left(rs, s)
            if a >= len(rs) or rs[a] != s:
                rest.append(s)
                i += 1
                continue
            cap = min(n - i, len(rs) - a)
            if want[i : i + cap] == rs[a : a + cap].tolist():
                m = cap
            else:
                m = 1
                while m < cap and want[i + m] == rs[a + m]:
                    m += 1
            hits.setdefault(x, []).append((a, a + m))
            i += m
        found: list[tuple[RawRows, int, int]] = []
        if not hits:
            return found, rest
        kept: list[RawRows] = []
        for x, r in enumerate(runs):
            ranges = hits.get(x)
            if ranges is None:
                kept.append(r)
                continue
            at = 0
            for a, b in _union(ranges):
                if a > at:
                    kept.append(r.part(at, a))
                found.append((r, a, b))
                at = b
            if at < len(r):
                kept.append(r.part(at, len(r)))
        self.runs = kept
        return found, rest


def _union(ranges: list[tuple[int, int]]) -> list[tuple[int, int]]:
    # Sorted, overlapping ranges merged (a seq given twice leaves once).
    out: list[tuple[int, int]] = []
    for a, b in sorted(ranges):
        if out and a <= out[-1][1]:
            if b > out[-1][1]:
                out[-1] = (out[-1][0], b)
        else:
            out.append((a, b))
    return out


class Containers(Protocol):
    """The containers the raw steps read and fill (`contents.Contents`, which holds the
    `RawUnacked` table and so imports this module: named here by what it provides)."""

    @property
    def counters(self) -> QueueCounters: ...

    @property
    def lane(self) -> Lane: ...

    @property
    def paging(self) -> PagedTail: ...

    @property
    def raw(self) -> RawUnacked: ...


def spill_raw(paging: PagedTail) -> bool:
    """Whether the spill may hand rows over raw: it holds stored items, no recovered backlog,
    and its store keeps page records (`SpillStore.keeps_raw`)."""
    return paging.stored > 0 and not paging.restoring and paging.keeps_raw


def ready(contents: Containers) -> bool:
    """Whether the head may be taken raw now (the guard of the module docstring; the caller
    checked `fetch`'s fast path)."""
    c = contents.counters
    lane = contents.lane
    paging = contents.paging
    return (
        not c.ready
        and c.paged == paging.spilled
        and not (lane.head or lane.returns)
        and spill_raw(paging)
    )


def take(
    contents: Containers,
    max_count: int,
    max_bytes: int | None,
    first: bool,
    seqs: list[SeqId],
    messages: list[Message | RawRows],
    redelivered: list[bool],
) -> tuple[int, int]:
    """Take up to `max_count` head rows raw (each while the bodies taken before it are below
    `max_bytes`; with `first`, the first always), appending their seqs, their `RawRows` (once
    per row: a row's rows object, shared) and False flags; moves paged to unacked and counts
    the deliveries. Returns (rows, bytes) taken; (0, 0) when the front is not raw."""
    rows = contents.paging.take_raw(max_count, max_bytes, first)
    if not rows:
        return 0, 0
    taken = cast("list[int]", seqs)  # SeqId is a NewType of int: no SeqId() call per row
    for r in rows:
        taken += r.seqs
        messages += [r] * len(r)
    n, nbytes = contents.raw.add(rows)
    redelivered += [False] * n
    contents.counters.delivered += n
    return n, nbytes
