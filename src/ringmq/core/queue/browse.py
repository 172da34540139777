"""Non-destructive reads: browsing a queue in seq order without taking anything.

Theory of operation
-------------------
Browsing follows seq (publish) order, skips expired, unacked and scheduled messages, and changes
no state: a non-destructive consumer or a read-only reader keeps the last seq it saw as its
cursor. The *browse index* is every live entry of a queue in seq order (ready, unacked and
scheduled), built on the first browse and then appended to by every publish; entries that leave
are only marked GONE and skipped, and `compact` drops them once they dominate. Reading `limit`
messages after a cursor (`Queue.browse_many`) gives exactly what `limit` calls of `browse` give
when each starts after the previous answer's seq (stopping at the first None).

The index is owned by the `Queue` (its publish fast paths append to it inline: one attribute
test per publish when no index exists); this module holds the functions that build and read it,
and the reads that need no index (`head_seq`, `head_message`, `ready_without_index`), each
given the state it reads explicitly (the index, or the queue's `Contents`). Building the index
pages the whole queue in and stops its paging (`Queue.pageable`), so readers that must not stop
a queue's paging (the streams API, `head_seq`, the management API's queue page through
`head_message`) use the index-free reads: the ready messages in memory, merged by seq with the
spilled tail read in place. The spill continues the lane's tail only
(paging.py): a message released from the schedule to the head, or requeued after that, can
have a higher seq than spilled ones, so the spill is read whenever `Contents.spill_floor`
does not rule it out. Bodies paged one by one are read in place through `peek`.
"""

from __future__ import annotations

import heapq
import itertools
from bisect import bisect_right
from collections.abc import Callable, Iterable
from typing import Final

from ringmq.core.message import Message, SeqId
from ringmq.core.queue.columns import Columns
from ringmq.core.queue.contents import Contents
from ringmq.core.queue.lanes import COMPACT_MIN, GONE, READY, Entry, Lane
from ringmq.core.queue.records import Delivery

__all__ = [
    "build_index",
    "compact_index",
    "deliveries",
    "head_message",
    "head_seq",
    "lowest_in_memory",
    "ready_columns",
    "ready_in_memory",
    "ready_without_index",
    "start_after",
]

Peek = Callable[[str, SeqId], Message]

_seq_of: Final = lambda e: e.seq  # noqa: E731  (bisect key)


def build_index(contents: Contents, scheduled: Iterable[Entry]) -> list[Entry]:
    """Every live entry in seq order: ready and unacked (`contents`) and `scheduled`."""
    live = contents.live_entries()
    live.extend(scheduled)
    live.sort()
    return live


def compact_index(index: list[Entry], live_count: int) -> list[Entry] | None:
    """A copy of `index` without gone entries when they dominate it, else None."""
    if len(index) > COMPACT_MIN and len(index) > 2 * (live_count + 1):
        return [e for e in index if e.state != GONE]
    return None


def start_after(index: list[Entry], after: SeqId | None) -> int:
    """The position of the first entry of `index` with a seq above `after`."""
    return 0 if after is None else bisect_right(index, after, key=_seq_of)


def deliveries(
    entries: list[Entry],
    start: int,
    limit: int,
    now_ms: int,
    out: list[Delivery],
    peek: Peek,
    name: str,
) -> list[Delivery]:
    """Append to `out`, until it holds `limit`, deliveries of the ready, unexpired entries of
    `entries[start:]` (in seq order); returns `out`."""
    append = out.append
    for i in range(start, len(entries)):
        e = entries[i]
        if e.state != READY:
            continue
        exp = e.expires_at
        if exp is not None and now_ms > exp:
            continue
        msg = e.msg if e.msg is not None else peek(name, e.seq)
        append(Delivery(e.seq, msg, e.redelivered, e.deliveries + 1))
        if len(out) >= limit:
            break
    return out


def lowest_in_memory(lanes: list[Lane], unacked: dict[SeqId, Entry]) -> SeqId | None:
    """The lowest seq among the ready entries in `lanes` and the `unacked` ones."""
    best: SeqId | None = None
    for lane in lanes:
        for e in lane.head:
            if e.state == READY and (best is None or e.seq < best):
                best = e.seq
        for e in lane.returns:
            if e.state == READY and (best is None or e.seq < best):
                best = e.seq
        for e in lane.tail:  # ascending seq: the first ready one is the lowest
            if e.state == READY:
                if best is None or e.seq < best:
                    best = e.seq
                break
    if unacked:
        low = min(unacked)
        if best is None or low < best:
            best = low
    return best


def ready_in_memory(lane: Lane, after: SeqId | None) -> list[Entry]:
    """The ready entries of `lane` with a seq above `after`, in seq order (sorted per call)."""
    live = [
        e
        for e in itertools.chain(lane.head, lane.returns, lane.tail)
        if e.state == READY and (after is None or e.seq > after)
    ]
    live.sort()
    return live


def head_seq(contents: Contents) -> SeqId | None:
    """The lowest seq of a ready or unacked message (see `Queue.head_seq`): the spill matters
    only when it may hold a seq below the lowest in memory (`Contents.spill_floor`: never while
    the tail holds a ready message), and then one read-ahead batch is paged in, as a fetch
    would, which brings the spill's first message into the tail."""
    best = lowest_in_memory(contents.lanes, contents.unacked)
    paging = contents.paging
    if (
        paging.spilled
        and (best is None or contents.spill_floor() < best)
        and paging.refill_batch(contents.lane.tail)
    ):
        best = lowest_in_memory(contents.lanes, contents.unacked)
    return best


def head_message(contents: Contents) -> Message | None:
    """The next delivery's message, read in place: the entry `Contents.peek_head` answers,
    except that where the spill may come first its front is read where it lies
    (`PagedTail.front`) instead of paging a batch in. Nothing is paged in, so a reader that
    only looks (the management API's queue page) leaves the queue's memory as it found it."""
    if len(contents.lanes) > 1:
        e = contents.peek_head()  # several priority levels: never spilled, nothing pages in
        return None if e is None else contents.body(e)
    lane = contents.lane
    e = lane.peek()
    paging = contents.paging
    if paging.spilled and (e is None or (not lane.head and contents.spill_floor() < e.seq)):
        front = paging.front()
        if front is not None and (e is None or front[0] < e.seq):
            return front[1]
    return None if e is None else contents.body(e)


def ready_without_index(
    contents: Contents, after: SeqId | None, limit: int, now_ms: int
) -> list[Delivery]:
    """Up to `limit` ready messages of a single-lane queue with seqs above `after`, in seq
    order, without the browse index: those in memory (sorted per call), merged with the
    spilled tail read in place through `SpillStore.peek_after` unless `spill_floor` shows that
    none of it comes before the last answer; nothing is paged in."""
    out: list[Delivery] = []
    if limit <= 0:
        return out
    live = ready_in_memory(contents.lane, after)
    deliveries(live, 0, limit, now_ms, out, contents.store.peek, contents.name)
    paging = contents.paging
    if paging.spilled and (len(out) < limit or contents.spill_floor() < out[-1].seq):
        spilled: list[Delivery] = []
        paging.browse(after, limit, now_ms, spilled)
        if spilled:
            out = list(itertools.islice(heapq.merge(out, spilled, key=_seq_of), limit))
    return out


def ready_columns(contents: Contents, after: SeqId | None, limit: int, now_ms: int) -> Columns:
    """`ready_without_index` as columns (`columns.py`): the same rows, the spilled ones read
    from their page records without building messages. When every spilled seq is above the
    last row from memory (`spill_floor`: the common case, memory holding the queue's front),
    only the rows still missing are read from the spill."""
    out = Columns()
    if limit <= 0:
        return out
    live = ready_in_memory(contents.lane, after)
    found = deliveries(live, 0, limit, now_ms, [], contents.store.peek, contents.name)
    out.add_rows((d.seq, d.seq, d.redelivered, d.message) for d in found)
    paging = contents.paging
    if not paging.spilled:
        return out
    floor = contents.spill_floor()
    if out and floor > out.seqs[-1]:
        if len(out) < limit:
            paging.browse_columns(after, limit, now_ms, out)  # appended: all above memory's
        return out
    spilled = Columns()
    paging.browse_columns(after, limit, now_ms, spilled)
    return out.merged(spilled, limit)
