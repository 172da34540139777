"""Where a queue's waiting messages wait: entries and per-priority lanes.

Theory of operation
-------------------
An `Entry` is one message in one queue: the per-queue state (seq, state, delivery counts,
expiry, LVQ key, priority level) around the shared `Message`. Its `state` says where it lives:
READY (in a lane), ACQUIRED (in the queue's unacked map), SCHEDULED (in the `Scheduler`) or GONE
(left the queue; lanes and heaps drop gone entries lazily).

A `Lane` holds one priority level's READY entries and serves, in order: its `head` deque
(messages put back at the head: Artemis ring returns and released scheduled messages), then the
smaller seq of its `returns` heap (RabbitMQ/Qpid requeues, back at their original position) and
its `tail` deque (new messages, ascending seq). Removing an entry from the middle only marks it
GONE; `peek`/`pop` skip gone entries and `compact` rebuilds the lane once they dominate.

Invariants: `tail` is in ascending seq order; `returns` is a heap by seq; a READY entry is in
exactly one of a lane's three containers. The queue's hot paths read these containers directly
(inline `popleft`/`append`): a method call per message there costs more than the work itself.
"""

from __future__ import annotations

import heapq
from collections import deque
from typing import Any, Final

from ringmq.core.message import Message, SeqId

__all__ = ["ACQUIRED", "COMPACT_MIN", "GONE", "READY", "SCHEDULED", "Entry", "Lane", "new_entry"]

COMPACT_MIN: Final = 256

# Entry states (ints: compared on the hot path).
READY: Final = 0
ACQUIRED: Final = 1
SCHEDULED: Final = 2
GONE: Final = 3


class Entry:
    # One message in one queue: the per-queue state around the shared Message. No __init__:
    # `Entry()` then slot stores is the cheapest construction (no Python frame, no argument
    # tuple); the publish fast paths do that inline, everything else calls `new_entry`.
    # Every slot is set before an entry is used.
    __slots__ = (
        "deliveries",
        "expires_at",
        "failures",
        "key",
        "level",
        "msg",
        "paged",
        "redelivered",
        "seq",
        "size",
        "state",
    )

    seq: SeqId
    msg: Message | None  # None while paged out
    size: int
    state: int
    redelivered: bool
    deliveries: int
    failures: int
    expires_at: int | None
    key: Any  # LVQ key value, None if not an LVQ message
    level: int
    paged: bool

    def __lt__(self, other: Entry) -> bool:
        return self.seq < other.seq


def new_entry(seq: SeqId, msg: Message | None, size: int) -> Entry:
    # A ready entry with default state (the publish fast paths inline this).
    e = Entry()
    e.seq = seq
    e.msg = msg
    e.size = size
    e.state = READY
    e.redelivered = e.paged = False
    e.deliveries = e.failures = e.level = 0
    e.expires_at = e.key = None
    return e


class Lane:
    # One priority level's waiting messages (see the module docstring).
    __slots__ = ("head", "returns", "tail")

    def __init__(self) -> None:
        self.head: deque[Entry] = deque()
        self.returns: list[Entry] = []
        self.tail: deque[Entry] = deque()

    def peek(self) -> Entry | None:
        head = self.head
        while head:
            e = head[0]
            if e.state == READY:
                return e
            head.popleft()
        returns = self.returns
        while returns and returns[0].state != READY:
            heapq.heappop(returns)
        tail = self.tail
        while tail and tail[0].state != READY:
            tail.popleft()
        if returns:
            if tail and tail[0].seq < returns[0].seq:
                return tail[0]
            return returns[0]
        return tail[0] if tail else None

    def pop(self) -> Entry | None:
        e = self.peek()
        if e is not None:
            self.take(e)
        return e

    def take(self, e: Entry) -> None:
        # Remove `e`, the entry `peek` just returned, from the front of its container.
        if self.head and self.head[0] is e:
            self.head.popleft()
        elif self.returns and self.returns[0] is e:
            heapq.heappop(self.returns)
        else:
            self.tail.popleft()

    def compact(self) -> None:
        self.head = deque(e for e in self.head if e.state == READY)
        self.returns = [e for e in self.returns if e.state == READY]
        heapq.heapify(self.returns)
        self.tail = deque(e for e in self.tail if e.state == READY)

    def entries(self) -> list[Entry]:
        # In delivery order (head, then the merge of returns and tail by seq).
        out = [e for e in self.head if e.state == READY]
        rest = sorted(
            [e for e in self.returns if e.state == READY]
            + [e for e in self.tail if e.state == READY]
        )
        return out + rest
