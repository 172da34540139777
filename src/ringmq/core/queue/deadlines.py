"""A queue's timed work: `QueueDeadlines`, a base class of `Queue`.

Theory of operation
-------------------
`QueueDeadlines` holds no state of its own: the attributes it names are `Queue`'s (engine.py),
set by `Queue.__init__`. Two owners have work at a time: `Scheduler` (scheduler.py: scheduled
messages by due time, released to the head through `Overflow.release`, under the queue's
limit) and `Expiry` (expiry.py: only the head of the whole queue expires, as in RabbitMQ).
`next_deadline_ms` is the earliest time `tick` has work, which the broker's timers wait for;
a plain queue (`Queue.plain`: no TTL seen) has no expiry to look at. Scheduled messages can
also be dropped or released at once (the management API's calls).
"""

from __future__ import annotations

from collections.abc import Iterable

from ringmq.core.message import SeqId
from ringmq.core.queue.contents import Contents
from ringmq.core.queue.expiry import Expiry
from ringmq.core.queue.overflow import Overflow
from ringmq.core.queue.scheduler import Scheduler

__all__ = ["QueueDeadlines"]


class QueueDeadlines:
    """Scheduled releases and expiry of one queue (see the module docstring)."""

    plain: bool
    _contents: Contents
    _expiry: Expiry
    _overflow: Overflow
    _scheduler: Scheduler

    def tick(self, now_ms: int) -> None:
        """Release due scheduled messages (at most `SCHEDULED_RELEASE_BATCH`) to the head and
        expire the messages at the head of the queue whose time has passed (expiry.py: only
        the head of the whole queue expires, as in RabbitMQ)."""
        self._scheduler.release_due(now_ms, self._overflow.release)
        if not self.plain:
            self._expiry.expire_heads(now_ms, now_ms)

    def drop_expired(self, now_ms: int) -> int:
        """Expire the messages at the head whose expiry time has been reached by `now_ms`
        (RabbitMQ's `drop_expired_msgs`, see expiry.py); returns how many expired."""
        if not self._expiry.seen:
            return 0
        return self._expiry.expire_heads(now_ms + 1, now_ms)

    def next_deadline_ms(self) -> int | None:
        """Earliest time at which `tick` has work: a scheduled message due, or a head message
        expiring (a message expires strictly after `publish time + ttl`)."""
        best = self._scheduler.next_due_ms()
        if self.plain:
            return best
        t = self._expiry.next_expiry_ms()
        if t is not None and (best is None or t < best):
            best = t
        return best

    def purge_scheduled(self) -> int:
        """Drop every scheduled message; returns how many."""
        return self._scheduler.purge(self._contents.on_remove)

    def deliver_scheduled_now(self, seqs: Iterable[SeqId] | None, now_ms: int) -> int:
        """Release the given scheduled messages (all when None) to the head now, under the
        queue's limit; returns how many were released (accepted or not)."""
        return self._scheduler.release_now(seqs, now_ms, self._overflow.release)
