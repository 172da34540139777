"""The storage port (`Store`) and its two implementations, `MemoryStore` and `FileStore`.

Theory of operation
-------------------
The core never touches files: it calls a `Store`. The store owns *where bytes live*; the
queue engine owns order and delivery state. Only persistent messages are given to the store
(`is_persistent(queue_durable, message)`: durable queue and delivery_mode 2, RabbitMQ's
`is_persistent`); transient ones never reach it (they may be paged, see `paging.py`).

How the engine and broker call it
~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
Every mutating call returns the store *position* after the write (a monotonically increasing
int). Nothing is durable until a group commit covers it:

* publish: ``pos = store.enqueue(queue, seq, message, expiry_ms=..., due_ms=...)``; keep
  ``(pos, channel, delivery_tag)`` for the confirm.
* settle: ``store.ack(queue, [seq, ...])`` for acks, rejects without requeue, ring/max-length
  drops, LVQ replacements, expiries, purge (ready seqs) and dead-lettering of persistent
  messages; ``store.delivered(queue, seq, delivery_count)`` when a message is handed to a
  consumer with ack required (so a clean restart knows what to flag redelivered);
  ``store.drop_queue(queue)`` when a durable queue is deleted.
* group commit (server): after a read batch, ``point = store.flush()`` on the loop thread, then
  ``await loop.run_in_executor(None, store.fsync, point)`` (only `os.fsync` calls, safe to run
  while the loop keeps writing), then release every confirm whose ``pos <= point.position``.
  ``store.sync()`` does both inline (tests, tx.commit-ok, shutdown).
* transactions: ``store.tx_begin()`` ... the tx's enqueues/acks ... ``store.tx_commit()``;
  on replay a transaction is applied whole or not at all. Send tx.commit-ok after the sync.
* definitions: ``store.put_definition(kind, key, value)`` / ``delete_definition(kind, key)``
  with JSON-able values (kinds: vhost, user, permission, exchange, queue, binding, policy).
* startup: ``state = FileStore.open(path).recover()`` once, before any write:
  ``state.definitions`` (kind -> key -> value), ``state.queues[queue]`` (messages in seq
  order with `redelivered` and `delivery_count`; for `FileStore` a lazy `RecoveredQueue`
  whose `split` reads a bounded head and leaves the rest in a spill store that pages it in from
  the journal), ``state.next_seq[queue]`` (first seq the engine may use), ``state.clean``.
  After a dirty stop every recovered message is flagged redelivered (RabbitMQ's
  `redeliver_seq_id` rule: we cannot prove it was never delivered); after a clean stop only
  those with a delivery count > 0.
* shutdown: ``store.close()`` (syncs, writes the recovery terms, marks the stop clean).

Index and recovery: the in-memory index holds, per live message, only its location
(``segment << 64 | offset << 32 | body size``), delivery counts (> 0), shared-body refs and
due times; messages are read back on demand (`read_entries`). A clean stop saves that index
(`terms.py`); the next open adopts it when it is intact and the files are exactly those it
describes, else replays the journal (decoding only record headers).

Message bodies at or above `embed_below` bytes go to the shared `MessageStore` once per
message (`Message.store_ref` is set on the shared `Message`, so fan-out to N durable queues
stores one body and N small index records); smaller ones are embedded in the ENQUEUE record.

FileStore layout (`docs/storage.md`): `journal/*.seg` (ENQUEUE, ACK, DELIVERY_COUNT, PURGE,
TX_BEGIN, TX_COMMIT records), `msgstore/*.msg` (BODY records), `definitions/` (snapshot+log),
`RECOVERY_TERMS` and `CLEAN` (present only between a clean close and the next open),
`paging/` (page files of recovered backlogs, wiped at open).

Space reclamation (`_maintain`, run at every `flush()`): a closed segment is deleted when none
of its ENQUEUEs is live and no segment its ACK/PURGE/TX records depend on still exists (so an
ACK never disappears before the ENQUEUE it cancels). When the oldest segment is mostly dead, its
live entries are copied forward into the current segment and it is deleted once the copies are
durable.

Write failures (ENOSPC, EDQUOT, EIO; docs/storage.md, "Write failures"): a failed `write`
is cut back to the last good byte and its records stay buffered; `flush()` raises the OSError
and `failure` says so until a later `flush()` writes them (same bytes, same offsets), so
nothing confirmed is touched and the failed tail is never counted as written. A failed `fsync`
*fences* the store: the kernel may have dropped the dirty pages and a later fsync would not
cover them, so from then on `flush()` raises, nothing more is written, and `close()` leaves no
recovery terms: the next start replays the journal, whose checksums decide what survived.
Everything an earlier fsync covered stays as it was.

Single owner: all methods except `fsync` run on one thread (the loop). No locks.
"""

from __future__ import annotations

import errno
import gc
import logging
import os
import shutil
import zlib
from array import array
from collections import OrderedDict
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final, Protocol, overload

from ringmq.core.durability import queue_key
from ringmq.core.message import Message, SeqId
from ringmq.storage import terms
from ringmq.storage.bodystore import DiskSpillStore, SpillDirectory
from ringmq.storage.dedup import DedupLog, Window
from ringmq.storage.definitions import DefinitionLog
from ringmq.storage.journal import DEFAULT_SEGMENT_BYTES, Journal, fsync_fds
from ringmq.storage.msgstore import MessageStore
from ringmq.storage.records import (
    F_EXPIRY,
    HEADER,
    HEADER_SIZE,
    MAX_RECORD,
    TYPE_CRC,
    Entry,
    Record,
    RecordType,
    decode_ack,
    decode_delivery,
    decode_entry,
    decode_purge,
    encode_ack,
    encode_delivery,
    encode_entry,
    encode_message,
    encode_purge,
    entry_head,
    scan,
)

log = logging.getLogger(__name__)

DEFAULT_EMBED_BELOW: Final = 4096
"""RabbitMQ's `queue_index_embed_msgs_below` default."""
_PURGE_ALL: Final = (1 << 64) - 1
_ROLL_DEAD_CURRENT_BYTES: Final = 1024 * 1024
_COMPACT_LIVE_RATIO: Final = 0.25
_COMPACT_QUIET_FLUSHES: Final = 8  # copy forward only once no ack touched it for this long
_SIZE_MASK: Final = 0xFFFFFFFF  # index locations: segment << 64 | offset << 32 | body size
_READ_WINDOW: Final = 256 * 1024  # journal bytes read at once when paging entries back in
_ITER_BATCH: Final = 1024
_SHARED_CACHE_BYTES: Final = 16 * 1024 * 1024
_TERMS_FIELDS: Final = frozenset(
    (
        "journal", "msgstore", "seg_total", "seg_live", "seg_deps", "moved", "next_seq",
        "expiring", "queues", "bodies",
    )
)  # fmt: skip


def is_persistent(queue_durable: bool, message: Message) -> bool:
    """RabbitMQ's rule: a message is persisted only on a durable queue with delivery_mode 2."""
    return queue_durable and message.persistent


@dataclass(frozen=True, slots=True)
class SyncPoint:
    """What `flush()` returns: the position it covers and descriptors to fsync."""

    position: int
    fds: tuple[int, ...] = ()


@dataclass(slots=True)
class RecoveredMessage:
    """One recovered message of one queue."""

    seq: SeqId
    message: Message
    redelivered: bool
    delivery_count: int
    expiry_ms: int | None
    due_ms: int | None


@dataclass(slots=True)
class RecoveredState:
    """Everything `recover()` found.

    Attributes:
        clean: the previous run ended with `close()`.
        definitions: kind -> key -> value.
        queues: queue -> messages in seq order (only queues with messages).
        next_seq: queue -> first seq id the engine may use (above any seq ever journaled).
        dedup: scope -> message_id -> accepted at (ms), oldest first (`dedup.py`).
    """

    clean: bool = True
    definitions: dict[str, dict[str, Any]] = field(default_factory=dict)
    queues: dict[str, Sequence[RecoveredMessage]] = field(default_factory=dict)
    next_seq: dict[str, int] = field(default_factory=dict)
    dedup: Window = field(default_factory=dict)


@dataclass(slots=True)
class RecoveredTail:
    """The part of a recovered queue left on disk by `RecoveredQueue.split`.

    Attributes:
        spill: the queue's spill store, holding `count` messages (`nbytes` of bodies) as
            references to their journal copies, in seq order; the engine pages them in.
        redelivered: every one of them is to be flagged redelivered (dirty stop).
        delivery_counts: seq -> recorded delivery count (> 0) for those that have one.
        expiring: some of them may carry an expiry time.
        below: every seq of the tail is below this.
    """

    spill: DiskSpillStore
    count: int
    nbytes: int
    redelivered: bool
    delivery_counts: dict[SeqId, int]
    expiring: bool
    below: SeqId


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
        qi = store._index.get(self.queue, {})
        due = store._due.get(self.queue, {})
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
                nbytes += qi[s] & _SIZE_MASK
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
        rest_bytes = sum([qi[s] & _SIZE_MASK for s in rest])
        counts = {
            SeqId(s): c
            for s, c in store._counts.get(self.queue, {}).items()
            if s >= first and s not in due
        }
        tail = RecoveredTail(
            spill=store.spill_for(self.queue, rest, rest_bytes),
            count=len(rest),
            nbytes=rest_bytes,
            redelivered=self.redeliver_all,
            delivery_counts=counts,
            expiring=self.queue in store._expiring,
            below=SeqId(rest[-1] + 1),
        )
        return messages, tail


class _QueueCopies:
    """One queue's journaled messages as a page file sees them (`paging.DurableCopies`)."""

    __slots__ = ("queue", "store")

    def __init__(self, store: FileStore, queue: str) -> None:
        self.store = store
        self.queue = queue

    def holds(self, seq: int) -> bool:
        qi = self.store._index.get(self.queue)
        return qi is not None and seq in qi

    def size(self, seq: int) -> int:
        return int(self.store._index[self.queue][seq] & _SIZE_MASK)

    def read(self, seqs: Sequence[int]) -> list[Entry]:
        return self.store.read_entries(self.queue, seqs)


class Store(Protocol):
    """The storage port. See the module docstring for the calling protocol."""

    @property
    def position(self) -> int:
        """Position of the last write (0 before any)."""
        ...

    @property
    def durable_position(self) -> int:
        """Highest position known to be on disk."""
        ...

    def enqueue(
        self,
        queue: str,
        seq: SeqId,
        message: Message,
        *,
        expiry_ms: int | None = None,
        due_ms: int | None = None,
        delivery_count: int = 0,
    ) -> int:
        """Persist a message at `seq` of `queue`; returns the write position."""
        ...

    def ack(self, queue: str, seqs: Iterable[SeqId]) -> int:
        """Remove messages for good (ack, drop, expiry, replace); unknown seqs are ignored."""
        ...

    def delivered(self, queue: str, seq: SeqId, delivery_count: int) -> int:
        """Record a new delivery count (the message has been handed out)."""
        ...

    def drop_queue(self, queue: str) -> int:
        """Remove every message of `queue` (durable queue deleted)."""
        ...

    def dedup_record(self, scope: str, message_id: str, at_ms: int) -> int:
        """Journal an accepted id of a durable de-duplication scope (`dedup.py`)."""
        ...

    def dedup_discard(self, scope: str, message_id: str) -> int:
        """Journal that an id was forgotten (its publish was refused after all)."""
        ...

    def dedup_due(self) -> bool:
        """True when the dedup log should be rewritten with the live window."""
        ...

    def dedup_rewrite(self, window: Mapping[str, Iterable[tuple[str, int]]]) -> None:
        """Replace the stored window with `window` (scope -> (id, at) oldest first)."""
        ...

    def put_definition(self, kind: str, key: str, value: Mapping[str, Any]) -> int:
        """Create or replace a durable definition."""
        ...

    def delete_definition(self, kind: str, key: str) -> int:
        """Delete a durable definition."""
        ...

    def tx_begin(self) -> None:
        """Start an atomic group of writes (tx.commit)."""
        ...

    def tx_commit(self) -> int:
        """End the group; it is replayed whole or not at all."""
        ...

    def flush(self) -> SyncPoint:
        """Hand buffered writes to the OS (owner thread); fsync the result with `fsync`."""
        ...

    def fsync(self, point: SyncPoint) -> int:
        """Make `point` durable; thread-safe. Returns `point.position`."""
        ...

    def sync(self) -> int:
        """`fsync(flush())` inline; returns the now durable position."""
        ...

    def recover(self) -> RecoveredState:
        """What survived the last run (call once, before any write)."""
        ...

    def close(self) -> None:
        """Sync everything and mark the stop clean."""
        ...


# ---------------------------------------------------------------------------------------------


class MemoryStore:
    """A `Store` that keeps everything in memory (tests, transient-only brokers).

    Positions are durable as soon as `sync()`/`fsync()` runs. `recover()` returns the current
    live contents (as after a clean in-process restart), so engine tests can exercise recovery.
    """

    def __init__(self) -> None:
        self._position = 0
        self._durable = 0
        self._queues: dict[str, dict[int, RecoveredMessage]] = {}
        self._next_seq: dict[str, int] = {}
        self._defs: dict[str, dict[str, Any]] = {}
        self._dedup: Window = {}

    @property
    def position(self) -> int:
        return self._position

    @property
    def durable_position(self) -> int:
        return self._durable

    def _bump(self) -> int:
        self._position += 1
        return self._position

    def enqueue(
        self,
        queue: str,
        seq: SeqId,
        message: Message,
        *,
        expiry_ms: int | None = None,
        due_ms: int | None = None,
        delivery_count: int = 0,
    ) -> int:
        self._queues.setdefault(queue, {})[seq] = RecoveredMessage(
            seq, message, delivery_count > 0, delivery_count, expiry_ms, due_ms
        )
        self._next_seq[queue] = max(self._next_seq.get(queue, 0), seq + 1)
        return self._bump()

    def ack(self, queue: str, seqs: Iterable[SeqId]) -> int:
        q = self._queues.get(queue, {})
        for seq in seqs:
            q.pop(seq, None)
        return self._bump()

    def delivered(self, queue: str, seq: SeqId, delivery_count: int) -> int:
        entry = self._queues.get(queue, {}).get(seq)
        if entry is not None:
            entry.delivery_count = delivery_count
            entry.redelivered = delivery_count > 0
        return self._bump()

    def drop_queue(self, queue: str) -> int:
        self._queues.pop(queue, None)
        return self._bump()

    def put_definition(self, kind: str, key: str, value: Mapping[str, Any]) -> int:
        self._defs.setdefault(kind, {})[key] = dict(value)
        return self._bump()

    def delete_definition(self, kind: str, key: str) -> int:
        self._defs.get(kind, {}).pop(key, None)
        return self._bump()

    def tx_begin(self) -> None:
        return None

    def tx_commit(self) -> int:
        return self._bump()

    def flush(self) -> SyncPoint:
        return SyncPoint(self._position)

    def fsync(self, point: SyncPoint) -> int:
        self._durable = max(self._durable, point.position)
        return point.position

    def sync(self) -> int:
        return self.fsync(self.flush())

    def recover(self) -> RecoveredState:
        return RecoveredState(
            clean=True,
            definitions={k: dict(v) for k, v in self._defs.items() if v},
            queues={q: [m[s] for s in sorted(m)] for q, m in self._queues.items() if m},
            next_seq=dict(self._next_seq),
            dedup={scope: OrderedDict(ids) for scope, ids in self._dedup.items() if ids},
        )

    def dedup_record(self, scope: str, message_id: str, at_ms: int) -> int:
        ids = self._dedup.setdefault(scope, OrderedDict())
        ids[message_id] = at_ms
        ids.move_to_end(message_id)
        return self._bump()

    def dedup_discard(self, scope: str, message_id: str) -> int:
        self._dedup.get(scope, OrderedDict()).pop(message_id, None)
        return self._bump()

    def dedup_due(self) -> bool:
        return False

    def dedup_rewrite(self, window: Mapping[str, Iterable[tuple[str, int]]]) -> None:
        self._dedup = {scope: OrderedDict(ids) for scope, ids in window.items()}

    def close(self) -> None:
        self.sync()


# ---------------------------------------------------------------------------------------------


class FileStore:
    """The on-disk `Store` (see the module docstring and docs/storage.md)."""

    def __init__(
        self,
        directory: Path,
        *,
        segment_bytes: int = DEFAULT_SEGMENT_BYTES,
        msg_segment_bytes: int = DEFAULT_SEGMENT_BYTES,
        embed_below: int = DEFAULT_EMBED_BELOW,
        spill_directory: Path | None = None,
    ) -> None:
        """Open (creating if needed) a store directory and replay it.

        Prefer `FileStore.open`. The replayed state is kept until `recover()` takes it.
        `spill_directory` (default `<directory>/paging`, wiped at open) is the broker's one
        paging directory: recovered backlogs page there, and `spills` hands it to live paging.
        """
        self.directory = directory
        self.embed_below = embed_below
        directory.mkdir(parents=True, exist_ok=True)
        self._journal = Journal(directory / "journal", segment_bytes=segment_bytes)
        self._bodies = MessageStore(directory / "msgstore", segment_bytes=msg_segment_bytes)
        self._defs = DefinitionLog(directory / "definitions")
        self._dedup = DedupLog(directory / "dedup")
        self._position = 0
        self._durable = 0
        # queue -> seq -> location of its live ENQUEUE: segment << 64 | offset << 32 | body size
        self._index: dict[str, dict[int, int]] = {}
        # queue -> seq -> due_ms (scheduled messages only)
        self._due: dict[str, dict[int, int]] = {}
        self._expiring: set[str] = set()  # queues that journaled a message with an expiry
        self._shared: dict[int, Message] = {}  # large bodies read lately (`read_entries`)
        self._shared_bytes = 0
        # queue -> seq -> shared-store ref (large bodies only)
        self._refs: dict[str, dict[int, int]] = {}
        # queue -> seq -> delivery count (only when > 0)
        self._counts: dict[str, dict[int, int]] = {}
        self._seg_live: dict[int, int] = {}
        self._seg_total: dict[int, int] = {}  # ENQUEUE records written to each segment
        self._seg_acked_at: dict[int, int] = {}  # segment -> flush count of its last ack
        self._flushes = 0
        self._seg_deps: dict[int, set[int]] = {}  # seg -> older segs it must not outlive
        self._moved: dict[int, int] = {}  # seg copied forward -> position that makes it dead
        self._tx_seg: int | None = None
        self._next_seq: dict[str, int] = {}
        self._fenced: OSError | None = None  # a failed fsync: nothing more is written
        self._pending_fds: list[int] = []  # handed out by a flush that then failed
        clean_marker = directory / "CLEAN"
        self._clean = clean_marker.exists()
        # The paging directory: page files are transient, so it starts empty (SpillDirectory
        # wipes it). Recovered backlogs and live paging share it and its disk-health source.
        own = directory / "paging"
        if spill_directory is not None and own.exists():
            shutil.rmtree(own)  # left by a version that paged recovered backlogs here
        self.spills = SpillDirectory(
            spill_directory or own,
            copies=lambda vhost, name: self.copies(queue_key(vhost, name)),
        )
        self.used_terms = False
        # Replay allocates a few objects per message and no cycles; the cyclic GC would
        # rescan the growing heap again and again (a quarter of the replay time at 100k).
        gc_was_enabled = gc.isenabled()
        gc.disable()
        try:
            self._recovered: RecoveredState | None = None
            if self._clean:
                self._recovered = self._load_terms()
            if self._recovered is None:
                self._recovered = self._replay()
        finally:
            if gc_was_enabled:
                gc.enable()
        terms.discard(directory)  # never usable again: the files change from now on
        if self._clean:
            clean_marker.unlink()
        # start appending in a fresh segment and make the marker removal durable
        self._journal.roll()
        fsync_fds(self._fsync_dir_fds())

    @classmethod
    def open(cls, directory: Path | str, **options: Any) -> FileStore:
        """Open a store directory (see `__init__` for options)."""
        return cls(Path(directory), **options)

    def _fsync_dir_fds(self) -> list[int]:
        return [os.open(self.directory, os.O_RDONLY)]

    # -- replay ------------------------------------------------------------------------------

    def _replay(self) -> RecoveredState:
        # Index every live entry by location only: no message is decoded or kept in memory
        # (bodies are read back lazily, see `RecoveredQueue`).
        self._bodies.replay()
        index = self._index
        counts = self._counts
        refs = self._refs
        due = self._due
        names: dict[bytes, str] = {}
        tx: list[tuple[int, Record]] | None = None
        tx_start: tuple[int, int] | None = None
        seg_total = self._seg_total
        next_seq = self._next_seq
        expiring = self._expiring
        bodies = self._bodies

        def enqueue(seg: int, rec: Record) -> None:
            qb, seq, flags, count, due_ms, ref, size = entry_head(rec.payload)
            q = names.get(qb)
            if q is None:
                q = names[qb] = qb.decode()
            qi = index.get(q)
            if qi is None:
                qi = index[q] = {}
            qi[seq] = (seg << 64) | (rec.offset << 32) | (size & _SIZE_MASK)
            seg_total[seg] = seg_total.get(seg, 0) + 1
            if ref:
                # never hand out a ref the journal mentions, even one whose body was lost
                bodies.reserve_refs_below(ref + 1)
                refs.setdefault(q, {})[seq] = ref
            elif q in refs:
                refs[q].pop(seq, None)
            if count:
                counts.setdefault(q, {})[seq] = count
            elif q in counts:
                counts[q].pop(seq, None)
            if due_ms is not None:
                due.setdefault(q, {})[seq] = due_ms
            elif q in due:
                due[q].pop(seq, None)
            if flags & F_EXPIRY:
                expiring.add(q)
            if seq >= next_seq.get(q, 0):
                next_seq[q] = seq + 1

        def drop(seg: int, q: str, qi: dict[int, int], seqs: Iterable[int]) -> None:
            qr, qc, qd = refs.get(q), counts.get(q), due.get(q)
            for s in seqs:
                loc = qi.pop(s, None)
                if loc is None:
                    continue
                self._depend(seg, loc >> 64)
                if qr:
                    qr.pop(s, None)
                if qc:
                    qc.pop(s, None)
                if qd:
                    qd.pop(s, None)

        def apply(seg: int, rec: Record) -> None:
            rtype = rec.rtype
            if rtype == RecordType.ENQUEUE:
                enqueue(seg, rec)
            elif rtype == RecordType.ACK:
                q, seqs = decode_ack(rec.payload)
                qi = index.get(q)
                if qi:
                    drop(seg, q, qi, seqs)
            elif rtype == RecordType.DELIVERY_COUNT:
                q, s, count = decode_delivery(rec.payload)
                qi = index.get(q)
                loc = qi.get(s) if qi else None
                if loc is not None:
                    counts.setdefault(q, {})[s] = count
                    self._depend(seg, loc >> 64)
            elif rtype == RecordType.PURGE:
                q, upto = decode_purge(rec.payload)
                qi = index.get(q)
                if qi:
                    drop(seg, q, qi, [s for s in qi if s <= upto])

        enqueue_type = RecordType.ENQUEUE
        for seg, rec in self._journal.replay():
            rtype = rec.rtype
            if rtype == enqueue_type and tx is None:
                enqueue(seg, rec)
            elif rtype == RecordType.TX_BEGIN:
                # a BEGIN without COMMIT followed by another BEGIN cannot happen (one writer,
                # contiguous transactions); treat the older one as committed, never drop data
                if tx is not None:
                    for s, r in tx:
                        apply(s, r)
                tx, tx_start = [], (seg, rec.offset)
            elif rtype == RecordType.TX_COMMIT:
                if tx is not None and tx_start is not None:
                    for s, r in tx:
                        apply(s, r)
                    self._depend(seg, tx_start[0])
                tx, tx_start = None, None
            elif tx is not None:
                tx.append((seg, rec))
            else:
                apply(seg, rec)
        if tx is not None and tx_start is not None:
            self._cut_torn_tx(*tx_start, len(tx))

        # shared bodies: rebuild refcounts, learn the body sizes, drop entries without a body
        lost = 0
        for q, qr in refs.items():
            qi = index[q]
            for seq, ref in list(qr.items()):
                if bodies.incref(ref):
                    loc = qi[seq]
                    qi[seq] = (loc & ~_SIZE_MASK) | (bodies.length(ref) & _SIZE_MASK)
                else:
                    # the body never reached the disk: the enqueue was not confirmed
                    lost += 1
                    del qi[seq], qr[seq]
                    counts.get(q, {}).pop(seq, None)
                    due.get(q, {}).pop(seq, None)
        if lost:
            log.warning(
                "store %s: %d enqueues without their body were dropped", self.directory, lost
            )
        bodies.sweep()
        seg_live = self._seg_live
        for qi in index.values():
            for loc in qi.values():
                seg = loc >> 64
                seg_live[seg] = seg_live.get(seg, 0) + 1
        return self._recovered_state()

    def _recovered_state(self) -> RecoveredState:
        dirty = not self._clean
        state = RecoveredState(clean=self._clean, definitions=self._defs.all())
        for q, qi in self._index.items():
            if qi:
                state.queues[q] = RecoveredQueue(self, q, sorted(qi), redeliver_all=dirty)
        state.next_seq = dict(self._next_seq)
        return state

    def _cut_torn_tx(self, seg: int, offset: int, n_records: int) -> None:
        # The journal ends inside a transaction (crash before TX_COMMIT): cut it off the disk so
        # that records appended after this start can never be mistaken for its continuation.
        log.warning(
            "journal: dropping an uncommitted transaction of %d records at segment %d offset %d",
            n_records,
            seg,
            offset,
        )
        os.truncate(self._journal.path(seg), offset)
        for later in [s for s in self._journal.segments if s > seg]:
            self._journal.delete(later)

    def _depend(self, seg: int, older: int) -> None:
        if older != seg:
            self._seg_deps.setdefault(seg, set()).add(older)

    # -- the port ----------------------------------------------------------------------------

    @property
    def position(self) -> int:
        return self._position

    @property
    def durable_position(self) -> int:
        return self._durable

    @property
    def failure(self) -> OSError | None:
        """The write or fsync error the store is stuck on (None when healthy)."""
        if self._fenced is not None:
            return self._fenced
        for j in (self._journal, self._bodies.journal):
            if j.poisoned:
                return j.failure or OSError(errno.EIO, "journal tail unknown", str(j.directory))
        return (
            self._journal.failure
            or self._bodies.journal.failure
            or self._defs.failure
            or self._dedup.failure
        )

    @property
    def fenced(self) -> bool:
        """True after a failed fsync (or an uncuttable write): no more writes until restart."""
        return self._fenced is not None or self._journal.poisoned or self._bodies.journal.poisoned

    def recover(self) -> RecoveredState:
        """Return (once) what the replay at open found."""
        state = self._recovered
        assert state is not None, "recover() is called once, right after open"
        self._recovered = None
        state.dedup = self._dedup.recovered()
        return state

    def enqueue(
        self,
        queue: str,
        seq: SeqId,
        message: Message,
        *,
        expiry_ms: int | None = None,
        due_ms: int | None = None,
        delivery_count: int = 0,
    ) -> int:
        qindex = self._index.setdefault(queue, {})
        if seq in qindex:  # re-enqueue of a live seq: the new record replaces the old one
            self._forget(queue, seq)
        ref = 0
        if len(message.body) >= self.embed_below:
            ref = message.store_ref
            if ref == 0 or not self._bodies.incref(ref):
                ref = self._bodies.put(message.body)
                message.store_ref = ref
            self._refs.setdefault(queue, {})[seq] = ref
        seg, offset = self._journal.append(
            RecordType.ENQUEUE,
            encode_message(queue, seq, message, delivery_count, expiry_ms, due_ms, False, ref),
        )
        qindex[seq] = (seg << 64) | (offset << 32) | len(message.body)
        self._seg_live[seg] = self._seg_live.get(seg, 0) + 1
        self._seg_total[seg] = self._seg_total.get(seg, 0) + 1
        if delivery_count:
            self._counts.setdefault(queue, {})[seq] = delivery_count
        if due_ms is not None:
            self._due.setdefault(queue, {})[seq] = due_ms
        if expiry_ms is not None:
            self._expiring.add(queue)
        if seq + 1 > self._next_seq.get(queue, 0):
            self._next_seq[queue] = seq + 1
        self._position += 1
        return self._position

    def _forget(self, queue: str, seq: int) -> int | None:
        """Drop a live entry from the in-memory index; returns its segment."""
        qindex = self._index.get(queue)
        if qindex is None:
            return None
        loc = qindex.pop(seq, None)
        if loc is None:
            return None
        seg: int = loc >> 64
        self._seg_live[seg] -= 1
        self._seg_acked_at[seg] = self._flushes
        qrefs = self._refs.get(queue)
        if qrefs:
            ref = qrefs.pop(seq, None)
            if ref is not None:
                self._bodies.decref(ref)
        qcounts = self._counts.get(queue)
        if qcounts:
            qcounts.pop(seq, None)
        qdue = self._due.get(queue)
        if qdue:
            qdue.pop(seq, None)
        return seg

    def read_entries(self, queue: str, seqs: Sequence[int]) -> list[Entry]:
        """Read live entries of `queue` back from the journal, in the given order.

        Large bodies are resolved from the message store; delivery counts are the current
        ones. Consecutive entries are read in windows of the segment, not one by one. Raises
        `LookupError` for a seq that is not live and `RuntimeError` for a damaged record.
        """
        qi = self._index.get(queue, {})
        qcounts = self._counts.get(queue, {})
        out: list[Entry] = []
        buf = b""
        buf_seg = -1
        buf_off = 0
        pread = self._journal.pread
        shared = self._shared
        for seq in seqs:
            loc = qi.get(seq)
            if loc is None:
                raise LookupError(f"store {self.directory}: {queue!r} has no live seq {seq}")
            seg = loc >> 64
            off = (loc >> 32) & _SIZE_MASK
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
                    body = entry.message.body = self._bodies.get(ref)
                    if self._shared_bytes + len(body) > _SHARED_CACHE_BYTES:
                        shared.clear()
                        self._shared_bytes = 0
                    shared[ref] = entry.message
                    self._shared_bytes += len(body)
            entry.delivery_count = qcounts.get(seq, 0)
            out.append(entry)
        return out

    def copies(self, queue: str) -> _QueueCopies:
        """`queue`'s journaled messages for a page file: a paged persistent message is then
        written as a reference and read back from the journal (no second copy)."""
        return _QueueCopies(self, queue)

    def spill_for(
        self, queue: str, seqs: Sequence[int], nbytes: int | None = None
    ) -> DiskSpillStore:
        """A spill store for `queue` holding the live `seqs` (in order) as journal references,
        in the store's paging directory (`spills`)."""
        return self.spills.restored(
            self.copies(queue), seqs if isinstance(seqs, list) else list(seqs), nbytes
        )

    def ack(self, queue: str, seqs: Iterable[SeqId]) -> int:
        found: list[int] = []
        segs: set[int] = set()
        for seq in seqs:
            seg = self._forget(queue, seq)
            if seg is not None:
                found.append(seq)
                segs.add(seg)
        if found:
            at, _ = self._journal.append(RecordType.ACK, encode_ack(queue, found))
            for seg in segs:
                self._depend(at, seg)
        self._position += 1
        return self._position

    def delivered(self, queue: str, seq: SeqId, delivery_count: int) -> int:
        loc = self._index.get(queue, {}).get(seq)
        if loc is not None:
            at, _ = self._journal.append(
                RecordType.DELIVERY_COUNT, encode_delivery(queue, seq, delivery_count)
            )
            self._depend(at, loc >> 64)  # the count must not vanish while its ENQUEUE stays
            self._counts.setdefault(queue, {})[seq] = delivery_count
        self._position += 1
        return self._position

    def drop_queue(self, queue: str) -> int:
        qindex = self._index.get(queue, {})
        segs = {self._forget(queue, seq) for seq in list(qindex)}
        at, _ = self._journal.append(RecordType.PURGE, encode_purge(queue, _PURGE_ALL))
        for seg in segs:
            if seg is not None:
                self._depend(at, seg)
        self._index.pop(queue, None)
        self._refs.pop(queue, None)
        self._counts.pop(queue, None)
        self._due.pop(queue, None)
        self._position += 1
        return self._position

    def put_definition(self, kind: str, key: str, value: Mapping[str, Any]) -> int:
        self._defs.put(kind, key, value)
        self._position += 1
        return self._position

    def delete_definition(self, kind: str, key: str) -> int:
        self._defs.delete(kind, key)
        self._position += 1
        return self._position

    def dedup_record(self, scope: str, message_id: str, at_ms: int) -> int:
        """`message_id` was accepted in de-duplication `scope` at `at_ms` (`dedup.py`)."""
        self._dedup.record(scope, message_id, at_ms)
        self._position += 1
        return self._position

    def dedup_discard(self, scope: str, message_id: str) -> int:
        """Forget an id of `scope` (its publish was refused after all)."""
        self._dedup.discard(scope, message_id)
        self._position += 1
        return self._position

    def dedup_due(self) -> bool:
        """True when the dedup log should be rewritten with the live window."""
        return self._dedup.due()

    def dedup_rewrite(self, window: Mapping[str, Iterable[tuple[str, int]]]) -> None:
        """Replace the dedup log with the live window, durably (synchronous fsync)."""
        self._dedup.rewrite(window)

    def definitions(self) -> dict[str, dict[str, Any]]:
        """Current durable definitions (kind -> key -> value)."""
        return self._defs.all()

    def tx_begin(self) -> None:
        assert self._tx_seg is None, "transactions do not nest"
        self._tx_seg, _ = self._journal.append(RecordType.TX_BEGIN, b"")

    def tx_commit(self) -> int:
        assert self._tx_seg is not None, "tx_commit without tx_begin"
        at, _ = self._journal.append(RecordType.TX_COMMIT, b"")
        self._depend(at, self._tx_seg)  # the COMMIT must outlive its BEGIN
        self._tx_seg = None
        self._position += 1
        return self._position

    def flush(self) -> SyncPoint:
        # bump first: anything appended by _maintain (copied-forward records) is covered by
        # this point and by no earlier one
        if self.fenced:
            raise self.failure or OSError(errno.EIO, "store fenced")
        self._position += 1
        self._flushes += 1
        if self._tx_seg is None and self.failure is None:
            self._maintain()
        # bodies first (records refer to them); a failure keeps what was handed out so far
        # for the next successful point, and leaves the rest buffered
        fds, self._pending_fds = self._pending_fds, []
        try:
            fds += self._bodies.journal.flush()
            fds += self._journal.flush()
            fds += self._defs.flush()
            fds += self._dedup.flush()
        except OSError:
            self._pending_fds = fds
            raise
        return SyncPoint(self._position, tuple(fds))

    def fsync(self, point: SyncPoint) -> int:
        try:
            fsync_fds(list(point.fds))
        except OSError as exc:
            # the kernel may have dropped the dirty pages ("fsyncgate"): never trust a later
            # fsync to cover them; stop writing (a plain store is atomic under the GIL)
            self._fenced = exc
            raise
        # a plain int store is atomic under the GIL; only ever moves forward
        if point.position > self._durable:
            self._durable = point.position
        return point.position

    def sync(self) -> int:
        return self.fsync(self.flush())

    def close(self) -> None:
        """Sync, close files, and leave the CLEAN marker for a fast, exact next start.

        After a write failure that a last try cannot clear, or a fenced store: close without
        writing anything more (no terms, no CLEAN): the next start replays the journal."""
        if not self.fenced:
            try:
                self.sync()
            except OSError as exc:
                log.error(
                    "store %s: final sync failed (%s); the next start replays", self.directory, exc
                )
        if self.failure is not None:
            self.abandon()
            return
        self._journal.close()
        self._bodies.journal.close()
        self._defs.close()
        self._dedup.close()
        if self._tx_seg is None:
            self._write_terms()
        (self.directory / "CLEAN").write_bytes(b"")
        fsync_fds(self._fsync_dir_fds())

    def abandon(self) -> None:
        """Release descriptors WITHOUT flushing buffered writes: a simulated crash (tests).

        What was already handed to the OS (`flush()`) stays in the files; the buffers are lost,
        exactly as when the process is killed.
        """
        for journal in (self._journal, self._bodies.journal):
            journal.abandon()
        self._defs.abandon()
        self._dedup.abandon()
        for fd in self._pending_fds:
            os.close(fd)
        self._pending_fds = []

    # -- recovery terms (clean stop) ---------------------------------------------------------

    def _write_terms(self) -> None:
        # Everything `_replay` would rebuild, as flat columns (see terms.py).
        cols: list[array[Any]] = []
        queues = []
        for q, qi in self._index.items():
            if not qi:
                continue
            seqs = sorted(qi)
            locs = [qi[s] for s in seqs]
            cols.append(array("Q", seqs))
            cols.append(array("Q", [loc >> 32 for loc in locs]))  # segment << 32 | offset
            cols.append(array("L", [loc & _SIZE_MASK for loc in locs]))
            qc = self._counts.get(q, {})
            cols.append(array("Q", qc.keys()))
            cols.append(array("L", qc.values()))
            qr = self._refs.get(q, {})
            cols.append(array("Q", qr.keys()))
            cols.append(array("Q", qr.values()))
            qd = self._due.get(q, {})
            cols.append(array("Q", qd.keys()))
            cols.append(array("q", qd.values()))
            queues.append(q)
        bodies = self._bodies.export()
        cols.extend(bodies)
        meta = {
            "journal": {str(k): v for k, v in self._journal.sizes().items()},
            "msgstore": {str(k): v for k, v in self._bodies.journal.sizes().items()},
            "seg_total": {str(k): v for k, v in self._seg_total.items()},
            "seg_live": {str(k): v for k, v in self._seg_live.items() if v},
            "seg_deps": {str(k): sorted(v) for k, v in self._seg_deps.items() if v},
            "moved": sorted(self._moved),
            "next_seq": self._next_seq,
            "expiring": sorted(self._expiring),
            "queues": queues,
            "bodies": self._bodies.export_meta(),
        }
        terms.write(self.directory, meta, cols)

    def _load_terms(self) -> RecoveredState | None:
        # A clean stop: rebuild the index from the terms instead of replaying the journal,
        # if (and only if) the terms are intact and describe exactly the files on disk.
        got = terms.read(self.directory)
        reason = got if isinstance(got, str) else None
        if not isinstance(got, str):
            meta, cols = got
            if not meta.keys() >= _TERMS_FIELDS:
                reason = "recovery terms: fields missing"
            elif {str(k): v for k, v in self._journal.sizes().items()} != meta["journal"]:
                reason = "journal segments differ from the recovery terms"
            elif {str(k): v for k, v in self._bodies.journal.sizes().items()} != meta["msgstore"]:
                reason = "message store files differ from the recovery terms"
            elif len(cols) != 9 * len(meta["queues"]) + 5:
                reason = "recovery terms: unexpected columns"
        if reason is not None:
            log.warning("store %s: %s; replaying the journal", self.directory, reason)
            return None
        self._journal.adopt()
        self._bodies.journal.adopt()
        it = iter(cols)
        for q in meta["queues"]:
            seqs, segoffs, sizes = next(it), next(it), next(it)
            self._index[q] = dict(
                zip(
                    seqs,
                    [(so << 32) | z for so, z in zip(segoffs, sizes, strict=True)],
                    strict=True,
                )
            )
            for target in (self._counts, self._refs, self._due):
                keys, values = next(it), next(it)
                if keys:
                    target[q] = dict(zip(keys, values, strict=True))
        self._bodies.adopt(meta["bodies"], [next(it) for _ in range(5)])
        self._seg_total = {int(k): v for k, v in meta["seg_total"].items()}
        self._seg_deps = {int(k): set(v) for k, v in meta["seg_deps"].items()}
        self._moved = dict.fromkeys(meta["moved"], 0)
        self._next_seq = {str(k): int(v) for k, v in meta["next_seq"].items()}
        self._expiring = set(meta["expiring"])
        self._seg_live = {int(k): v for k, v in meta["seg_live"].items()}
        self.used_terms = True
        return self._recovered_state()

    # -- space reclamation -------------------------------------------------------------------

    def _maintain(self) -> None:
        current = self._journal.current
        if (
            current >= 0
            and self._seg_live.get(current, 0) == 0
            and self._journal.current_bytes >= _ROLL_DEAD_CURRENT_BYTES
        ):
            # a drained queue: start a new segment so the dead current one can go now
            self._journal.roll()
            current = -1
        segments = self._journal.segments
        alive = set(segments)
        for seg in segments:
            if seg == current:
                continue
            moved_at = self._moved.get(seg)
            if moved_at is not None and moved_at > self._durable:
                continue
            if self._seg_live.get(seg, 0) > 0:
                continue
            if any(dep in alive for dep in self._seg_deps.get(seg, ())):
                continue
            self._journal.delete(seg)
            alive.discard(seg)
            self._seg_live.pop(seg, None)
            self._seg_total.pop(seg, None)
            self._seg_acked_at.pop(seg, None)
            self._seg_deps.pop(seg, None)
            self._moved.pop(seg, None)
        self._maybe_copy_forward(current)
        self._bodies.maintain(self._position, self._durable)

    def _maybe_copy_forward(self, current: int) -> None:
        # Copy the oldest segment's few live entries into the current one so a handful of
        # long-lived messages does not pin a whole segment (and all its successors' ACKs).
        segments = self._journal.segments
        if len(segments) < 3:
            return
        oldest = segments[0]
        if oldest == current or oldest in self._moved:
            return
        live = self._seg_live.get(oldest, 0)
        if live == 0:
            return
        if live > self._seg_total.get(oldest, 0) * _COMPACT_LIVE_RATIO:
            return
        if self._flushes - self._seg_acked_at.get(oldest, -_COMPACT_QUIET_FLUSHES) < (
            _COMPACT_QUIET_FLUSHES
        ):
            return  # still being acked (a draining queue): its entries are about to go anyway
        records, _ = _read_records(self._journal, oldest)
        for rec in records:
            if rec.rtype != RecordType.ENQUEUE:
                continue
            entry = decode_entry(rec.payload)
            loc = self._index.get(entry.queue, {}).get(entry.seq)
            if loc is None or loc >> 64 != oldest or (loc >> 32) & _SIZE_MASK != rec.offset:
                continue
            entry.delivery_count = self._counts.get(entry.queue, {}).get(entry.seq, 0)
            at, offset = self._journal.append(RecordType.ENQUEUE, encode_entry(entry))
            self._index[entry.queue][entry.seq] = (at << 64) | (offset << 32) | (loc & _SIZE_MASK)
            self._seg_live[oldest] -= 1
            self._seg_live[at] = self._seg_live.get(at, 0) + 1
            self._seg_total[at] = self._seg_total.get(at, 0) + 1
            self._depend(at, oldest)
        self._moved[oldest] = self._position

    # -- introspection (tests, management) ---------------------------------------------------

    def stats(self) -> dict[str, int]:
        """Counters: live messages, segments, disk bytes, shared bodies."""
        return {
            "messages": sum(len(q) for q in self._index.values()),
            "segments": len(self._journal.segments),
            "journal_bytes": self._journal.disk_bytes(),
            "msgstore_files": len(self._bodies.journal.segments),
            "msgstore_bytes": self._bodies.journal.disk_bytes(),
            "shared_bodies": len(self._bodies),
        }

    def body_refcount(self, ref: int) -> int:
        """Reference count of a shared body (0 when gone)."""
        return self._bodies.refcount(ref)


def _read_records(journal: Journal, seg: int) -> tuple[list[Record], int]:
    return scan(journal.read_segment(seg))
