"""Effects: what the pure core asks the server to do, in no protocol's words.

Core calls return lists of effects; the server applies them in order, through the adapter of
each target connection's protocol (`Handler.apply`), and writes each connection's output once
per read batch. Effects are imperatives (STYLE §5) and plain values: ints, strings, bools, an
enum, the stored `Message` (itself plain: bytes and a few fields) and, in `Reply` and
`ReplyContent`, the adapter's own frame value, so a list of them could cross a process
boundary (`tests/unit/core/test_effects_plain.py` pickles each kind). `conn_id` and `channel`
name the connection and the session on it (the number the adapter opened it under).

The core speaks of deliveries, settlements, outcomes and credit. A delivery carries its
`delivery_id`, a per-session number the core allocates in delivery order (1, 2, ...); a
settle names deliveries by it. An adapter whose protocol numbers deliveries the same way uses
it as its own number, others keep a map. A publish that asked for an outcome gets a `Confirm`
naming its `seq`, the session's per-publish number for publishes that want one.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ringmq.core.errors import Condition
from ringmq.core.message import Message


@dataclass(frozen=True, slots=True)
class Reply:
    """Send a protocol adapter's reply (`frame`: a value of the adapter's protocol), in order
    with the core's effects. The core never builds one: adapters append their replies to the
    call's effects so that a reply precedes the deliveries it enables."""

    conn_id: int
    channel: int
    frame: Any  # the adapter's frame value; the core never reads it


@dataclass(frozen=True, slots=True)
class ReplyContent:
    """Send an adapter's reply that carries a message (a get's answer)."""

    conn_id: int
    channel: int
    frame: Any
    message: Message


@dataclass(slots=True)
class Deliver:
    """Deliver `message` to a consumer (its exchange and routing key are the message's) as
    delivery `delivery_id` of the session.

    The delivery hot path builds one per delivered message, so it is a plain slotted class
    (a frozen dataclass's __init__ sets each field through object.__setattr__, several times
    slower); treat it as immutable like the other effects.
    """

    conn_id: int
    channel: int
    consumer_tag: str
    delivery_id: int
    redelivered: bool
    message: Message
    offset: int | None = None
    """The message's offset when it comes from a stream queue (None otherwise)."""
    delivery_count: int = 1
    """Deliveries of the message so far, this one included (1 on its first), as its queue
    counts them: what an adapter that carries a count (the shard link) passes on."""


@dataclass(frozen=True, slots=True)
class DeliverReply:
    """Deliver `message` to a direct reply-to consumer under the routing key it was published
    with (`amq.rabbitmq.reply-to.<token>`), never tracked for settlement."""

    conn_id: int
    channel: int
    consumer_tag: str
    delivery_id: int
    routing_key: str
    message: Message


@dataclass(frozen=True, slots=True)
class Bounce:
    """Hand an unroutable publish that asked to be told back to its publisher (`reason`:
    "NO_ROUTE")."""

    conn_id: int
    channel: int
    reason: str
    message: Message


@dataclass(frozen=True, slots=True)
class Confirm:
    """Settle publishes for their publisher: accepted (`ok`) or refused (`reason`:
    "overflow", "address-full", "store-failed"), up to and including publish sequence number
    `seq` when `multiple`, else that one."""

    conn_id: int
    channel: int
    seq: int
    multiple: bool
    ok: bool
    reason: str | None = None


@dataclass(frozen=True, slots=True)
class CancelConsumer:
    """Tell a consumer that the broker ended its subscription (its queue was deleted)."""

    conn_id: int
    channel: int
    consumer_tag: str


@dataclass(frozen=True, slots=True)
class Drained:
    """A draining consumer had `credit` left that no message could use: it is spent (AMQP 1.0
    flow with drain: the sender advances its delivery count and echoes a flow)."""

    conn_id: int
    channel: int
    consumer_tag: str
    credit: int


@dataclass(frozen=True, slots=True)
class CloseConnection:
    """Close a connection from the broker side (management, vhost deleted)."""

    conn_id: int
    condition: Condition
    text: str


@dataclass(frozen=True, slots=True)
class CloseChannel:
    """Close one session from the broker side: a delivery passed its consumer timeout.

    Each adapter says it in its protocol's words (a session close with `condition`, a link
    detach, an error frame or a disconnect). The core has already ended `consumer_tag` (if
    any) and returned its unacknowledged messages.
    """

    conn_id: int
    channel: int
    consumer_tag: str | None
    condition: Condition
    text: str


@dataclass(frozen=True, slots=True)
class Block:
    """Tell this publishing connection it is blocked and stop reading from it."""

    conn_id: int
    reason: str


@dataclass(frozen=True, slots=True)
class Unblock:
    """Tell the connection it is unblocked and resume reading."""

    conn_id: int


@dataclass(frozen=True, slots=True)
class ActivateConsumer:
    """A waiting single-active-consumer subscription becomes the active one of its group
    (core/streamsac.py): its adapter tells its client (the stream protocol's consumer update)."""

    conn_id: int
    subscription_id: int


@dataclass(frozen=True, slots=True)
class DefinitionAnswered:
    """Shard 0 made (`condition` None) or refused the definition change a parked command of
    this connection asked for (core/asks.py): its adapter runs the command again, now
    local, or answers the refusal."""

    conn_id: int
    channel: int
    rid: int
    condition: Condition | None
    text: str = ""


Effect = (
    Reply
    | ReplyContent
    | Deliver
    | DeliverReply
    | Bounce
    | Confirm
    | CancelConsumer
    | Drained
    | CloseConnection
    | CloseChannel
    | Block
    | Unblock
    | ActivateConsumer
    | DefinitionAnswered
)
