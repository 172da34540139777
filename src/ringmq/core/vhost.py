"""A virtual host: its exchanges, its queues and the routing between them.

Theory of operation: `VHost` owns the name spaces of exchanges and queues and resolves a publish
(exchange, routing key, headers) to the set of queues it reaches. Resolution walks exchange-to-
exchange bindings breadth-first with a visited set (so binding cycles terminate, as in RabbitMQ's
`rabbit_exchange:route`), and falls back to an exchange's alternate exchange (argument or policy)
when that exchange itself matched nothing. Results are cached per (exchange, routing key) unless
an exchange on the path routes on headers, and the default exchange's per queue name
(`direct`: a publish then builds no tuple); every binding, queue or exchange change clears the
caches (changes are rare, publishes are not).

The queues themselves (`QueueEntity`) live with their consumers in `entities.py`.
Pure: no I/O, no clock.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, Final

from ringmq.core.entities import QueueEntity
from ringmq.core.exchange import Exchange
from ringmq.core.routing import EXCHANGE, QUEUE, Dest, ExchangeType

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
