"""Named reservations, range reads and cumulative settle.

Theory of operation
-------------------
This module gives a queue the primitives an offset-based reader (the Spark connector) needs on top
of a destructive AMQP queue. It is pure and synchronous: time arrives as `now_ms`, and it only
talks to a queue through the small `ReservableQueue` port (`reserveports.py`: fetch with ack
required, ack, requeue), which the broker adapts from its backing queue. It must not import
server/, management/ or connector/.

*Reservation log.* A `Lease` belongs to a durable consumer **name** (not a channel, not a
connection). `reserve` moves messages from the head of the queue into the lease: the queue sees
them exactly as it sees messages delivered to a channel and not yet acked (they are no longer
ready, they do not count against a ring, other consumers do not get them). Each reserved message
gets the next *position* of the lease: positions are dense, start at 0 and never go back, so a
range `[lo, hi)` of positions names the same messages for as long as the lease holds them, and
`hi - lo` is an exact message count (queue sequence numbers have gaps: evictions, expiry, LVQ
replacement, other consumers). Each entry also carries the queue's own `seq`, exposed to readers.

Invariants of a lease, with `settled` = S and `next_pos` = N:
  * S <= N; every held entry has S <= pos < N; entries are sorted by pos; positions may have
    holes (a reader that asked to start beyond N moves N forward without holding anything).
  * Every held entry is unacked in the queue under the lease's tag; nothing else holds that tag.

*Layout.* A lease keeps its held entries as parallel lists in position order (positions,
seqs, messages, redelivered flags, tags), not as one object per message: a reserve extends
them, a settle cuts their front, a read slices them (`read` builds `Entry` values, `read_rows`
plain tuples). Over the queue engine (`EngineAdapter`) a reserve takes its whole run in one
call, `Queue.take_run` (the engine's guard in front of its per-message fetch, which gives what
N single takes give), appending straight to these lists; any other `ReservableQueue` is taken
from one `take` at a time.

*Raw rows.* When the engine's run take reaches the paged tail it may hand over page rows
raw (`core.queue.rawtake`): the lease's messages list then holds, for each such row, the
`RawRows` it belongs to (one object shared by its rows, which sit together in the lease), no
`Message`. `read_columns` moves them into the answer's columns as blocks (as a browse reads
page runs); `read`, `read_rows` and the byte budget decode or size them row by row. Settling
and giving back go through the queue as for any message (its ack drops them, its requeue
decodes them first).

*Reads* (`read`) return held entries with `lo <= pos < hi` and change nothing, so any number of
readers (Spark executors, task retries, speculative attempts) get identical data.

*Settle* (`settle(up_to)`) is cumulative and idempotent: entries below `up_to` are acked in the
queue (deleted) and S moves to `max(S, up_to)`.

*Lease expiry.* Every `reserve`, `read` or `renew` pushes the deadline to `now_ms + lease_ms`.
When `expire(now_ms)` finds a lease past its deadline it requeues all its held entries (they go
back to the head, at their original seq position, flagged redelivered, for any consumer) and sets
N back to S. The lease record itself is kept (positions never go back below S), so a restarted
reader that asks for `[S, hi)` again gets that range refilled from the head of the queue:
at-least-once, nothing lost.

*Evictions.* Messages dropped by a ring, an LVQ replacement or TTL before they were reserved are
never seen by the lease; the gap in queue seqs between consecutive reserved entries is counted in
`Lease.skipped` so a reader can report it next to the queue's own eviction counters.

Publish de-duplication by `message_id` lives in `core.dedup`.
"""

from __future__ import annotations

import bisect
from array import array
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Final, Generic, cast

from ringmq.core.message import Message, SeqId
from ringmq.core.queue.columns import Columns
from ringmq.core.queue.ports import RawRows
from ringmq.core.reserveports import EngineAdapter, Held, ReservableQueue, TagT

DEFAULT_LEASE_MS: Final = 60_000
MAX_RESERVE_PER_CALL: Final = 100_000


def _raw_span(held: list[Held], seqs: list[SeqId], x: int, j: int) -> tuple[RawRows, int, int]:
    # The raw rows at lease index x, the row of `seqs[x]` in them, and the lease index where
    # they end (at most j): a raw take appended its rows together, and a lease only ever cuts
    # its front, so they follow each other.
    m = cast("RawRows", held[x])
    a = bisect.bisect_left(m.seqs, seqs[x])
    y = min(j, x + len(m) - a)
    assert held[y - 1] is m
    return m, a, y


def _spans(
    held: list[Held], seqs: list[SeqId], i: int, j: int
) -> Iterator[tuple[int, int, RawRows | None, int]]:
    # Lease rows [i, j) as consecutive spans (x, y, raw, a): a run of messages (raw None), or
    # rows [a, a + y - x) of one `RawRows`.
    x = i
    while x < j:
        if isinstance(held[x], Message):
            y = x + 1
            while y < j and isinstance(held[y], Message):
                y += 1
            yield x, y, None, 0
        else:
            raw, a, y = _raw_span(held, seqs, x, j)
            yield x, y, raw, a
        x = y


def _messages(held: list[Held], seqs: list[SeqId], i: int, j: int) -> list[Message]:
    # The messages of lease rows [i, j): raw rows decoded (`RawRows.items`).
    out: list[Message] = []
    for x, y, raw, a in _spans(held, seqs, i, j):
        if raw is None:
            out += cast("list[Message]", held[x:y])
        else:
            out += [msg for _, msg, _ in raw.part(a, a + y - x).items()]
    return out


def _held_bytes(held: list[Held], seqs: list[SeqId], i: int, j: int) -> int:
    # Body bytes of lease rows [i, j).
    total = 0
    for x, y, raw, a in _spans(held, seqs, i, j):
        if raw is None:
            total += sum(m.size for m in cast("list[Message]", held[x:y]))
        else:
            total += sum(raw.sizes[a : a + y - x])
    return total


@dataclass(frozen=True, slots=True)
class Entry(Generic[TagT]):
    """A reserved message: its lease position, its queue seq and the message itself."""

    pos: int
    seq: SeqId
    message: Message
    redelivered: bool
    tag: TagT


_ENTRY_SETTERS: Final = tuple(
    vars(Entry)[name].__set__ for name in ("pos", "seq", "message", "redelivered", "tag")
)


def _new_entry(pos: int, seq: SeqId, message: Message, redelivered: bool, tag: TagT) -> Entry[TagT]:
    # An ordinary, equal, immutable Entry built through the slot descriptors: the frozen
    # dataclass __init__ (one object.__setattr__ per field) costs several times more, once
    # per reserved message.
    e: Entry[TagT] = object.__new__(Entry)
    set_pos, set_seq, set_message, set_redelivered, set_tag = _ENTRY_SETTERS
    set_pos(e, pos)
    set_seq(e, seq)
    set_message(e, message)
    set_redelivered(e, redelivered)
    set_tag(e, tag)
    return e


@dataclass(frozen=True, slots=True)
class ReserveResult:
    """Answer to `reserve`: the reserved range `[start, end)` and the lease's state."""

    start: int
    end: int
    settled: int
    next_pos: int
    skipped: int
    expired: int


@dataclass(slots=True)
class Lease(Generic[TagT]):
    """The reservation log of one consumer name on one queue (see module docstring)."""

    consumer: str
    lease_ms: int
    deadline_ms: int
    settled: int = 0
    next_pos: int = 0
    skipped: int = 0
    """Queue seqs never seen between reserved entries (evicted, expired, replaced, taken)."""
    expired: int = 0
    """How many times this lease expired and gave its messages back."""
    last_seq: int | None = None
    # The held entries as parallel lists in position order (no object per message):
    positions: list[int] = field(default_factory=list)
    seqs: list[SeqId] = field(default_factory=list)
    messages: list[Held] = field(default_factory=list)
    redelivered: list[bool] = field(default_factory=list)
    tags: list[TagT] = field(default_factory=list)

    @property
    def held(self) -> int:
        """Messages currently held (reserved, not settled)."""
        return len(self.positions)

    @property
    def entries(self) -> list[Entry[TagT]]:
        """The held entries, in position order (built on each call)."""
        return self.slice(0, len(self.positions))

    def slice(self, i: int, j: int) -> list[Entry[TagT]]:
        """Held entries `i` to `j` (indexes into the parallel lists) as `Entry` objects."""
        return list(
            map(
                _new_entry,
                self.positions[i:j],
                self.seqs[i:j],
                _messages(self.messages, self.seqs, i, j),
                self.redelivered[i:j],
                self.tags[i:j],
            )
        )

    def hold(self, entries: Iterable[Entry[TagT]]) -> None:
        """Replace the held entries by `entries` (in position order: recovery)."""
        held = list(entries)
        self.positions[:] = [e.pos for e in held]
        self.seqs[:] = [e.seq for e in held]
        self.messages[:] = [e.message for e in held]
        self.redelivered[:] = [e.redelivered for e in held]
        self.tags[:] = [e.tag for e in held]

    def append(self, pos: int, seq: SeqId, message: Message, redelivered: bool, tag: TagT) -> None:
        """Hold one more entry (its position above every held one)."""
        self.positions.append(pos)
        self.seqs.append(seq)
        self.messages.append(message)
        self.redelivered.append(redelivered)
        self.tags.append(tag)

    def cut(self, n: int) -> list[TagT]:
        """Drop the first `n` held entries; returns their tags."""
        tags = self.tags[:n]
        del self.positions[:n], self.seqs[:n], self.messages[:n], self.redelivered[:n]
        del self.tags[:n]
        return tags

    def span(self, lo: int, hi: int) -> tuple[int, int]:
        """Indexes (into the parallel lists) of the held entries with lo <= pos < hi."""
        return bisect.bisect_left(self.positions, lo), bisect.bisect_left(self.positions, hi)


class Reservations(Generic[TagT]):
    """All leases of one queue.

    The owner (the broker) calls `expire(now_ms)` from its timer (`next_deadline_ms()` says when)
    and `release_all` when the queue is deleted or purged.
    """

    def __init__(self, queue: ReservableQueue[TagT]) -> None:
        self._queue = queue
        self._leases: dict[str, Lease[TagT]] = {}

    # -- queries ------------------------------------------------------------------------------
    def lease(self, consumer: str) -> Lease[TagT] | None:
        """The lease of `consumer`, or None if it never reserved."""
        return self._leases.get(consumer)

    def leases(self) -> list[Lease[TagT]]:
        """All leases, in creation order."""
        return list(self._leases.values())

    @property
    def held(self) -> int:
        """Messages held by all leases."""
        return sum(lease.held for lease in self._leases.values())

    def next_deadline_ms(self) -> int | None:
        """Earliest lease deadline among leases that hold messages, or None."""
        deadlines = [le.deadline_ms for le in self._leases.values() if le.positions]
        return min(deadlines) if deadlines else None

    # -- commands -----------------------------------------------------------------------------
    def reserve(
        self,
        consumer: str,
        start: int,
        max_messages: int,
        now_ms: int,
        *,
        lease_ms: int = DEFAULT_LEASE_MS,
        max_bytes: int | None = None,
    ) -> ReserveResult:
        """Make positions `[start, end)` of `consumer`'s lease hold messages and return `end`.

        Positions already held are kept as they are (so a replayed `[start, end)` names the same
        messages); missing positions are filled from the head of the queue, up to
        `start + max_messages` positions and `max_bytes` body bytes in this call. A `start`
        below the settled mark is raised to it; a `start` beyond the lease's next position moves
        the next position forward (nothing is ever reserved below a reader's start). The lease
        is renewed. `end == start` means nothing is available.

        Args:
            consumer: durable consumer name (e.g. the Spark option `consumerName`).
            start: first position the caller wants (its last committed or planned end).
            max_messages: admission limit for this range (>= 0).
            now_ms: wall time.
            lease_ms: lease duration from now; every later call renews it.
            max_bytes: optional admission limit on body bytes (at least one message is taken).
        """
        if max_messages < 0:
            raise ValueError("max_messages must be >= 0")
        if lease_ms <= 0:
            raise ValueError("lease_ms must be > 0")
        lease = self._leases.get(consumer)
        if lease is None:
            lease = Lease(consumer=consumer, lease_ms=lease_ms, deadline_ms=now_ms + lease_ms)
            self._leases[consumer] = lease
        lease.lease_ms = lease_ms
        lease.deadline_ms = now_ms + lease_ms
        start = max(start, lease.settled)
        if start > lease.next_pos:
            # The reader already planned positions we never held (a replay that found the queue
            # shorter, or a checkpoint newer than this broker's memory): never fill below start.
            lease.next_pos = start
        goal = start + min(max_messages, MAX_RESERVE_PER_CALL)
        budget: int | None = None
        full = False
        if max_bytes is not None:
            # The bytes already held in the range count; a message is taken while the range
            # holds fewer than `max_bytes`, and always when the range is empty (`take_run`).
            i, j = lease.span(start, goal)
            budget = max_bytes - _held_bytes(lease.messages, lease.seqs, i, j)
            full = budget <= 0 and lease.next_pos > start
        if lease.next_pos < goal and not full:
            adapter: object = self._queue
            if isinstance(adapter, EngineAdapter):
                self._reserve_run(lease, adapter, goal, budget, now_ms)
            else:
                self._reserve_each(lease, self._queue, goal, budget, now_ms)
        end = max(start, min(goal, lease.next_pos))
        return ReserveResult(
            start, end, lease.settled, lease.next_pos, lease.skipped, lease.expired
        )

    def _reserve_run(
        self,
        lease: Lease[TagT],
        queue: EngineAdapter,
        goal: int,
        budget: int | None,
        now_ms: int,
    ) -> None:
        # The engine hands the whole run over in one call (`Queue.take_run`), appended to the
        # lease's parallel lists; the tag of an engine message is its seq.
        seqs = lease.seqs
        before = len(seqs)
        next_pos = lease.next_pos
        k = queue.engine.take_run(
            goal - next_pos, budget, now_ms, seqs, lease.messages, lease.redelivered
        )
        if not k:
            return
        run = seqs[before:]
        lease.tags.extend(cast("list[TagT]", run))
        lease.positions.extend(range(next_pos, next_pos + k))
        lease.next_pos = next_pos + k
        self._count_gaps(lease, run)

    def _reserve_each(
        self,
        lease: Lease[TagT],
        queue: ReservableQueue[TagT],
        goal: int,
        budget: int | None,
        now_ms: int,
    ) -> None:
        # Any other `ReservableQueue`: one `take` per message, the same byte rule.
        taken_bytes = 0
        run: list[SeqId] = []
        next_pos = lease.next_pos
        while next_pos < goal:
            if budget is not None and run and taken_bytes >= budget:
                break
            got = queue.take(now_ms)
            if got is None:
                break
            lease.append(next_pos, got.seq, got.message, got.redelivered, got.tag)
            run.append(got.seq)
            next_pos += 1
            taken_bytes += got.message.size
        lease.next_pos = next_pos
        self._count_gaps(lease, run)

    @staticmethod
    def _count_gaps(lease: Lease[TagT], run: list[SeqId]) -> None:
        # `skipped`: every reserved seq above the last one seen adds the seqs between them.
        if not run:
            return
        last = lease.last_seq
        for seq in run:
            if last is None:
                last = seq
            elif seq > last:
                lease.skipped += seq - last - 1
                last = seq
        lease.last_seq = last

    def read(
        self, consumer: str, lo: int, hi: int, now_ms: int, *, renew: bool = True
    ) -> list[Entry[TagT]]:
        """Held entries of `consumer` with `lo <= pos < hi`, in position order; changes nothing.

        An unknown consumer reads nothing. Reading renews the lease unless `renew` is False.
        """
        lease = self._leases.get(consumer)
        if lease is None:
            return []
        if renew:
            lease.deadline_ms = now_ms + lease.lease_ms
        return lease.slice(*lease.span(lo, hi))

    def read_rows(
        self, consumer: str, lo: int, hi: int, now_ms: int, *, renew: bool = True
    ) -> list[tuple[int, int, bool, Message]]:
        """`read` as (position, seq, redelivered, message) tuples, without an `Entry` each."""
        lease = self._leases.get(consumer)
        if lease is None:
            return []
        if renew:
            lease.deadline_ms = now_ms + lease.lease_ms
        i, j = lease.span(lo, hi)
        return list(
            zip(
                lease.positions[i:j],
                cast("list[int]", lease.seqs[i:j]),
                lease.redelivered[i:j],
                _messages(lease.messages, lease.seqs, i, j),
                strict=True,
            )
        )

    def read_columns(
        self, consumer: str, lo: int, hi: int, now_ms: int, *, renew: bool = True
    ) -> tuple[Columns, array[int]]:
        """`read_rows` as columns and their positions: messages added row by row, raw rows
        as blocks of their page records (`RawRows.add_columns`, no message built)."""
        cols = Columns()
        positions: array[int] = array("Q")
        lease = self._leases.get(consumer)
        if lease is None:
            return cols, positions
        if renew:
            lease.deadline_ms = now_ms + lease.lease_ms
        i, j = lease.span(lo, hi)
        positions.extend(lease.positions[i:j])
        held, seqs = lease.messages, lease.seqs
        for x, y, raw, a in _spans(held, seqs, i, j):
            if raw is None:
                rows = zip(
                    lease.positions[x:y],
                    cast("list[int]", seqs[x:y]),
                    lease.redelivered[x:y],
                    cast("list[Message]", held[x:y]),
                    strict=True,
                )
                cols.add_rows(rows)
            else:
                raw.add_columns(a, a + y - x, cols)
        return cols, positions

    def renew(self, consumer: str, now_ms: int) -> bool:
        """Push the lease deadline; False if there is no such lease."""
        lease = self._leases.get(consumer)
        if lease is None:
            return False
        lease.deadline_ms = now_ms + lease.lease_ms
        return True

    def settle(self, consumer: str, up_to: int, now_ms: int) -> int:
        """Ack (delete) every held entry below position `up_to`; cumulative and idempotent.

        Returns how many messages were deleted by this call. Settling an unknown consumer or a
        position at or below the settled mark does nothing.
        """
        lease = self._leases.get(consumer)
        if lease is None or up_to <= lease.settled:
            return 0
        done = lease.cut(bisect.bisect_left(lease.positions, up_to))
        lease.settled = up_to
        lease.next_pos = max(lease.next_pos, up_to)
        lease.deadline_ms = now_ms + lease.lease_ms
        if done:
            self._queue.ack(done, now_ms)
        return len(done)

    def expire(self, now_ms: int) -> list[str]:
        """Give back the messages of every lease whose deadline has passed.

        Returns the consumer names whose messages went back to the queue (the broker then
        tries to deliver to waiting consumers).
        """
        gone: list[str] = []
        for lease in self._leases.values():
            if lease.positions and lease.deadline_ms <= now_ms:
                self._give_back(lease, now_ms)
                lease.expired += 1
                gone.append(lease.consumer)
        return gone

    def drop(self, consumer: str, now_ms: int) -> bool:
        """Forget a consumer name, returning its held messages to the queue."""
        lease = self._leases.pop(consumer, None)
        if lease is None:
            return False
        if lease.positions:
            self._give_back(lease, now_ms)
        return True

    def release_all(self, now_ms: int) -> None:
        """Return every held message to the queue and forget all leases."""
        for name in list(self._leases):
            self.drop(name, now_ms)

    def restore_lease(
        self,
        consumer: str,
        *,
        lease_ms: int,
        deadline_ms: int,
        settled: int,
        next_pos: int,
        skipped: int,
        expired: int,
        last_seq: int | None,
    ) -> Lease[TagT]:
        """Recreate a stored lease holding nothing (recovery fills its entries, in pos order,
        with messages it took from the queue; `core.streambooks`)."""
        lease: Lease[TagT] = Lease(
            consumer=consumer,
            lease_ms=lease_ms,
            deadline_ms=deadline_ms,
            settled=settled,
            next_pos=max(next_pos, settled),
            skipped=skipped,
            expired=expired,
            last_seq=last_seq,
        )
        self._leases[consumer] = lease
        return lease

    # -- internals ----------------------------------------------------------------------------
    def _give_back(self, lease: Lease[TagT], now_ms: int) -> None:
        tags = lease.cut(len(lease.positions))
        lease.next_pos = lease.settled
        # The returned messages keep their seq; a refill may see them again, so the gap count
        # restarts from the settled side.
        lease.last_seq = None
        self._queue.requeue(tags, now_ms)
