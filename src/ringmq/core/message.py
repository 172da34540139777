"""Messages as the core sees them.

A `Message` is created once per publish by the broker layer and shared by every queue it is
routed to (so a fan-out to ten queues holds one body). Queues never mutate it: per-queue state
(sequence number, redelivered flag, delivery count, expiry) lives in the queue's own entry.

The content header is kept raw (`properties_bin`, the AMQP property flags and list exactly as
the publisher sent them) and re-sent verbatim on delivery. The few properties the core needs
(headers for LVQ keys and delays, priority, expiration, delivery mode, message id) are decoded
once by the broker layer, only when the property flags say they are present.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, NewType

SeqId = NewType("SeqId", int)
"""Per-queue, strictly increasing position of a message; requeues restore it."""

DeliveryTag = NewType("DeliveryTag", int)
"""Per-channel delivery tag, as on the wire."""


@dataclass(slots=True, eq=False)
class Message:
    """One published message (immutable by convention once routed).

    Attributes:
        exchange: exchange it was published to ("" for the default exchange).
        routing_key: the publish routing key.
        properties_bin: raw encoded basic properties (flags + property list), re-sent verbatim.
        body: the message body.
        headers: decoded application headers, or None when the publisher sent none.
        priority: the `priority` property, 0 when absent.
        expiration_ms: the per-message TTL from the `expiration` property, None when absent.
        persistent: delivery_mode == 2.
        message_id: the `message_id` property, None when absent.
        timestamp_ms: wall time at which the broker accepted the message.
    """

    exchange: str
    routing_key: str
    properties_bin: bytes
    body: bytes
    headers: dict[str, Any] | None = None
    priority: int = 0
    expiration_ms: int | None = None
    persistent: bool = False
    message_id: str | None = None
    timestamp_ms: int = 0
    store_ref: int = field(default=0)
    """Identity in the shared message store once persisted (0: not stored)."""

    @property
    def size(self) -> int:
        """Body size in bytes: what byte limits count (RabbitMQ counts bodies only)."""
        return len(self.body)
