"""The queue engine: one queue's messages, their order, delivery state, limits and counters.

Theory of operation
-------------------
A `Queue` is a pure, synchronous state machine (no clock, no I/O, no asyncio): every call that
depends on time takes `now_ms` (wall-clock epoch milliseconds, supplied by the server). It owns

* **waiting messages** in *lanes*, one per priority level (a single lane without
  `x-max-priority`). A lane serves, in order: its `head` deque (messages put back at the head:
  Artemis ring returns and released scheduled messages), then the smaller sequence number of its
  `returns` heap (RabbitMQ/Qpid requeues, which go back to their original position) and its
  `tail` deque (new messages, ascending seq). Removing a message from the middle (LVQ
  replacement, Qpid ring eviction, purge of scheduled) marks its entry `GONE`; lanes skip gone
  entries lazily and are compacted when gone entries dominate.
* **unacked messages** (`_unacked: dict[SeqId, Entry]`): fetched with `ack_required`.
* **scheduled messages** through its `Scheduler` (`scheduler.py`: a heap by due time beside the
  lanes, Artemis' scheduled-delivery handler): counted, not subject to any limit until
  released at the head.
* **dead letters** waiting for the broker to route them, in its `DeadLetters` outbox
  (`deadletters.py`; `drain_dead_letters`).
* **counters**: `QueueCounters`, updated incrementally so reading them is O(1).

Invariants: every live entry is in exactly one of {a lane (READY), `_unacked` (ACQUIRED), the
schedule (SCHEDULED)}; counters equal the sums over those sets; sequence numbers strictly
increase per queue and a message keeps its seq for life (requeue restores order by seq).

Limits are one `settings.Limit` (what is counted, count and byte bounds, the action) handled in
one `match` in `_enforce`. Adding at the tail or at the head uses the same rule: add first, then
evict from the *delivery head* while over the limit, so a message returning to a full ring is
itself the victim (Artemis `enforceRing`), and requeued messages are the first dropped under
`drop-head` (RabbitMQ `requeue_and_run` + `maybe_drop_head`).

Hot path: a plain queue's publish + fetch + ack is one entry object, one deque append/popleft,
one dict insert/pop and one `Delivery`; everything optional (priorities, schedules, LVQ, the
browse index, the Qpid age order) is behind a single attribute test. `_apply` precomputes what
the fast paths test, once per settings change: `_plain` (no option at all), `_bounded` with its
bounds as plain ints (`_reject_n/_b`, `_evict_n/_b`, `UNBOUNDED` where a bound does not apply:
a ready-counted ring, drop-head or reject limit is the only option), `_lvq_fast` (the LVQ key is
the only option) and `_fetch_fast` (one lane, no TTL, destructive consumers). The first
per-message expiry clears them for good (`_saw_expiry`). The publish fast paths are inlined in
`publish` and build entries slot by slot (no `__init__` frame), outcomes are module globals
(`_ENQUEUED`...: reading an Enum member costs about one small object here); anything unusual
(a spill, a put-back message, a scheduling header, an eviction) leaves for the general code.

What stays in `Queue` and why. The parts with their own state live in their own modules (see
the package docstring); what stays here is what the per-message paths touch: the lanes' deques,
the unacked map, the LVQ map, the browse index list and the fast-path flags and bounds, read
and written inline by `publish`, `fetch` and `ack`, and the removal and eviction steps that
move entries between them. Measured with timeit on the development machine (Python 3.11): an
attribute read costs about 20 ns, one more attribute hop about 4 ns and a method call about
30 ns more, against about 1.7 us for a plain publish + fetch + ack (`benchmarks/engine_bench.py`):
a delegated call at each of the three steps would cost about 5%. So the collaborators are
called only off the fast paths (a spill, a due schedule, a browse, a limit that acts), and the
values the fast paths test are copied into `Queue` attributes when they change (`_head_n/_b`
from the paged tail, the `FastBounds` thresholds), or read through a counter that is 0 unless
the collaborator has work (`counters.paged` before the paged tail).

Paging (bounded in-memory head). With a `SpillStore` (given by the broker when a data directory
exists), a queue keeps at most `head_count` messages / `head_bytes` body bytes ready in memory
(`set_memory_bound`, tightened by the broker under memory pressure); its `PagedTail`
(`paging.py`, which states the invariants) holds the rest, a suffix of the queue in seq order.
Fetch pages a batch back in (read-ahead of half the bound) when memory falls to a quarter of
the bound, so consumers see queue order through publish, requeue, page out and page in.
Spilled messages are counted in `paged`/`paged_bytes` (hence in `message_count` and limits) but
cost no memory per message: only a count. Spilling applies to single-lane queues without LVQ,
non-destructive browsing, ring or flow-to-disk limits (those keep envelopes in memory;
flow-to-disk pages bodies one by one through `BodyStore`). Without a spill store, or while the
queue is short, nothing extra runs per message beyond one bound comparison; the publish fast
paths test `counters.paged` before asking the paged tail, so a queue that is not paging reads
no more attributes than when the paged tail lived in `Queue`.

This module must not import server/, storage/ or asyncio. Bodies that leave memory go through
the `BodyStore` port (`MemoryBodyStore` by default; the storage layer provides a real one) or,
for the spilled tail, the `SpillStore` port (`MemorySpillStore` here; storage has a disk one).

Public API (used by the broker layer)
-------------------------------------
* `Queue(name, settings, *, body_store=None, spill=None)`
* paging: `set_spill(store)`, `set_body_store(store)`, `set_memory_bound(count, nbytes)`,
  `memory_bound`, `page_out()`, `spilled`, `close()`
* `publish(msg, now_ms) -> PublishOutcome` (ENQUEUED, SCHEDULED, REJECTED: nack the publisher,
  DROPPED: accepted then discarded by policy, ack the publisher as RabbitMQ does)
* `fetch(now_ms, ack_required=True) -> Delivery | None`
* `ack(seqs)`, `requeue(seqs, now_ms, *, count_failure=True)`, `reject(seqs, now_ms)`,
  `purge() -> int`
* `tick(now_ms)`, `next_deadline_ms() -> int | None`, `drop_expired(now_ms) -> int`
* `drain_dead_letters() -> list[DeadLetter]`
* `update_settings(settings, now_ms)`
* `browse(after, now_ms) -> Delivery | None`, `browse_many(after, limit, now_ms)`,
  `head_seq() -> SeqId | None` (lowest ready or unacked seq; builds no browse index)
* `list_scheduled()`, `purge_scheduled() -> int`, `deliver_scheduled_now(seqs, now_ms) -> int`
* storage: `on_remove` (callback for engine-internal removals), `timing_of(msg, now_ms)`,
  `restore(seq, msg, ...)` and `resume_seqs(next_seq)` (recovery)
* `counters` (`QueueCounters`), `stats() -> dict`, `ready_count`, `unacked_count`,
  `message_count`, `over_limit`, `non_destructive`, `last_seq`
* introspection (O(n), management and tests): `ready_view()`, `ready_seqs()`,
  `ready_messages()`, `unacked_seqs()`
"""

from __future__ import annotations

import heapq
import itertools
import logging
from collections import deque
from collections.abc import Callable, Iterable, Sequence
from dataclasses import replace
from typing import Any, Final, cast

from ringmq.core.message import Message, SeqId
from ringmq.core.queue import browse
from ringmq.core.queue.deadletters import DeadLetters
from ringmq.core.queue.lanes import (
    ACQUIRED,
    COMPACT_MIN,
    GONE,
    READY,
    Entry,
    Lane,
    new_entry,
)
from ringmq.core.queue.limits import (
    FAST_ACTIONS,
    PAGEABLE_ACTIONS,
    QPID_ACTIONS,
    FastBounds,
    QpidOrder,
    describe,
    over,
    over_bytes,
    refusal,
)
from ringmq.core.queue.paging import PagedTail
from ringmq.core.queue.ports import BodyStore, MemoryBodyStore, SpillStore
from ringmq.core.queue.records import (
    SCHEDULED_RELEASE_BATCH,
    UNBOUNDED,
    DeadLetter,
    DeadLetterReason,
    Delivery,
    PublishOutcome,
    QueueCounters,
    ScheduledMessage,
)
from ringmq.core.queue.scheduler import Scheduler, schedule_due
from ringmq.core.settings import Counted, Limit, LimitAction, QueueSettings

__all__ = ["Queue"]

log = logging.getLogger(__name__)


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
        self.counters = QueueCounters()
        self._store: BodyStore = body_store if body_store is not None else MemoryBodyStore()
        # Paged tail (see "Paging" in the module docstring and paging.py).
        self._paging = PagedTail(name, spill, self.counters)
        # The hot paths' copy of the paged tail's effective bounds (`_apply_bound` keeps it).
        self._head_n = self._head_b = UNBOUNDED
        # itertools.count: a C-level counter (the hot path avoids a Python-level increment).
        self._seq_counter = itertools.count(1)
        self._next_seq = cast("Callable[[], SeqId]", self._seq_counter.__next__)
        self._max_priority = settings.max_priority or 0
        self._lanes: list[Lane] = [Lane() for _ in range(self._max_priority + 1)]
        self._lane = self._lanes[0]
        self._unacked: dict[SeqId, Entry] = self.counters.unacked_map
        self._scheduler = Scheduler(self.counters)
        self._lvq_key = settings.lvq_key
        self._lvq: dict[Any, Entry] = {}
        self._lvq_acks = self._lvq if self._lvq_key is not None else None  # for `ack`
        self._lvq_header: str = self._lvq_key or ""  # the key, typed for the fast path
        self._non_destructive = settings.non_destructive
        self._index: list[Entry] | None = None  # browse index, built on first browse
        self._order: QpidOrder | None = None  # Qpid legacy ring only
        self._gone = 0  # gone entries still sitting in lanes
        self._saw_expiry = False
        self._dead = DeadLetters(name, self.counters)
        self.on_remove: Callable[[SeqId], None] | None = None
        """Storage hook: called with the seq of every message the engine removes by itself
        (eviction, drop, LVQ replacement, expiry, purge, dead-lettering, no-ack fetch). `ack`
        does not call it: the caller of `ack` knows the seqs. None (the default) costs nothing."""
        self._apply(settings)

    # --- configuration -------------------------------------------------------------------

    def _apply(self, settings: QueueSettings) -> None:
        self.settings = settings
        limit = settings.limit
        self._limit: Limit | None = limit
        self._ttl = settings.message_ttl_ms
        self._dlx = settings.dead_letter_exchange
        self._dead.target(self._dlx, settings.dead_letter_routing_key)
        self._delivery_limit = settings.delivery_limit
        # Fast-path flags: nothing optional configured, or only a simple ready-counted limit.
        simple = (
            self._ttl is None
            and not self._saw_expiry
            and self._lvq_key is None
            and not self._max_priority
            and not self._non_destructive
        )
        self._plain = simple and limit is None
        self._bounded: Limit | None = (
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
        # Fetch fast path: one lane, no expiry to check, destructive consumers.
        self._fetch_fast = (
            self._ttl is None
            and not self._saw_expiry
            and not self._max_priority
            and not self._non_destructive
        )
        # LVQ fast path: the key is the only feature (no limit, TTL, priority or browsing).
        self._lvq_fast = (
            self._lvq_key is not None
            and limit is None
            and self._ttl is None
            and not self._saw_expiry
            and not self._max_priority
            and not self._non_destructive
        )
        if limit is None or limit.action not in QPID_ACTIONS:
            self._order = None
        elif self._order is None:
            live = [e for lane in self._lanes for e in lane.entries()]
            live.extend(self._unacked.values())
            self._order = QpidOrder(len(self._lanes), live)
        self._apply_bound()

    def _saw_expiry_now(self) -> None:
        # A per-message expiry seen: leave the fast paths for good.
        self._saw_expiry = True
        self._plain = False
        self._bounded = None
        self._lvq_fast = self._fetch_fast = False

    # --- paging --------------------------------------------------------------------------

    def _spillable(self) -> bool:
        return self._paging.spill is not None and self.pageable

    @property
    def pageable(self) -> bool:
        """Whether this queue can page its tail (given a spill store): single lane, no LVQ,
        no browse index, and no limit that needs envelopes in memory."""
        limit = self._limit
        return (
            not self._max_priority
            and self._lvq_key is None
            and not self._non_destructive
            and self._index is None
            and (limit is None or limit.action in PAGEABLE_ACTIONS)
        )

    def _apply_bound(self) -> None:
        paging = self._paging
        paging.set_active(self._spillable(), self._lane.tail)
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
        n, gone = self._paging.page_out(self._lane.tail)
        if gone:
            self._gone = max(0, self._gone - gone)
        return n

    def set_body_store(self, store: BodyStore) -> bool:
        """Use `store` for bodies paged one by one (flow-to-disk limits). Refused (False)
        while bodies are paged in the current store."""
        if self.counters.paged != self._paging.spilled:
            return False
        self._store = store
        return True

    def close(self) -> None:
        """The queue is deleted: release its paged data (spilled tail and paged bodies)."""
        self._paging.close()
        close = getattr(self._store, "close", None)
        if callable(close):
            close()

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
        limit = self._limit
        if limit is not None and limit.action is LimitAction.DROP_HEAD:
            while over(limit, self.counters, 0, 0) and self._evict_head(now_ms, ring=False):
                pass

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

    def would_refuse(self, n: int, nbytes: int) -> str | None:
        """Why a reject-publish limit would refuse `n` more messages of `nbytes` bytes in all.

        None when they fit, or when the queue has no reject-type limit. Transactions ask this
        for a whole commit before applying any of it; the counted set is the one `publish`
        checks (ready + paged, plus acquired when the limit counts them).
        """
        return refusal(self.settings.limit, self.counters, n, nbytes)

    @property
    def message_count(self) -> int:
        """ready + delivering + scheduled + paged (Artemis `messageCount`)."""
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
        limit = self._limit
        return limit is not None and over(limit, self.counters, 1, 0)

    def __len__(self) -> int:
        return self.counters.message_count

    def stats(self) -> dict[str, Any]:
        """A snapshot of every counter plus the limit (snake_case, for management)."""
        out = self.counters.snapshot()
        out["limit"] = describe(self._limit)
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
                    # ready-counted ring, drop-head or reject limit (the rules of _admit +
                    # _enforce without the options), bounds precomputed as ints by `_apply`
                    # (UNBOUNDED where they do not apply). Inlined: it runs per publish.
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
                            # `_evict_head` inlined for the common case: every waiting
                            # message is in memory in the lane's tail (nothing requeued or
                            # paged) and a victim goes nowhere (a ring replaces; drop-head
                            # without a DLX drops), so evicting is pop, count and forget.
                            return self._evict_tail(c, lane.tail)
                        if self._evict_ring:
                            # Artemis enforceRing: one eviction per add; the new message
                            # is the victim only when alone (single lane, it is the newest).
                            self._evict_head(now_ms, ring=True)
                        else:  # drop-head
                            while (
                                c.ready + c.paged > self._evict_n
                                or c.ready_bytes + c.paged_bytes > self._evict_b
                            ) and self._evict_head(now_ms, ring=False):
                                pass
                        # single lane: the new message is the last, so it went only if all went
                        return _ENQUEUED if c.ready + c.paged else _DROPPED
                    return _ENQUEUED
            elif (
                self._lvq_fast and "x-delay" not in headers and "_AMQ_SCHED_DELIVERY" not in headers
            ):
                # LVQ fast path: the key is the queue's only feature (`_lvq_fast`): `_admit`
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

    def _expiry(self, msg: Message, now_ms: int) -> int | None:
        ttl = self._ttl
        own = msg.expiration_ms
        if own is not None:
            ttl = own if ttl is None else min(ttl, own)
        return None if ttl is None else now_ms + ttl

    def _admit(self, e: Entry, now_ms: int, *, head: bool) -> PublishOutcome:
        # Place a new (or released scheduled) entry, applying LVQ replacement and the limit.
        msg = e.msg
        assert msg is not None
        e.state = GONE  # until enqueued below
        expires_at = e.expires_at = self._expiry(msg, now_ms)
        if expires_at is not None and not self._saw_expiry:
            self._saw_expiry_now()
        limit = self._limit
        replaced: Entry | None = None
        key = e.key
        if key is not None:
            old = self._lvq.get(key)
            if old is not None and old.state == READY:
                replaced = old
        if limit is not None:
            action = limit.action
            refused = False
            if action is LimitAction.REJECT_PUBLISH or action is LimitAction.REJECT_PUBLISH_DLX:
                free_n, free_b = (1, replaced.size) if replaced is not None else (0, 0)
                refused = over(limit, self.counters, 1 - free_n, e.size - free_b)
            elif action is LimitAction.DROP_NEW:
                free_n, free_b = (1, replaced.size) if replaced is not None else (0, 0)
                if over(limit, self.counters, 1 - free_n, e.size - free_b):
                    self.counters.overflow_dropped += 1
                    return PublishOutcome.DROPPED
            elif action is LimitAction.QPID_RING or action is LimitAction.QPID_RING_STRICT:
                # A message bigger than max_size can never fit: refused, nothing evicted.
                refused = limit.max_bytes is not None and e.size > limit.max_bytes
            if refused:
                self.counters.overflow_rejected += 1
                if action is LimitAction.REJECT_PUBLISH_DLX:
                    self._dead.add(msg, DeadLetterReason.MAXLEN, now_ms, e.deliveries)
                return PublishOutcome.REJECTED
        if replaced is not None:
            self._remove_ready(replaced)
            self.counters.lvq_replaced += 1
        if key is not None:
            self._lvq[key] = e
        if (
            self._order is not None
            and limit is not None
            and not self._qpid_make_room(limit, e, now_ms)
        ):
            if key is not None and self._lvq.get(key) is e:
                del self._lvq[key]
            self.counters.overflow_rejected += 1
            return PublishOutcome.REJECTED
        # Enqueue.
        e.state = READY
        if not head and self._paging.spilled:
            self._paging.push(e.seq, msg, e.size, e.expires_at)
            if limit is not None and limit.action is LimitAction.DROP_HEAD:
                while over(limit, self.counters, 0, 0) and self._evict_head(now_ms, ring=False):
                    pass
                # single lane: the new message is the last one, so it went only if all went
                c = self.counters
                return PublishOutcome.ENQUEUED if c.ready + c.paged else PublishOutcome.DROPPED
            return PublishOutcome.ENQUEUED
        lane = self._lanes[e.level]
        if head:
            lane.head.appendleft(e)
        else:
            lane.tail.append(e)
        if self._order is not None:
            self._order.insert(e)
        c = self.counters
        c.ready += 1
        c.ready_bytes += e.size
        if not head:
            c.added += 1
        if self._index is not None and not head:
            self._index.append(e)
        if c.ready > self._head_n or c.ready_bytes > self._head_b:
            self.page_out()
        if limit is not None:
            out = self._enforce(limit, e, now_ms)
            if not head and self._head_n != UNBOUNDED and limit.action is LimitAction.DROP_HEAD:
                # paged queues have one lane and `e` is the newest: it went only if all went
                return PublishOutcome.ENQUEUED if c.ready + c.paged else PublishOutcome.DROPPED
            return out
        return PublishOutcome.ENQUEUED

    def _enforce(self, limit: Limit, e: Entry, now_ms: int) -> PublishOutcome:
        # After adding `e` (at the tail or the head): the one place overflow actions live.
        match limit.action:
            case LimitAction.RING:
                # Artemis enforceRing: one eviction per add, so a lowered size purges nothing.
                if over(limit, self.counters, 0, 0):
                    self._evict_head(now_ms, ring=True)
            case LimitAction.DROP_HEAD:
                while over(limit, self.counters, 0, 0) and self._evict_head(now_ms, ring=False):
                    pass
            case LimitAction.FLOW_TO_DISK:
                if over(limit, self.counters, 0, 0) and e.state == READY and not e.paged:
                    self._page_out(e)
            case (
                LimitAction.REJECT_PUBLISH
                | LimitAction.REJECT_PUBLISH_DLX
                | LimitAction.QPID_RING
                | LimitAction.QPID_RING_STRICT
                | LimitAction.DROP_NEW
                | LimitAction.BLOCK
            ):
                pass  # decided before enqueueing (or, for BLOCK, by the broker)
        return PublishOutcome.ENQUEUED if e.state == READY else PublishOutcome.DROPPED

    def _evict_tail(self, c: QueueCounters, tail: deque[Entry]) -> PublishOutcome:
        # The bounded fast path's eviction when the lane is only its in-memory tail: a ring
        # evicts one message per add (Artemis enforceRing), drop-head until within bounds;
        # the new message, the last of the tail, is the victim only when it is alone.
        on_remove = self.on_remove
        ring = self._evict_ring
        while tail:
            e = tail[0]
            if e.state != READY:  # left behind lazily (as `Lane.peek` skips them)
                tail.popleft()
                continue
            if not ring and c.ready <= self._evict_n and c.ready_bytes <= self._evict_b:
                break
            tail.popleft()
            c.ready -= 1
            c.ready_bytes -= e.size
            e.state = GONE
            if on_remove is not None:
                on_remove(e.seq)
            if ring:
                c.ring_evicted += 1
                break
            c.maxlen_dropped += 1
        return _ENQUEUED if c.ready else _DROPPED

    def _evict_head(self, now_ms: int, *, ring: bool) -> bool:
        # Remove the next message to be delivered: Artemis REPLACED (not dead-lettered) or
        # RabbitMQ drop-head (dead-lettered `maxlen` when a DLX is set).
        e = self._pop_ready()
        if e is None:
            return False
        msg = self._take_body(e)
        self._forget(e)
        if ring:
            self.counters.ring_evicted += 1
        else:
            self.counters.maxlen_dropped += 1
            self._dead.add(msg, DeadLetterReason.MAXLEN, now_ms, e.deliveries)
        return True

    # --- Qpid legacy ring ----------------------------------------------------------------

    def _qpid_make_room(self, limit: Limit, e: Entry, now_ms: int) -> bool:
        # Legacy RingQueuePolicy::checkLimit: if count+1 or bytes+size is over, evict the
        # oldest; keep evicting only while the bytes still do not fit (one eviction is enough
        # for the count bound). Strict mode refuses when the oldest is acquired.
        if not over(limit, self.counters, 1, e.size):
            return True
        strict = limit.action is LimitAction.QPID_RING_STRICT
        c = self.counters
        order = self._order
        assert order is not None
        while True:
            oldest = order.oldest()
            if oldest is None:
                return True
            if oldest.state == ACQUIRED:
                if strict:
                    log.debug(
                        "queue %s: oldest message is acquired; ring_strict refuses", self.name
                    )
                    return False
                # Non-strict: evicted under its consumer, whose later ack is a no-op.
                del self._unacked[oldest.seq]
                c.unacked_bytes -= oldest.size
                msg = oldest.msg
                assert msg is not None
                self._forget(oldest)
            else:
                if oldest.msg is None:  # paged: fetch the body back for the dead letter
                    oldest.msg = self._store.page_in(self.name, oldest.seq)
                msg = oldest.msg
                self._remove_ready(oldest)
            c.ring_evicted += 1
            # Qpid reroutes ring-evicted messages to the queue's alternate exchange.
            self._dead.add(msg, DeadLetterReason.MAXLEN, now_ms, oldest.deliveries)
            if limit.max_bytes is None or not over_bytes(limit, self.counters, e.size):
                return True

    # --- removal helpers -----------------------------------------------------------------

    def _remove_ready(self, e: Entry) -> None:
        # Remove a waiting entry from the middle of its lane (lazily).
        c = self.counters
        if e.paged:
            c.paged -= 1
            c.paged_bytes -= e.size
            if e.msg is None:
                self._store.discard(self.name, e.seq)
        else:
            c.ready -= 1
            c.ready_bytes -= e.size
        self._forget(e)
        self._gone += 1
        if self._gone > COMPACT_MIN and self._gone > c.ready + c.paged:
            for lane in self._lanes:
                lane.compact()
            self._gone = 0

    def _forget(self, e: Entry) -> None:
        # The entry leaves the queue for good.
        e.state = GONE
        if self.on_remove is not None:
            self.on_remove(e.seq)
        key = e.key
        if key is not None and self._lvq.get(key) is e:
            del self._lvq[key]

    def _pop_ready(self) -> Entry | None:
        # Pop the next waiting entry in delivery order and update the ready counters.
        if self._max_priority:
            for lane in reversed(self._lanes):
                e = lane.pop()
                if e is not None:
                    break
            else:
                return None
        else:
            e = self._lane.pop()
            if e is None:
                if not self._paging.spilled:
                    return None
                self._paging.refill_batch(self._lane.tail)
                e = self._lane.pop()
                if e is None:
                    return None
        c = self.counters
        if e.paged:
            c.paged -= 1
            c.paged_bytes -= e.size
        else:
            c.ready -= 1
            c.ready_bytes -= e.size
        return e

    def _take_body(self, e: Entry) -> Message:
        if e.msg is None:
            e.msg = self._store.page_in(self.name, e.seq)
        e.paged = False
        return e.msg

    def _page_out(self, e: Entry) -> None:
        msg = e.msg
        assert msg is not None
        self._store.page_out(self.name, e.seq, msg)
        e.msg = None
        e.paged = True
        c = self.counters
        c.ready -= 1
        c.ready_bytes -= e.size
        c.paged += 1
        c.paged_bytes += e.size

    def _expire(self, e: Entry, now_ms: int) -> None:
        # `e` was already popped from its lane (ready counters updated).
        msg = self._take_body(e)
        self._forget(e)
        self.counters.expired += 1
        self._dead.add(msg, DeadLetterReason.EXPIRED, now_ms, e.deliveries)

    # --- consume -------------------------------------------------------------------------

    def _fetch_next(self, now_ms: int) -> Entry | None:
        # The general case of `fetch`: the next ready entry in delivery order, paging the
        # spill in and expiring (dead-lettering) expired heads on the way; counters moved.
        c = self.counters
        while True:
            if self._max_priority:
                e = self._pop_ready()
                if e is None:
                    return None
            else:
                # Single lane, inlined: usually a popleft from the tail.
                paging = self._paging
                if paging.spilled and c.ready <= paging.low_n and c.ready_bytes <= paging.low_b:
                    paging.refill_batch(self._lane.tail)  # read ahead: page the next batch in
                lane = self._lane
                if lane.head or lane.returns:
                    e = lane.pop()
                else:
                    tail = lane.tail
                    e = None
                    while tail:
                        x = tail.popleft()
                        if x.state == READY:
                            e = x
                            break
                if e is None:
                    return None
                if e.paged:
                    c.paged -= 1
                    c.paged_bytes -= e.size
                else:
                    c.ready -= 1
                    c.ready_bytes -= e.size
            expires_at = e.expires_at
            if expires_at is not None and now_ms > expires_at:
                self._expire(e, now_ms)
                continue
            return e

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
            next_e = self._fetch_next(now_ms)
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
            self._forget(e)
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

    def _take_unacked(self, seqs: Iterable[SeqId]) -> list[Entry]:
        out: list[Entry] = []
        c = self.counters
        unacked = self._unacked
        for seq in seqs:
            e = unacked.pop(seq, None)
            if e is None:
                continue
            c.unacked_bytes -= e.size
            out.append(e)
        return out

    def requeue(self, seqs: Sequence[SeqId], now_ms: int, *, count_failure: bool = True) -> None:
        """Put unacked messages back (nack/reject requeue, recover, cancel, close, rollback).

        `seqs` are in consumption order. Each returning message is marked redelivered and, if
        `count_failure`, counts one failed delivery: past `delivery_limit` it is dead-lettered
        (`delivery_limit`) instead. LVQ: a message whose key got a newer value while it was out
        is dropped ("combined"); one that returns stays and is no longer replaced by later
        values. Placement:

        * ring queues (Artemis): back to the head in reverse consumption order; a message
          returning to a full ring is itself deleted;
        * all others: back to the original position by seq (RabbitMQ, Qpid); then a drop-head
          limit drops from the head, i.e. the returned messages first.
        """
        entries = self._take_unacked(seqs)
        if not entries:
            return
        limit = self._limit
        ring = limit is not None and limit.action is LimitAction.RING
        c = self.counters
        dl = self._delivery_limit
        for e in reversed(entries) if ring else entries:
            msg = e.msg
            assert msg is not None
            if count_failure:
                e.failures += 1
                if dl is not None and e.failures > dl:
                    self._forget(e)
                    self._dead.add(msg, DeadLetterReason.DELIVERY_LIMIT, now_ms, e.deliveries)
                    continue
            key = e.key
            if key is not None:
                current = self._lvq.get(key)
                if current is not None and current is not e:
                    e.state = GONE  # combined with the newer value
                    if self.on_remove is not None:
                        self.on_remove(e.seq)
                    c.lvq_replaced += 1
                    continue
                if current is e:
                    del self._lvq[key]  # the requeued copy is not replaced by later values
            e.state = READY
            e.redelivered = True
            c.requeued += 1
            c.ready += 1
            c.ready_bytes += e.size
            lane = self._lanes[e.level]
            if ring:
                lane.head.appendleft(e)
                assert limit is not None
                if over(limit, self.counters, 0, 0):
                    self._evict_head(now_ms, ring=True)
            else:
                heapq.heappush(lane.returns, e)
        if limit is not None and limit.action is LimitAction.DROP_HEAD:
            while over(limit, self.counters, 0, 0) and self._evict_head(now_ms, ring=False):
                pass
        if c.ready > self._head_n or c.ready_bytes > self._head_b:
            self.page_out()  # returned messages stay; the tail's rear makes room

    def reject(self, seqs: Iterable[SeqId], now_ms: int) -> None:
        """nack/reject with requeue=false: dead-letter (`rejected`) when a DLX is set, else drop."""
        c = self.counters
        for e in self._take_unacked(seqs):
            msg = e.msg
            assert msg is not None
            self._forget(e)
            c.rejected += 1
            self._dead.add(msg, DeadLetterReason.REJECTED, now_ms, e.deliveries)

    def purge(self) -> int:
        """Remove every waiting message (not unacked, not scheduled); returns how many."""
        if self.on_remove is not None:
            self._paging.unspill(self._lane.tail)  # storage must hear every removed seq
        n = 0
        for lane in self._lanes:
            for e in lane.entries():
                if e.paged and e.msg is None:
                    self._store.discard(self.name, e.seq)
                self._forget(e)
                n += 1
            lane.head.clear()
            lane.returns.clear()
            lane.tail.clear()
        n += self._paging.clear()
        c = self.counters
        c.ready = c.ready_bytes = c.paged = c.paged_bytes = 0
        c.purged += n
        self._gone = 0
        return n

    # --- time ----------------------------------------------------------------------------

    def tick(self, now_ms: int) -> None:
        """Release due scheduled messages (at most `SCHEDULED_RELEASE_BATCH`) to the head and
        expire the messages at the head of the queue whose time has passed.

        Only the head of the whole queue expires (the next delivery: with priorities, the head
        of the highest non-empty level), as in RabbitMQ: a message behind it keeps its place,
        and counts toward limits, until it is the head, even past its expiry time.
        """
        pop_due = self._scheduler.pop_due
        for _ in range(SCHEDULED_RELEASE_BATCH):
            e = pop_due(now_ms)
            if e is None:
                break
            self._release(e, now_ms)
        if not self._plain:
            self._expire_heads(now_ms, now_ms)

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
        return self._expire_heads(now_ms + 1, now_ms)

    def _peek_head(self) -> Entry | None:
        # The next delivery, left in place: the head of the highest non-empty level, paging
        # the spill in when the (single) lane ran dry.
        for lane in reversed(self._lanes):
            e = lane.peek()
            if e is not None:
                return e
        if self._paging.spilled:
            self._paging.refill_batch(self._lane.tail)
            return self._lane.peek()
        return None

    def _expire_heads(self, before: int, now_ms: int) -> int:
        # Expire head entries whose expiry time is below `before` (`tick` passes `now_ms`: the
        # strict "after its time" of `fetch`; `drop_expired` passes `now_ms + 1`).
        n = 0
        while True:
            e = self._peek_head()
            if e is None or e.expires_at is None or e.expires_at >= before:
                return n
            self._pop_ready()  # the same entry: moves the ready (or paged) counters
            self._expire(e, now_ms)
            n += 1

    def _release(self, e: Entry, now_ms: int) -> PublishOutcome:
        # `e` left the schedule (uncounted there): admit it at the head.
        outcome = self._admit(e, now_ms, head=True)
        if outcome is not PublishOutcome.ENQUEUED and self.on_remove is not None:
            self.on_remove(e.seq)  # refused or dropped (some paths skip `_forget`)
        return outcome

    def next_deadline_ms(self) -> int | None:
        """Earliest time at which `tick` has work: a scheduled message due, or a head message
        expiring (a message expires strictly after `publish time + ttl`)."""
        best = self._scheduler.next_due_ms()
        if self._plain:
            return best
        e = self._peek_head()  # only the head of the whole queue expires (see `tick`)
        if e is not None and e.expires_at is not None:
            t = e.expires_at + 1
            if best is None or t < best:
                best = t
        return best

    # --- dead letters ----------------------------------------------------------------------

    def drain_dead_letters(self) -> list[DeadLetter]:
        """Dead letters produced since the last call, in order; the broker routes them."""
        return self._dead.drain()

    # --- browse (non-destructive reads) ------------------------------------------------------

    # The browse index (`self._index`, see browse.py) stays a Queue attribute: the publish
    # fast paths append to it inline, one `is not None` test per publish when it does not exist.

    def _browse_index(self) -> list[Entry]:
        # Built on first use, kept up to date by publish, compacted once gone entries dominate.
        index = self._index
        if index is None:
            self._paging.unspill(self._lane.tail)  # paging stops while the index exists
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
        would page the whole queue in and stop paging it): spilled messages follow every
        message in memory, so the spill matters only when memory holds none, and then one
        read-ahead batch is paged in, as a fetch would.
        """
        best = browse.lowest_in_memory(self._lanes, self._unacked)
        if best is None and self._paging.spilled and self._paging.refill_batch(self._lane.tail):
            best = browse.lowest_in_memory(self._lanes, self._unacked)
        return best

    def browse_ready(self, after: SeqId | None, limit: int, now_ms: int) -> list[Delivery]:
        """`browse_many` for readers that must not stop a queue's paging (the streams API).

        A pageable queue with a spill store is browsed without the browse index (building it
        pages the whole queue in and stops paging it): the ready messages in memory, sorted
        per call (at most the in-memory head), then the spilled tail, which follows every seq
        in memory, read in place through `SpillStore.peek_after`; nothing is paged in. Any
        other queue, or one whose index exists already, is browsed by `browse_many`.
        """
        if self._index is not None or not self._spillable():
            return self.browse_many(after, limit, now_ms)
        out: list[Delivery] = []
        if limit <= 0:
            return out
        live = browse.ready_in_memory(self._lane, after)
        browse.deliveries(live, 0, limit, now_ms, out, self._store.peek, self.name)
        if len(out) < limit and self._paging.spilled:
            self._paging.browse(after, limit, now_ms, out)
        return out

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
        return browse.deliveries(index, start, limit, now_ms, out, self._store.peek, self.name)

    # --- scheduled messages (admin) ----------------------------------------------------------

    def list_scheduled(self) -> list[ScheduledMessage]:
        """Scheduled messages by due time (Artemis `listScheduledMessages`)."""
        return self._scheduler.listing()

    def purge_scheduled(self) -> int:
        """Drop every scheduled message; returns how many."""
        n = self._scheduler.purge(self.on_remove)
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
        return self._expiry(msg, now_ms), due

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
        c = self.counters
        c.added += 1
        if self._index is not None:
            self._index.append(e)
        if due_ms is not None:
            self._scheduler.add(due_ms, e)
            return
        if expiry_ms is not None:
            e.expires_at = expiry_ms
            self._saw_expiry_now()
        if e.key is not None:
            old = self._lvq.get(e.key)
            if old is not None and old.state == READY:
                self._remove_ready(old)  # an older value that survived: the newer one wins
            self._lvq[e.key] = e
        self._lanes[e.level].tail.append(e)
        if self._order is not None:
            self._order.insert(e)
        c.ready += 1
        c.ready_bytes += e.size

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

    # --- introspection for tests and management ----------------------------------------------

    def _ready_entries(self) -> list[Entry]:
        # Waiting entries in delivery order, the whole queue in memory (O(n) anyway; the next
        # publish pages the excess out again).
        self._paging.unspill(self._lane.tail)
        return [e for lane in reversed(self._lanes) for e in lane.entries()]

    def _body(self, e: Entry) -> Message:
        return e.msg if e.msg is not None else self._store.peek(self.name, e.seq)

    def ready_seqs(self) -> list[SeqId]:
        """Waiting messages' seqs in delivery order (O(n); tests and management only)."""
        return [e.seq for e in self._ready_entries()]

    def ready_view(self) -> list[Delivery]:
        """Waiting messages in delivery order as `Delivery` values (delivery_count: so far).

        O(n); for tests, management "get messages" previews and debugging.
        """
        return [
            Delivery(e.seq, self._body(e), e.redelivered, e.deliveries)
            for e in self._ready_entries()
        ]

    def unacked_seqs(self) -> list[SeqId]:
        """Unacked seqs in delivery order."""
        return list(self._unacked)

    def ready_messages(self) -> list[Message]:
        """Waiting messages in delivery order (paged ones are peeked from the store)."""
        return [self._body(e) for e in self._ready_entries()]
