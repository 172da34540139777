"""The durability hold: a queue hands out no message whose journal write is not yet on disk.

Theory of operation
-------------------
A persistent message published to a durable queue is written to the journal at once but is
durable only when the group commit's fsync covers it (server/commit.py). When its publisher
waits for the outcome (AMQP 0-9-1 confirms, an unsettled AMQP 1.0 transfer, MQTT QoS 1 and 2,
a STOMP receipt) it must not reach a consumer until then: if the write or the fsync fails, the
publish is refused (a negative confirm, a rejected transfer, an ERROR frame), and a consumer
that had it would see a message its publisher was told to send again. Artemis does the same:
a durable send's references are added to their queues only once the journal completes the
write (`PostOffice.processRoute`).

A `Hold` belongs to one queue (`Queue.hold`). The durability layer (core/durability.py) keeps it:

* `pending`: (store position, seq) of the queue's writes not yet covered by an fsync, in
  write order (so both columns ascend);
* `refused`: seqs whose write failed: they are taken out of the queue (at once when they wait
  in memory, else when they reach the head) and never handed out.

and mirrors `first_checked()` into `Queue.hold_from`, the one number the engine's take paths
compare a head's seq with: from it on they take the general path, whose gate (`waits`) drops
refused heads and holds the head while its seq is at or above `first_held()`. Seqs ascend
with publication, so holding from the first undurable seq keeps the queue's order (a transient
message published after a held persistent one waits behind it, as it would in the journal)
and never holds a requeued message (its seq is older). A queue with nothing held has
`hold_from == NO_HOLD` and its take paths pay one integer comparison.

`waits()` is the engine's general take path's gate: it drops refused heads, then says whether
the head must wait. Pure: no I/O, no clock.
"""

from __future__ import annotations

from collections import deque
from typing import TYPE_CHECKING, Final

from ringmq.core.message import SeqId
from ringmq.core.queue.lanes import READY

if TYPE_CHECKING:
    from ringmq.core.queue.contents import Contents
    from ringmq.core.queue.expiry import Expiry

NO_HOLD: Final = 1 << 62
"""`Queue.hold_from` when nothing is held (above every seq a queue will use)."""


class Hold:
    """What one queue holds back until it is durable (see the module docstring)."""

    __slots__ = ("pending", "refused")

    def __init__(self) -> None:
        self.pending: deque[tuple[int, SeqId]] = deque()
        self.refused: set[SeqId] = set()

    def first_held(self) -> int:
        """The lowest seq that must not be handed out (NO_HOLD: none)."""
        return self.pending[0][1] if self.pending else NO_HOLD

    def first_checked(self) -> int:
        """`Queue.hold_from`: the lowest seq the take paths must look at (held or refused)."""
        low = self.pending[0][1] if self.pending else NO_HOLD
        if self.refused:
            low = min(low, min(self.refused))
        return low

    def release(self, durable: int) -> None:
        """An fsync covered every write up to store position `durable`."""
        pending = self.pending
        while pending and pending[0][0] <= durable:
            pending.popleft()

    def refuse(self, after: int) -> list[SeqId]:
        """The writes after store position `after` failed: their seqs become refused and are
        returned (ascending)."""
        pending = self.pending
        gone: list[SeqId] = []
        while pending and pending[-1][0] > after:
            gone.append(pending.pop()[1])
        gone.reverse()
        self.refused.update(gone)
        return gone


def drop_waiting(hold: Hold, contents: Contents, seqs: list[SeqId]) -> None:
    """Take the refused `seqs` out of the lanes now where they wait in memory (they are the
    newest, so each lane is read from its rear); the rest go when they reach the head."""
    if not seqs:
        return
    low = seqs[0]
    refused = hold.refused
    for lane in contents.lanes:
        for e in reversed(lane.tail):
            if e.seq < low:
                break
            if e.seq in refused and e.state == READY:
                refused.discard(e.seq)
                contents.remove_ready(e)


def waits(hold: Hold, contents: Contents, expiry: Expiry, scheduled: int, now_ms: int) -> bool:
    """Before a take from a queue that holds something: drop refused (and expired) heads;
    True when the head is held (or nothing is left), so nothing is taken now. `scheduled`:
    how many messages the queue's schedule holds (they come back with their old seqs). The
    caller sets `Queue.hold_from` to `hold.first_checked()` afterwards."""
    refused = hold.refused
    while True:
        expiry.expire_heads(now_ms, now_ms)  # what `take_live` would drop on its way
        e = contents.peek_head()
        if e is None:
            return True
        seq = e.seq
        if seq in refused:
            refused.discard(seq)
            contents.pop_ready()  # the same entry: moves the ready (or paged) counters
            contents.forget(e)
            continue
        if refused and len(contents.lanes) == 1 and not scheduled:
            # One lane hands out in seq order (but for requeued entries, older still): a
            # refused seq below the head left by another way (evicted, expired) and is
            # forgotten, so it does not send every later take down this path.
            refused.difference_update([r for r in refused if r < seq])
        return seq >= hold.first_held()
