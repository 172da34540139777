"""Exchanges: declared attributes, their bindings and (for x-delayed-message) held messages.

Theory of operation: an `Exchange` owns its binding table (`ringmq.core.routing`) and the
canonical list of its bindings (for listing, unbinding and auto-delete). It does not know
queues: routing returns `Dest` tuples and the vhost resolves them (following e2e bindings and
the alternate exchange). A delayed exchange (`x-delayed-message`) routes with the table of its
`x-delayed-type`; messages carrying a positive `x-delay` header are held in a heap ordered by
(due_ms, arrival) and released by `take_due(now_ms)`. Pure: no I/O, no clock.
"""

from __future__ import annotations

import heapq
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from ringmq.core.message import Message
from ringmq.core.routing import (
    BindingKey,
    Dest,
    ExchangeType,
    Table,
    binding_key,
    new_table,
)


@dataclass(slots=True)
class Binding:
    """One binding as listed by management: source exchange -> destination."""

    source: str
    dest: Dest
    routing_key: str
    arguments: dict[str, Any]


@dataclass(order=True, slots=True)
class _Held:
    due_ms: int
    order: int
    message: Message = field(compare=False)


class Exchange:
    """One exchange in one vhost.

    Attributes:
        name: exchange name ("" is the default exchange).
        type: its type (`ExchangeType`).
        routing_type: the type whose rules route messages (x-delayed-type for delayed ones).
        durable, auto_delete, internal: declare flags.
        arguments: declare arguments as received.
        bindings: binding identity -> Binding, in creation order.
    """

    def __init__(
        self,
        name: str,
        type_: ExchangeType,
        *,
        durable: bool = True,
        auto_delete: bool = False,
        internal: bool = False,
        arguments: Mapping[str, Any] | None = None,
        routing_type: ExchangeType | None = None,
    ) -> None:
        self.name = name
        self.type = type_
        self.routing_type = routing_type or type_
        self.durable = durable
        self.auto_delete = auto_delete
        self.internal = internal
        self.arguments: dict[str, Any] = dict(arguments or {})
        self.bindings: dict[BindingKey, Binding] = {}
        self._by_dest: dict[Dest, list[BindingKey]] = {}
        """The keys of `bindings` by destination: a queue's delete finds its bindings without
        a scan of every binding of the exchange."""
        self._table: Table = new_table(self.routing_type)
        self._held: list[_Held] = []
        self._held_order = 0

    @property
    def uses_headers(self) -> bool:
        """True when routing looks at message headers (route results are not cacheable)."""
        return self._table.uses_headers

    @property
    def alternate_exchange(self) -> str | None:
        """The `alternate-exchange` argument, if any (policies are applied by the vhost)."""
        ae = self.arguments.get("alternate-exchange")
        if isinstance(ae, bytes):
            ae = ae.decode("utf-8", "replace")
        return ae if isinstance(ae, str) else None

    def bind(self, dest: Dest, routing_key: str, arguments: Mapping[str, Any] | None) -> bool:
        """Add a binding; False when an identical binding already exists (idempotent)."""
        args = dict(arguments or {})
        key = binding_key(dest, routing_key, args)
        if key in self.bindings:
            return False
        self._table.add(dest, routing_key, args)  # may raise ValueError (bad x-match)
        self.bindings[key] = Binding(self.name, dest, routing_key, args)
        self._by_dest.setdefault(dest, []).append(key)
        return True

    def unbind(self, dest: Dest, routing_key: str, arguments: Mapping[str, Any] | None) -> bool:
        """Remove a binding; False when it did not exist."""
        args = dict(arguments or {})
        key = binding_key(dest, routing_key, args)
        if self.bindings.pop(key, None) is None:
            return False
        keys = self._by_dest[dest]
        keys.remove(key)
        if not keys:
            del self._by_dest[dest]
        self._table.remove(dest, routing_key, args)
        return True

    def unbind_dest(self, dest: Dest) -> int:
        """Remove every binding to `dest` (the queue or exchange is going); returns the count."""
        keys = self._by_dest.pop(dest, ())
        for k in keys:
            b = self.bindings.pop(k)
            self._table.remove(dest, b.routing_key, b.arguments)
        return len(keys)

    def clear_bindings(self) -> None:
        """Forget every binding (the exchange is going; its routing table goes with it)."""
        self.bindings.clear()
        self._by_dest.clear()

    def has_binding(
        self, dest: Dest, routing_key: str, arguments: Mapping[str, Any] | None
    ) -> bool:
        """True when exactly this binding exists."""
        return binding_key(dest, routing_key, arguments) in self.bindings

    def route(self, routing_key: str, headers: Mapping[str, Any] | None) -> list[Dest]:
        """Destinations bound to this exchange that match (one level, no e2e expansion)."""
        return self._table.route(routing_key, headers)

    # -- delayed messages (x-delayed-message) -------------------------------------------------
    def hold(self, message: Message, due_ms: int, seq: int | None = None) -> int:
        """Keep `message` until `due_ms` (then `take_due` returns it for routing).

        Returns the held message's number (arrival order, 1, 2, ...): storage journals a held
        message under it. `seq` restores a recovered message under its stored number; later
        holds number on from the highest restored.
        """
        if seq is None:
            self._held_order += 1
            seq = self._held_order
        elif seq > self._held_order:
            self._held_order = seq
        heapq.heappush(self._held, _Held(due_ms, seq, message))
        return seq

    def take_due(self, now_ms: int) -> list[tuple[int, Message]]:
        """(number, message) of held messages whose time has come, in due order (ties:
        arrival order)."""
        out: list[tuple[int, Message]] = []
        held = self._held
        while held and held[0].due_ms <= now_ms:
            h = heapq.heappop(held)
            out.append((h.order, h.message))
        return out

    def next_due_ms(self) -> int | None:
        """Earliest due time of a held message."""
        return self._held[0].due_ms if self._held else None

    @property
    def held_count(self) -> int:
        """Number of messages waiting for their delay."""
        return len(self._held)

    def equivalent(
        self,
        type_: ExchangeType,
        durable: bool,
        auto_delete: bool,
        internal: bool,
        arguments: Mapping[str, Any],
    ) -> str | None:
        """None when a redeclare matches, else the name of the first differing field.

        As RabbitMQ's `assert_equivalence`: type, durable, auto_delete, internal, then
        arguments (compared as whole tables).
        """
        if type_ is not self.type:
            return "type"
        if durable != self.durable:
            return "durable"
        if auto_delete != self.auto_delete:
            return "auto_delete"
        if internal != self.internal:
            return "internal"
        if dict(arguments) != self.arguments:
            for k in sorted(set(arguments) | set(self.arguments)):
                if arguments.get(k) != self.arguments.get(k):
                    return k
        return None
