"""Message TTL: when a message expires, and expiring the head of the queue.

Theory of operation
-------------------
`Expiry` owns the queue's `x-message-ttl` (`ttl`) and the expiry steps. A message's expiry time
is fixed when it is enqueued (`expires_at`: the smaller of the queue TTL and its own
`expiration`, from the publish time) and kept in its entry. Only the head of the whole queue
expires (the next delivery: with priorities, the head of the highest non-empty level), as in
RabbitMQ: a message behind it keeps its place, and counts toward limits, until it is the head,
even past its expiry time. A message expires strictly after its time on the consumer paths
(`take_live`, used by `fetch`, and `tick`), and at its time in `drop_expired` (RabbitMQ's
`Now >= Expiry` after an enqueue or a fetch). An expired message is dead-lettered `expired`.

`drop_expired` is RabbitMQ's `drop_expired_msgs`, which its queue runs after an enqueue and
after a fetch: the broker calls it once the dispatch that follows a publish is done, and after
a basic.get before it counts the messages left. So a message whose TTL is 0 reaches only a
consumer ready to take it at once, and the count a get reports leaves out the expired messages
its fetch exposed.

`seen` says whether any message of the queue ever had an expiry time (`stamp`, `note`): the
queue's fast paths check no expiry, so the first one calls `on_first` (`Queue` leaves its fast
paths for good) and `drop_expired` does nothing until then.
"""

from __future__ import annotations

from collections.abc import Callable

from ringmq.core.message import Message
from ringmq.core.queue.contents import Contents
from ringmq.core.queue.deadletters import DeadLetters
from ringmq.core.queue.lanes import Entry
from ringmq.core.queue.records import DeadLetterReason

__all__ = ["Expiry"]


class Expiry:
    """One queue's message expiry (see the module docstring)."""

    __slots__ = ("_contents", "_dead", "_on_first", "seen", "ttl")

    def __init__(self, contents: Contents, dead: DeadLetters, on_first: Callable[[], None]) -> None:
        self._contents = contents
        self._dead = dead
        self._on_first = on_first
        self.ttl: int | None = None
        self.seen = False

    def note(self) -> None:
        """A message with an expiry time joined the queue (`seen`; `on_first` the first time)."""
        if not self.seen:
            self.seen = True
            self._on_first()

    def stamp(self, e: Entry, now_ms: int) -> None:
        """Give a new (or released scheduled) entry its expiry time."""
        assert e.msg is not None
        expires_at = e.expires_at = self.expires_at(e.msg, now_ms)
        if expires_at is not None and not self.seen:
            self.note()

    def expires_at(self, msg: Message, now_ms: int) -> int | None:
        """The expiry time of `msg` enqueued at `now_ms` (None: never)."""
        ttl = self.ttl
        own = msg.expiration_ms
        if own is not None:
            ttl = own if ttl is None else min(ttl, own)
        return None if ttl is None else now_ms + ttl

    def expire(self, e: Entry, now_ms: int) -> None:
        """Expire `e`, already popped from its lane (ready counters updated)."""
        msg = self._contents.take_body(e)
        self._contents.forget(e)
        self._contents.counters.expired += 1
        self._dead.add(msg, DeadLetterReason.EXPIRED, now_ms, e.deliveries)

    def take_live(self, now_ms: int) -> Entry | None:
        """The next ready entry in delivery order, popped (counters moved), expiring the
        expired heads met on the way."""
        pop_next = self._contents.pop_next
        while True:
            e = pop_next()
            if e is None:
                return None
            expires_at = e.expires_at
            if expires_at is not None and now_ms > expires_at:
                self.expire(e, now_ms)
                continue
            return e

    def expire_heads(self, before: int, now_ms: int) -> int:
        """Expire head entries whose expiry time is below `before` (`tick` passes `now_ms`:
        strictly after their time; `drop_expired` passes `now_ms + 1`); returns how many."""
        contents = self._contents
        n = 0
        while True:
            e = contents.peek_head()
            if e is None or e.expires_at is None or e.expires_at >= before:
                return n
            contents.pop_ready()  # the same entry: moves the ready (or paged) counters
            self.expire(e, now_ms)
            n += 1

    def next_expiry_ms(self) -> int | None:
        """When the head expires (strictly after its expiry time), or None."""
        e = self._contents.peek_head()
        if e is not None and e.expires_at is not None:
            return e.expires_at + 1
        return None
