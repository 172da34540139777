"""Where a queue's messages are, and the primitive moves that take them out.

Theory of operation
-------------------
`Contents` owns, for one queue, the containers its live entries sit in and the steps that
move entries out of them; the rules (limits, settlement, expiry, scheduling) live in the
collaborators that call these steps:

* `lanes`: one `Lane` per priority level (`lane` is level 0, the only one without
  `x-max-priority`) holding the READY entries (lanes.py states their order);
* `unacked`: the ACQUIRED entries by seq (the map is `counters.unacked_map`, so the counters
  read the unacked count from it);
* `raw`: the unacked rows of raw reservations, held as page rows (rawtake.py), counted in
  `counters.raw_unacked`;
* `paging`: the `PagedTail`, the spilled suffix of a single-lane queue (paging.py);
* `store`: the `BodyStore` holding bodies paged one by one (flow-to-disk limits);
* `lvq`: the last-value index, LVQ key -> the entry holding the key's latest value (ready or
  acquired); an entry leaves it when it leaves the queue or is requeued;
* `on_remove`: the storage hook told of every seq the engine removes by itself.

Removal is lazy: an entry taken from the middle of a lane (`remove_ready`) is only marked GONE
and counted in `_gone`; lanes skip gone entries and are compacted once gone entries dominate
the ready ones. `forget` is the one exit of an entry: GONE, reported to `on_remove`, dropped
from `lvq`. The `Queue` keeps aliases to `lanes`, `lane`, `unacked`, `lvq` and `paging` (never
rebound here) so its inlined publish/fetch/ack paths read them without a hop.

Invariants: a READY entry is in exactly one lane container (or, spilled, only in `paging`);
`counters.ready`/`ready_bytes` count the in-memory READY entries and `paged`/`paged_bytes` the
spilled ones plus the bodies in `store`; `_gone` counts GONE entries still in lanes (an upper
bound: `page_out` lowers it by those it met).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from typing import Any

from ringmq.core.message import Message, SeqId
from ringmq.core.queue.lanes import COMPACT_MIN, GONE, READY, Entry, Lane
from ringmq.core.queue.paging import PagedTail
from ringmq.core.queue.ports import BodyStore, SpillStore
from ringmq.core.queue.rawtake import RawUnacked
from ringmq.core.queue.records import QueueCounters

__all__ = ["Contents"]


class Contents:
    """One queue's containers and removal steps (see the module docstring)."""

    __slots__ = (
        "_gone",
        "counters",
        "lane",
        "lanes",
        "lvq",
        "name",
        "on_remove",
        "paging",
        "raw",
        "store",
        "unacked",
    )

    def __init__(
        self,
        name: str,
        counters: QueueCounters,
        levels: int,
        store: BodyStore,
        spill: SpillStore | None,
    ) -> None:
        self.name = name
        self.counters = counters
        self.lanes: list[Lane] = [Lane() for _ in range(levels)]
        self.lane = self.lanes[0]
        self.unacked: dict[SeqId, Entry] = counters.unacked_map
        self.paging = PagedTail(name, spill, counters)
        self.raw = RawUnacked(counters)
        self.store = store
        self.lvq: dict[Any, Entry] = {}
        self.on_remove: Callable[[SeqId], None] | None = None
        self._gone = 0  # gone entries still sitting in lanes

    # --- leaving the queue ---------------------------------------------------------------

    def forget(self, e: Entry) -> None:
        """The entry leaves the queue for good."""
        e.state = GONE
        if self.on_remove is not None:
            self.on_remove(e.seq)
        key = e.key
        if key is not None and self.lvq.get(key) is e:
            del self.lvq[key]

    def remove_ready(self, e: Entry) -> None:
        """Remove a waiting entry from the middle of its lane (lazily)."""
        c = self.counters
        if e.paged:
            c.paged -= 1
            c.paged_bytes -= e.size
            if e.msg is None:
                self.store.discard(self.name, e.seq)
        else:
            c.ready -= 1
            c.ready_bytes -= e.size
        self.forget(e)
        self._gone += 1
        if self._gone > COMPACT_MIN and self._gone > c.ready + c.paged:
            for lane in self.lanes:
                lane.compact()
            self._gone = 0

    def purge(self) -> int:
        """Remove every waiting message (not unacked, not scheduled); returns how many."""
        n = self._purge_spilled() if self.on_remove is not None else 0
        for lane in self.lanes:
            for e in lane.entries():
                if e.paged and e.msg is None:
                    self.store.discard(self.name, e.seq)
                self.forget(e)
                n += 1
            lane.head.clear()
            lane.returns.clear()
            lane.tail.clear()
        n += self.paging.clear()
        c = self.counters
        c.ready = c.ready_bytes = c.paged = c.paged_bytes = 0
        c.purged += n
        self._gone = 0
        return n

    def _purge_spilled(self) -> int:
        # Storage must hear every removed seq, so the spill is read back, but one read-ahead
        # batch at a time, each forgotten as soon as it is read: purging a paged backlog holds
        # no more of it in memory than a consumer draining it does (paging it all in first
        # would take the broker up by the backlog's size, and glibc keeps such a peak).
        paging = self.paging
        batch: deque[Entry] = deque()
        n = 0
        while paging.spilled:
            if not paging.refill_batch(batch):
                raise RuntimeError(f"queue {self.name}: spill store lost messages")
            for e in batch:
                self._uncount(e)
                self.forget(e)
            n += len(batch)
            batch.clear()
        return n

    # --- the head ------------------------------------------------------------------------

    def pop_ready(self) -> Entry | None:
        """Pop the next waiting entry in delivery order and update the ready counters,
        paging a batch in when the (single) lane ran dry."""
        if len(self.lanes) > 1:
            for lane in reversed(self.lanes):
                e = lane.pop()
                if e is not None:
                    break
            else:
                return None
        else:
            e = self.peek_lane()
            if e is None:
                return None
            self.lane.take(e)
        self._uncount(e)
        return e

    def pop_next(self) -> Entry | None:
        """`pop_ready` for consumers: a single lane reads ahead (pages the next batch in once
        memory falls to the low mark) and pops from its tail inline."""
        if len(self.lanes) > 1:
            return self.pop_ready()
        if self.paging.spilled:
            self.read_ahead()
        lane = self.lane
        if lane.head or lane.returns:
            e = self.peek_lane()
            if e is not None:
                lane.take(e)
        else:
            tail = lane.tail
            e = None
            while tail:
                x = tail.popleft()
                if x.state == READY:
                    e = x
                    break
        if e is not None:
            self._uncount(e)
        return e

    def read_ahead(self) -> None:
        """Page the next batch in when memory fell to the low mark (both `low_n` and `low_b`)
        and something is spilled: what a consumer does before each pop (`pop_next`)."""
        c = self.counters
        paging = self.paging
        if paging.spilled and c.ready <= paging.low_n and c.ready_bytes <= paging.low_b:
            paging.refill_batch(self.lane.tail)

    def _uncount(self, e: Entry) -> None:
        c = self.counters
        if e.paged:
            c.paged -= 1
            c.paged_bytes -= e.size
        else:
            c.ready -= 1
            c.ready_bytes -= e.size

    def peek_head(self) -> Entry | None:
        """The next delivery, left in place: the head of the highest non-empty level (a
        single lane pages the spill in when it may come first: `peek_lane`)."""
        if len(self.lanes) == 1:
            return self.peek_lane()
        for lane in reversed(self.lanes):
            e = lane.peek()
            if e is not None:
                return e
        return None

    def peek_lane(self) -> Entry | None:
        """The single lane's next delivery, left in place, the spill taken as the rest of its
        tail: the lane serves its head, then the lower seq of its returns and its tail, and
        when the tail is drained a spilled message may be that lower seq (a requeued message
        released from the schedule can follow it), so one read-ahead batch is paged in first
        whenever the spill may precede the lane's answer (`spill_floor`)."""
        lane = self.lane
        e = lane.peek()
        paging = self.paging
        if paging.spilled and (e is None or (not lane.head and self.spill_floor() < e.seq)):
            paging.refill_batch(lane.tail)
            e = lane.peek()
        return e

    def spill_floor(self) -> SeqId:
        """A seq no spilled message is below: the spill continues the single lane's tail (every
        spilled seq is above the tail's last one) and none is below `paging.floor` (paging.py).
        Entries in the lane's head or returns, and unacked ones, may be above it."""
        floor = self.paging.floor
        tail = self.lane.tail
        if tail and tail[-1].seq >= floor:
            return SeqId(tail[-1].seq + 1)
        return SeqId(floor)

    # --- bodies and paging ---------------------------------------------------------------

    def take_body(self, e: Entry) -> Message:
        """The entry's body, paged back in from `store` if it was paged out."""
        if e.msg is None:
            e.msg = self.store.page_in(self.name, e.seq)
        e.paged = False
        return e.msg

    def body(self, e: Entry) -> Message:
        """The entry's body, read in place (nothing is paged in)."""
        return e.msg if e.msg is not None else self.store.peek(self.name, e.seq)

    def page_out_body(self, e: Entry) -> None:
        """Move a ready entry's body to `store` (flow-to-disk); it stays in its lane."""
        msg = e.msg
        assert msg is not None
        self.store.page_out(self.name, e.seq, msg)
        e.msg = None
        e.paged = True
        c = self.counters
        c.ready -= 1
        c.ready_bytes -= e.size
        c.paged += 1
        c.paged_bytes += e.size

    def page_out(self) -> int:
        """Page the rear of the in-memory tail out until memory is within the bound; returns
        how many messages were paged (see `Queue.page_out`)."""
        n, gone = self.paging.page_out(self.lane.tail)
        if gone:
            self._gone = max(0, self._gone - gone)
        return n

    def set_store(self, store: BodyStore) -> bool:
        """Use `store` for bodies paged one by one; refused (False) while bodies are paged in
        the current one."""
        if self.counters.paged != self.paging.spilled:
            return False
        self.store = store
        return True

    def close(self) -> None:
        """The queue is deleted: release the spilled tail and the paged bodies."""
        self.paging.close()
        close = getattr(self.store, "close", None)
        if callable(close):
            close()

    def unspill(self) -> None:
        """Bring every spilled message back into memory (O(n) reads, the browse index)."""
        self.paging.unspill(self.lane.tail)

    # --- recovery and views --------------------------------------------------------------

    def restore_ready(self, e: Entry) -> None:
        """Append a recovered entry to its lane (an older LVQ value that survived loses)."""
        key = e.key
        if key is not None:
            old = self.lvq.get(key)
            if old is not None and old.state == READY:
                self.remove_ready(old)
            self.lvq[key] = e
        self.lanes[e.level].tail.append(e)
        c = self.counters
        c.ready += 1
        c.ready_bytes += e.size

    def ready_entries(self) -> list[Entry]:
        """Waiting entries in delivery order, the whole queue in memory (O(n) anyway; the
        next publish pages the excess out again)."""
        self.paging.unspill(self.lane.tail)
        return [e for lane in reversed(self.lanes) for e in lane.entries()]

    def live_entries(self) -> list[Entry]:
        """Every ready (in memory) and unacked entry, in no particular order."""
        live = [e for lane in self.lanes for e in lane.entries()]
        live.extend(self.unacked.values())
        return live
