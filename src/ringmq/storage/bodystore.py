"""`DiskBodyStore`: the queue engine's `BodyStore` port backed by spill files.

Theory of operation
-------------------
`ringmq.core.queue.Queue` keeps every entry's envelope (seq, state, size) in memory and, when a
queue pages (Artemis PAGE, Qpid flow_to_disk, RabbitMQ lazy behaviour), hands the `Message` of
an entry to its `BodyStore` with `page_out(queue, seq, message)`; it asks for it back with
`page_in` (forget) or `peek` (keep, for browsing), and `discard`s it when the entry goes away
unread. This class satisfies that Protocol structurally (no import from core.queue).

Each paged message is written whole (routing fields, decoded headers, raw properties, body,
`store_ref`) as one record into a reference-counted `MessageStore` of spill files; memory keeps
only `(queue, seq) -> handle`. Files whose messages were all read back or discarded are deleted,
sparse ones compacted (`reclaim`, run every `reclaim_every` operations). The directory is wiped
when the store is created: paged data is transient (persistent messages are recovered from the
journal by `Store.recover`, never from here).

Random access by seq suits the engine's model (it decides order; any seq may be read back, e.g.
a browse or an LVQ replacement). `PageQueue` (paging.py) is the sequential alternative for an
engine that pages whole runs.

`DiskSpillStore` is that alternative wired to the engine's `SpillStore` port (a queue's paged
tail: no per-message memory at all, only run files read back in order). `SpillDirectory` hands
one to each queue under `<data-dir>/paging` and wipes the directory at start (transient).
"""

from __future__ import annotations

import shutil
import struct
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Final

from ringmq.core.message import Message, SeqId
from ringmq.core.queue.columns import Columns
from ringmq.core.queue.ports import RunColumns
from ringmq.storage.msgstore import MessageStore
from ringmq.storage.pagefile import DiskHealth
from ringmq.storage.pageruns import RunRows
from ringmq.storage.paging import DEFAULT_RUN_BYTES, DurableCopies, PageQueue
from ringmq.storage.records import Entry, decode_entry, encode_message

Spilled = tuple[SeqId, Message, int | None]  # the engine's SpillStore item (seq, msg, expiry)

DEFAULT_SEGMENT_BYTES: Final = 16 * 1024 * 1024
DEFAULT_RECLAIM_EVERY: Final = 4096
_STORE_REF: Final = struct.Struct("<Q")
_NEVER: Final = 1 << 62  # spill files need no fsync before compaction deletes a source file


class DiskBodyStore:
    """Spill-file `BodyStore` (see the module docstring)."""

    def __init__(
        self,
        directory: Path,
        *,
        segment_bytes: int = DEFAULT_SEGMENT_BYTES,
        reclaim_every: int = DEFAULT_RECLAIM_EVERY,
    ) -> None:
        if directory.exists():
            shutil.rmtree(directory)
        self.directory = directory
        self._store = MessageStore(directory, segment_bytes=segment_bytes)
        self._handles: dict[tuple[str, int], int] = {}
        self._reclaim_every = reclaim_every
        self._ops = 0
        self.bytes_out = 0
        self.bytes_in = 0

    def page_out(self, queue: str, seq: SeqId, message: Message) -> None:
        """Write the message out; the caller drops its reference."""
        key = (queue, seq)
        old = self._handles.pop(key, None)
        if old is not None:
            self._store.decref(old)
        record = _STORE_REF.pack(message.store_ref) + encode_message("", seq, message)
        self._handles[key] = self._store.put(record)
        self.bytes_out += len(record)
        self._tick()

    def _read(self, handle: int) -> Message:
        raw = self._store.get(handle)
        self.bytes_in += len(raw)
        (store_ref,) = _STORE_REF.unpack_from(raw, 0)
        message = decode_entry(memoryview(raw)[_STORE_REF.size :]).message
        message.store_ref = store_ref
        return message

    def page_in(self, queue: str, seq: SeqId) -> Message:
        """Read the message back and forget it. Raises KeyError when not paged."""
        handle = self._handles.pop((queue, seq))
        message = self._read(handle)
        self._store.decref(handle)
        self._tick()
        return message

    def peek(self, queue: str, seq: SeqId) -> Message:
        """Read the message back and keep it paged. Raises KeyError when not paged."""
        return self._read(self._handles[(queue, seq)])

    def discard(self, queue: str, seq: SeqId) -> None:
        """Forget a paged message (purged, evicted, expired); no-op when not paged."""
        handle = self._handles.pop((queue, seq), None)
        if handle is not None:
            self._store.decref(handle)
            self._tick()

    def close(self) -> None:
        """Forget everything and delete the spill files (the owning queue was deleted)."""
        self._handles.clear()
        self._store.journal.close()
        shutil.rmtree(self.directory, ignore_errors=True)

    def discard_queue(self, queue: str) -> int:
        """Forget every paged message of a deleted queue; returns how many."""
        keys = [k for k in self._handles if k[0] == queue]
        for key in keys:
            self._store.decref(self._handles.pop(key))
        self.reclaim()
        return len(keys)

    def _tick(self) -> None:
        self._ops += 1
        if self._ops >= self._reclaim_every:
            self._ops = 0
            self.reclaim()

    def reclaim(self) -> None:
        """Delete spill files with nothing live and compact sparse ones."""
        self._store.maintain(_NEVER, _NEVER)

    def __len__(self) -> int:
        return len(self._handles)

    def __contains__(self, key: tuple[str, int]) -> bool:
        return key in self._handles

    def files(self) -> int:
        """Number of spill files on disk."""
        return len(self._store.journal.segments)

    def disk_bytes(self) -> int:
        """Bytes of spill files on disk."""
        return self._store.journal.disk_bytes()


class DiskSpillStore:
    """The engine's `SpillStore` port on a `PageQueue` (one directory of run files)."""

    keeps_raw = True  # page runs are taken raw (`pop_raw`)

    def __init__(
        self,
        directory: Path,
        *,
        run_bytes: int = DEFAULT_RUN_BYTES,
        copies: DurableCopies | None = None,
        health: DiskHealth | None = None,
    ) -> None:
        self.directory = directory
        self._pages = PageQueue(directory, run_bytes=run_bytes, copies=copies, health=health)

    def restore(self, seqs: list[int], nbytes: int | None = None) -> None:
        """Append journaled messages by seq (a recovered backlog; needs `copies`)."""
        self._pages.restore(seqs, nbytes)

    @property
    def pages(self) -> PageQueue:
        """The underlying page queue (tests, metrics)."""
        return self._pages

    @staticmethod
    def _entries(items: Sequence[Spilled]) -> list[Entry]:
        return [Entry("", seq, msg, expiry_ms=expires_at) for seq, msg, expires_at in items]

    def push_back(self, items: Sequence[Spilled]) -> None:
        """Append after everything spilled."""
        self._pages.push_back_spilled(items)

    def push_back_run(self, seqs: Sequence[int], run: RunColumns) -> None:
        """Append the messages of a run given as columns after everything spilled."""
        self._pages.push_back_run(seqs, run)

    def push_front(self, items: Sequence[Spilled]) -> None:
        """Insert a run before everything spilled."""
        self._pages.push_front(self._entries(items))

    def pop_front(self, max_count: int, max_bytes: int) -> list[Spilled]:
        """Read the oldest items back in order (at least one when any is spilled)."""
        return self._pages.pop_front(max_count, max_bytes)

    def pop_raw(self, max_count: int, max_bytes: int | None, first: bool) -> list[RunRows]:
        """The page-run rows at the front, taken as they are (`PageQueue.pop_raw`)."""
        return self._pages.pop_raw(max_count, max_bytes, first)

    def peek_after(self, after: int | None, limit: int) -> list[Spilled]:
        """Up to `limit` items with a seq above `after`, in order, read in place (a browse)."""
        return self._pages.peek_after(after, limit)

    def peek_columns(self, after: int | None, limit: int, now_ms: int, out: Columns) -> int | None:
        """`peek_after` as columns, expired items left out (`PageQueue.peek_columns`)."""
        return self._pages.peek_columns(after, limit, now_ms, out)

    def clear(self) -> None:
        """Forget everything (purge)."""
        self._pages.clear()

    def close(self) -> None:
        """Forget everything and remove the directory (queue deleted)."""
        self._pages.clear()
        shutil.rmtree(self.directory, ignore_errors=True)

    def __len__(self) -> int:
        return len(self._pages)

    def files(self) -> int:
        """Run files on disk."""
        return self._pages.files()


class SpillDirectory:
    """One `DiskSpillStore` per queue under one directory, wiped when created (transient).

    `copies(vhost, queue)`, when given, returns a queue's journaled messages (or None for a
    queue the store ignores): its persistent messages are then paged by reference.
    """

    def __init__(
        self,
        directory: Path,
        *,
        run_bytes: int = DEFAULT_RUN_BYTES,
        copies: Callable[[str, str], DurableCopies | None] | None = None,
    ) -> None:
        if directory.exists():
            shutil.rmtree(directory)
        directory.mkdir(parents=True)
        self.directory = directory
        self.run_bytes = run_bytes
        self.copies = copies
        self._next = 0
        self.health = DiskHealth()
        """Page-file write errors of every queue here (the memory monitor's disk alarm)."""

    def __call__(self, vhost: str, queue: str) -> DiskSpillStore:
        """A fresh store for a new queue (directory names are counters: names may hold any
        character, and a redeclared queue never meets its predecessor's files)."""
        self._next += 1
        copies = self.copies(vhost, queue) if self.copies is not None else None
        return DiskSpillStore(
            self.directory / f"q{self._next:08d}",
            run_bytes=self.run_bytes,
            copies=copies,
            health=self.health,
        )

    def restored(
        self, copies: DurableCopies, seqs: list[int], nbytes: int | None = None
    ) -> DiskSpillStore:
        """A store holding a recovered backlog's live `seqs` (in order) as references to their
        journal `copies`: it pages in this directory and reports to this directory's `health`,
        like every other queue's."""
        self._next += 1
        spill = DiskSpillStore(
            self.directory / f"q{self._next:08d}",
            run_bytes=self.run_bytes,
            copies=copies,
            health=self.health,
        )
        spill.restore(seqs, nbytes)
        return spill

    def body_store(self, vhost: str, queue: str) -> DiskBodyStore:
        """A fresh `DiskBodyStore` for a flow-to-disk queue (Qpid flow_to_disk, Artemis PAGE):
        bodies over the queue's limit are written out one by one and read back on delivery."""
        self._next += 1
        return DiskBodyStore(self.directory / f"b{self._next:08d}", segment_bytes=4 * 1024 * 1024)
