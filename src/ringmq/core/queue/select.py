"""Selective fetch: the first waiting message a predicate accepts (JMS selector consumers).

Theory of operation
-------------------
A selector consumer takes the first ready message, in delivery order, that its selector
matches, and leaves the others where they are for the queue's other consumers (Artemis'
rule). `find` walks the lanes as `fetch` would serve them (the highest priority level first;
in a level its head, then its returns and tail merged by seq), skipping entries that are gone,
acquired, paged out or expired, and stops after `scan` entries: a queue whose head is a long
run of messages no selector wants costs each selective fetch at most `scan` predicate calls,
and a match deeper than that is not seen until the run ahead of it is consumed. The spilled
tail of a paging queue is not scanned (its messages are found once paged in). `take` takes
the entry it found out of its container (so a later requeue puts it back exactly once) and out
of the ready counters, and hands it out as `fetch` does (`Queue.fetch_matching`).

Pure: no I/O, no clock.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING

from ringmq.core.queue.lanes import ACQUIRED, READY, Entry, Lane
from ringmq.core.queue.records import Delivery

if TYPE_CHECKING:
    from ringmq.core.message import Message
    from ringmq.core.queue.contents import Contents


def _in_order(lane: Lane) -> Iterator[Entry]:
    # A lane's entries in delivery order (gone ones included; the caller skips them).
    yield from lane.head
    yield from heapq.merge(sorted(lane.returns), lane.tail)


def find(
    contents: Contents, match: Callable[[Message], bool], scan: int, now_ms: int
) -> tuple[Lane, Entry] | None:
    """The first ready in-memory entry `match` accepts among the first `scan` (see above)."""
    seen = 0
    for lane in reversed(contents.lanes):
        for e in _in_order(lane):
            if seen >= scan:
                return None
            seen += 1
            msg = e.msg
            if e.state != READY or msg is None or e.paged:
                continue
            if e.expires_at is not None and e.expires_at <= now_ms:
                continue
            if match(msg):
                return lane, e
    return None


def take(contents: Contents, lane: Lane, e: Entry, *, ack_required: bool) -> Delivery:
    """Take `e`, which `find` returned, out of its lane and hand it out as `Queue.fetch`
    does (which inlines these steps: the hot path): acquired, or gone when no ack is due."""
    if e in lane.head:
        lane.head.remove(e)
    elif e in lane.returns:
        lane.returns.remove(e)
        heapq.heapify(lane.returns)
    else:
        lane.tail.remove(e)
    c = contents.counters
    c.ready -= 1
    c.ready_bytes -= e.size
    deliveries = e.deliveries = e.deliveries + 1
    c.delivered += 1
    if e.redelivered:
        c.redelivered += 1
    msg = e.msg
    assert msg is not None
    delivery = Delivery(e.seq, msg, e.redelivered, deliveries)
    if ack_required:
        e.state = ACQUIRED
        contents.unacked[e.seq] = e
        c.unacked_bytes += e.size
    else:
        contents.forget(e)
        c.acknowledged += 1
    return delivery
