"""Per-connection and per-channel state: delivery tags, unacked messages, prefetch, confirms, tx.

Theory of operation: a `Session` is one open session of a client connection as the core sees it
(an AMQP 0-9-1 channel, an AMQP 1.0 session). It owns

* the delivery-tag counter and the unacked map `tag -> Unacked` (insertion ordered by tag, with a
  deque of tags so `multiple=True` settles pop from the front in O(settled));
* prefetch accounting: `prefetch_count` is what new consumers get (basic.qos global=false, the
  RabbitMQ interpretation), `global_prefetch` caps all unacked deliveries of the channel
  (global=true); `global_unacked` counts deliveries to consumers that need an ack;
* publisher confirms: the publish sequence counter, the set of confirms held back for the storage
  layer, and the "floor" under which every sequence number has been confirmed (to coalesce
  `multiple=True` acks);
* the transaction buffer (publishes and settles applied at tx.commit);
* the cache of its successful permission checks (`check`).

It does not touch queues; the broker does, using what the session returns. `Conn` groups the
sessions of one connection with its user, vhost, writability and exclusive queues.
Pure: no I/O, no clock.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from enum import Enum
from typing import TYPE_CHECKING, Any

from ringmq.core.errors import BrokerError, Condition
from ringmq.core.message import Message, SeqId

if TYPE_CHECKING:
    from ringmq.core.auth import Access, AuthDB
    from ringmq.core.consumers import Consumer
    from ringmq.core.vhost import QueueEntity, VHost


@dataclass(slots=True)
class Unacked:
    """A delivery waiting for ack/nack/reject on its channel.

    Attributes:
        queue: the queue it came from.
        seq: its sequence number in that queue.
        consumer: the consumer it was delivered to (None for basic.get).
        browse: True for a non-destructive (browsing) delivery: settling it does not touch the
            queue.
        tag: its delivery tag (set by `Session.track`; orders deliveries by consumption).
    """

    queue: QueueEntity
    seq: SeqId
    consumer: Consumer | None
    browse: bool = False
    tag: int = 0


class SettleKind(Enum):
    """What to do with settled deliveries (AMQP 1.0's outcomes; 0-9-1 uses three of them)."""

    ACK = "ack"  # accepted: delete
    REQUEUE = (
        "requeue"  # modified, delivery failed: back to its position, counted (x-delivery-limit)
    )
    RELEASE = "release"  # released: back to its position, not counted as a failed delivery
    REJECT = "reject"  # rejected: drop or dead-letter (reason "rejected")


@dataclass(slots=True)
class TxPublish:
    """A publish buffered by a transaction."""

    exchange: str
    routing_key: str
    mandatory: bool
    message: Message


@dataclass(slots=True)
class TxState:
    """Publishes and settles buffered until tx.commit (discarded by tx.rollback)."""

    publishes: list[TxPublish] = field(default_factory=list)
    settles: list[tuple[SettleKind, list[Unacked]]] = field(default_factory=list)


class ChannelMode(Enum):
    NORMAL = "normal"
    CONFIRM = "confirm"
    TX = "tx"


class Session:
    """State of one open channel."""

    def __init__(self, conn: Conn, channel: int, vhost: VHost) -> None:
        self.conn = conn
        self.vhost = vhost
        self.channel = channel
        self.conn_id = conn.conn_id
        self.counts = conn.counts
        self.next_tag = 1
        self.unacked: dict[int, Unacked] = {}
        self._order: deque[int] = deque()
        self.prefetch_count = 0
        self.global_prefetch = 0
        self.global_unacked = 0
        self.consumers: dict[str, Consumer] = {}
        self.mode = ChannelMode.NORMAL
        self.publish_seq = 0
        self.confirm_held: set[int] = set()
        self.confirm_floor = 0
        self.tx: TxState | None = None
        self.reply_to_token: str | None = None
        self.reply_tag: str | None = None
        self.last_queue = ""
        self.perm_ok: set[tuple[str, str, str]] = set()
        self.write_ok: set[str] = set()  # exchanges this channel may publish to (cached)
        self.perm_generation = 0
        self.part_of: int | None = None
        """The client session this one serves, when an adapter opened it as a helper (AMQP
        1.0's confirm and transaction sessions): management shows it as part of that one."""

    # -- permissions ----------------------------------------------------------------------
    def check(self, auth: AuthDB, access: Access, kind: str, name: str) -> None:
        """Check that the session's user has `access` to resource `kind` `name` (raises
        ACCESS_REFUSED). Successful checks are cached per session; any permission change bumps
        the generation and empties the cache."""
        key = (access.value, kind, name)
        if self.perm_generation == auth.generation and key in self.perm_ok:
            return
        conn = self.conn
        auth.check(conn.user, conn.vhost, access, kind, name)
        if self.perm_generation != auth.generation:
            self.perm_ok.clear()
            self.write_ok.clear()
            self.perm_generation = auth.generation
        self.perm_ok.add(key)

    # -- deliveries -----------------------------------------------------------------------
    def track(self, entry: Unacked) -> int:
        """Allocate the next delivery tag for an ack-required delivery and remember it."""
        tag = self.next_tag
        self.next_tag = tag + 1
        entry.tag = tag
        self.unacked[tag] = entry
        self._order.append(tag)
        consumer = entry.consumer
        if consumer is not None:
            consumer.unacked += 1
            self.global_unacked += 1
        return tag

    def next_untracked_tag(self) -> int:
        """A delivery tag for a no-ack delivery (nothing to remember)."""
        tag = self.next_tag
        self.next_tag = tag + 1
        return tag

    def take(self, delivery_tag: int, multiple: bool) -> list[Unacked]:
        """Remove and return the deliveries a settle names, in delivery order.

        `multiple=True` with tag 0 means every outstanding delivery (RabbitMQ). An unknown tag
        raises PRECONDITION_FAILED "unknown delivery tag N" (the channel then closes).
        """
        unacked = self.unacked
        if multiple:
            if delivery_tag != 0 and delivery_tag not in unacked:
                raise BrokerError(
                    Condition.PRECONDITION_FAILED, f"unknown delivery tag {delivery_tag}"
                )
            upto = delivery_tag if delivery_tag else self.next_tag
            out: list[Unacked] = []
            order = self._order
            while order and order[0] <= upto:
                entry = unacked.pop(order.popleft(), None)
                if entry is not None:
                    out.append(entry)
            self._release(out)
            return out
        entry = unacked.pop(delivery_tag, None)
        if entry is None:
            raise BrokerError(Condition.PRECONDITION_FAILED, f"unknown delivery tag {delivery_tag}")
        order = self._order
        while order and order[0] not in unacked:
            order.popleft()
        self._release((entry,))
        return [entry]

    def take_all(self) -> list[Unacked]:
        """Remove and return every outstanding delivery, in delivery order."""
        out = list(self.unacked.values())
        self.unacked.clear()
        self._order.clear()
        self._release(out)
        return out

    def _release(self, entries: Any) -> None:
        for entry in entries:
            consumer = entry.consumer
            if consumer is not None:
                consumer.unacked -= 1
                self.global_unacked -= 1

    # -- publisher confirms ---------------------------------------------------------------
    def next_publish_seq(self) -> int:
        """Sequence number of the next publish on a confirm channel."""
        self.publish_seq += 1
        return self.publish_seq

    def next_publish_seqs(self, n: int) -> range:
        """`next_publish_seq` of `n` publishes at once."""
        first = self.publish_seq + 1
        self.publish_seq += n
        return range(first, first + n)

    def confirm_acks(self, released: list[int]) -> list[tuple[int, bool]]:
        """(delivery_tag, multiple) acks to send for `released` publish seqs (now confirmed).

        Seqs are removed from the held set. When the confirmed floor moves past several released
        seqs they are coalesced into one `multiple=True` ack, as RabbitMQ does.
        """
        held = self.confirm_held
        for s in released:
            held.discard(s)
        prev = self.confirm_floor
        floor = (min(held) - 1) if held else self.publish_seq
        self.confirm_floor = floor
        below = [s for s in released if s <= floor]
        out: list[tuple[int, bool]] = []
        if below:
            if floor - prev > 1:
                out.append((floor, True))
            else:
                out.append((floor, False))
        out.extend((s, False) for s in sorted(released) if s > floor)
        return out


class ProtocolCounts:
    """Message counters of every connection of one protocol (the `/metrics` series labelled
    `protocol`, as rabbitmq_prometheus splits its global counters). Each `Conn` holds its
    protocol's instance and each `Session` a reference to it, so a counted step adds to one
    attribute of a session it already holds."""

    __slots__ = (
        "acknowledged",
        "confirmed",
        "delivered_auto",
        "delivered_manual",
        "get_auto",
        "get_empty",
        "get_manual",
        "received",
        "redelivered",
        "returned",
        "unroutable",
    )

    def __init__(self) -> None:
        self.received = 0
        self.unroutable = 0
        self.returned = 0
        self.confirmed = 0
        self.delivered_manual = 0
        self.delivered_auto = 0
        self.get_manual = 0
        self.get_auto = 0
        self.get_empty = 0
        self.redelivered = 0
        self.acknowledged = 0


@dataclass(slots=True)
class Conn:
    """One client connection as the core sees it.

    Attributes:
        conn_id: the server's id for it.
        user: authenticated user name.
        vhost: the vhost it opened.
        peer: peer address text (for listings).
        client_properties: the client's Connection.StartOk properties.
        opened_ms: when it opened.
        writable: False while its socket buffer is full (no dispatch to it).
        sessions: open channels by number.
        exclusive_queues: names of exclusive queues it owns.
        protocol: the adapter's protocol label (`amqp091`, `amqp10`, `stomp`, `mqtt311`, ...).
        counts: that protocol's message counters (shared by its connections).
    """

    conn_id: int
    user: str
    vhost: str
    peer: str = ""
    client_properties: dict[str, Any] = field(default_factory=dict)
    opened_ms: int = 0
    writable: bool = True
    sessions: dict[int, Session] = field(default_factory=dict)
    exclusive_queues: set[str] = field(default_factory=set)
    protocol: str = "amqp091"
    counts: ProtocolCounts = field(default_factory=ProtocolCounts)

    @property
    def cancel_notify(self) -> bool:
        """True when the client understands server-sent basic.cancel (capability advertised)."""
        caps = self.client_properties.get("capabilities")
        return isinstance(caps, dict) and bool(caps.get("consumer_cancel_notify"))
