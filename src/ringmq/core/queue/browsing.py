"""Non-destructive reads of one queue: `QueueBrowsing`, a base class of `Queue`.

Theory of operation
-------------------
`QueueBrowsing` holds no state of its own: the attributes it names are `Queue`'s (engine.py),
set by `Queue.__init__`. A browse reads waiting messages in seq order without taking them
(browse.py: expired, unacked and scheduled messages skipped), through the browse index built on
first use (paging stops while it exists), or, for readers that must not stop a queue's paging
(the streams API), straight from the lanes and the paged tail. A reader sees nothing the
durability hold keeps back (hold.py): no message at or past the first held seq, none refused.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ringmq.core.message import SeqId
from ringmq.core.queue import browse
from ringmq.core.queue.columns import Columns
from ringmq.core.queue.hold import NO_HOLD, Hold
from ringmq.core.queue.records import Delivery, QueueCounters

if TYPE_CHECKING:
    from ringmq.core.queue.contents import Contents
    from ringmq.core.queue.lanes import Entry
    from ringmq.core.queue.paging import PagedTail
    from ringmq.core.queue.scheduler import Scheduler

__all__ = ["QueueBrowsing"]


class QueueBrowsing:
    """Browse one queue (see the module docstring)."""

    name: str
    counters: QueueCounters
    hold: Hold
    hold_from: int
    _index: list[Entry] | None
    _contents: Contents
    _paging: PagedTail
    _scheduler: Scheduler

    @property
    def pageable(self) -> bool:
        raise NotImplementedError  # QueueMemoryBound's (membound.py)

    def _apply_bound(self) -> None:
        raise NotImplementedError  # QueueMemoryBound's (membound.py)

    def _browse_index(self) -> list[Entry]:
        # Built on first use, kept up to date by publish, compacted once gone entries dominate.
        index = self._index
        if index is None:
            self._contents.unspill()  # paging stops while the index exists
            index = self._index = browse.build_index(self._contents, self._scheduler.entries())
            self._apply_bound()
        else:
            compacted = browse.compact_index(index, self.counters.message_count)
            if compacted is not None:
                index = self._index = compacted
        return index

    def browse_ready(self, after: SeqId | None, limit: int, now_ms: int) -> list[Delivery]:
        """`browse_many` for readers that must not stop a queue's paging (the streams API): a
        paging queue is read without the browse index (`browse.ready_without_index`)."""
        if self._index is not None or self._paging.spill is None or not self.pageable:
            return self.browse_many(after, limit, now_ms)
        found = browse.ready_without_index(self._contents, after, limit, now_ms)
        return found if self.hold_from == NO_HOLD else self._unheld(found)

    def browse_columns(self, after: SeqId | None, limit: int, now_ms: int) -> Columns:
        """`browse_ready` as columns (`columns.Columns`): the same rows, and a paged queue's
        spilled messages go from their page records to the columns without being built."""
        if (
            self._index is not None
            or self._paging.spill is None
            or not self.pageable
            or self.hold_from != NO_HOLD  # rows, to leave the held ones out
        ):
            out = Columns()
            found = self.browse_many(after, limit, now_ms)
            out.add_rows((d.seq, d.seq, d.redelivered, d.message) for d in found)
            return out
        return browse.ready_columns(self._contents, after, limit, now_ms)

    def browse(self, after: SeqId | None, now_ms: int) -> Delivery | None:
        """The next waiting message with a seq greater than `after`, without removing it
        (browse.py: seq order, expired, unacked and scheduled messages skipped)."""
        out = self.browse_many(after, 1, now_ms)
        return out[0] if out else None

    def browse_many(self, after: SeqId | None, limit: int, now_ms: int) -> list[Delivery]:
        """Up to `limit` waiting messages with seqs greater than `after`, in seq order: what
        `limit` chained calls of `browse` give, in one bisect and one pass over the index."""
        out: list[Delivery] = []
        if limit <= 0:
            return out
        index = self._browse_index()
        start = browse.start_after(index, after)
        peek = self._contents.store.peek
        found = browse.deliveries(index, start, limit, now_ms, out, peek, self.name)
        return found if self.hold_from == NO_HOLD else self._unheld(found)

    def _unheld(self, found: list[Delivery]) -> list[Delivery]:
        # A reader sees no message the durability hold keeps back (hold.py): none at or past
        # the first held seq (order kept), none refused.
        first, refused = self.hold.first_held(), self.hold.refused
        out: list[Delivery] = []
        for d in found:
            if d.seq >= first:
                break
            if d.seq not in refused:
                out.append(d)
        return out
