"""Admission and overflow: placing an entry under the queue's limit, and evicting for it.

Theory of operation
-------------------
`Overflow` owns the queue's current `settings.Limit` (`limit`, with its `FastBounds`), the
Qpid legacy ring's age order (`QpidOrder`, only under a Qpid ring limit) and every step that
acts on the limit:

* `admit` places a new entry (or, `release`, a scheduled one at the head): its expiry time
  (`Expiry.stamp`), LVQ replacement, the refusals decided before enqueueing (reject-publish
  (-dlx), drop-new, Qpid oversize and ring_strict), the enqueue itself (into the paged tail
  when it is not empty), then `enforce`;
* `enforce`, the one `match` over the actions that act after adding. Adding at the tail or at
  the head uses the same rule: add first, then evict from the *delivery head* while over the
  limit, so a message returning to a full ring is itself the victim (Artemis `enforceRing`),
  and requeued messages are the first dropped under `drop-head` (RabbitMQ `requeue_and_run` +
  `maybe_drop_head`);
* `evict_head` (one victim: Artemis REPLACED, or RabbitMQ drop-head, dead-lettered `maxlen`),
  `drop_head` (evict while over), `evict_tail` (the bounded publish fast path's eviction,
  called by `Queue.publish` through a bound-method alias: it runs per publish on a full queue),
  and the Qpid ring's `make_room` (evict the oldest, acquired ones too unless strict).

The counted set and its comparisons are limits.py's (`over`, `over_bytes`); the containers
and the removal steps are `Contents`'; dead letters go to the queue's `DeadLetters`.

A changed limit (`configure`, from `Queue.update_settings`) acts at once only for drop-head,
which drops (or dead-letters) down to the new bound, as RabbitMQ does; a lowered ring size
purges nothing (Artemis: one eviction per add); reject, drop-new and Qpid limits apply to the
next publish.

Invariants: `order` is not None exactly when the limit is a Qpid ring, and then holds every
ready or acquired entry (limits.py); after `admit` or `enforce` returns, a RING, DROP_HEAD or
Qpid limit holds (a ring by at most one message over after a lowered size: Artemis purges
nothing).
"""

from __future__ import annotations

import logging
from collections import deque

from ringmq.core.queue.contents import Contents
from ringmq.core.queue.deadletters import DeadLetters
from ringmq.core.queue.expiry import Expiry
from ringmq.core.queue.lanes import ACQUIRED, GONE, READY, Entry
from ringmq.core.queue.limits import QPID_ACTIONS, FastBounds, QpidOrder, over, over_bytes
from ringmq.core.queue.records import (
    UNBOUNDED,
    DeadLetterReason,
    PublishOutcome,
    QueueCounters,
)
from ringmq.core.settings import Limit, LimitAction

__all__ = ["Overflow"]

log = logging.getLogger(__name__)

_ENQUEUED = PublishOutcome.ENQUEUED
_DROPPED = PublishOutcome.DROPPED


class Overflow:
    """One queue's limit enforcement (see the module docstring)."""

    __slots__ = ("_contents", "_counters", "_dead", "_expiry", "bounds", "limit", "order")

    def __init__(self, contents: Contents, dead: DeadLetters, expiry: Expiry) -> None:
        self._contents = contents
        self._counters = contents.counters
        self._dead = dead
        self._expiry = expiry
        self.limit: Limit | None = None
        self.bounds = FastBounds()
        self.order: QpidOrder | None = None  # Qpid legacy ring only

    def configure(self, limit: Limit | None, bounds: FastBounds) -> None:
        """The limit changed (`bounds`: its fast-path thresholds, or none)."""
        self.limit = limit
        self.bounds = bounds
        if limit is None or limit.action not in QPID_ACTIONS:
            self.order = None
        elif self.order is None:
            self.order = QpidOrder(len(self._contents.lanes), self._contents.live_entries())

    def track(self, e: Entry) -> None:
        """An entry joined the ready set outside `admit` (recovery): keep the age order."""
        if self.order is not None:
            self.order.insert(e)

    # --- admission -----------------------------------------------------------------------

    def admit(
        self, e: Entry, now_ms: int, *, head: bool, index: list[Entry] | None
    ) -> PublishOutcome:
        """Place a new entry (at the tail; `head`: a released scheduled one), applying its
        expiry, LVQ replacement and the limit; `index` is the queue's browse index, if built."""
        msg = e.msg
        assert msg is not None
        e.state = GONE  # until enqueued below (a refused entry has left the queue)
        if not (head and e.redelivered):
            # A delayed redelivery keeps the expiry time it had (TTL runs from the enqueue).
            self._expiry.stamp(e, now_ms)
        contents = self._contents
        c = self._counters
        lvq = contents.lvq
        limit = self.limit
        replaced: Entry | None = None
        key = e.key
        if key is not None:
            old = lvq.get(key)
            if old is not None and old.state == READY:
                replaced = old
        if limit is not None:
            action = limit.action
            refused = False
            if action is LimitAction.REJECT_PUBLISH or action is LimitAction.REJECT_PUBLISH_DLX:
                free_n, free_b = (1, replaced.size) if replaced is not None else (0, 0)
                refused = over(limit, c, 1 - free_n, e.size - free_b)
            elif action is LimitAction.DROP_NEW:
                free_n, free_b = (1, replaced.size) if replaced is not None else (0, 0)
                if over(limit, c, 1 - free_n, e.size - free_b):
                    c.overflow_dropped += 1
                    return PublishOutcome.DROPPED
            elif action is LimitAction.QPID_RING or action is LimitAction.QPID_RING_STRICT:
                # A message bigger than max_size can never fit: refused, nothing evicted.
                refused = limit.max_bytes is not None and e.size > limit.max_bytes
            if refused:
                c.overflow_rejected += 1
                if action is LimitAction.REJECT_PUBLISH_DLX:
                    self._dead.add(msg, DeadLetterReason.MAXLEN, now_ms, e.deliveries)
                return PublishOutcome.REJECTED
        if replaced is not None:
            contents.remove_ready(replaced)
            c.lvq_replaced += 1
        if key is not None:
            lvq[key] = e
        if self.order is not None and limit is not None and not self.make_room(limit, e, now_ms):
            if key is not None and lvq.get(key) is e:
                del lvq[key]
            c.overflow_rejected += 1
            return PublishOutcome.REJECTED
        # Enqueue.
        e.state = READY
        paging = contents.paging
        if not head and paging.spilled:
            paging.push(e.seq, msg, e.size, e.expires_at)
            if limit is not None and limit.action is LimitAction.DROP_HEAD:
                self.drop_head(now_ms)
                # single lane: the new message is the last one, so it went only if all went
                return PublishOutcome.ENQUEUED if c.ready + c.paged else PublishOutcome.DROPPED
            return PublishOutcome.ENQUEUED
        lane = contents.lanes[e.level]
        if head:
            lane.head.appendleft(e)
        else:
            lane.tail.append(e)
        if self.order is not None:
            self.order.insert(e)
        c.ready += 1
        c.ready_bytes += e.size
        if not head:
            c.added += 1
            if index is not None:
                index.append(e)
        if c.ready > paging.head_n or c.ready_bytes > paging.head_b:
            contents.page_out()
        if limit is not None:
            out = self.enforce(limit, e, now_ms)
            if not head and paging.head_n != UNBOUNDED and limit.action is LimitAction.DROP_HEAD:
                # paged queues have one lane and `e` is the newest: it went only if all went
                return PublishOutcome.ENQUEUED if c.ready + c.paged else PublishOutcome.DROPPED
            return out
        return PublishOutcome.ENQUEUED

    def release(self, e: Entry, now_ms: int) -> PublishOutcome:
        """Admit `e`, which left the schedule (uncounted there), at the head."""
        outcome = self.admit(e, now_ms, head=True, index=None)
        on_remove = self._contents.on_remove
        if outcome is not PublishOutcome.ENQUEUED and on_remove is not None:
            on_remove(e.seq)  # refused or dropped (some paths skip `forget`)
        return outcome

    def enforce(self, limit: Limit, e: Entry, now_ms: int) -> PublishOutcome:
        """After adding `e` (at the tail or the head): the one place overflow actions live."""
        match limit.action:
            case LimitAction.RING:
                # Artemis enforceRing: one eviction per add, so a lowered size purges nothing.
                if over(limit, self._counters, 0, 0):
                    self.evict_head(now_ms, ring=True)
            case LimitAction.DROP_HEAD:
                self.drop_head(now_ms)
            case LimitAction.FLOW_TO_DISK:
                if over(limit, self._counters, 0, 0) and e.state == READY and not e.paged:
                    self._contents.page_out_body(e)
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

    # --- eviction ------------------------------------------------------------------------

    def drop_head(self, now_ms: int) -> None:
        """drop-head: evict (dead-letter `maxlen`) from the head while over the limit."""
        limit = self.limit
        assert limit is not None
        while over(limit, self._counters, 0, 0) and self.evict_head(now_ms, ring=False):
            pass

    def evict_head(self, now_ms: int, *, ring: bool) -> bool:
        """Remove the next message to be delivered: Artemis REPLACED (not dead-lettered) or
        RabbitMQ drop-head (dead-lettered `maxlen` when a DLX is set). False: none left."""
        contents = self._contents
        e = contents.pop_ready()
        if e is None:
            return False
        msg = contents.take_body(e)
        contents.forget(e)
        if ring:
            self._counters.ring_evicted += 1
        else:
            self._counters.maxlen_dropped += 1
            self._dead.add(msg, DeadLetterReason.MAXLEN, now_ms, e.deliveries)
        return True

    def evict_tail(self, c: QueueCounters, tail: deque[Entry]) -> PublishOutcome:
        """The bounded fast path's eviction when the lane is only its in-memory tail: a ring
        evicts one message per add (Artemis enforceRing), drop-head until within bounds; the
        new message, the last of the tail, is the victim only when it is alone."""
        on_remove = self._contents.on_remove
        bounds = self.bounds
        ring = bounds.evict_ring
        evict_n, evict_b = bounds.evict_n, bounds.evict_b
        while tail:
            e = tail[0]
            if e.state != READY:  # left behind lazily (as `Lane.peek` skips them)
                tail.popleft()
                continue
            if not ring and c.ready <= evict_n and c.ready_bytes <= evict_b:
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

    def make_room(self, limit: Limit, e: Entry, now_ms: int) -> bool:
        """The Qpid legacy ring (RingQueuePolicy::checkLimit): if count+1 or bytes+size is
        over, evict the oldest; keep evicting only while the bytes still do not fit (one
        eviction is enough for the count bound). Strict mode refuses (False) when the oldest
        is acquired."""
        c = self._counters
        if not over(limit, c, 1, e.size):
            return True
        strict = limit.action is LimitAction.QPID_RING_STRICT
        contents = self._contents
        order = self.order
        assert order is not None
        while True:
            oldest = order.oldest()
            if oldest is None:
                return True
            if oldest.state == ACQUIRED:
                if strict:
                    log.debug(
                        "queue %s: oldest message is acquired; ring_strict refuses", contents.name
                    )
                    return False
                # Non-strict: evicted under its consumer, whose later ack is a no-op.
                del contents.unacked[oldest.seq]
                c.unacked_bytes -= oldest.size
                msg = oldest.msg
                assert msg is not None
                contents.forget(oldest)
            else:
                if oldest.msg is None:  # paged: fetch the body back for the dead letter
                    oldest.msg = contents.store.page_in(contents.name, oldest.seq)
                msg = oldest.msg
                contents.remove_ready(oldest)
            c.ring_evicted += 1
            # Qpid reroutes ring-evicted messages to the queue's alternate exchange.
            self._dead.add(msg, DeadLetterReason.MAXLEN, now_ms, oldest.deliveries)
            if limit.max_bytes is None or not over_bytes(limit, c, e.size):
                return True
