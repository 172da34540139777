"""The reservation books of every queue, kept durable with the queue and recovered at start.

Theory of operation
-------------------
`StreamBooks` is the broker's registry of `core.reservations.Reservations` books, one per live
queue that an offset reader (the streams API, the Spark connector) has used. It owns the
lease state's life across restarts:

* **Persistence.** After every change of a lease of a *durable* queue (reserve, settle,
  expiry, drop) the lease is written to the store as one definition of kind `LEASE`, keyed by
  the queue's store key and the consumer name: settled mark, next position, counters, and
  the held entries as runs `[pos, seq, n]` (positions and seqs both step by one inside a run,
  so a reservation of consecutive messages is one run whatever its length). Definitions live
  in the store's definitions log (fsynced by the same group commit as the journal, never
  pinning message segments). The settles' ACKs go through the broker's one ack path
  (`Delivery.ack_seqs`: engine ack and journal ACK records), like basic.ack. The streams API
  answers a reserve or a settle only after the fsync covering these writes, so a position a
  reader was told about survives a crash with the same message behind it.
* **Recovery** (`recover`, called by `Durability.recover` once the queues' messages are back,
  all ready): for each queue with stored leases, messages are taken from the head with an ack
  required until every held seq was found (or the queue is past the highest held seq); a
  found seq goes back into its lease at its position, anything else taken on the way is
  requeued at its own seq position. A held seq that is gone (settled by ACKs that reached the
  disk before the lease did) leaves a hole, which reads skip. The lease deadline restarts
  at `now + lease_ms`, so a reader that comes back in time finds its positions intact; one
  that does not gets them back at the head by expiry (at-least-once, as before a restart).
* **Cleanup.** A book whose queue was deleted (or replaced under the same name) is dropped
  with its stored leases; stored leases of unknown queues are deleted at recovery.

Built from what it uses (no broker): the vhosts it finds queues in, the one ack path, and the
store's definitions log (`storeport.DefinitionStorePort`; None without a store: nothing is
written). Pure and synchronous like the rest of core: time is `now_ms`. Only the broker's loop
thread calls it.
"""

from __future__ import annotations

import logging
import operator
from collections.abc import Callable, Iterator, Mapping
from typing import TYPE_CHECKING, Any, Final

from ringmq.core.message import SeqId
from ringmq.core.reservations import (
    DEFAULT_LEASE_MS,
    Entry,
    Lease,
    Reservations,
    ReserveResult,
)
from ringmq.core.reserveports import EngineAdapter

if TYPE_CHECKING:
    from ringmq.core.entities import QueueEntity
    from ringmq.core.storeport import DefinitionStorePort
    from ringmq.core.vhost import VHost

log = logging.getLogger(__name__)

LEASE: Final = "lease"
"""Definition kind of a stored lease."""
_SEP: Final = "\x1f"

Book = Reservations[SeqId]


def lease_key(vhost: str, queue: str, consumer: str) -> str:
    """The store key of `consumer`'s lease on `queue` of `vhost`."""
    return f"{vhost}{_SEP}{queue}{_SEP}{consumer}"


def _runs(positions: list[int], seqs: list[SeqId]) -> list[list[int]]:
    # [pos, seq, n] runs where both step by one.
    n = len(positions)
    if n and positions[-1] - positions[0] == n - 1:
        # Consecutive positions (the usual lease): one run when seq - pos is the same for all,
        # checked in C (a reserve of 100 000 messages stores its lease after every call).
        gaps = list(map(operator.sub, seqs, positions))
        if gaps.count(gaps[0]) == n:
            return [[positions[0], int(seqs[0]), n]]
    out: list[list[int]] = []
    for pos, seq in zip(positions, seqs, strict=True):
        if out:
            last = out[-1]
            if pos == last[0] + last[2] and seq == last[1] + last[2]:
                last[2] += 1
                continue
        out.append([pos, int(seq), 1])
    return out


def _unrun(runs: Any) -> Iterator[tuple[int, int]]:
    for pos, seq, n in runs:
        for i in range(int(n)):
            yield int(pos) + i, int(seq) + i


def lease_value(vhost: str, queue: str, lease: Lease[SeqId]) -> dict[str, Any]:
    """The JSON-able stored form of `lease`."""
    return {
        "vhost": vhost,
        "queue": queue,
        "consumer": lease.consumer,
        "lease_ms": lease.lease_ms,
        "settled": lease.settled,
        "next": lease.next_pos,
        "skipped": lease.skipped,
        "expired": lease.expired,
        "last_seq": lease.last_seq,
        "held": _runs(lease.positions, lease.seqs),
    }


class StreamBooks:
    """Reservation books per queue, durable for durable queues (see the module docstring).

    Args:
        vhosts: the broker's vhosts by name (the queues of stored leases are found there).
        ack_seqs: the one ack path (`Delivery.ack_seqs`), for the messages a settle deletes.
        store: where leases of durable queues are written; None keeps them in memory only.
    """

    def __init__(
        self,
        vhosts: Mapping[str, VHost],
        ack_seqs: Callable[[QueueEntity, list[SeqId]], None],
        store: DefinitionStorePort | None,
    ) -> None:
        self.vhosts = vhosts
        self.ack_seqs = ack_seqs
        self.store = store
        self._books: dict[tuple[str, str], tuple[QueueEntity, Book]] = {}
        self._stored: dict[tuple[str, str], set[str]] = {}  # queue -> consumers in the store

    # -- books --------------------------------------------------------------------------------
    def book(self, q: QueueEntity) -> Book:
        """The book of `q`, created on first use (a new queue under an old name: a new book)."""
        key = (q.vhost, q.name)
        got = self._books.get(key)
        if got is not None and got[0] is q:
            return got[1]
        if got is not None:
            self._forget(key)  # the old book's messages died with the old queue
        ack_seqs = self.ack_seqs
        book: Book = Reservations(EngineAdapter(q.queue, lambda seqs: ack_seqs(q, seqs)))
        self._books[key] = (q, book)
        return book

    def existing(self, q: QueueEntity) -> Book | None:
        """The book of `q` if it has one (no side effects)."""
        got = self._books.get((q.vhost, q.name))
        return got[1] if got is not None and got[0] is q else None

    def _forget(self, key: tuple[str, str]) -> None:
        self._books.pop(key, None)
        store = self.store
        for consumer in self._stored.pop(key, set()):
            if store is not None:
                store.delete_definition(LEASE, lease_key(key[0], key[1], consumer))

    def _save(self, q: QueueEntity, lease: Lease[SeqId] | None, consumer: str) -> None:
        store = self.store
        if store is None or not q.durable:
            return
        key = lease_key(q.vhost, q.name, consumer)
        stored = self._stored.setdefault((q.vhost, q.name), set())
        if lease is None:
            if consumer in stored:
                stored.discard(consumer)
                store.delete_definition(LEASE, key)
            return
        stored.add(consumer)
        store.put_definition(LEASE, key, lease_value(q.vhost, q.name, lease))

    # -- commands (each followed by the write of the lease it changed) ------------------------
    def reserve(
        self,
        q: QueueEntity,
        consumer: str,
        start: int,
        max_messages: int,
        now_ms: int,
        *,
        lease_ms: int = DEFAULT_LEASE_MS,
        max_bytes: int | None = None,
    ) -> ReserveResult:
        """`Reservations.reserve` on `q`'s book, then the lease is stored."""
        book = self.book(q)
        r = book.reserve(
            consumer, start, max_messages, now_ms, lease_ms=lease_ms, max_bytes=max_bytes
        )
        self._save(q, book.lease(consumer), consumer)
        return r

    def settle(self, q: QueueEntity, consumer: str, up_to: int, now_ms: int) -> int:
        """`Reservations.settle` on `q`'s book (ACKs journaled), then the lease is stored."""
        book = self.book(q)
        lease = book.lease(consumer)
        if lease is None or up_to <= lease.settled:
            return 0
        deleted = book.settle(consumer, up_to, now_ms)
        self._save(q, lease, consumer)
        return deleted

    def drop(self, q: QueueEntity, consumer: str, now_ms: int) -> bool:
        """Forget `consumer` on `q` (held messages back to the queue) and its stored lease."""
        found = self.book(q).drop(consumer, now_ms)
        if found:
            self._save(q, None, consumer)
        return found

    def expire(self, now_ms: int) -> list[tuple[QueueEntity, list[str]]]:
        """Expire leases in every book; returns the queues whose messages went back."""
        out: list[tuple[QueueEntity, list[str]]] = []
        for key, (q, book) in list(self._books.items()):
            if q.deleted:
                self._forget(key)
                continue
            gone = book.expire(now_ms)
            if gone:
                for consumer in gone:
                    self._save(q, book.lease(consumer), consumer)
                out.append((q, gone))
        return out

    # -- recovery -----------------------------------------------------------------------------
    def recover(self, stored: Mapping[str, Any], now_ms: int) -> int:
        """Rebuild the books from stored leases (see the module docstring); returns how many
        held messages went back into their leases."""
        store = self.store
        by_queue: dict[tuple[str, str], list[dict[str, Any]]] = {}
        for key, value in stored.items():
            vh = self.vhosts.get(str(value.get("vhost")))
            q = vh.queues.get(str(value.get("queue"))) if vh is not None else None
            if q is None or not q.durable:
                log.warning("dropping the stored lease %r of an unknown queue", key)
                if store is not None:
                    store.delete_definition(LEASE, key)
                continue
            by_queue.setdefault((q.vhost, q.name), []).append(value)
        restored = 0
        for (vhost, name), values in by_queue.items():
            q = self.vhosts[vhost].queues[name]
            restored += self._recover_queue(q, values, now_ms)
        return restored

    def _recover_queue(self, q: QueueEntity, values: list[dict[str, Any]], now_ms: int) -> int:
        book = self.book(q)
        wanted: dict[int, tuple[Lease[SeqId], int]] = {}
        leases: list[Lease[SeqId]] = []
        for v in values:
            consumer = str(v["consumer"])
            lease_ms = int(v.get("lease_ms", DEFAULT_LEASE_MS))
            lease: Lease[SeqId] = book.restore_lease(
                consumer,
                lease_ms=lease_ms,
                deadline_ms=now_ms + lease_ms,
                settled=int(v["settled"]),
                next_pos=int(v["next"]),
                skipped=int(v.get("skipped", 0)),
                expired=int(v.get("expired", 0)),
                last_seq=None if v.get("last_seq") is None else int(v["last_seq"]),
            )
            leases.append(lease)
            self._stored.setdefault((q.vhost, q.name), set()).add(consumer)
            for pos, seq in _unrun(v.get("held", ())):
                if pos >= lease.settled:
                    wanted[seq] = (lease, pos)
        if not wanted:
            return 0
        engine = q.queue
        highest = max(wanted)
        in_seq_order = q.settings.max_priority is None
        others: list[SeqId] = []
        found: dict[int, list[Entry[SeqId]]] = {}
        while wanted:
            d = engine.fetch(now_ms, ack_required=True)
            if d is None:
                break
            hit = wanted.pop(int(d.seq), None)
            if hit is None:
                others.append(d.seq)
                if in_seq_order and d.seq > highest:
                    break
                continue
            lease, pos = hit
            entry = Entry(pos, d.seq, d.message, d.redelivered, d.seq)
            found.setdefault(id(lease), []).append(entry)
        if others:
            engine.requeue(others, now_ms, count_failure=False)
        n = 0
        for lease in leases:
            entries = sorted(found.get(id(lease), ()), key=lambda e: e.pos)
            lease.hold(entries)
            n += len(entries)
        if wanted:
            log.info(
                "%d leased messages of %s/%s were settled before the stop",
                len(wanted),
                *(q.vhost, q.name),
            )
        return n
