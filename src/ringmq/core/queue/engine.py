"""The queue engine's façade: `Queue`, one queue's messages, order, delivery state and limits.

Theory of operation
-------------------
A `Queue` is a pure, synchronous state machine (no clock, no I/O, no asyncio): every call that
depends on time takes `now_ms` (wall-clock epoch milliseconds, supplied by the server). The
state is split by ownership; `Queue` creates the owners, hands each what it needs explicitly,
and keeps the public API:

* `Contents` (contents.py): where entries are (per-priority *lanes* of READY entries, the
  unacked map of ACQUIRED ones, the paged tail, the body store, the LVQ index) and the primitive
  moves out of them (pop, remove from the middle, forget, page a body, purge);
* `Overflow` (overflow.py): the limit, admission under it (LVQ replacement, refusals, the
  enqueue) and eviction (ring, drop-head, the Qpid ring and its age order);
* `Settlement` (settle.py): requeue and reject of unacked messages, the delivery limit;
* `Expiry` (expiry.py): the TTL and expiring the head;
* `Scheduler` (scheduler.py): scheduled messages by due time (Artemis' scheduled delivery);
* `DeadLetters` (deadletters.py): the outbox the broker drains (`drain_dead_letters`);
* `QueueCounters` (records.py), updated incrementally so reading them is O(1).

Invariants: every live entry is in exactly one of {a lane or the paged tail (READY), the
unacked map (ACQUIRED), the schedule (SCHEDULED)}; counters equal the sums over those sets;
sequence numbers strictly increase per queue and a message keeps its seq for life (requeue
restores order by seq).

What stays in `Queue` and why: the hot paths. A plain queue's publish + fetch + ack is one
entry object, one deque append/popleft, one dict insert/pop and one `Delivery`; everything
optional (priorities, schedules, LVQ, the browse index, the Qpid age order) is behind a single
attribute test. Measured with timeit on the development machine (Python 3.11): an attribute
read costs about 20 ns, one more attribute hop about 4 ns and a method call about 30 ns more,
against about 1.7 us for a plain publish + fetch + ack (`benchmarks/engine_bench.py`): a
delegated call at each of the three steps would cost about 5%. So `publish` (its plain,
bounded and LVQ fast paths), `fetch` (its fast path) and `ack` stay inlined here, reading
aliases of the owners' containers (`_lanes`, `_lane`, `_unacked`, `_lvq`, `_paging`: set once,
never rebound by their owner) and of the bound methods they call there (`_remove_ready`,
`_take_body`, `_evict_tail`: an instance attribute read, no extra hop). `_apply` precomputes
what they test, once per settings change: `_plain` (no option at all), `_bounded` with its
bounds as plain ints (`_reject_n/_b`, `_evict_n/_b`, `UNBOUNDED` where a bound does not apply:
a ready-counted ring, drop-head or reject limit is the only option), `_lvq_fast` (the LVQ key
is the only option) and `_fetch_fast` (one lane, no TTL, destructive consumers); the paged
tail's effective bounds are copied to `_head_n/_b` when they change (`_apply_bound`). The first
per-message expiry clears the fast paths for good (`_saw_expiry`). Outcomes are module globals
(`_ENQUEUED`...: reading an Enum member costs about one small object here). Anything unusual
(a spill, a put-back message, a scheduling header, an eviction other than the tail's, a TTL)
leaves for the owners' general code. The browse index (`_index`, browse.py) is a `Queue`
attribute for the same reason: the publish fast paths append to it inline.

Paging (bounded in-memory head). With a `SpillStore` (given by the broker when a data directory
exists), a queue keeps at most `head_count` messages / `head_bytes` body bytes ready in memory
(`set_memory_bound`, tightened by the broker under memory pressure); its `PagedTail`
(`paging.py`, which states the invariants) holds the rest, a suffix of the queue in seq order.
Fetch pages a batch back in (read-ahead of half the bound) when memory falls to a quarter of
the bound, so consumers see queue order through publish, requeue, page out and page in.
Spilled messages are counted in `paged`/`paged_bytes` (hence in `message_count` and limits) but
cost no memory per message: only a count. Spilling applies to single-lane queues without LVQ,
non-destructive browsing, ring or flow-to-disk limits (`pageable`; those keep envelopes in
memory; flow-to-disk pages bodies one by one through `BodyStore`). The publish fast paths test
`counters.paged` (0 unless something is paged) before asking the paged tail.

This package must not import server/, storage/ or asyncio. Bodies that leave memory go through
the `BodyStore` port (`MemoryBodyStore` by default; the storage layer provides a real one) or,
for the spilled tail, the `SpillStore` port (`MemorySpillStore` here; storage has a disk one).

Public API (used by the broker layer)
-------------------------------------
* `Queue(name, settings, *, body_store=None, spill=None)`
* paging: `set_spill(store)`, `set_body_store(store)`, `set_memory_bound(count, nbytes)`,
  `memory_bound`, `page_out()`, `spilled`, `pageable`, `close()`
* `publish(msg, now_ms) -> PublishOutcome` (ENQUEUED, SCHEDULED, REJECTED: nack the publisher,
  DROPPED: accepted then discarded by policy, ack the publisher as RabbitMQ does)
* `fetch(now_ms, ack_required=True) -> Delivery | None`
* `ack(seqs)`, `requeue(seqs, now_ms, *, count_failure=True)`, `reject(seqs, now_ms)`,
  `purge() -> int`
* `tick(now_ms)`, `next_deadline_ms() -> int | None`, `drop_expired(now_ms) -> int`
* `drain_dead_letters() -> list[DeadLetter]`
* `update_settings(settings, now_ms)`, `would_refuse(n, nbytes)`
* `browse(after, now_ms) -> Delivery | None`, `browse_many(after, limit, now_ms)`,
  `browse_ready(after, limit, now_ms)`, `head_seq() -> SeqId | None` (lowest ready or unacked
  seq; builds no browse index)
* `list_scheduled()`, `purge_scheduled() -> int`, `deliver_scheduled_now(seqs, now_ms) -> int`
* storage: `on_remove` (callback for engine-internal removals), `timing_of(msg, now_ms)`,
  `restore(seq, msg, ...)`, `restore_spilled(...)` and `resume_seqs(next_seq)` (recovery)
* `counters` (`QueueCounters`), `stats() -> dict`, `ready_count`, `unacked_count`,
  `message_count`, `over_limit`, `non_destructive`, `last_seq`
* introspection (O(n), management and tests): `ready_view()`, `ready_seqs()`,
  `ready_messages()`, `unacked_seqs()`
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterable, Sequence
from dataclasses import replace
from typing import Any, Final, cast

from ringmq.core.message import Message, SeqId
from ringmq.core.queue import browse
from ringmq.core.queue.contents import Contents
from ringmq.core.queue.deadletters import DeadLetters
from ringmq.core.queue.expiry import Expiry
from ringmq.core.queue.lanes import ACQUIRED, GONE, READY, Entry, new_entry
from ringmq.core.queue.limits import (
    FAST_ACTIONS,
    PAGEABLE_ACTIONS,
    FastBounds,
    describe,
    over,
    refusal,
)
from ringmq.core.queue.overflow import Overflow
from ringmq.core.queue.ports import BodyStore, MemoryBodyStore, SpillStore
from ringmq.core.queue.records import (
    SCHEDULED_RELEASE_BATCH,
    DeadLetter,
    DeadLetterReason,
    Delivery,
    PublishOutcome,
    QueueCounters,
    ScheduledMessage,
)
from ringmq.core.queue.scheduler import Scheduler, schedule_due
from ringmq.core.queue.settle import Settlement
from ringmq.core.settings import Counted, LimitAction, QueueSettings

__all__ = ["Queue"]


# Module globals for the hot paths: reading an Enum member through its class costs about as
# much as creating a small object; a global is a cached dict read.
_ENQUEUED: Final = PublishOutcome.ENQUEUED
_SCHEDULED_OUT: Final = PublishOutcome.SCHEDULED
_REJECTED: Final = PublishOutcome.REJECTED
_DROPPED: Final = PublishOutcome.DROPPED

# `new_delivery(Delivery)` then slot stores skips the Python-level __init__ on the hot path.
new_delivery: Final = object.__new__


class Queue:
    """One queue's engine. See the module docstring for the theory of operation."""

    def __init__(
        self,
        name: str,
        settings: QueueSettings,
        *,
        body_store: BodyStore | None = None,
        spill: SpillStore | None = None,
    ) -> None:
        self.name = name
        self.settings = settings
        self.counters = c = QueueCounters()
        self._max_priority = settings.max_priority or 0
        store = body_store if body_store is not None else MemoryBodyStore()
        self._contents = contents = Contents(name, c, self._max_priority + 1, store, spill)
        self._dead = DeadLetters(name, c)
        self._scheduler = Scheduler(c)
        self._overflow = Overflow(contents, self._dead)
        self._settle = Settlement(contents, self._overflow, self._dead)
        self._expiry = Expiry(contents, self._dead)
        # Hot-path aliases of the owners' containers and steps (see the module docstring).
        self._lanes = contents.lanes
        self._lane = contents.lane
        self._unacked = contents.unacked
        self._lvq = contents.lvq
        self._paging = contents.paging
        self._remove_ready = contents.remove_ready
        self._take_body = contents.take_body
        self._evict_tail = self._overflow.evict_tail
        self._head_n, self._head_b = self._paging.head_n, self._paging.head_b  # `_apply_bound`
        # itertools.count: a C-level counter (the hot path avoids a Python-level increment).
        self._seq_counter = itertools.count(1)
        self._next_seq = cast("Callable[[], SeqId]", self._seq_counter.__next__)
        self._lvq_key = settings.lvq_key
        self._lvq_acks = self._lvq if self._lvq_key is not None else None  # for `ack`
        self._lvq_header: str = self._lvq_key or ""  # the key, typed for the fast path
        self._non_destructive = settings.non_destructive
        self._index: list[Entry] | None = None  # browse index, built on first browse
        self._saw_expiry = False
        self._apply(settings)

    @property
    def on_remove(self) -> Callable[[SeqId], None] | None:
        """Storage hook: called with the seq of every message the engine removes by itself
        (eviction, drop, LVQ replacement, expiry, purge, dead-lettering, no-ack fetch). `ack`
        does not call it: the caller of `ack` knows the seqs. None (the default) costs nothing."""
        return self._contents.on_remove

    @on_remove.setter
    def on_remove(self, hook: Callable[[SeqId], None] | None) -> None:
        self._contents.on_remove = hook

    # --- configuration -------------------------------------------------------------------

    def _apply(self, settings: QueueSettings) -> None:
        self.settings = settings
        limit = settings.limit
        ttl = self._expiry.ttl = settings.message_ttl_ms
        self._dlx = settings.dead_letter_exchange
        self._dead.target(self._dlx, settings.dead_letter_routing_key)
        self._settle.delivery_limit = settings.delivery_limit
        # Fast-path flags: nothing optional configured, or only a simple ready-counted limit.
        simple = (
            ttl is None
            and not self._saw_expiry
            and self._lvq_key is None
            and not self._max_priority
            and not self._non_destructive
        )
        self._plain = simple and limit is None
        self._bounded = (
            limit
            if simple
            and limit is not None
            and limit.counts is Counted.READY
            and limit.action in FAST_ACTIONS
            else None
        )
        # The bounded fast path's thresholds, copied to attributes: the hot path reads them.
        fast = FastBounds.of(self._bounded)
        self._reject_n, self._reject_b = fast.reject_n, fast.reject_b
        self._evict_n, self._evict_b = fast.evict_n, fast.evict_b
        self._reject_dlx, self._evict_ring = fast.reject_dlx, fast.evict_ring
        self._overflow.configure(limit, fast)
        # Fetch fast path: one lane, no expiry to check, destructive consumers.
        self._fetch_fast = (
            ttl is None
            and not self._saw_expiry
            and not self._max_priority
            and not self._non_destructive
        )
        # LVQ fast path: the key is the only feature (no limit, TTL, priority or browsing).
        self._lvq_fast = self._lvq_key is not None and limit is None and self._fetch_fast
        self._apply_bound()

    def _saw_expiry_now(self) -> None:
        # A per-message expiry seen: leave the fast paths for good.
        self._saw_expiry = True
        self._plain = False
        self._bounded = None
        self._lvq_fast = self._fetch_fast = False

    def update_settings(self, settings: QueueSettings, now_ms: int) -> None:
        """Apply new effective settings live (a policy or address-setting changed).

        `max_priority`, the LVQ key and `non_destructive` are structural and keep their
        declared values. A lowered `drop-head` limit drops (or dead-letters) at once, as
        RabbitMQ does; a lowered ring size purges nothing (Artemis); reject limits and Qpid
        limits apply to the next publish. TTL changes apply to messages enqueued afterwards.
        """
        settings = replace(
            settings,
            max_priority=self.settings.max_priority,
            lvq_key=self.settings.lvq_key,
            non_destructive=self.settings.non_destructive,
        )
        self._apply(settings)
        limit = settings.limit
        if limit is not None and limit.action is LimitAction.DROP_HEAD:
            self._overflow.drop_head(now_ms)

    # --- paging (the paged tail is `Contents.paging`; paging.py) -------------------------

    @property
    def pageable(self) -> bool:
        """Whether this queue can page its tail (given a spill store): single lane, no LVQ,
        no browse index, and no limit that needs envelopes in memory."""
        limit = self.settings.limit
        return (
            not self._max_priority
            and self._lvq_key is None
            and not self._non_destructive
            and self._index is None
            and (limit is None or limit.action in PAGEABLE_ACTIONS)
        )

    def _apply_bound(self) -> None:
        paging = self._paging
        paging.set_active(paging.spill is not None and self.pageable, self._lane.tail)
        self._head_n, self._head_b = paging.head_n, paging.head_b

    @property
    def memory_bound(self) -> tuple[int, int]:
        """The configured in-memory head bound: (ready messages, ready body bytes)."""
        return self._paging.bound_n, self._paging.bound_b

    @property
    def spilled(self) -> int:
        """Messages in the paged tail (part of `counters.paged`)."""
        return self._paging.spilled

    def set_spill(self, spill: SpillStore) -> None:
        """Give the queue a spill store (paging starts within the current bound)."""
        if self._paging.spill is None:
            self._paging.spill = spill
            self._apply_bound()
            self.page_out()

    def set_memory_bound(self, count: int, nbytes: int) -> None:
        """Bound the ready messages held in memory; the rest pages (needs a spill store).

        Lowering the bound pages the excess out at once (memory pressure); raising it lets
        the next fetches page more back in.
        """
        self._paging.bound_n = count
        self._paging.bound_b = nbytes
        self._apply_bound()
        self.page_out()

    def page_out(self) -> int:
        """Page the rear of the in-memory tail out until memory is within the bound.

        Returns how many messages were paged. Only never-delivered messages at the tail move;
        requeued ones stay in memory (they precede the spill).
        """
        return self._contents.page_out()

    def set_body_store(self, store: BodyStore) -> bool:
        """Use `store` for bodies paged one by one (flow-to-disk limits). Refused (False)
        while bodies are paged in the current store."""
        if self.counters.paged != self._paging.spilled:
            return False
        self._contents.store = store
        return True

    def close(self) -> None:
        """The queue is deleted: release its paged data (spilled tail and paged bodies)."""
        self._paging.close()
        close = getattr(self._contents.store, "close", None)
        if callable(close):
            close()

    # --- read-only views -----------------------------------------------------------------

    @property
    def ready_count(self) -> int:
        """Messages that can be fetched now (ready + paged)."""
        c = self.counters
        return c.ready + c.paged

    @property
    def unacked_count(self) -> int:
        """Messages delivered and not yet acknowledged."""
        return self.counters.unacked

    @property
    def message_count(self) -> int:
        """ready + delivering + scheduled + paged (Artemis `messageCount`)."""
        return self.counters.message_count

    def __len__(self) -> int:
        return self.counters.message_count

    @property
    def last_seq(self) -> SeqId:
        """The highest seq issued so far (0 before the first publish).

        Every publish takes a seq, refused ones included, so seqs have gaps; `counters.added`
        is not a seq.
        """
        # repr is "count(N)" (step 1): read N without copying the C counter.
        return SeqId(int(repr(self._seq_counter)[6:-1]) - 1)

    @property
    def non_destructive(self) -> bool:
        """Consumers must `browse` (with a per-consumer cursor) instead of `fetch`."""
        return self._non_destructive

    @property
    def over_limit(self) -> bool:
        """The counted messages reach the limit (the broker blocks publishers under BLOCK)."""
        limit = self.settings.limit
        return limit is not None and over(limit, self.counters, 1, 0)

    def would_refuse(self, n: int, nbytes: int) -> str | None:
        """Why a reject-publish limit would refuse `n` more messages of `nbytes` bytes in all.

        None when they fit, or when the queue has no reject-type limit. Transactions ask this
        for a whole commit before applying any of it; the counted set is the one `publish`
        checks (ready + paged, plus acquired when the limit counts them).
        """
        return refusal(self.settings.limit, self.counters, n, nbytes)

    def stats(self) -> dict[str, Any]:
        """A snapshot of every counter plus the limit (snake_case, for management)."""
        out = self.counters.snapshot()
        out["limit"] = describe(self.settings.limit)
        return out

    # --- publish -------------------------------------------------------------------------

    def publish(self, msg: Message, now_ms: int) -> PublishOutcome:
        """Enqueue (or schedule) a published message; broker-internal publishes use it too.

        Scheduling headers (`SCHEDULE_HEADERS`) with a due time in the future put the message
        in the schedule (SCHEDULED). Otherwise the limit decides (see `PublishOutcome`).
        """
        seq = self._next_seq()
        headers = msg.headers
        if msg.expiration_ms is None:
            if headers is None:
                if self._plain:
                    # Fast path: no limit, TTL, LVQ, priority or schedule.
                    c = self.counters
                    # `c.paged` first: 0 unless paging, so the common case reads no more
                    # attributes than before the paged tail had its own object.
                    if c.paged and self._paging.spilled:
                        self._paging.push(seq, msg, len(msg.body), None)
                        return _ENQUEUED
                    e = Entry()  # `new_entry(seq, msg, size)` inlined
                    e.seq = seq
                    e.msg = msg
                    e.size = size = len(msg.body)
                    e.state = READY
                    e.redelivered = e.paged = False
                    e.deliveries = e.failures = e.level = 0
                    e.expires_at = e.key = None
                    self._lane.tail.append(e)
                    c.ready += 1
                    c.ready_bytes += size
                    c.added += 1
                    if self._index is not None:
                        self._index.append(e)
                    if c.ready > self._head_n or c.ready_bytes > self._head_b:
                        self.page_out()
                    return _ENQUEUED
                if self._bounded is not None:
                    # Bounded fast path: a single-lane queue whose only feature is a
                    # ready-counted ring, drop-head or reject limit (the rules of
                    # `Overflow.admit` + `enforce` without the options), bounds precomputed
                    # as ints by `_apply` (UNBOUNDED where they do not apply). Inlined: it
                    # runs per publish.
                    size = len(msg.body)
                    c = self.counters
                    n = c.ready + c.paged + 1  # counted messages and bytes once `msg` is in
                    nbytes = c.ready_bytes + c.paged_bytes + size
                    if n > self._reject_n or nbytes > self._reject_b:
                        c.overflow_rejected += 1
                        if self._reject_dlx:
                            self._dead.add(msg, DeadLetterReason.MAXLEN, now_ms, 0)
                        return _REJECTED
                    if c.paged and self._paging.spilled:
                        self._paging.push(seq, msg, size, None)
                    else:
                        e = Entry()  # `new_entry(seq, msg, size)` inlined
                        e.seq = seq
                        e.msg = msg
                        e.size = size
                        e.state = READY
                        e.redelivered = e.paged = False
                        e.deliveries = e.failures = e.level = 0
                        e.expires_at = e.key = None
                        self._lane.tail.append(e)
                        c.ready += 1
                        c.ready_bytes += size
                        c.added += 1
                        if self._index is not None:
                            self._index.append(e)
                        if c.ready > self._head_n or c.ready_bytes > self._head_b:
                            self.page_out()  # moves ready to paged: n and nbytes stay right
                    if n > self._evict_n or nbytes > self._evict_b:
                        lane = self._lane
                        if (
                            not c.paged
                            and not lane.head
                            and not lane.returns
                            and (self._evict_ring or self._dlx is None)
                        ):
                            # Every waiting message is in memory in the lane's tail (nothing
                            # requeued or paged) and a victim goes nowhere (a ring replaces;
                            # drop-head without a DLX drops): evicting is pop, count, forget.
                            return self._evict_tail(c, lane.tail)
                        if self._evict_ring:
                            # Artemis enforceRing: one eviction per add; the new message
                            # is the victim only when alone (single lane, it is the newest).
                            self._overflow.evict_head(now_ms, ring=True)
                        else:  # drop-head (the bounds above are the limit's)
                            self._overflow.drop_head(now_ms)
                        # single lane: the new message is the last, so it went only if all went
                        return _ENQUEUED if c.ready + c.paged else _DROPPED
                    return _ENQUEUED
            elif (
                self._lvq_fast and "x-delay" not in headers and "_AMQ_SCHED_DELIVERY" not in headers
            ):
                # LVQ fast path: the key is the queue's only feature (`_lvq_fast`): `admit`
                # without limits, TTL, priority lanes, schedule or paging (LVQs never spill).
                key = headers.get(self._lvq_header)
                e = Entry()  # `new_entry(seq, msg, size)` inlined
                e.seq = seq
                e.msg = msg
                e.size = size = len(msg.body)
                e.state = READY
                e.redelivered = e.paged = False
                e.deliveries = e.failures = e.level = 0
                e.expires_at = None
                e.key = key
                c = self.counters
                if key is not None:
                    lvq = self._lvq
                    old = lvq.get(key)
                    if old is not None and old.state == READY:
                        self._remove_ready(old)  # replaced by the newer value
                        c.lvq_replaced += 1
                    lvq[key] = e
                self._lane.tail.append(e)
                c.ready += 1
                c.ready_bytes += size
                c.added += 1
                if self._index is not None:
                    self._index.append(e)
                return _ENQUEUED
        e = new_entry(seq, msg, len(msg.body))
        if self._max_priority:
            e.level = min(max(msg.priority, 0), self._max_priority)
        if headers:
            if self._lvq_key is not None:
                e.key = headers.get(self._lvq_key)
            due = schedule_due(headers, now_ms)
            if due is not None and due > now_ms:
                self._scheduler.add(due, e)
                self.counters.added += 1
                if self._index is not None:
                    self._index.append(e)
                return _SCHEDULED_OUT
        return self._admit(e, now_ms, head=False)

    def _admit(self, e: Entry, now_ms: int, *, head: bool) -> PublishOutcome:
        # Place a new (or released scheduled) entry: its expiry, then `Overflow.admit`.
        assert e.msg is not None
        expires_at = e.expires_at = self._expiry.expires_at(e.msg, now_ms)
        if expires_at is not None and not self._saw_expiry:
            self._saw_expiry_now()
        return self._overflow.admit(e, now_ms, head=head, index=self._index)

    # --- consume and settle --------------------------------------------------------------

    def fetch(self, now_ms: int, ack_required: bool = True) -> Delivery | None:
        """Take the next message (basic.get, or a push to a consumer with credit).

        Expired messages met at the head are removed first (dead-lettered `expired`). With
        `ack_required` the message stays unacked until `ack`/`requeue`/`reject`; without it
        (no_ack) it is removed at once. On a non-destructive queue nothing is removed: this
        returns the head, as `browse(None, now_ms)` does.
        """
        c = self.counters
        lane = self._lane
        # `c.paged` stands for "anything spilled" here: it is 0 whenever nothing is (it also
        # counts flow-to-disk bodies, which then take the general path, as spilled ones do).
        if self._fetch_fast and not (lane.head or lane.returns or c.paged):
            # Fast path (single lane, no TTL, nothing put back or spilled): the first ready
            # entry of the tail. Gone entries (LVQ replaced, evicted) are skipped lazily.
            tail = lane.tail
            while tail:
                e = tail.popleft()
                if e.state == READY:
                    break
            else:
                return None
            if e.paged:
                c.paged -= 1
                c.paged_bytes -= e.size
            else:
                c.ready -= 1
                c.ready_bytes -= e.size
        else:
            if self._non_destructive:
                return self.browse(None, now_ms)
            next_e = self._expiry.take_live(now_ms)  # pages in and expires on the way
            if next_e is None:
                return None
            e = next_e
        msg = e.msg
        if msg is None:  # paged out (counters were moved above)
            msg = self._take_body(e)
        deliveries = e.deliveries = e.deliveries + 1
        c.delivered += 1
        redelivered = e.redelivered
        if redelivered:
            c.redelivered += 1
        seq = e.seq
        delivery = new_delivery(Delivery)
        delivery.seq = seq
        delivery.message = msg
        delivery.redelivered = redelivered
        delivery.delivery_count = deliveries
        if ack_required:
            e.state = ACQUIRED
            self._unacked[seq] = e
            c.unacked_bytes += e.size
        else:
            self._contents.forget(e)
            c.acknowledged += 1
        return delivery

    def ack(self, seqs: Iterable[SeqId]) -> None:
        """Acknowledge unacked messages. Unknown seqs (e.g. evicted by a Qpid ring) are no-ops."""
        unacked = self._unacked
        lvq = self._lvq_acks
        c = self.counters
        for seq in seqs:
            e = unacked.pop(seq, None)
            if e is not None:
                e.state = GONE
                c.unacked_bytes -= e.size
                c.acknowledged += 1
                if lvq is not None and e.key is not None and lvq.get(e.key) is e:
                    del lvq[e.key]

    def requeue(self, seqs: Sequence[SeqId], now_ms: int, *, count_failure: bool = True) -> None:
        """Put unacked messages back (nack/reject requeue, recover, cancel, close, rollback).

        `seqs` are in consumption order. Each returning message is marked redelivered and, if
        `count_failure`, counts one failed delivery: past `delivery_limit` it is dead-lettered
        (`delivery_limit`) instead. Ring queues (Artemis) put them back at the head in reverse
        consumption order, all others at their original position by seq (RabbitMQ, Qpid); LVQ
        and limit rules in settle.py.
        """
        self._settle.requeue(seqs, now_ms, count_failure=count_failure)

    def reject(self, seqs: Iterable[SeqId], now_ms: int) -> None:
        """nack/reject with requeue=false: dead-letter (`rejected`) when a DLX is set, else drop."""
        self._settle.reject(seqs, now_ms)

    def purge(self) -> int:
        """Remove every waiting message (not unacked, not scheduled); returns how many."""
        return self._contents.purge()

    def drain_dead_letters(self) -> list[DeadLetter]:
        """Dead letters produced since the last call, in order; the broker routes them."""
        return self._dead.drain()

    # --- time ----------------------------------------------------------------------------

    def tick(self, now_ms: int) -> None:
        """Release due scheduled messages (at most `SCHEDULED_RELEASE_BATCH`) to the head and
        expire the messages at the head of the queue whose time has passed (expiry.py: only
        the head of the whole queue expires, as in RabbitMQ)."""
        pop_due = self._scheduler.pop_due
        for _ in range(SCHEDULED_RELEASE_BATCH):
            e = pop_due(now_ms)
            if e is None:
                break
            self._release(e, now_ms)
        if not self._plain:
            self._expiry.expire_heads(now_ms, now_ms)

    def drop_expired(self, now_ms: int) -> int:
        """Expire the messages at the head whose expiry time has been reached by `now_ms`.

        RabbitMQ's `drop_expired_msgs`, which its queue runs after an enqueue and after a
        fetch (`Now >= Expiry`): the broker calls it once the dispatch that follows a publish
        is done, and after a basic.get before it counts the messages left. So a message whose
        TTL is 0 reaches only a consumer ready to take it at once, and the count a get reports
        leaves out the expired messages its fetch exposed. Only the head of the whole queue is
        examined (see `tick`). Returns how many expired; dead letters are queued as usual.
        """
        if not self._saw_expiry:
            return 0
        return self._expiry.expire_heads(now_ms + 1, now_ms)

    def _release(self, e: Entry, now_ms: int) -> PublishOutcome:
        # `e` left the schedule (uncounted there): admit it at the head.
        outcome = self._admit(e, now_ms, head=True)
        on_remove = self._contents.on_remove
        if outcome is not PublishOutcome.ENQUEUED and on_remove is not None:
            on_remove(e.seq)  # refused or dropped (some paths skip `forget`)
        return outcome

    def next_deadline_ms(self) -> int | None:
        """Earliest time at which `tick` has work: a scheduled message due, or a head message
        expiring (a message expires strictly after `publish time + ttl`)."""
        best = self._scheduler.next_due_ms()
        if self._plain:
            return best
        t = self._expiry.next_expiry_ms()
        if t is not None and (best is None or t < best):
            best = t
        return best

    # --- browse (non-destructive reads; browse.py) -------------------------------------------

    def _browse_index(self) -> list[Entry]:
        # Built on first use, kept up to date by publish, compacted once gone entries dominate.
        index = self._index
        if index is None:
            self._contents.unspill()  # paging stops while the index exists
            index = self._index = browse.build_index(
                self._lanes, self._unacked.values(), self._scheduler.entries()
            )
            self._apply_bound()
        else:
            compacted = browse.compact_index(index, self.counters.message_count)
            if compacted is not None:
                index = self._index = compacted
        return index

    def head_seq(self) -> SeqId | None:
        """The lowest seq of a waiting (ready) or unacked message; None when there is none.

        Scheduled messages do not count. Unlike `browse`, this builds no browse index (which
        would page the whole queue in and stop paging it).
        """
        return browse.head_seq(self._contents)

    def browse_ready(self, after: SeqId | None, limit: int, now_ms: int) -> list[Delivery]:
        """`browse_many` for readers that must not stop a queue's paging (the streams API).

        A pageable queue with a spill store is browsed without the browse index (building it
        pages the whole queue in and stops paging it; `browse.ready_without_index`: nothing is
        paged in). Any other queue, or one whose index exists already, is browsed by
        `browse_many`.
        """
        if self._index is not None or self._paging.spill is None or not self.pageable:
            return self.browse_many(after, limit, now_ms)
        return browse.ready_without_index(self._contents, after, limit, now_ms)

    def browse(self, after: SeqId | None, now_ms: int) -> Delivery | None:
        """The next waiting message with a seq greater than `after`, without removing it.

        Browsing follows seq (publish) order, skips expired, unacked and scheduled messages,
        and changes no state: non-destructive consumers and read-only readers keep `after`
        as their cursor.
        """
        out = self.browse_many(after, 1, now_ms)
        return out[0] if out else None

    def browse_many(self, after: SeqId | None, limit: int, now_ms: int) -> list[Delivery]:
        """Up to `limit` waiting messages with seqs greater than `after`, in seq order.

        Exactly what `limit` calls of `browse` give when each starts after the previous
        answer's seq (stopping at the first None), in one bisect and one pass over the index.
        """
        out: list[Delivery] = []
        if limit <= 0:
            return out
        index = self._browse_index()
        start = browse.start_after(index, after)
        peek = self._contents.store.peek
        return browse.deliveries(index, start, limit, now_ms, out, peek, self.name)

    # --- scheduled messages (admin; scheduler.py) ---------------------------------------------

    def list_scheduled(self) -> list[ScheduledMessage]:
        """Scheduled messages by due time (Artemis `listScheduledMessages`)."""
        return self._scheduler.listing()

    def purge_scheduled(self) -> int:
        """Drop every scheduled message; returns how many."""
        n = self._scheduler.purge(self._contents.on_remove)
        self.counters.purged += n
        return n

    def deliver_scheduled_now(self, seqs: Iterable[SeqId] | None, now_ms: int) -> int:
        """Release the given scheduled messages (all when None) to the head now, under the
        queue's limit; returns how many were released (accepted or not)."""
        picked = self._scheduler.take(seqs)
        for e in picked:
            self._release(e, now_ms)
        return len(picked)

    # --- storage: what a durable copy needs, and recovery -------------------------------------

    def timing_of(self, msg: Message, now_ms: int) -> tuple[int | None, int | None]:
        """`(expiry_ms, due_ms)` the engine gives `msg` published at `now_ms` (to persist)."""
        headers = msg.headers
        due = schedule_due(headers, now_ms) if headers else None
        if due is not None and due <= now_ms:
            due = None
        return self._expiry.expires_at(msg, now_ms), due

    def restore(
        self,
        seq: SeqId,
        msg: Message,
        *,
        redelivered: bool,
        delivery_count: int,
        expiry_ms: int | None,
        due_ms: int | None,
    ) -> None:
        """Put a recovered message back at the tail (recovery, in ascending seq order).

        No limit is applied (what was stored fitted). A message with `due_ms` goes back to the
        schedule, whatever its due time (`tick` releases overdue ones in batches). Call
        `resume_seqs` afterwards so new publishes take higher seqs.
        """
        e = new_entry(seq, msg, len(msg.body))
        e.redelivered = redelivered
        e.deliveries = delivery_count
        if self._max_priority:
            e.level = min(max(msg.priority, 0), self._max_priority)
        if self._lvq_key is not None and msg.headers:
            e.key = msg.headers.get(self._lvq_key)
        self.counters.added += 1
        if self._index is not None:
            self._index.append(e)
        if due_ms is not None:
            self._scheduler.add(due_ms, e)
            return
        if expiry_ms is not None:
            e.expires_at = expiry_ms
            self._saw_expiry_now()
        self._contents.restore_ready(e)
        self._overflow.track(e)

    def restore_spilled(
        self,
        spill: SpillStore,
        count: int,
        nbytes: int,
        *,
        redelivered: bool,
        delivery_counts: dict[SeqId, int],
        expiring: bool,
        below: SeqId,
    ) -> None:
        """Recovery of a long backlog: the rest of it stays on disk in `spill`.

        Call after `restore` put the head in memory (every seq in `spill` is above every
        restored one, in seq order); the queue then pages it in as it drains, as if it had
        paged it out itself, and uses `spill` for later paging too. Paged-in messages with a
        seq below `below` get `redelivered` (or a delivery count from `delivery_counts`: then
        flagged redelivered). `expiring`: some of them carry an expiry time. Needs `pageable`.
        """
        assert self.pageable, "restore_spilled needs a pageable queue"
        self._paging.restore(
            spill,
            count,
            nbytes,
            redelivered=redelivered,
            delivery_counts=delivery_counts,
            below=below,
        )
        if expiring and not self._saw_expiry:
            self._saw_expiry_now()
        self._apply_bound()

    def resume_seqs(self, next_seq: int) -> None:
        """Issue seqs from `next_seq` on (never lower than what was issued already)."""
        start = max(next_seq, self.last_seq + 1)
        self._seq_counter = itertools.count(start)
        self._next_seq = cast("Callable[[], SeqId]", self._seq_counter.__next__)

    # --- introspection for tests and management (O(n); contents.py) -------------------------

    def ready_seqs(self) -> list[SeqId]:
        """Waiting messages' seqs in delivery order (O(n); tests and management only)."""
        return [e.seq for e in self._contents.ready_entries()]

    def ready_view(self) -> list[Delivery]:
        """Waiting messages in delivery order as `Delivery` values (delivery_count: so far).

        O(n); for tests, management "get messages" previews and debugging.
        """
        body = self._contents.body
        return [
            Delivery(e.seq, body(e), e.redelivered, e.deliveries)
            for e in self._contents.ready_entries()
        ]

    def unacked_seqs(self) -> list[SeqId]:
        """Unacked seqs in delivery order."""
        return list(self._unacked)

    def ready_messages(self) -> list[Message]:
        """Waiting messages in delivery order (paged ones are peeked from the store)."""
        body = self._contents.body
        return [body(e) for e in self._contents.ready_entries()]
