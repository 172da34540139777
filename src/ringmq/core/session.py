"""Per-connection and per-session state: deliveries, unsettled messages, prefetch, outcomes, tx.

Theory of operation: a `Session` is one open session of a client connection as the core sees it
(whatever its protocol calls it). It owns

* the delivery id counter and the unsettled map `delivery id -> Unacked` (insertion ordered by
  id, with a deque of ids so a settle of "this one and every earlier one" pops from the front
  in O(settled)); the ids are the session's, 1, 2, ... in delivery order, and an adapter whose
  protocol numbers deliveries per session that way sends them as they are;
* prefetch accounting: `prefetch_count` is what new consumers get (the RabbitMQ
  interpretation of a per-consumer limit), `global_prefetch` caps all unsettled deliveries of
  the session; `global_unacked` counts deliveries to consumers that need a settle;
* publish outcomes: the publish sequence counter, the set of outcomes held back for the
  storage layer, the "floor" at and under which every publish is settled, and the publishes
  refused above it; from these `confirm_acks` coalesces acceptances into multiple ones (the one
  place the rule below lives);
* transactions (publishes and settles buffered until a commit applies them): the session's
  own in transactional mode (`tx`: every publish and settle of the session waits), and any
  number declared beside its publish mode and named by an id of the session (`txns`,
  `Transactions.declare`: AMQP 1.0's transactions, which a transfer or disposition names);
  closing the session rolls back every one;
* the cache of its successful permission checks (`check`).

**The confirm rule.** A client reads a multiple acceptance of publish `n` as "every publish of
mine up to `n` that is still waiting is accepted" (aiormq, pika), and most drop one whose
number is not itself waiting. So a multiple acceptance names a publish accepted by that call,
and its range (the floor before it, n] holds only accepted publishes: none still held for the
fsync, none nacked (a nack splits the range: an ack below it and another above), as RabbitMQ's
`rabbit_channel` coalescing does and stricter (RabbitMQ lets a range run over an earlier nack).
Invariants: every publish at or under `confirm_floor` is settled (acked or nacked) on the wire;
every held publish is above it; every nacked one above it is in `confirm_nacked` (empty unless a
refusal came while an earlier publish was held). A publish above the floor that is neither held
nor nacked was acked singly, is acked now, or is numbered but not yet settled by its caller;
the last kind is always above every publish acked now (one publish is settled within its call;
a batch acks the publishes before a refused one, then refuses it), so the floor never moves
past the highest publish acked now.

It does not touch queues; the broker does, using what the session returns. `Conn` groups the
sessions of one connection with its user, vhost, writability and exclusive queues.
Pure: no I/O, no clock.
"""

from __future__ import annotations

from bisect import bisect_right
from collections import deque
from dataclasses import dataclass, field
from enum import Enum
from typing import TYPE_CHECKING, Any

from ringmq.core.errors import BrokerError, Condition
from ringmq.core.message import Message
from ringmq.core.texts import unknown_delivery

if TYPE_CHECKING:
    from ringmq.core.auth import Access, AuthDB, ExternalGrant
    from ringmq.core.entities import Consumer, Unacked
    from ringmq.core.exchange import Exchange
    from ringmq.core.vhost import VHost


class SettleKind(Enum):
    """What to do with settled deliveries (AMQP 1.0's outcomes; other protocols use some)."""

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
    """Publishes and settles buffered until the commit (discarded by a rollback)."""

    publishes: list[TxPublish] = field(default_factory=list)
    settles: list[tuple[SettleKind, list[Unacked]]] = field(default_factory=list)

    def discard(self) -> list[Unacked]:
        """Empty the buffer; returns the deliveries its settles took (a rollback returns
        them to their queues)."""
        entries = [e for _kind, settled in self.settles for e in settled]
        self.settles = []
        self.publishes = []
        return entries


class PublishMode(Enum):
    """What a session's publishes get back: nothing (NORMAL), each its outcome (CONFIRM,
    `effects.Confirm` by the session's publish number), or nothing until they are committed
    together (TX, the session's `TxState`)."""

    NORMAL = "normal"
    CONFIRM = "confirm"
    TX = "tx"


class Session:
    """State of one open session."""

    def __init__(self, conn: Conn, channel: int, vhost: VHost) -> None:
        self.conn = conn
        self.vhost = vhost
        self.channel = channel
        self.conn_id = conn.conn_id
        self.counts = conn.counts
        self.next_delivery_id = 1
        self.unacked: dict[int, Unacked] = {}
        self._order: deque[int] = deque()
        self.prefetch_count = 0
        self.global_prefetch = 0
        self.global_unacked = 0
        self.consumers: dict[str, Consumer] = {}
        self.mode = PublishMode.NORMAL
        self.publish_seq = 0
        self.confirm_held: set[int] = set()
        self.confirm_waits: dict[int, int] = {}
        """Held publishes that wait for more than one answer (the local fsync and other
        shards' owners, core/forwarding.py): seq -> answers still due."""
        self.confirm_floor = 0
        self.confirm_nacked: set[int] = set()  # nacked publishes above the floor (rarely any)
        self.tx: TxState | None = None
        self.txns: dict[int, TxState] = {}
        """Transactions declared on the session by id (`Transactions.declare`)."""
        self.txn_seq = 0
        self.reply_to_token: str | None = None
        self.reply_tag: str | None = None
        self.last_queue = ""
        self.perm_ok: set[tuple[str, str, str]] = set()
        self.write_ok: set[str] = set()  # exchanges this session may publish to (cached)
        self.perm_generation = 0
        self.timed_out = False
        """A delivery passed its consumer timeout: the channel is being closed."""

    # -- permissions ----------------------------------------------------------------------
    def check(self, auth: AuthDB, access: Access, kind: str, name: str) -> None:
        """Check that the session's user has `access` to resource `kind` `name` (raises
        ACCESS_REFUSED). Successful checks are cached per session; any permission change bumps
        the generation and empties the cache."""
        key = (access.value, kind, name)
        if self.perm_generation == auth.generation and key in self.perm_ok:
            return
        conn = self.conn
        auth.check(conn.user, self.vhost.name, access, kind, name, conn.grant)
        if self.perm_generation != auth.generation:
            self.perm_ok.clear()
            self.write_ok.clear()
            self.perm_generation = auth.generation
        self.perm_ok.add(key)

    def check_topic(self, auth: AuthDB, x: Exchange, access: str, routing_key: str | None) -> bool:
        """`AuthDB.check_topic` for this session (its connection's user, grant and, for MQTT,
        client id; the session's vhost)."""
        conn = self.conn
        client_id = None
        if conn.protocol.startswith("mqtt"):
            client_id = str(conn.client_properties.get("client_id", ""))
        return auth.check_topic(
            conn.user, self.vhost.name, x, access, routing_key, client_id, conn.grant
        )

    def forget_checks(self) -> None:
        """Drop the cached successful checks (the connection's grant changed: update-secret)."""
        self.perm_ok.clear()
        self.write_ok.clear()

    # -- deliveries -----------------------------------------------------------------------
    def track(self, entry: Unacked) -> int:
        """Allocate the next delivery id for a delivery that needs a settle and remember it."""
        delivery_id = self.next_delivery_id
        self.next_delivery_id = delivery_id + 1
        entry.delivery_id = delivery_id
        self.unacked[delivery_id] = entry
        self._order.append(delivery_id)
        consumer = entry.consumer
        if consumer is not None:
            consumer.unacked += 1
            self.global_unacked += 1
        return delivery_id

    def next_untracked_id(self) -> int:
        """A delivery id for a delivery settled as it goes (nothing to remember)."""
        delivery_id = self.next_delivery_id
        self.next_delivery_id = delivery_id + 1
        return delivery_id

    def take(self, delivery_id: int, multiple: bool) -> list[Unacked]:
        """Remove and return the deliveries a settle names, in delivery order.

        `multiple=True` with id 0 means every outstanding delivery (RabbitMQ). An unknown id
        raises PRECONDITION_FAILED with RabbitMQ's text (`texts.unknown_delivery`; the session
        then closes).
        """
        unacked = self.unacked
        if multiple:
            if delivery_id != 0 and delivery_id not in unacked:
                raise BrokerError(Condition.PRECONDITION_FAILED, unknown_delivery(delivery_id))
            upto = delivery_id if delivery_id else self.next_delivery_id
            out: list[Unacked] = []
            order = self._order
            while order and order[0] <= upto:
                entry = unacked.pop(order.popleft(), None)
                if entry is not None:
                    out.append(entry)
            self._release(out)
            return out
        entry = unacked.pop(delivery_id, None)
        if entry is None:
            raise BrokerError(Condition.PRECONDITION_FAILED, unknown_delivery(delivery_id))
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

    # -- publish outcomes -----------------------------------------------------------------
    def next_publish_seq(self) -> int:
        """Sequence number of the next publish that wants its outcome."""
        self.publish_seq += 1
        return self.publish_seq

    def next_publish_seqs(self, n: int) -> range:
        """`next_publish_seq` of `n` publishes at once."""
        first = self.publish_seq + 1
        self.publish_seq += n
        return range(first, first + n)

    def confirm_acks(self, released: list[int]) -> list[tuple[int, bool]]:
        """(seq, multiple) acceptances to send for `released` publish seqs (now confirmed), in
        seq order; the seqs leave the held set.

        The seqs at or under the new floor (everything under the lowest still held) are
        coalesced into one `multiple=True` ack, or one per run between nacked publishes (the
        confirm rule in the module docstring); the ones above it are acked singly.
        """
        held = self.confirm_held
        if held:
            for q in released:
                held.discard(q)
        if not released:
            return []
        ordered = released if len(released) == 1 else sorted(released)
        prev = self.confirm_floor
        top = ordered[-1]
        # The new floor: under the lowest held publish, and not past the highest acked now (a
        # publish numbered after it may still be settling in its caller: a batch's nack).
        floor = top if not held else min(top, min(held) - 1)
        n_below = bisect_right(ordered, floor) if floor < top else len(ordered)
        out: list[tuple[int, bool]] = []
        nacked = self.confirm_nacked
        if n_below:
            if nacked:
                self._split_acks(ordered, n_below, prev, out)
            else:
                tag = ordered[n_below - 1]
                out.append((tag, tag - prev > 1))
        if n_below < len(ordered):
            out.extend((q, False) for q in ordered[n_below:])
        self._raise_floor(floor)
        return out

    def _split_acks(
        self, ordered: list[int], n_below: int, prev: int, out: list[tuple[int, bool]]
    ) -> None:
        # The coalescible acks `ordered[:n_below]`, one multiple ack per run between nacked
        # publishes: a range never covers a nack (the confirm rule).
        cuts = sorted(n for n in self.confirm_nacked if n < ordered[n_below - 1])
        lo = prev  # the range of the next ack starts above it
        tag = 0  # the highest seq of the run being built (0: none yet)
        i = 0
        for q in ordered[:n_below]:
            if i < len(cuts) and cuts[i] < q:
                if tag:
                    out.append((tag, tag - lo > 1))
                    tag = 0
                while i < len(cuts) and cuts[i] < q:
                    lo = cuts[i]
                    i += 1
            tag = q
        out.append((tag, tag - lo > 1))

    def confirm_nack(self, seq: int) -> None:
        """Publish `seq` is refused: it leaves the held set, and the next multiple acks stop
        below it (the caller sends its negative confirm)."""
        self.confirm_held.discard(seq)
        if self.confirm_waits:
            self.confirm_waits.pop(seq, None)
        floor = self.confirm_floor
        if seq == floor + 1:  # nothing waits under it (held ones are above the floor)
            self._raise_floor(seq)
        elif seq > floor:
            self.confirm_nacked.add(seq)

    def _raise_floor(self, floor: int) -> None:
        # The floor moves up to `floor` and on over the nacks just above it; the nacks at or
        # under it are forgotten (no range reaches down to them any more).
        nacked = self.confirm_nacked
        if nacked:
            while floor + 1 in nacked:
                floor += 1
            self.confirm_nacked = {n for n in nacked if n > floor}
        self.confirm_floor = floor


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
        sessions: open sessions by number.
        exclusive_queues: names of exclusive queues it owns.
        protocol: the adapter's protocol label (`amqp091`, `amqp10`, `stomp`, `mqtt311`, ...).
        counts: that protocol's message counters (shared by its connections).
        grant: what its login's backend granted when not the user table (a token, LDAP):
            it answers this connection's checks alone (`core.auth`); None: the tables answer.
        parks: its adapter parks a command whose definition step shard 0 makes (core/asks.py);
            on a shard that follows shard 0 the others' steps stay local (a gap).
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
    grant: ExternalGrant | None = None
    parks: bool = False

    def regrant(self, grant: ExternalGrant) -> None:
        """A fresh token's grant replaces this connection's (update-secret,
        `AuthDB.update_secret`): its sessions drop their cached checks and check again."""
        self.grant = grant
        for s in self.sessions.values():
            s.forget_checks()

    @property
    def cancel_notify(self) -> bool:
        """True when the client accepts a consumer cancelled by the broker (a capability)."""
        caps = self.client_properties.get("capabilities")
        return isinstance(caps, dict) and bool(caps.get("consumer_cancel_notify"))
