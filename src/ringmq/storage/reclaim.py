"""Journal space reclamation: which segments to delete, which live entries to copy forward.

Theory of operation
-------------------
`Reclaimer.run` runs inside every `FileStore.flush()` (so at most once per group commit) and
owns two decisions over the store's `Journal` and `StoreIndex`:

* **Delete** a closed segment when none of its ENQUEUEs is live, no copy forward out of it
  awaits an fsync (`StoreIndex.moved`), and none of the older segments its ACK, PURGE,
  DELIVERY_COUNT and TX_COMMIT records refer to still exists (`StoreIndex.seg_deps`): an ack
  never disappears before the enqueue it cancels. A current segment whose entries are all dead
  is rolled once it passes `_ROLL_DEAD_CURRENT_BYTES`, so that it can go too.
* **Copy forward** the oldest segment's live entries into the current segment (with their
  current delivery counts and due times), after which the old segment is dead and goes once a
  completed fsync covers the copies. Two reasons start a copy:

  - the oldest segment is mostly dead (at most `_COMPACT_LIVE_RATIO` of its enqueues live):
    a few long-lived messages must not pin a whole segment;
  - dead segments are *pinned* behind live ones and outweigh them (`_pinned_garbage`). Acks
    that straddle two segments make the newer depend on the older, and every start opens a new
    segment, so dead segments chain back to the newest older segment that still holds live
    entries. A standing backlog keeps that segment above the live ratio forever, and without
    this rule the chain, and the replay after a crash, grew with history instead of with what
    is live. Copying the live segments before the chain forward, oldest first, frees it; it is
    done once the dead bytes outweigh those live bytes, so copies cost at most what they free
    and the journal stays within about twice what is live (a kept dead segment counts at least
    1/`_DEAD_SEGMENT_SHARE` of a full one: a file costs an open and a read at recovery whatever
    its size, so tiny per-restart segments cannot pile up either).

  A mostly dead segment that an ack touched within the last `_COMPACT_QUIET_FLUSHES` flushes
  is left alone (a queue draining it will free it anyway); pinned dead segments do not wait
  for that (a slow consumer of a backlog must not let them grow meanwhile). A copy proceeds
  `_COPY_WINDOW_BYTES` of the segment per flush, so a mostly-live segment never stalls the
  loop for long; after each window the segment is marked moved at the current position, so it
  is never deleted before every copy made so far is durable. A copy cut short by a restart
  starts again (the entries already copied have moved and are skipped).

Invariants: nothing live is ever deleted (a segment goes only with no live entry); a copy is
durable before its original goes. One owner thread (the store's); file I/O only through
`Journal`. Imports nothing from core/ except through records.py.
"""

from __future__ import annotations

from typing import Final

from ringmq.storage.index import SIZE_MASK, StoreIndex
from ringmq.storage.journal import Journal
from ringmq.storage.records import (
    HEADER,
    HEADER_SIZE,
    MAX_RECORD,
    RecordType,
    decode_entry,
    encode_entry,
    scan,
)

_ROLL_DEAD_CURRENT_BYTES: Final = 1024 * 1024
_COMPACT_LIVE_RATIO: Final = 0.25
_COMPACT_QUIET_FLUSHES: Final = 8  # copy forward only once no ack touched it for this long
_DEAD_SEGMENT_SHARE: Final = 16  # a kept dead segment weighs at least 1/16 of a full one
_COPY_WINDOW_BYTES: Final = 1024 * 1024  # of the copied segment, per flush


class Reclaimer:
    """Deletes dead journal segments and copies live entries forward (module docstring)."""

    def __init__(self, journal: Journal, index: StoreIndex) -> None:
        self.journal = journal
        self.index = index
        self._closed_bytes: dict[int, int] = {}  # closed segment -> size (closed never grow)
        self._copying: tuple[int, int] | None = None  # segment, offset of the next window

    def run(self, position: int, durable: int) -> None:
        """Delete what is dead, then copy one window forward if a copy is due.

        Args:
            position: the store's write position (stamped on the segment copied from).
            durable: the highest position a completed fsync covers.
        """
        index = self.index
        journal = self.journal
        current = journal.current
        if (
            current >= 0
            and index.seg_live.get(current, 0) == 0
            and journal.current_bytes >= _ROLL_DEAD_CURRENT_BYTES
        ):
            # a drained queue: start a new segment so the dead current one can go now
            journal.roll()
            current = -1
        segments = journal.segments
        alive = set(segments)
        pinned = False  # a dead segment stays because records in it cancel kept ones
        for seg in segments:
            if seg == current:
                continue
            moved_at = index.moved.get(seg)
            if moved_at is not None and moved_at > durable:
                continue
            if index.seg_live.get(seg, 0) > 0:
                continue
            if any(dep in alive for dep in index.seg_deps.get(seg, ())):
                pinned = True
                continue
            journal.delete(seg)
            alive.discard(seg)
            index.dropped_segment(seg)
            self._closed_bytes.pop(seg, None)
        self._maybe_copy_forward(journal.segments, current, pinned, position)

    def _maybe_copy_forward(
        self, segments: list[int], current: int, pinned: bool, position: int
    ) -> None:
        index = self.index
        if self._copying is not None:
            seg, offset = self._copying
            if seg in segments:
                self._copy_window(seg, offset, position)
                return
            self._copying = None  # its last live entries were acked meanwhile: it is gone
        if len(segments) < 3:
            return
        oldest = segments[0]
        if oldest == current:
            return
        live = index.seg_live.get(oldest, 0)
        if live == 0:
            return  # dead (copied already): it goes once the copies are durable
        mostly_dead = live <= index.seg_total.get(oldest, 0) * _COMPACT_LIVE_RATIO
        # an ack within the last few flushes: a queue is draining it, its entries go anyway
        quiet = index.flushes - index.seg_acked_at.get(oldest, -_COMPACT_QUIET_FLUSHES) >= (
            _COMPACT_QUIET_FLUSHES
        )
        if (mostly_dead and quiet) or (pinned and self._pinned_garbage(segments, current)):
            self._copy_window(oldest, 0, position)

    def _pinned_garbage(self, segments: list[int], current: int) -> bool:
        # True when the kept dead segments outweigh the live bytes older than the newest of
        # them: what copying those live entries forward would cost (module docstring). A
        # segment's live bytes are estimated from its share of live enqueues (no per-entry
        # walk on every flush).
        index = self.index
        floor = self.journal.segment_bytes // _DEAD_SEGMENT_SHARE
        garbage = live_before = live_bytes = 0
        for seg in segments:
            if seg == current or seg in index.moved:
                continue
            size = self._size(seg)
            live = index.seg_live.get(seg, 0)
            if live:
                live_bytes += size * live // max(index.seg_total.get(seg, live), live)
            else:
                garbage += max(size, floor)
                live_before = live_bytes
        return garbage > live_before

    def _size(self, seg: int) -> int:
        size = self._closed_bytes.get(seg)
        if size is None:
            try:
                size = self.journal.path(seg).stat().st_size
            except FileNotFoundError:
                size = 0
            self._closed_bytes[seg] = size
        return size

    def _copy_window(self, seg: int, offset: int, position: int) -> None:
        # Copy the live entries among the records of `seg` from `offset` on (one window).
        index = self.index
        journal = self.journal
        want = _COPY_WINDOW_BYTES
        data = journal.read(seg, offset, want)
        records, good = scan(data)
        if not records and len(data) >= HEADER_SIZE:
            length = HEADER.unpack_from(data, 0)[0]
            if _COPY_WINDOW_BYTES < length <= MAX_RECORD:  # one record longer than a window
                want = HEADER_SIZE + length
                data = journal.read(seg, offset, want)
                records, good = scan(data)
        locations = index.locations
        counts = index.counts
        due = index.due
        for rec in records:
            if rec.rtype != RecordType.ENQUEUE:
                continue
            entry = decode_entry(rec.payload)
            loc = locations.get(entry.queue, {}).get(entry.seq)
            if loc is None or loc >> 64 != seg or (loc >> 32) & SIZE_MASK != offset + rec.offset:
                continue  # acked, or superseded by a later copy
            entry.delivery_count = counts.get(entry.queue, {}).get(entry.seq, 0)
            # a delayed redelivery's due time (from a DELIVERY_COUNT) travels as F_DUE
            entry.due_ms = due.get(entry.queue, {}).get(entry.seq)
            at, at_offset = journal.append(RecordType.ENQUEUE, encode_entry(entry))
            index.relocate(entry.queue, entry.seq, seg, at, at_offset)
        # not deleted before the copies so far are durable (and not copied again meanwhile)
        index.moved_at(seg, position)
        # the end of the segment, or a damaged record (a live entry past it keeps the segment)
        done = not records or len(data) < want
        self._copying = None if done else (seg, offset + good)
