"""The values a queue hands out and the counters it keeps (no state machine here).

`PublishOutcome`, `DeadLetterReason`, `Delivery`, `DeadLetter`, `ScheduledMessage`,
`QueueCounters`, and the queue-wide constants (paging bounds, schedule headers).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum, StrEnum
from typing import Any, Final

from ringmq.core.message import Message, SeqId

__all__ = [
    "DEFAULT_HEAD_BYTES",
    "DEFAULT_HEAD_COUNT",
    "SCHEDULED_RELEASE_BATCH",
    "SCHEDULE_HEADERS",
    "UNBOUNDED",
    "DeadLetter",
    "DeadLetterReason",
    "Delivery",
    "PublishOutcome",
    "QueueCounters",
    "ScheduledMessage",
]

UNBOUNDED: Final = 1 << 62
"""A bound that never applies (compared as an int on the hot paths)."""

SCHEDULED_RELEASE_BATCH: Final = 1000
"""At most this many due scheduled messages are released per `tick`, so a backlog after
downtime does not starve live traffic; `next_deadline_ms` then reports "due now"."""

SCHEDULE_HEADERS: Final = ("x-delay", "_AMQ_SCHED_DELIVERY")
"""`x-delay`: relative ms (RabbitMQ delayed-message plugin); `_AMQ_SCHED_DELIVERY`: absolute epoch
ms (Artemis). When both are present the absolute time wins."""

DEFAULT_HEAD_COUNT: Final = 16384
"""Ready messages a queue keeps in memory before paging the rest (with a spill store).

RabbitMQ keeps at most 2048; ringmq keeps more because paging a message out and back costs
about 13 µs here, and a consumer that keeps up with a burst should not pay it. The byte bound
still caps large messages, and the memory governor shrinks every head under pressure."""

DEFAULT_HEAD_BYTES: Final = 8 * 1024 * 1024
"""Ready body bytes a queue keeps in memory before paging the rest (with a spill store)."""


class PublishOutcome(Enum):
    """What `Queue.publish` did with a message."""

    ENQUEUED = "enqueued"
    SCHEDULED = "scheduled"
    REJECTED = "rejected"
    """Refused by the limit (reject-publish(-dlx), Qpid reject / ring_strict / oversize,
    Artemis FAIL): the broker nacks a confirming publisher."""
    DROPPED = "dropped"
    """Accepted and discarded by the policy at once (drop-head with the new message as victim,
    Artemis DROP): the publisher is acked, as RabbitMQ does for drop-head."""


class DeadLetterReason(StrEnum):
    """RabbitMQ's `x-death` reasons."""

    REJECTED = "rejected"
    EXPIRED = "expired"
    MAXLEN = "maxlen"
    DELIVERY_LIMIT = "delivery_limit"


@dataclass(slots=True)
class Delivery:
    """A message handed out by `fetch` or `browse`; read-only by convention.

    A slotted class rather than a tuple: the fetch path builds it with `object.__new__` and
    four slot stores, cheaper than building a named tuple (measured in engine_bench).

    Attributes:
        seq: the message's sequence number in this queue (ack/requeue/reject by it).
        message: the shared message.
        redelivered: the message was delivered before and put back (AMQP `redelivered`).
        delivery_count: deliveries of this message so far, this one included (1 on first).
    """

    seq: SeqId
    message: Message
    redelivered: bool
    delivery_count: int


@dataclass(frozen=True, slots=True)
class DeadLetter:
    """A message the broker must dead-letter (build `x-death`, publish to `exchange`).

    Attributes:
        message: the original message.
        reason: why it died.
        queue: this queue's name.
        exchange: the dead-letter exchange ("" is the default exchange).
        routing_key: the dead-letter routing key, or None to keep the original routing key(s).
        time_ms: when it died.
        delivery_count: how many times it had been delivered.
        address: `exchange` names an Artemis address (dead-letter or expiry address: an
            exchange of that name if one exists, else a queue), not a RabbitMQ DLX.
        address_queue: the auto-created dead-letter or expiry queue that also receives it.
    """

    message: Message
    reason: DeadLetterReason
    queue: str
    exchange: str
    routing_key: str | None
    time_ms: int
    delivery_count: int
    address: bool = False
    address_queue: str | None = None


@dataclass(frozen=True, slots=True)
class ScheduledMessage:
    """One entry of `Queue.list_scheduled()`."""

    seq: SeqId
    message: Message
    due_ms: int


@dataclass(slots=True)
class QueueCounters:
    """Per-queue counters; gauges first, then cumulative totals. All O(1) to read."""

    ready: int = 0
    ready_bytes: int = 0
    unacked_bytes: int = 0
    scheduled: int = 0
    scheduled_bytes: int = 0
    paged: int = 0
    paged_bytes: int = 0
    added: int = 0
    delivered: int = 0
    acknowledged: int = 0
    redelivered: int = 0
    requeued: int = 0
    rejected: int = 0
    expired: int = 0
    ring_evicted: int = 0
    lvq_replaced: int = 0
    maxlen_dropped: int = 0
    overflow_rejected: int = 0
    overflow_dropped: int = 0
    purged: int = 0
    dead_lettered: dict[str, int] = field(default_factory=dict)
    # The queue's unacked map (seq -> entry): `unacked` is its length, so the per-message
    # fetch/ack paths keep no separate count.
    unacked_map: dict[SeqId, Any] = field(default_factory=dict, repr=False, compare=False)
    # Unacked rows of raw reservations (rawtake.py: held as page rows, not in the map).
    raw_unacked: int = field(default=0, repr=False, compare=False)

    @property
    def unacked(self) -> int:
        """Messages delivered and not yet acknowledged (Artemis `deliveringCount`)."""
        return len(self.unacked_map) + self.raw_unacked

    @property
    def message_count(self) -> int:
        """Artemis `messageCount`: ready + delivering + scheduled + paged."""
        return self.ready + self.unacked + self.scheduled + self.paged

    @property
    def message_bytes(self) -> int:
        """Bytes of `message_count`'s messages (bodies)."""
        return self.ready_bytes + self.unacked_bytes + self.scheduled_bytes + self.paged_bytes

    @property
    def memory_bytes(self) -> int:
        """Body bytes held in memory by this queue (everything but paged bodies)."""
        return self.ready_bytes + self.unacked_bytes + self.scheduled_bytes

    def snapshot(self) -> dict[str, Any]:
        """Every counter (snake_case, for management); ready includes paged."""
        c = self
        return {
            "message_count": c.message_count,
            "message_bytes": c.message_bytes,
            "memory_bytes": c.memory_bytes,
            "ready": c.ready + c.paged,
            "ready_bytes": c.ready_bytes + c.paged_bytes,
            "ready_in_memory": c.ready,
            "delivering": c.unacked,
            "delivering_bytes": c.unacked_bytes,
            "scheduled": c.scheduled,
            "scheduled_bytes": c.scheduled_bytes,
            "paged": c.paged,
            "paged_bytes": c.paged_bytes,
            "added": c.added,
            "delivered": c.delivered,
            "acknowledged": c.acknowledged,
            "redelivered": c.redelivered,
            "requeued": c.requeued,
            "rejected": c.rejected,
            "expired": c.expired,
            "ring_evicted": c.ring_evicted,
            "lvq_replaced": c.lvq_replaced,
            "maxlen_dropped": c.maxlen_dropped,
            "overflow_rejected": c.overflow_rejected,
            "overflow_dropped": c.overflow_dropped,
            "purged": c.purged,
            "dead_lettered": dict(c.dead_lettered),
        }
