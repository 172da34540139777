"""The paged tail: the part of a queue's backlog that lives in a `SpillStore`, not in memory.

Theory of operation
-------------------
A `PagedTail` owns, for one queue, the spill store, the newest spilled items not yet handed to
it (`_buf`, flushed every `SPILL_BATCH` messages or `SPILL_BATCH_BYTES` of bodies, whichever
comes first: those bodies are still in memory, so the buffer must stay small whatever the
message size), how many messages and bytes are spilled, the
recovered-backlog flags (`restore`), and the in-memory bound (`bound_n`/`bound_b`, with the
effective `head_*` bounds and the `low_*` read-ahead marks derived from it by `set_active`).

The queue keeps at most `head_n` ready messages / `head_b` body bytes in memory. Past the bound,
`page_out` moves the rear of the lane's tail to the *front* of the spill; while anything is
spilled, new publishes go behind it (`push`). `refill` pages the oldest spilled messages back
into the tail as new entries. The spill continues the lane's *tail* in seq order: every spilled
seq is greater than every seq in the tail, because only never-delivered messages from the
tail's rear spill and new ones go behind them. It does not follow everything in memory: a
scheduled message released at the head (then perhaps unacked, or requeued into the lane's
returns) can have a higher seq than spilled ones. `floor` is a seq no spilled message is below
(the spill's first seq after `page_out`, the one after the last paged in after `refill`), so a
reader that needs the lowest seq learns from memory alone whether the spill can hold it
(`Contents.spill_floor`, the one place that combines the two).

Invariants: `spilled`/`spilled_bytes` count the store plus the buffer, `_stored` the store
alone, `buffered`/`buffered_bytes` the buffer alone (below `SPILL_BATCH` messages and
`SPILL_BATCH_BYTES` between calls: the management API counts them in memory, not paged);
every spilled seq is above every seq in the lane's tail and at least `floor`; the
queue's `counters.paged`/`paged_bytes` include them (the paged tail moves those counters and
`ready`/`ready_bytes` together, so `message_count` never changes by paging).
Spilled seqs below `_restored_below` come from recovery and carry the stored redelivered flag
and delivery counts. Inactive (`set_active(False)`): unbounded, nothing spilled.

Consumers page a batch back in (`refill_batch`: read-ahead of half the bound) when memory falls
to a quarter of the bound (`low_*`; `Contents.pop_next`), so they see queue order through
publish, requeue, page out and page in. `Contents` passes its single lane's tail deque
explicitly; the tail does not know lanes, limits or the browse index. A raw reservation takes
the oldest stored messages past the tail as the store keeps them (`take_raw`, rawtake.py): they
leave the spill and the `paged` counters as a refill moves them.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence
from typing import Final

from ringmq.core.message import Message, SeqId
from ringmq.core.queue.columns import Columns
from ringmq.core.queue.lanes import READY, Entry, new_entry
from ringmq.core.queue.ports import RawRows, RunColumns, Spilled, SpillStore
from ringmq.core.queue.records import (
    DEFAULT_HEAD_BYTES,
    DEFAULT_HEAD_COUNT,
    UNBOUNDED,
    Delivery,
    QueueCounters,
)

__all__ = ["SPILL_BATCH", "SPILL_BATCH_BYTES", "PagedTail"]

SPILL_BATCH: Final = 128  # spilled publishes handed to the store together
SPILL_BATCH_BYTES: Final = 1024 * 1024
"""Bodies the buffer of new spilled publishes holds at most before they go to the store (the
count alone would let 128 bodies of 1 MiB wait in memory while counted as paged)."""


class PagedTail:
    """One queue's paged tail (see the module docstring)."""

    __slots__ = (
        "_buf",
        "_buf_bytes",
        "_counters",
        "_restored_below",
        "_restored_counts",
        "_restored_redelivered",
        "_stored",
        "bound_b",
        "bound_n",
        "floor",
        "head_b",
        "head_n",
        "low_b",
        "low_n",
        "name",
        "spill",
        "spilled",
        "spilled_bytes",
    )

    def __init__(self, name: str, spill: SpillStore | None, counters: QueueCounters) -> None:
        self.name = name
        self.spill = spill
        self._counters = counters
        self._buf: list[Spilled] = []  # newest spilled items, not yet in the store
        self._buf_bytes = 0  # their bodies
        self.spilled = 0  # spilled messages (store + buffer)
        self.spilled_bytes = 0
        self._stored = 0  # of which in the store
        self.floor = 0  # no spilled seq is below it (a lower bound, exact after `page_out`)
        # Recovered backlog left in the spill (`restore`): spilled seqs below
        # `_restored_below` came from the store, with these flags and delivery counts.
        self._restored_below = 0
        self._restored_redelivered = False
        self._restored_counts: dict[SeqId, int] = {}
        self.bound_n = DEFAULT_HEAD_COUNT
        self.bound_b = DEFAULT_HEAD_BYTES
        self.head_n = self.head_b = UNBOUNDED  # effective bounds (unbounded: no paging)
        self.low_n = self.low_b = 0  # refill when memory is at or below both

    def set_active(self, active: bool, tail: deque[Entry]) -> None:
        """Derive the effective bounds: from `bound_*` when the queue can page, else unbounded
        (and everything spilled comes back into `tail`)."""
        if active:
            self.head_n = max(1, self.bound_n)
            self.head_b = max(1, self.bound_b)
            self.low_n = self.head_n // 4
            self.low_b = self.head_b // 4
        else:
            self.head_n = self.head_b = UNBOUNDED
            self.low_n = self.low_b = 0
            if self.spilled:
                self.unspill(tail)

    def page_out(self, tail: deque[Entry]) -> tuple[int, int]:
        """Move the rear of `tail` to the front of the spill until memory is within the bound.

        Returns (messages paged, gone entries dropped from `tail` on the way). Only
        never-delivered messages move; requeued ones stay in memory (in the lane's returns).
        """
        c = self._counters
        head_n, head_b = self.head_n, self.head_b
        if c.ready <= head_n and c.ready_bytes <= head_b:
            return 0, 0
        spill = self.spill
        if spill is None:
            return 0, 0
        moved: list[Spilled] = []
        n = nbytes = gone = 0
        while tail and (c.ready - n > head_n or c.ready_bytes - nbytes > head_b):
            e = tail.pop()
            if e.state != READY:
                gone += 1
                continue
            if e.paged or e.redelivered:
                tail.append(e)  # cannot happen for spillable queues; keep it in place
                break
            msg = e.msg
            assert msg is not None
            # `e` is dropped (its state is left alone: a caller may still be looking at it);
            # the message comes back as a new entry when paged in.
            moved.append((e.seq, msg, e.expires_at))
            n += 1
            nbytes += e.size
        if not moved:
            return 0, gone
        moved.reverse()
        spill.push_front(moved)
        self.floor = moved[0][0]  # the tail's rear went before the spill: its first seq now
        c.ready -= n
        c.ready_bytes -= nbytes
        c.paged += n
        c.paged_bytes += nbytes
        self.spilled += n
        self.spilled_bytes += nbytes
        self._stored += n
        return n, gone

    def push(self, seq: SeqId, msg: Message, size: int, expires_at: int | None) -> None:
        """A new message while the spill is non-empty: it goes behind everything spilled."""
        buf = self._buf
        buf.append((seq, msg, expires_at))
        self._added(1, size)
        self._buf_bytes += size
        if len(buf) >= SPILL_BATCH or self._buf_bytes >= SPILL_BATCH_BYTES:
            self._spill_buffer()

    def push_run(self, items: list[Spilled]) -> None:
        """`push` for many new messages (`(seq, message, None)` in seq order) while the spill
        is non-empty: they go behind everything spilled, handed to the store together."""
        if not items:
            return
        nbytes = 0
        for item in items:
            nbytes += len(item[1].body)
        self._added(len(items), nbytes)
        buf = self._buf
        buf += items
        self._buf_bytes += nbytes
        if len(buf) >= SPILL_BATCH or self._buf_bytes >= SPILL_BATCH_BYTES:
            self._spill_buffer()

    def push_columns(self, seqs: list[int], run: RunColumns) -> None:
        """`push_run` of a run given as columns (`seqs` ascending, above every seq pushed so
        far): the buffered items go to the store first, then the run, in one hand-over."""
        n = len(seqs)
        if not n:
            return
        self._added(n, sum(map(len, run.bodies)))
        if self._buf:
            self._spill_buffer()
        spill = self.spill
        assert spill is not None
        spill.push_back_run(seqs, run)
        self._stored += n

    def _added(self, n: int, nbytes: int) -> None:
        # `n` new messages of `nbytes` bodies, spilled: the queue's counters and the spill's.
        c = self._counters
        c.paged += n
        c.paged_bytes += nbytes
        c.added += n
        self.spilled += n
        self.spilled_bytes += nbytes

    def _spill_buffer(self) -> None:
        # The buffered new messages to the store, behind everything spilled, in one hand-over.
        buf = self._buf
        spill = self.spill
        assert spill is not None
        spill.push_back(buf)
        self._stored += len(buf)
        self._buf = []
        self._buf_bytes = 0

    def refill(self, tail: deque[Entry], max_count: int, max_bytes: int) -> int:
        """Page the oldest spilled messages back into `tail` (store first, then the buffer);
        returns how many."""
        items: list[Spilled] = []
        if self._stored:
            spill = self.spill
            assert spill is not None
            items = spill.pop_front(max_count, max_bytes)
            self._stored -= len(items)
        if not self._stored and len(items) < max_count and self._buf:
            buf = self._buf
            k = max_count - len(items)
            taken = buf[:k]
            del buf[:k]
            items.extend(taken)
            self._buf_bytes -= sum(len(t[1].body) for t in taken) if buf else self._buf_bytes
        if items:
            self.floor = items[-1][0] + 1  # what stays spilled follows what came back
        nbytes = 0
        restored_below = self._restored_below
        append = tail.append
        for seq, msg, expires_at in items:
            e = new_entry(seq, msg, size := len(msg.body))
            e.expires_at = expires_at
            if seq < restored_below:  # recovered backlog: flags as stored
                e.deliveries, e.redelivered = self.recovered_state(seq, forget=True)
            append(e)
            nbytes += size
        n = len(items)
        c = self._counters
        c.paged -= n
        c.paged_bytes -= nbytes
        c.ready += n
        c.ready_bytes += nbytes
        self.spilled -= n
        self.spilled_bytes -= nbytes
        if restored_below and not self.spilled:
            self._restored_below = 0
            self._restored_counts = {}
        return n

    def front(self) -> Spilled | None:
        """The oldest spilled message, read where it lies (the store's front, else the
        buffer's): nothing is paged in and the counters do not move. None when nothing is
        spilled."""
        if self._stored:
            spill = self.spill
            assert spill is not None
            items = spill.peek_after(None, 1)
            if items:
                return items[0]
        return self._buf[0] if self._buf else None

    @property
    def buffered(self) -> int:
        """Spilled messages still in the buffer, i.e. in memory (below `SPILL_BATCH`)."""
        return len(self._buf)

    @property
    def buffered_bytes(self) -> int:
        """Their bodies (below `SPILL_BATCH_BYTES` between calls)."""
        return self._buf_bytes

    @property
    def stored(self) -> int:
        """Spilled messages handed to the store (the rest is the newest, still buffered)."""
        return self._stored

    @property
    def keeps_raw(self) -> bool:
        """Whether the spill may hand its front over raw (`SpillStore.keeps_raw`)."""
        return self.spill is not None and self.spill.keeps_raw

    @property
    def restoring(self) -> bool:
        """Whether a recovered backlog (stored flags and counts) is still spilled."""
        return self._restored_below > 0

    def take_raw(self, max_count: int, max_bytes: int | None, first: bool) -> Sequence[RawRows]:
        """Take the oldest stored messages as the store keeps them (`SpillStore.pop_raw`: a
        raw reservation, rawtake.py): they leave the spill and `paged` as `refill` moves
        them, but to the caller, not to the tail. Empty when the front is not raw."""
        spill = self.spill
        if not self._stored or self._restored_below or spill is None:
            return []
        rows = spill.pop_raw(max_count, max_bytes, first)
        if not rows:
            return rows
        n = nbytes = 0
        for r in rows:
            n += len(r)
            nbytes += r.nbytes
        self._stored -= n
        self.spilled -= n
        self.spilled_bytes -= nbytes
        self.floor = rows[-1].seqs[-1] + 1  # what stays spilled follows what was taken
        c = self._counters
        c.paged -= n
        c.paged_bytes -= nbytes
        return rows

    def refill_batch(self, tail: deque[Entry]) -> int:
        """`refill` one read-ahead batch: half the bound."""
        return self.refill(tail, max(1, self.head_n // 2), max(1, self.head_b // 2))

    def unspill(self, tail: deque[Entry]) -> None:
        """Bring every spilled message back into `tail` (settings change, O(n) reads)."""
        while self.spilled:
            if not self.refill(tail, UNBOUNDED, UNBOUNDED):
                raise RuntimeError(f"queue {self.name}: spill store lost messages")

    def clear(self) -> int:
        """Forget everything spilled (purge); returns how many messages."""
        n = self.spilled
        if self.spill is not None:
            self.spill.clear()
        self._buf = []
        self._buf_bytes = 0
        c = self._counters
        c.paged -= n
        c.paged_bytes -= self.spilled_bytes
        self.spilled = self.spilled_bytes = self._stored = 0
        self.floor = 0
        self._restored_below = 0
        self._restored_counts = {}
        return n

    def close(self) -> None:
        """The queue is deleted: forget everything and release the store."""
        self.clear()
        if self.spill is not None:
            self.spill.close()

    def restore(
        self,
        spill: SpillStore,
        count: int,
        nbytes: int,
        *,
        redelivered: bool,
        counts: dict[SeqId, int],
        below: SeqId,
    ) -> None:
        """Adopt a recovered backlog of `count` messages (`nbytes` body bytes) left in `spill`.

        Called after the queue's `restore` put the head in memory: every seq in `spill` is
        above every restored one, in seq order. The queue then pages it in as it drains, as if
        it had paged it out itself, and uses `spill` for later paging too. Paged-in messages
        with a seq below `below` get `redelivered` (or a delivery count from `counts`: then
        flagged redelivered).
        """
        assert not self.spilled, "restore_spilled runs once, on a queue with nothing paged"
        self.spill = spill
        self.spilled = self._stored = count
        self.spilled_bytes = nbytes
        self.floor = 0  # unknown; the backlog follows the restored tail (`Contents.spill_floor`)
        c = self._counters
        c.paged += count
        c.paged_bytes += nbytes
        c.added += count
        self._restored_below = below
        self._restored_redelivered = redelivered
        self._restored_counts = counts

    def recovered_state(self, seq: SeqId, *, forget: bool) -> tuple[int, bool]:
        """(delivery count, redelivered) of a spilled message as recovery stored them; a
        message published since recovery has (0, False). `forget`: it is being paged in."""
        if seq >= self._restored_below:
            return 0, False
        counts = self._restored_counts
        count = counts.pop(seq, 0) if forget else counts.get(seq, 0)
        return count, self._restored_redelivered or count > 0

    def browse(self, after: SeqId | None, limit: int, now_ms: int, out: list[Delivery]) -> None:
        """Append to `out` (until it holds `limit`) the spilled messages with a seq above
        `after`, in order, read in place (nothing is paged in); expired ones are skipped."""
        spill = self.spill
        assert spill is not None
        cursor: int | None = after
        while self._stored and len(out) < limit:
            want = limit - len(out)
            items = spill.peek_after(cursor, want)
            self._browse(items, now_ms, out, limit)
            if len(items) < want:
                break
            cursor = items[-1][0]
        if len(out) < limit:
            buf = [item for item in self._buf if cursor is None or item[0] > cursor]
            self._browse(buf, now_ms, out, limit)

    def browse_columns(self, after: SeqId | None, limit: int, now_ms: int, out: Columns) -> None:
        """`browse` as columns: the spilled messages read in place straight into `out`
        (`SpillStore.peek_columns`: no message is built for a page record), then the
        redelivered flags a recovered backlog keeps (`recovered_state`)."""
        spill = self.spill
        assert spill is not None
        start = len(out)
        cursor: int | None = after
        while self._stored and len(out) < limit:
            last = spill.peek_columns(cursor, limit, now_ms, out)
            if last is None:
                break
            cursor = last
        if len(out) < limit:
            for seq, msg, expires_at in self._buf:
                if len(out) >= limit:
                    break
                if (cursor is None or seq > cursor) and (
                    expires_at is None or now_ms <= expires_at
                ):
                    out.add_message(seq, False, msg)
        if start < len(out) and out.seqs[start] < self._restored_below:
            seqs, flags = out.seqs, out.redelivered
            for i in range(start, len(out)):
                row_seq = SeqId(seqs[i])
                if row_seq >= self._restored_below:
                    break
                flags[i] = 1 if self.recovered_state(row_seq, forget=False)[1] else 0

    def _browse(self, items: list[Spilled], now_ms: int, out: list[Delivery], limit: int) -> None:
        # Spilled messages as `refill` would restore them: a recovered backlog keeps its
        # stored flags and delivery counts; expired ones are skipped as browse skips them.
        for seq, msg, expires_at in items:
            if len(out) >= limit:
                return
            if expires_at is not None and now_ms > expires_at:
                continue
            count, redelivered = self.recovered_state(seq, forget=False)
            out.append(Delivery(seq, msg, redelivered, count + 1))
