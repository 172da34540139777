"""The storage port: `Store`, the calling protocol, and what `recover()` hands back.

Theory of operation
-------------------
The core never touches files: it calls a `Store`. The store owns *where bytes live*; the
queue engine owns order and delivery state. Only persistent messages are given to the store
(`is_persistent(queue_durable, message)`: durable queue and delivery_mode 2, RabbitMQ's
`is_persistent`); transient ones never reach it (they may be paged, see `paging.py`).

Two implementations: `memstore.MemoryStore` (tests, transient-only brokers) and
`filestore.FileStore` (the journal on disk, docs/storage.md). This module holds no state:
only the port, its value types, and the persistence rule.

How the engine and broker call it
~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
Every mutating call returns the store *position* after the write (a monotonically increasing
int). Nothing is durable until a group commit covers it:

* publish: ``pos = store.enqueue(queue, seq, message, expiry_ms=..., due_ms=...)``; keep
  ``(pos, channel, delivery_tag)`` for the confirm.
* settle: ``store.ack(queue, [seq, ...])`` for acks, rejects without requeue, ring/max-length
  drops, LVQ replacements, expiries, purge (ready seqs) and dead-lettering of persistent
  messages; ``store.delivered(queue, seq, delivery_count)`` when a message is handed to a
  consumer with ack required (so a clean restart knows what to flag redelivered), and
  ``store.delivered(queue, seq, delivery_count, due_ms=...)`` when a failed delivery makes the
  message wait before it returns (Artemis' `redelivery-delay`: recovered as scheduled);
  ``store.drop_queue(queue)`` when a durable queue is deleted.
* group commit (server): after a read batch, ``point = store.flush()`` on the loop thread, then
  ``await loop.run_in_executor(None, store.fsync, point)`` (only `os.fsync` calls, safe to run
  while the loop keeps writing), then release every confirm whose ``pos <= point.position``.
  `FileStore` splits `fsync` for several points in flight (server/commit.py): `sync_files`
  (concurrent) then `synced`, in point order.
  A point holds descriptors that only `fsync` closes, so `flush()` is called only when its
  fsync will run; writes handed to the OS with no fsync to follow use ``store.write_out()``.
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

Single owner: all methods except `fsync` run on one thread (the loop). No locks.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from ringmq.core.message import Message, SeqId
from ringmq.storage.bodystore import DiskSpillStore
from ringmq.storage.dedup import Window


def is_persistent(queue_durable: bool, message: Message) -> bool:
    """RabbitMQ's rule: a message is persisted only on a durable queue with delivery_mode 2."""
    return queue_durable and message.persistent


@dataclass(frozen=True, slots=True)
class SyncPoint:
    """What `flush()` returns: the position it covers and descriptors to fsync.

    `log_position` is the shard log's position once these writes reached the OS (0 without a
    shard log, `shardlog.py`): what a follower must have acknowledged for them to be
    replicated."""

    position: int
    fds: tuple[int, ...] = ()
    log_position: int = 0


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

    def delivered(
        self, queue: str, seq: SeqId, delivery_count: int, *, due_ms: int | None = None
    ) -> int:
        """Record a new delivery count (the message has been handed out), or, with `due_ms`,
        that the message failed a delivery and waits until `due_ms` to return (a delayed
        redelivery): a restart puts it back in the schedule, as a scheduled message."""
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

    def write_out(self) -> int:
        """Hand buffered writes to the OS without preparing an fsync (owner thread); returns
        the write position. Raises the write's OSError. The next `flush()` covers them."""
        ...

    def fsync(self, point: SyncPoint) -> int:
        """Make `point` durable; thread-safe. Returns `point.position`. The point's
        descriptors are closed whatever happens: every point `flush()` returns must reach
        `fsync`."""
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
