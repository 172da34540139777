"""A virtual host: its exchanges, its queues and the routing between them.

Theory of operation: `VHost` owns the name spaces of exchanges and queues and resolves a publish
(exchange, routing key, headers) to the set of queues it reaches. Resolution walks exchange-to-
exchange bindings breadth-first with a visited set (so binding cycles terminate, as in RabbitMQ's
`rabbit_exchange:route`), and falls back to an exchange's alternate exchange (argument or policy)
when that exchange itself matched nothing. Results are cached per (exchange, routing key) unless
an exchange on the path routes on headers, and the default exchange's per queue name
(`direct`: a publish then builds no tuple); every binding, queue or exchange change clears the
caches (changes are rare, publishes are not).

A `QueueEntity` wraps one engine `Queue` with what AMQP adds: declare flags, owner connection
of an exclusive queue, consumers, the no-local rule (`NoLocal`) and the bookkeeping for
auto-delete and `x-expires`.
Pure: no I/O, no clock.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Final, Protocol

from ringmq.core.consumers import ConsumerSet
from ringmq.core.exchange import Exchange
from ringmq.core.queue import Queue
from ringmq.core.routing import EXCHANGE, QUEUE, Dest, ExchangeType
from ringmq.core.settings import QueueSettings
from ringmq.core.streamlog import StreamLog

STANDARD_EXCHANGES: Final = (
    ("", ExchangeType.DIRECT),
    ("amq.direct", ExchangeType.DIRECT),
    ("amq.fanout", ExchangeType.FANOUT),
    ("amq.topic", ExchangeType.TOPIC),
    ("amq.headers", ExchangeType.HEADERS),
    ("amq.match", ExchangeType.HEADERS),
)
"""The exchanges every vhost has (RabbitMQ's default set)."""

ROUTE_CACHE_MAX: Final = 65_536
"""Cached (exchange, routing key) routes per vhost before the cache is reset."""
OWNER_PROPERTY: Final = "container_id"
"""The client property in which an adapter names its connection's owner identity (AMQP 1.0:
the open's container id), the key of an owner's no-local rule (`NoLocal`)."""


class Peer(Protocol):
    """What the no-local rule reads of a connection (`session.Conn`; named here by what it
    provides, so that this module, below the sessions, imports none)."""

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

    def expires_at_ms(self) -> int | None:
        """When an unused queue expires (`x-expires`), or None."""
        expires = self.settings.expires_ms
        if expires is None or self.consumers:
            return None
        return self.last_used_ms + expires


class VHost:
    """Exchanges, queues and routing of one virtual host.

    Args:
        name: vhost name.
        alternate_of: looks up an exchange's `alternate-exchange` policy (None: none); the
            argument on the exchange wins over the policy, as in RabbitMQ.
    """

    def __init__(
        self, name: str, alternate_of: Callable[[str, Exchange], str | None] | None = None
    ) -> None:
        self.name = name
        self.exchanges: dict[str, Exchange] = {}
        self.queues: dict[str, QueueEntity] = {}
        self._cache: dict[tuple[str, str], tuple[QueueEntity, ...]] = {}
        self.direct: dict[str, tuple[QueueEntity, ...]] = {}
        """The default exchange's cached routes: queue name -> (that queue,), filled by
        `route` (the publish pipeline reads it first); cleared with the route cache."""
        self._alternate_policy = alternate_of
        for xname, kind in STANDARD_EXCHANGES:
            self.exchanges[xname] = Exchange(xname, kind, durable=True)

    def invalidate(self) -> None:
        """Forget cached routes (call after any binding, queue or exchange change)."""
        self._cache.clear()
        self.direct.clear()

    def alternate_of(self, exchange: Exchange) -> str | None:
        """The effective alternate exchange of `exchange` (argument, then policy)."""
        ae = exchange.alternate_exchange
        if ae is None and self._alternate_policy is not None:
            ae = self._alternate_policy(self.name, exchange)
        return ae

    def route(
        self, exchange: Exchange, routing_key: str, headers: Mapping[str, Any] | None
    ) -> tuple[QueueEntity, ...]:
        """Queues reached by a message published to `exchange` (deduplicated, stable order)."""
        if exchange.name == "":
            hit = self.direct.get(routing_key)
            if hit is None:
                q = self.queues.get(routing_key)
                if q is None:
                    return ()
                hit = self.direct[routing_key] = (q,)
            return hit
        key = (exchange.name, routing_key)
        hit = self._cache.get(key)
        if hit is not None:
            return hit
        found, cacheable = self._walk(exchange, routing_key, headers)
        if cacheable:
            if len(self._cache) >= ROUTE_CACHE_MAX:
                self._cache.clear()  # many distinct keys: start over rather than grow forever
            self._cache[key] = found
        return found

    def _walk(
        self, start: Exchange, routing_key: str, headers: Mapping[str, Any] | None
    ) -> tuple[tuple[QueueEntity, ...], bool]:
        seen: set[str] = {start.name}
        work: list[Exchange] = [start]
        out: dict[str, QueueEntity] = {}
        cacheable = True
        queues = self.queues
        exchanges = self.exchanges
        i = 0
        while i < len(work):
            x = work[i]
            i += 1
            if x.uses_headers:
                cacheable = False
            dests: list[Dest] = x.route(routing_key, headers)
            if not dests:
                ae = self.alternate_of(x)
                if ae is not None:
                    dests = [(EXCHANGE, ae)]
            for kind, name in dests:
                if kind == QUEUE:
                    q = queues.get(name)
                    if q is not None and name not in out:
                        out[name] = q
                elif name not in seen:
                    seen.add(name)
                    nxt = exchanges.get(name)
                    if nxt is not None:
                        work.append(nxt)
        return tuple(out.values()), cacheable

    def bindings_to(self, dest: Dest) -> list[tuple[Exchange, str, dict[str, Any]]]:
        """Every (source, routing key, arguments) bound to `dest`."""
        out: list[tuple[Exchange, str, dict[str, Any]]] = []
        for x in self.exchanges.values():
            out.extend(
                (x, b.routing_key, b.arguments) for b in x.bindings.values() if b.dest == dest
            )
        return out

    def remove_dest(self, dest: Dest) -> list[Exchange]:
        """Drop every binding to `dest`; returns the source exchanges that lost bindings."""
        touched = [x for x in self.exchanges.values() if x.unbind_dest(dest)]
        self.invalidate()
        return touched
