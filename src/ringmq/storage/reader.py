"""Reading live journal entries back: `EntryReader`, and the views built on it.

Theory of operation
-------------------
The `FileStore` keeps no message in memory, only locations (`index.py`). Three readers go
back to the journal through one `EntryReader`:

* `FileStore.read_entries(queue, seqs)`: the entries, in the given order, with current delivery
  counts and due times (`StoreIndex.due`); consecutive entries are read in windows of a
  segment, not one record at a time.
* `QueueCopies` (`paging.DurableCopies`): one queue's journaled messages as a page file sees
  them, so a paged persistent message is written as a reference and read back from here.
* `RecoveredQueue`: one queue's recovered messages in seq order, decoded in batches on demand;
  `split` keeps a bounded head and leaves the rest in a spill store that pages it in.

`EntryReader` owns one piece of state: a bounded cache of the shared (large) bodies read
lately, so fan-out copies of one message read back share one `Message`. Every record read is
checked (type, length, checksum, queue and seq); a mismatch raises `RuntimeError`, a seq that
is not live `LookupError`. One owner thread (the store's).
"""

from __future__ import annotations

import zlib
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Final, overload

from ringmq.core.message import Message, SeqId
from ringmq.storage.index import SIZE_MASK, StoreIndex
from ringmq.storage.journal import Journal
from ringmq.storage.msgstore import MessageStore
from ringmq.storage.port import RecoveredMessage, RecoveredTail
from ringmq.storage.records import (
    HEADER,
    HEADER_SIZE,
    MAX_RECORD,
    TYPE_CRC,
    Entry,
    RecordType,
    decode_entry,
)

if TYPE_CHECKING:
    from ringmq.storage.filestore import FileStore

_READ_WINDOW: Final = 256 * 1024  # journal bytes read at once when paging entries back in
_ITER_BATCH: Final = 1024
_SHARED_CACHE_BYTES: Final = 16 * 1024 * 1024


class EntryReader:
    """Reads live entries of the store's journal (see the module docstring)."""

    __slots__ = ("bodies", "directory", "index", "journal", "shared", "shared_bytes")

    def __init__(
        self, directory: Path, journal: Journal, bodies: MessageStore, index: StoreIndex
    ) -> None:
        self.directory = directory
        self.journal = journal
        self.bodies = bodies
        self.index = index
        self.shared: dict[int, Message] = {}  # large bodies read lately, by ref
        self.shared_bytes = 0

    def read(self, queue: str, seqs: Sequence[int]) -> list[Entry]:
        """Live entries of `queue` in the given order (`FileStore.read_entries`)."""
        qi = self.index.locations.get(queue, {})
        qcounts = self.index.counts.get(queue, {})
        qdue = self.index.due.get(queue, {})
        out: list[Entry] = []
        buf = b""
        buf_seg = -1
        buf_off = 0
        pread = self.journal.pread
        shared = self.shared
        for seq in seqs:
            loc = qi.get(seq)
            if loc is None:
                raise LookupError(f"store {self.directory}: {queue!r} has no live seq {seq}")
            seg = loc >> 64
            off = (loc >> 32) & SIZE_MASK
            rel = off - buf_off
            if seg != buf_seg or rel < 0 or rel + HEADER_SIZE > len(buf):
                buf = pread(seg, off, _READ_WINDOW)
                buf_seg, buf_off, rel = seg, off, 0
            if rel + HEADER_SIZE > len(buf):  # the segment ends before the record
                raise RuntimeError(f"journal segment {seg} offset {off}: damaged record")
            length, crc, rtype = HEADER.unpack_from(buf, rel)
            end = rel + HEADER_SIZE + length
            if end > len(buf) and length <= MAX_RECORD:
                buf = pread(seg, off, max(_READ_WINDOW, HEADER_SIZE + length))
                buf_off, rel, end = off, 0, HEADER_SIZE + length
            payload = memoryview(buf)[rel + HEADER_SIZE : end]
            if (
                rtype != RecordType.ENQUEUE
                or len(payload) != length
                or zlib.crc32(payload, TYPE_CRC[rtype]) != crc
            ):
                raise RuntimeError(f"journal segment {seg} offset {off}: damaged record")
            entry = decode_entry(payload)
            if entry.seq != seq or entry.queue != queue:
                raise RuntimeError(f"journal segment {seg} offset {off}: not {queue!r} {seq}")
            ref = entry.body_ref
            if ref:
                # one Message per shared body among those read lately (fan-out copies)
                cached = shared.get(ref)
                if cached is not None:
                    entry.message = cached
                else:
                    body = entry.message.body = self.bodies.get(ref)
                    if self.shared_bytes + len(body) > _SHARED_CACHE_BYTES:
                        shared.clear()
                        self.shared_bytes = 0
                    shared[ref] = entry.message
                    self.shared_bytes += len(body)
            entry.delivery_count = qcounts.get(seq, 0)
            # the index has the due time as it stands: a DELIVERY_COUNT may have set one (a
            # delayed redelivery) or ended the one the ENQUEUE carried
            entry.due_ms = qdue.get(seq)
            out.append(entry)
        return out


class QueueCopies:
    """One queue's journaled messages as a page file sees them (`paging.DurableCopies`)."""

    __slots__ = ("index", "queue", "reader")

    def __init__(self, reader: EntryReader, queue: str) -> None:
        self.reader = reader
        self.index = reader.index
        self.queue = queue

    def holds(self, seq: int) -> bool:
        return self.index.holds(self.queue, seq)

    def size(self, seq: int) -> int:
        return self.index.size(self.queue, seq)

    def read(self, seqs: Sequence[int]) -> list[Entry]:
        return self.reader.read(self.queue, seqs)


class RecoveredQueue(Sequence[RecoveredMessage]):
    """One queue's recovered messages in seq order, read from the journal on demand.

    Nothing is held in memory but the seqs: iterating (or indexing) reads and decodes the
    messages in batches, so a caller that keeps them all materialises the queue (as before),
    while `split` keeps a bounded head and leaves the rest on disk for the engine to page in.
    """

    def __init__(
        self, store: FileStore, queue: str, seqs: list[int], *, redeliver_all: bool
    ) -> None:
        self.store = store
        self.queue = queue
        self.seqs = seqs
        self.redeliver_all = redeliver_all

    def __len__(self) -> int:
        return len(self.seqs)

    @overload
    def __getitem__(self, i: int) -> RecoveredMessage: ...

    @overload
    def __getitem__(self, i: slice) -> list[RecoveredMessage]: ...

    def __getitem__(self, i: int | slice) -> RecoveredMessage | list[RecoveredMessage]:
        if isinstance(i, slice):
            return self._read(self.seqs[i])
        return self._read([self.seqs[i]])[0]

    def __iter__(self) -> Iterator[RecoveredMessage]:
        seqs = self.seqs
        for start in range(0, len(seqs), _ITER_BATCH):
            yield from self._read(seqs[start : start + _ITER_BATCH])

    def __repr__(self) -> str:
        return f"RecoveredQueue({self.queue!r}, {len(self.seqs)} messages)"

    def _read(self, seqs: Sequence[int]) -> list[RecoveredMessage]:
        dirty = self.redeliver_all
        return [
            RecoveredMessage(
                e.seq,
                e.message,
                dirty or e.delivery_count > 0,
                e.delivery_count,
                e.expiry_ms,
                e.due_ms,
            )
            for e in self.store.read_entries(self.queue, seqs)
        ]

    def split(
        self, max_count: int, max_bytes: int
    ) -> tuple[list[RecoveredMessage], RecoveredTail | None]:
        """Read the head (up to `max_count` messages / about `max_bytes` of bodies, plus every
        scheduled message) and leave the rest in a spill store that reads it back from the
        journal; `None` when everything fits."""
        store = self.store
        index = store.index
        qi = index.locations.get(self.queue, {})
        due = index.due.get(self.queue, {})
        seqs = self.seqs
        head: list[int] = []
        n = nbytes = 0
        i = 0
        while i < len(seqs):
            s = seqs[i]
            if s not in due:
                if n >= max_count or nbytes >= max_bytes:
                    break
                n += 1
                nbytes += qi[s] & SIZE_MASK
            head.append(s)
            i += 1
        rest = seqs[i:]
        if due:
            head.extend(s for s in rest if s in due)
            rest = [s for s in rest if s not in due]
        messages = self._read(head)
        if not rest:
            return messages, None
        first = rest[0]
        rest_bytes = sum([qi[s] & SIZE_MASK for s in rest])
        counts = {
            SeqId(s): c
            for s, c in index.counts.get(self.queue, {}).items()
            if s >= first and s not in due
        }
        tail = RecoveredTail(
            spill=store.spill_for(self.queue, rest, rest_bytes),
            count=len(rest),
            nbytes=rest_bytes,
            redelivered=self.redeliver_all,
            delivery_counts=counts,
            expiring=self.queue in index.expiring,
            below=SeqId(rest[-1] + 1),
        )
        return messages, tail
