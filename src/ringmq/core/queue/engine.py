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
* `Scheduler` (scheduler.py): scheduled messages by due time (Artemis' scheduled delivery),
  released through `Overflow.release`;
* `DeadLetters` (deadletters.py): the outbox the broker drains (`drain_dead_letters`);
* `QueueCounters` (records.py), updated incrementally so reading them is O(1).

`Queue` subclasses `QueueViews` (views.py), which holds the read-only surface (counts, stats, O(n)
listings) over the counters, `Contents` and `Scheduler` handed to its `__init__`, `QueueBrowsing`
(browsing.py), the non-destructive reads, `QueueMemoryBound` (membound.py), the memory bound and
paging controls, and `QueueDeadlines` (deadlines.py), the timed work (`tick`, `next_deadline_ms`,
scheduled messages); the last two hold no state of their own. `Queue.hold` (hold.py) keeps
persistent messages from every take and browse until the journal's fsync covers them. The
collaborators are given each other explicitly (`Overflow` gets `Contents`, `DeadLetters` and
`Expiry`; `Settlement` gets `Overflow`...) and expose what the others read as public names; none
reads another's (or `Queue`'s) private attributes.

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
what they test, once per settings change (the rules are limits.py's `FastPaths` and
`FastBounds`; `paths` keeps the `FastPaths`): `plain` (no option changes a publish: public,
since the publisher's per-queue step and the bulk ingest read the same property, so that no
path has a rule of its own), `_bounded` with its bounds as plain ints
(`_reject_n/_b`, `_evict_n/_b`, `UNBOUNDED` where a bound does not apply: a ready-counted ring,
drop-head or reject limit is the only option), `_lvq_fast` (the LVQ key is the only option)
and `_fetch_fast` (one lane, no TTL, destructive consumers); the paged tail's effective bounds
are copied to `_head_n/_b` when they change (`_apply_bound`). The plain and bounded publish
paths share one inlined enqueue (the plain path pays one local-variable test for it). The first
message with an expiry time clears the fast paths for good (`Expiry.on_first` calls
`_saw_expiry_now`). Outcomes are module globals (`_ENQUEUED`...: reading an Enum member costs
about one small object here). Anything unusual (a spill, a put-back message, a scheduling
header, an eviction other than the tail's, a TTL) leaves for the owners' general code. The
browse index (`_index`, browse.py) is a `Queue` attribute for the same reason: the publish fast
paths append to it inline. With this shape, `engine_bench.py` alternated with the single-class
engine it replaced shows every scenario level (within the run-to-run noise).

Paging (bounded in-memory head). With a `SpillStore` (given by the broker when a data directory
exists), a `pageable` queue (single lane, no LVQ, no browse index, no limit that needs envelopes in
memory) keeps at most `head_count` messages / `head_bytes` body bytes ready in memory
(`set_memory_bound`, membound.py: tightened by the broker under memory pressure); the `PagedTail`
(paging.py states its theory and invariants) holds the rest, a suffix of the queue in seq order,
counted in `paged`/`paged_bytes`. The publish fast paths test `counters.paged` (0 unless something
is paged) before asking the paged tail.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterable, Sequence
from dataclasses import replace
from typing import Final, cast

from ringmq.core.groups import GROUP_ID_HEADERS, Groups, group_id
from ringmq.core.message import Message, SeqId
from ringmq.core.queue import hold, select, takerun
from ringmq.core.queue.browsing import QueueBrowsing
from ringmq.core.queue.contents import Contents
from ringmq.core.queue.deadletters import DeadLetters
from ringmq.core.queue.deadlines import QueueDeadlines
from ringmq.core.queue.expiry import Expiry
from ringmq.core.queue.hold import NO_HOLD, Hold
from ringmq.core.queue.ingest import QueueIngest
from ringmq.core.queue.lanes import ACQUIRED, GONE, READY, Entry, new_entry
from ringmq.core.queue.limits import FastBounds, FastPaths
from ringmq.core.queue.membound import QueueMemoryBound
from ringmq.core.queue.overflow import Overflow
from ringmq.core.queue.ports import BodyStore, MemoryBodyStore, RawRows, SpillStore
from ringmq.core.queue.records import (
    DeadLetter,
    DeadLetterReason,
    Delivery,
    PublishOutcome,
    QueueCounters,
)
from ringmq.core.queue.recovery import QueueRecovery
from ringmq.core.queue.scheduler import Scheduler, future_due
from ringmq.core.queue.settle import Settlement
from ringmq.core.queue.views import QueueViews
from ringmq.core.settings import LimitAction, QueueSettings

__all__ = ["Queue"]


# Module globals for the hot paths: reading an Enum member through its class costs about as
# much as creating a small object; a global is a cached dict read.
_ENQUEUED: Final = PublishOutcome.ENQUEUED
_SCHEDULED_OUT: Final = PublishOutcome.SCHEDULED
_REJECTED: Final = PublishOutcome.REJECTED
_DROPPED: Final = PublishOutcome.DROPPED

_GROUP_ID, _GROUP_ID_CORE = GROUP_ID_HEADERS  # the LVQ fast path leaves grouped messages

# `new_delivery(Delivery)` then slot stores skips the Python-level __init__ on the hot path.
new_delivery: Final = object.__new__


class Queue(
    QueueMemoryBound, QueueDeadlines, QueueViews, QueueRecovery, QueueIngest, QueueBrowsing
):
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
        c = QueueCounters()
        self._max_priority = settings.max_priority or 0
        store = body_store if body_store is not None else MemoryBodyStore()
        self._contents = contents = Contents(name, c, self._max_priority + 1, store, spill)
        self._scheduler = Scheduler(c)
        super().__init__(settings, c, contents, self._scheduler)
        self._dead = dead = DeadLetters(name, c)
        self._expiry = Expiry(contents, dead, self._saw_expiry_now)
        self._overflow = Overflow(contents, dead, self._expiry)
        self._settle = Settlement(contents, self._overflow, dead, self._scheduler)
        # Hot-path aliases of the owners' containers and steps (see the module docstring).
        self._lanes, self._lane, self._unacked = contents.lanes, contents.lane, contents.unacked
        self._lvq, self._paging, self._raw = contents.lvq, contents.paging, contents.raw
        self._remove_ready, self._take_body = contents.remove_ready, contents.take_body
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
        self.groups: Groups | None = None
        """The owners of this queue's message groups (core/groups.py): None until a message
        with a group id arrives (`_entry`), which turns `plain` off for good."""
        self.hold = Hold()
        """What waits for the journal's fsync (hold.py; kept by core/durability.py)."""
        self.hold_from: int = NO_HOLD
        """`hold.first_checked()`: from this seq on the take paths check the hold."""
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

    @property
    def on_delay(self) -> Callable[[SeqId, int, int], None] | None:
        """Storage hook: called with `(seq, delivery count, due_ms)` when a failed delivery
        holds a message back until `due_ms` (Artemis' `redelivery-delay`), so the wait can be
        journaled and survive a restart. None (the default) costs nothing."""
        return self._settle.on_delay

    @on_delay.setter
    def on_delay(self, hook: Callable[[SeqId, int, int], None] | None) -> None:
        self._settle.on_delay = hook

    # --- configuration -------------------------------------------------------------------

    def _apply(self, settings: QueueSettings) -> None:
        self.settings = settings
        self._expiry.ttl = settings.message_ttl_ms
        self._dlx = settings.dead_letter_exchange
        dla = settings.dead_letter_address
        expiry = settings.expiry_address
        self._dead.target(
            self._dlx,
            settings.dead_letter_routing_key,
            dead_letter_address=(dla, settings.dead_letter_queue) if dla else None,
            expiry_address=(expiry, settings.expiry_queue) if expiry else None,
        )
        self._settle.delivery_limit = settings.delivery_limit
        self._settle.redelivery = settings.redelivery
        if self.groups is not None:
            self.groups.configure(
                settings.group_buckets, settings.group_rebalance, settings.group_first_key
            )
        self._apply_paths()
        fast = FastBounds.of(self._bounded)
        self._reject_n, self._reject_b = fast.reject_n, fast.reject_b
        self._evict_n, self._evict_b = fast.evict_n, fast.evict_b
        self._reject_dlx, self._evict_ring = fast.reject_dlx, fast.evict_ring
        self._overflow.configure(settings.limit, fast)
        self._apply_bound()

    def _apply_paths(self) -> None:
        # What the fast paths test, copied to attributes: `FastPaths.of` (limits.py) is the
        # one rule; `plain` is the property every publish path reads.
        paths = self.paths = FastPaths.of(
            self.settings, self._expiry.seen, grouped=self.groups is not None
        )
        self.plain, self._bounded = paths.plain, paths.bounded
        self._fetch_fast, self._lvq_fast = paths.fetch, paths.lvq

    def _saw_expiry_now(self) -> None:
        # `Expiry.on_first`: a message with an expiry time; leave the fast paths for good.
        self._apply_paths()

    def update_settings(self, settings: QueueSettings, now_ms: int) -> None:
        """Apply new effective settings live (a policy or address-setting changed); the
        priority levels, LVQ key and browsing stay as declared. What a changed limit does at
        once is overflow.py's rule; a changed TTL applies to messages enqueued afterwards."""
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

    @property
    def last_seq(self) -> SeqId:
        """The highest seq issued so far (0 before the first publish; refused publishes take
        a seq too, so seqs have gaps; `counters.added` is not a seq)."""
        # repr is "count(N)" (step 1): read N without copying the C counter.
        return SeqId(int(repr(self._seq_counter)[6:-1]) - 1)

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
                plain = self.plain
                if plain or self._bounded is not None:
                    # Plain and bounded fast paths: no TTL, LVQ, priority, schedule or browsing;
                    # bounded: a ready-counted ring, drop-head or reject limit is the only
                    # option (`Overflow.admit` + `enforce` without the options), its bounds
                    # precomputed as ints by `_apply` (UNBOUNDED where they do not apply).
                    c = self.counters
                    size = len(msg.body)
                    if not plain:  # counted messages and bytes once `msg` is in
                        n = c.ready + c.paged + 1
                        nbytes = c.ready_bytes + c.paged_bytes + size
                        if n > self._reject_n or nbytes > self._reject_b:
                            c.overflow_rejected += 1
                            if self._reject_dlx:
                                self._dead.add(msg, DeadLetterReason.MAXLEN, now_ms, 0)
                            return _REJECTED
                    # `c.paged` first: 0 unless paging, so the common case reads no more
                    # attributes than before the paged tail had its own object.
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
                    if plain or (n <= self._evict_n and nbytes <= self._evict_b):
                        return _ENQUEUED
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
                        # Artemis enforceRing: one eviction per add; the new message is the
                        # victim only when alone (single lane, it is the newest).
                        self._overflow.evict_head(now_ms, ring=True)
                    else:  # drop-head (the bounds above are the limit's)
                        self._overflow.drop_head(now_ms)
                    # single lane: the new message is the last, so it went only if all went
                    return _ENQUEUED if c.ready + c.paged else _DROPPED
            elif (
                self._lvq_fast
                and "x-delay" not in headers
                and "_AMQ_SCHED_DELIVERY" not in headers
                and _GROUP_ID not in headers
                and _GROUP_ID_CORE not in headers
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
        e = self._entry(seq, msg)
        if headers:
            due = future_due(headers, now_ms)
            if due is not None:
                self._scheduler.add(due, e)
                self.counters.added += 1
                if self._index is not None:
                    self._index.append(e)
                return _SCHEDULED_OUT
        return self._overflow.admit(e, now_ms, head=False, index=self._index)

    def _entry(self, seq: SeqId, msg: Message) -> Entry:
        # A new entry for `msg` with its priority level and LVQ key.
        e = new_entry(seq, msg, len(msg.body))
        if self._max_priority:
            e.level = min(max(msg.priority, 0), self._max_priority)
        headers = msg.headers
        if headers:
            if self._lvq_key is not None:
                e.key = headers.get(self._lvq_key)
            if self.groups is None and self.settings.group_buckets and group_id(headers):
                self._saw_group()
        return e

    def _saw_group(self) -> None:
        # The first message with a group id: keep the groups' owners from now on (dispatch
        # asks them, message by message) and leave the plain paths for good.
        st = self.settings
        self.groups = Groups(st.group_buckets, st.group_rebalance, st.group_first_key)
        self._apply_paths()

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
        # Fast path (single lane, no TTL, nothing put back or spilled): the first ready
        # entry of the tail. Gone entries (LVQ replaced, evicted) are skipped lazily. An entry
        # at or past `hold_from` may be held (hold.py): it goes back and the general path,
        # which checks the hold, decides.
        e = None
        if self._fetch_fast and not (lane.head or lane.returns or c.paged):
            tail = lane.tail
            while tail:
                e = tail.popleft()
                if e.state == READY:
                    break
            else:
                return None
            if e.seq >= self.hold_from:
                tail.appendleft(e)
                e = None
            elif e.paged:
                c.paged -= 1
                c.paged_bytes -= e.size
            else:
                c.ready -= 1
                c.ready_bytes -= e.size
        if e is None:
            if self.hold_from != NO_HOLD and self._held(now_ms):
                return None
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

    def _held(self, now_ms: int) -> bool:
        # The general take path's gate while something is held (hold.py `waits`).
        c = self.counters
        held = hold.waits(self.hold, self._contents, self._expiry, c.scheduled, now_ms)
        self.hold_from = self.hold.first_checked()
        return held

    def drop_refused(self, seqs: list[SeqId]) -> None:
        """The journal writes of `seqs` failed: never hand them out (hold.py)."""
        hold.drop_waiting(self.hold, self._contents, seqs)
        self.hold_from = self.hold.first_checked()

    def take_run(
        self,
        max_count: int,
        max_bytes: int | None,
        now_ms: int,
        seqs: list[SeqId],
        messages: list[Message | RawRows],
        redelivered: list[bool],
    ) -> int:
        """What `max_count` chained `fetch(now_ms, ack_required=True)` calls take, in one call
        (takerun.py; page rows taken raw: rawtake.py): appended to `seqs`, `messages` and
        `redelivered`, stopping once `max_bytes` body bytes are taken (the first always is)."""
        return takerun.take_run(
            self._contents,
            self.fetch,
            self._fetch_fast and self.hold_from == NO_HOLD,  # a hold: `fetch` checks each
            max_count,
            max_bytes,
            now_ms,
            seqs,
            messages,
            redelivered,
        )

    def fetch_matching(
        self, match: Callable[[Message], bool], scan: int, now_ms: int, ack_required: bool = True
    ) -> Delivery | None:
        """`fetch` for a selector consumer: take the first ready message `match` accepts among
        the first `scan` in delivery order, leaving the others in place (select.py states the
        cost and what is not scanned). None when none matches, and on a non-destructive queue
        (its consumers browse)."""
        if self._non_destructive:
            return None
        # What `fetch` does before each pop: page the next batch in when memory ran low, or
        # a queue all of whose consumers match (a grouped queue's) would never see its spill.
        self._contents.read_ahead()
        found = select.find(self._contents, match, scan, now_ms)
        if found is None:
            return None
        seq = found[1].seq
        if seq >= self.hold_from and (seq >= self.hold.first_held() or seq in self.hold.refused):
            return None  # held, or refused and left for the head's gate (hold.py)
        return select.take(self._contents, *found, ack_required=ack_required)

    def has_matching(self, match: Callable[[Message], bool], scan: int, now_ms: int) -> bool:
        """Whether `fetch_matching` would find a message now (nothing is taken)."""
        if self._non_destructive:
            return False
        return select.find(self._contents, match, scan, now_ms) is not None

    def ack(self, seqs: Iterable[SeqId]) -> None:
        """Acknowledge unacked messages. Unknown seqs (e.g. evicted by a Qpid ring) are no-ops."""
        seqs = self._raw.ack(seqs) if self._raw.runs else seqs  # raw rows: rawtake.py
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
        """Put unacked messages back (nack/reject requeue, recover, cancel, close, rollback);
        `seqs` in consumption order. `count_failure`: each counts one failed delivery against
        the delivery limit. Placement, LVQ and limit rules: settle.py."""
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
