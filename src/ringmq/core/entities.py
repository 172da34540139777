"""The live objects of the delivery path: a declared queue, its consumers, the deliveries
waiting for their settlement, and what a consumer reads of its session.

Why one module: these objects refer to each other. A queue holds its consumers
(`QueueEntity.consumers`), a consumer its queue (`Consumer.queue`), a delivery waiting for its
settlement both (`Unacked`), and dispatch walks that graph on every message with the concrete
classes (`dispatch.py`). Kept together, the core's modules import each other without cycles
(`tests/unit/core/test_imports.py`, the import-linter contract in `pyproject.toml`). The
session keeps its own module (its delivery ids, confirms and transactions are a module's worth,
`core/session.py`), which holds consumers and unacked deliveries and so names this one; the
one reference back, a consumer's session, is typed by a Protocol, `ConsumerSession`: what the
consumer side (capacity, dispatch, cancel) reads and updates of a session. `session.Session`
provides it structurally (mypy checks it where a `Consumer` is made), so the objects and the
attribute accesses are the same and cost nothing at run time. A no-local rule reads
connections through a Protocol too (`Peer`).

Theory of operation
-------------------
A `QueueEntity` wraps one engine `Queue` with what AMQP adds: declare flags, owner connection
of an exclusive queue, consumers, the no-local rule (`NoLocal`) and the bookkeeping for
auto-delete and `x-expires`.

A `ConsumerSet` keeps a queue's consumers in registration order and, for
dispatch, grouped by `x-priority` (highest first) with a round-robin cursor per group. `pick()`
returns the next consumer that can take a message: the highest-priority group that has any
consumer with capacity wins (RabbitMQ consumer priorities), and within a group consumers take
turns. With single-active-consumer only one consumer is eligible: the earliest registered one
of the highest priority; when it goes, the next one takes over. A *browsing* consumer (AMQP 1.0
distribution mode `copy`) is in `all` and `browsers` but in no priority group: `pick()` never
returns it, dispatch serves it through its own cursor instead (dispatch.py,
`Dispatcher._dispatch_browse`).
A consumer with a JMS selector (also in `selective`) takes its turn like any other, in its
priority group and under single-active-consumer, as Artemis serves filtered consumers round
robin with the others: when `pick()` returns it, dispatch hands it the first message its
selector matches (`Dispatcher._dispatch`), and a consumer that finds none is passed
over (`skip`) for the rest of that round. `fetchers` are the consumers that take messages
(all but the browsers); `special` says whether there are browsers or selector consumers (the
one test in front of the hot path). Capacity = the connection is
writable and (no-ack, or below both the consumer's prefetch and the channel's global prefetch).

An `Unacked` is a delivery that needs a settlement: its session keeps it by delivery id
(`Session.track`) until the client settles it or the session closes.
Pure: no I/O, no clock.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Final, Protocol

from ringmq.core.message import SeqId
from ringmq.core.queue import Queue
from ringmq.core.settings import QueueSettings
from ringmq.core.streamlog import StreamLog

if TYPE_CHECKING:
    from ringmq.core.selector import Selector

ELSEWHERE: Final = -1
"""`QueueEntity.exclusive_owner` of a copy of an exclusive queue another shard owns: its
connection is on that shard (connection ids here start at 1), so no connection here may use it."""
OWNER_PROPERTY: Final = "container_id"
"""The client property in which an adapter names its connection's owner identity (AMQP 1.0:
the open's container id), the key of an owner's no-local rule (`NoLocal`)."""


class SessionConn(Protocol):
    """What the consumer side reads of a session's connection (`session.Conn`)."""

    @property
    def writable(self) -> bool:
        """False while its socket buffer is full (no dispatch to it)."""

    @property
    def cancel_notify(self) -> bool:
        """It accepts a consumer cancelled by the broker."""

    @property
    def sessions(self) -> Mapping[int, object]:
        """Its open sessions by number."""


class DeliveryCounts(Protocol):
    """The message counters a delivery adds to (`session.ProtocolCounts`)."""

    delivered_auto: int
    delivered_manual: int
    redelivered: int


class ConsumerSession(Protocol):
    """What the consumer side (capacity, dispatch, cancel) reads and updates of the session a
    consumer lives on: `session.Session`, which names this module and so is not named here
    (the module docstring)."""

    next_delivery_id: int
    """The id of its next delivery (dispatch allocates ids of deliveries settled as they go
    inline)."""

    @property
    def conn(self) -> SessionConn:
        """Its connection."""

    @property
    def conn_id(self) -> int:
        """Its connection's id."""

    @property
    def channel(self) -> int:
        """Its number on the connection."""

    @property
    def counts(self) -> DeliveryCounts:
        """Its protocol's message counters."""

    @property
    def global_prefetch(self) -> int:
        """The cap on all its unsettled deliveries (0: none)."""

    @property
    def global_unacked(self) -> int:
        """Its deliveries to consumers that wait for a settlement."""

    @property
    def consumers(self) -> dict[str, Consumer]:
        """Its consumers by tag."""

    def track(self, entry: Unacked) -> int:
        """Allocate the next delivery id for a delivery that needs a settle and remember it."""

    def next_untracked_id(self) -> int:
        """A delivery id for a delivery settled as it goes."""


class Peer(Protocol):
    """What the no-local rule reads of a connection (`session.Conn`)."""

    @property
    def client_properties(self) -> dict[str, Any]: ...


class NoLocal:
    """A queue's no-local rule: the queue takes no message its owner publishes.

    The owner is a connection (`conn_id`, AMQP 0-9-1 `basic.consume` no-local: the rule goes
    with the consumer, `Delivery.remove_consumer`), or, when the consuming adapter supplies
    one, an owner identity (`owner`, AMQP 1.0: the client container id, as Artemis keys its
    no-local filter): then every connection whose `OWNER_PROPERTY` is that identity is the
    owner, and the rule stays with the queue while its link is detached (a durable
    subscription's). `excludes`, the one place the rule is decided, is what the publish
    path asks.
    """

    __slots__ = ("conn_id", "conns", "owner")

    def __init__(self, conn_id: int, owner: str | None, conns: Mapping[int, Peer]) -> None:
        self.conn_id = conn_id
        self.owner = owner
        self.conns = conns

    def excludes(self, conn_id: int | None) -> bool:
        """True when a publish of connection `conn_id` is its owner's (None: no connection)."""
        if self.owner is None or conn_id is None:
            return conn_id == self.conn_id
        conn = self.conns.get(conn_id)
        return conn is not None and conn.client_properties.get(OWNER_PROPERTY) == self.owner

    def __repr__(self) -> str:
        if self.owner is None:
            return f"NoLocal(conn_id={self.conn_id})"
        return f"NoLocal(owner={self.owner!r})"


@dataclass(slots=True, eq=False)
class Consumer:
    """A basic.consume subscription.

    Attributes:
        tag: consumer tag (client-chosen or `amq.ctag-*`).
        session: the channel it lives on.
        queue: the queue it consumes from.
        no_ack: deliveries need no ack (and take no prefetch credit).
        exclusive: exclusive consumer (no other consumer may join).
        priority: `x-priority` (default 0).
        prefetch: per-consumer prefetch limit at consume time (0: unlimited).
        unacked: deliveries outstanding to it.
        arguments: the consume arguments.
        cursor: for a browsing consumer, the last seq browsed (None: from the head).
        browse: it reads without consuming (AMQP 1.0 distribution mode `copy`); on a
            non-destructive queue every consumer browses, whatever this says.
        credit, drain: link credit and drain mode (AMQP 1.0), see below.
        selector: a JMS selector: it takes (or browses) only the messages it matches.
        no_local: its queue does not take the messages its connection publishes.
    """

    tag: str
    session: ConsumerSession
    queue: QueueEntity
    no_ack: bool
    exclusive: bool = False
    priority: int = 0
    prefetch: int = 0
    unacked: int = 0
    arguments: dict[str, Any] = field(default_factory=dict)
    cursor: SeqId | None = None
    browse: bool = False
    selector: Selector | None = None
    no_local: bool = False
    credit: int | None = None
    """Link credit (AMQP 1.0 flow): deliveries it may still take; None: no credit, prefetch
    alone bounds it (AMQP 0-9-1)."""
    drain: bool = False
    """The receiver asked to drain: credit it cannot use now is given back (`Drained`)."""
    offset_header: bool = True
    """On a stream: each delivery carries its offset in an `x-stream-offset` header (the
    message re-encoded); False: the message as stored, the offset in `Deliver.offset` alone
    (the stream protocol, whose chunks carry offsets)."""
    chunks: bool = False
    """A stream-protocol consumer: each delivery is one stored chunk (its message's body, as
    stored; `Deliver.offset` its first offset), and credit counts chunks (RabbitMQ's)."""

    def has_capacity(self) -> bool:
        """True when a message may be delivered to it now."""
        session = self.session
        if not session.conn.writable:
            return False
        credit = self.credit
        if credit is not None and credit <= 0:
            return False
        if self.no_ack:
            return True
        if self.prefetch and self.unacked >= self.prefetch:
            return False
        g = session.global_prefetch
        return not (g and session.global_unacked >= g)


class ConsumerSet:
    """The consumers of one queue, with priority groups and round-robin dispatch."""

    def __init__(self, single_active: bool = False) -> None:
        self.single_active = single_active
        self.credited = False
        """Some consumer of the queue was ever given link credit (dispatch then counts it)."""
        self.all: list[Consumer] = []
        self.fetchers: list[Consumer] = []
        """The consumers that take messages (all but the browsers, selector consumers
        included), in registration order."""
        self.browsers: list[Consumer] = []
        """The browsing consumers (`Consumer.browse`), in registration order."""
        self.selective: list[Consumer] = []
        """The consumers with a selector that take messages (also in `fetchers`), in
        registration order."""
        self.special = False
        """There are browsers or selective consumers (dispatch serves them first)."""
        self._groups: list[tuple[int, list[Consumer]]] = []  # by priority, highest first
        self._rr: dict[int, int] = {}

    def __len__(self) -> int:
        return len(self.all)

    def __bool__(self) -> bool:
        return bool(self.all)

    @property
    def exclusive(self) -> bool:
        """True when an exclusive consumer holds the queue."""
        return any(c.exclusive for c in self.all)

    @property
    def active(self) -> Consumer | None:
        """With single-active-consumer, the consumer that receives messages: the earliest
        registered among those with the highest `x-priority` (RabbitMQ 3.12+)."""
        return self._groups[0][1][0] if self._groups else None

    def add(self, consumer: Consumer) -> None:
        """Register a consumer (it joins the end of its priority group's rotation; a browser
        joins no group)."""
        self.all.append(consumer)
        if consumer.browse:
            self.browsers.append(consumer)
            self.special = True
            return
        if consumer.selector is not None:
            self.selective.append(consumer)
            self.special = True
        self.fetchers.append(consumer)
        for prio, members in self._groups:
            if prio == consumer.priority:
                members.append(consumer)
                return
        self._groups.append((consumer.priority, [consumer]))
        self._groups.sort(key=lambda g: -g[0])

    def remove(self, consumer: Consumer) -> bool:
        """Unregister a consumer; False when it was not registered."""
        try:
            self.all.remove(consumer)
        except ValueError:
            return False
        if consumer.browse:
            self.browsers.remove(consumer)
            self.special = bool(self.browsers or self.selective)
            return True
        if consumer.selector is not None:
            self.selective.remove(consumer)
            self.special = bool(self.browsers or self.selective)
        self.fetchers.remove(consumer)
        for i, (prio, members) in enumerate(self._groups):
            if prio == consumer.priority:
                members.remove(consumer)
                if not members:
                    del self._groups[i]
                    self._rr.pop(prio, None)
                break
        return True

    def pick(self, skip: set[Consumer] | None = None) -> Consumer | None:
        """The consumer that should get the next message, or None when nobody can take one;
        consumers in `skip` (selector consumers that found nothing this round) are passed
        over, as those without capacity are."""
        if self.single_active:
            active = self.active
            if active is None or not active.has_capacity():
                return None
            return None if skip is not None and active in skip else active
        everyone = self.fetchers
        if len(everyone) == 1:
            only = everyone[0]
            if skip is not None and only in skip:
                return None
            return only if only.has_capacity() else None
        for prio, members in self._groups:
            n = len(members)
            if n == 1:
                only = members[0]
                if only.has_capacity() and (skip is None or only not in skip):
                    return only
                continue
            start = self._rr.get(prio, 0) % n
            for i in range(n):
                idx = (start + i) % n
                c = members[idx]
                if c.has_capacity() and (skip is None or c not in skip):
                    self._rr[prio] = idx + 1
                    return c
        return None


@dataclass(slots=True, eq=False)
class QueueEntity:
    """A declared queue.

    Attributes:
        name: queue name.
        vhost: vhost name.
        queue: the engine queue (order, delivery state, limits).
        settings: its effective settings.
        durable, auto_delete: declare flags.
        exclusive_owner: conn_id of the owning connection for exclusive queues.
        no_local: the no-local rule of a no-local consumer (`Delivery.consume`): the queue
            does not take the messages its owner publishes (`NoLocal`), else None.
        arguments: declare arguments as received (for redeclare checks and listings).
        consumers: its consumers.
        last_used_ms: last declare/consume/get/cancel time (for `x-expires`).
        had_consumer: auto-delete happens only after a first consumer came and went.
        deleted: set when the queue is gone (late acks become no-ops).
        deliver, deliver_no_ack, get, get_no_ack, get_empty: AMQP-level delivery totals
            (RabbitMQ's message_stats); the engine counts the rest.
        stream: a stream queue's log (`x-queue-type: stream`, core/streamlog.py), else None:
            its messages live there, not in `queue` (which stays empty), and every consumer
            reads it from its own offset.
        owner: the index of the shard that owns the queue when another shard does (this one
            holds a copy: publishes to it are forwarded, core/forwarding.py), else None.
    """

    name: str
    vhost: str
    queue: Queue
    settings: QueueSettings
    durable: bool = False
    auto_delete: bool = False
    exclusive_owner: int | None = None
    no_local: NoLocal | None = None
    arguments: dict[str, Any] = field(default_factory=dict)
    consumers: ConsumerSet = field(default_factory=ConsumerSet)
    last_used_ms: int = 0
    had_consumer: bool = False
    deleted: bool = False
    deliver: int = 0
    deliver_no_ack: int = 0
    get: int = 0
    get_no_ack: int = 0
    get_empty: int = 0
    stream: StreamLog | None = None
    owner: int | None = None

    @property
    def shard(self) -> int:
        """The shard that owns it (`core/placement.py` placed it there): `owner` for a copy,
        else this one (shard 0 while a broker is one shard)."""
        return self.owner if self.owner is not None else 0

    def expires_at_ms(self) -> int | None:
        """When an unused queue expires (`x-expires`), or None."""
        expires = self.settings.expires_ms
        if expires is None or self.consumers:
            return None
        return self.last_used_ms + expires


@dataclass(slots=True)
class Unacked:
    """A delivery waiting for its settlement on its session.

    Attributes:
        queue: the queue it came from.
        seq: its sequence number in that queue.
        consumer: the consumer it was delivered to (None for a get).
        browse: True for a non-destructive (browsing) delivery: settling it does not touch the
            queue.
        delivery_id: its id on the session (set by `Session.track`; orders deliveries by
            consumption).
        delivered_at: when it was delivered (epoch ms): the consumer timeout counts from it.
    """

    queue: QueueEntity
    seq: SeqId
    consumer: Consumer | None
    browse: bool = False
    delivery_id: int = 0
    delivered_at: int = 0
