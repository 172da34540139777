"""Settling unacked messages other than by ack: requeue (release) and reject.

Theory of operation
-------------------
A fetch with `ack_required` moves an entry into the unacked map (`Contents.unacked`, ACQUIRED);
`Queue.ack` removes it inline (the hot path). `Settlement` owns the other ways out of the map,
and the rules they apply:

* `requeue` (nack/reject with requeue, recover, consumer cancel, channel close, rollback): each
  returning message is marked redelivered and, unless told otherwise, counts one failed
  delivery; past the queue's `delivery_limit` it is dead-lettered (`delivery_limit`) instead.
  An LVQ message whose key got a newer value while it was out is dropped ("combined"); one that
  returns stays and is no longer replaced by later values. Ring queues (Artemis) put messages
  back at the head in reverse consumption order, and a message returning to a full ring is
  itself deleted (`Overflow.evict_head`); all others go back to their original position by seq
  (the lane's `returns` heap: RabbitMQ, Qpid), then a drop-head limit drops from the head, the
  returned messages first.
  With Artemis' delayed redelivery (`redelivery`), a message returning after a failed
  delivery goes to the `Scheduler` instead, due after the delay its failure count gives; when
  due it is released to the head under the limit, exactly as a scheduled message (a full ring
  deletes it: the seed's rule for scheduled messages). Returns that are not failures (a
  release, a consumer's prefetched messages given back without `count_failure`) are not
  delayed. The storage hook `on_delay` hears of each delayed message with its delivery count
  and due time (core/durability.py journals it, so a restart keeps the wait).
* `reject` (requeue=false): dead-letter (`rejected`) when a dead-letter exchange is set, else
  drop.

Unknown seqs (acked already, or evicted under their consumer by a Qpid ring) are skipped.
Invariant: an entry leaves the unacked map here exactly once, and its bytes leave
`counters.unacked_bytes` with it.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Iterable, Sequence

from ringmq.core.message import SeqId
from ringmq.core.queue.contents import Contents
from ringmq.core.queue.deadletters import DeadLetters
from ringmq.core.queue.lanes import GONE, READY, Entry
from ringmq.core.queue.limits import over
from ringmq.core.queue.overflow import Overflow
from ringmq.core.queue.records import DeadLetterReason
from ringmq.core.queue.scheduler import Scheduler, clamp_due
from ringmq.core.settings import LimitAction, Redelivery

__all__ = ["Settlement"]


class Settlement:
    """Requeue and reject of unacked messages (see the module docstring)."""

    __slots__ = (
        "_contents",
        "_dead",
        "_overflow",
        "_scheduler",
        "delivery_limit",
        "on_delay",
        "redelivery",
    )

    def __init__(
        self, contents: Contents, overflow: Overflow, dead: DeadLetters, scheduler: Scheduler
    ) -> None:
        self._contents = contents
        self._overflow = overflow
        self._dead = dead
        self._scheduler = scheduler
        self.delivery_limit: int | None = None
        self.redelivery: Redelivery | None = None
        self.on_delay: Callable[[SeqId, int, int], None] | None = None
        """Storage hook: `(seq, delivery count, due_ms)` of each message a failed delivery
        holds back (`Queue.on_delay`)."""

    def take(self, seqs: Iterable[SeqId]) -> list[Entry]:
        """Take the known `seqs` out of the unacked map, in the given order (raw rows among
        them decoded into it first: rawtake.py)."""
        out: list[Entry] = []
        c = self._contents.counters
        unacked = self._contents.unacked
        raw = self._contents.raw
        if raw.runs:
            seqs = list(seqs)
            raw.restore(seqs, unacked)
        for seq in seqs:
            e = unacked.pop(seq, None)
            if e is None:
                continue
            c.unacked_bytes -= e.size
            out.append(e)
        return out

    def requeue(self, seqs: Sequence[SeqId], now_ms: int, *, count_failure: bool) -> None:
        """Put unacked messages back (`seqs` in consumption order; see the module docstring)."""
        entries = self.take(seqs)
        if not entries:
            return
        contents = self._contents
        overflow = self._overflow
        limit = overflow.limit
        ring = limit is not None and limit.action is LimitAction.RING
        c = contents.counters
        lvq = contents.lvq
        dl = self.delivery_limit
        delayed = self.redelivery if count_failure else None
        on_delay = self.on_delay
        for e in reversed(entries) if ring else entries:
            msg = e.msg
            assert msg is not None
            if count_failure:
                e.failures += 1
                if dl is not None and e.failures > dl:
                    contents.forget(e)
                    self._dead.add(msg, DeadLetterReason.DELIVERY_LIMIT, now_ms, e.deliveries)
                    continue
            key = e.key
            if key is not None:
                current = lvq.get(key)
                if current is not None and current is not e:
                    e.state = GONE  # combined with the newer value
                    if contents.on_remove is not None:
                        contents.on_remove(e.seq)
                    c.lvq_replaced += 1
                    continue
                if current is e:
                    del lvq[key]  # the requeued copy is not replaced by later values
            e.redelivered = True
            c.requeued += 1
            if delayed is not None:
                due = clamp_due(now_ms + delayed.delay_after(e.failures))
                self._scheduler.add(due, e)
                if on_delay is not None:
                    on_delay(e.seq, e.deliveries, due)
                continue
            e.state = READY
            c.ready += 1
            c.ready_bytes += e.size
            lane = contents.lanes[e.level]
            if ring:
                lane.head.appendleft(e)
                assert limit is not None
                if over(limit, c, 0, 0):
                    overflow.evict_head(now_ms, ring=True)
            else:
                heapq.heappush(lane.returns, e)
        if limit is not None and limit.action is LimitAction.DROP_HEAD:
            overflow.drop_head(now_ms)
        paging = contents.paging
        if c.ready > paging.head_n or c.ready_bytes > paging.head_b:
            contents.page_out()  # returned messages stay; the tail's rear makes room

    def reject(self, seqs: Iterable[SeqId], now_ms: int) -> None:
        """Dead-letter (`rejected`) or drop unacked messages (see the module docstring)."""
        contents = self._contents
        c = contents.counters
        for e in self.take(seqs):
            msg = e.msg
            assert msg is not None
            contents.forget(e)
            c.rejected += 1
            self._dead.add(msg, DeadLetterReason.REJECTED, now_ms, e.deliveries)
