"""Declarations by vhost name (`Broker.admin`), and where the effects of the broker's own
calls made outside a client read go.

Theory of operation: a caller with no session (config loading at start-up and on a reload,
`server/setup.py`; the management API, whose facade `ringmq.management.admin.CoreAdmin`
adapts HTTP to these calls) declares exchanges, queues and bindings by vhost name here. Each
call looks the vhost up and hands the declaration to its owner (`Exchanges.declare_exchange`,
`Topology.declare`, `Topology.bind_destination`), the same steps, rules and texts as a
client's declare, then writes the definitions it changed (even when it failed half-way). This
is the one copy of those steps for callers without a session.

Built from the owners it calls and the shared `State` (whose `sync_definitions` writes the
definitions), not from the broker.

`emit` is set by the composition root to the server's batch writer; `apply` hands it the
effects of a broker call that returns none to its caller (`Broker.replace_address_settings`:
a reload's new limits may deliver or dead-letter at once). Without `emit` they are kept in
`pending` for `drain_effects()`. `parameters` hands the runtime parameters table to the
same callers.

Runs on the broker's loop thread; raises `BrokerError` (or `ValueError` for an empty name).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from ringmq.core.effects import Effect

if TYPE_CHECKING:
    from ringmq.core.exchanges import Exchanges
    from ringmq.core.parameters import Parameters
    from ringmq.core.state import State
    from ringmq.core.topology import Topology


class Declarations:
    """By-name declarations for callers with no session, and the effects hook (module
    docstring)."""

    def __init__(self, state: State, exchanges: Exchanges, topology: Topology) -> None:
        self.state = state
        self.exchanges = exchanges
        self.topology = topology
        self.emit: Callable[[list[Effect]], None] | None = None
        self.pending: list[Effect] = []

    def apply(self, effects: list[Effect]) -> None:
        """Hand `effects` to `emit` (else keep them in `pending`)."""
        if not effects:
            return
        if self.emit is not None:
            self.emit(effects)
        else:
            self.pending.extend(effects)

    @property
    def parameters(self) -> Parameters:
        """The runtime parameters kept from definitions (`core/parameters.py`): callers
        without a session (the management API) read and change them here."""
        return self.state.parameters

    def drain_effects(self) -> list[Effect]:
        """Effects `apply` kept while no `emit` was set."""
        out, self.pending = self.pending, []
        return out

    def declare_exchange(
        self,
        vhost: str,
        name: str,
        *,
        type: str = "direct",
        durable: bool = True,
        auto_delete: bool = False,
        internal: bool = False,
        arguments: Mapping[str, Any] | None = None,
        now_ms: int = 0,
    ) -> bool:
        """Declare an exchange (`Exchanges.declare_exchange`); True when created."""
        exchanges = self.exchanges
        try:
            return exchanges.declare_exchange(
                exchanges.vhost(vhost),
                name,
                type,
                durable=durable,
                auto_delete=auto_delete,
                internal=internal,
                arguments=arguments,
            )
        finally:
            self.state.sync_definitions(full=True)

    def declare_queue(
        self,
        vhost: str,
        name: str,
        *,
        durable: bool = True,
        auto_delete: bool = False,
        arguments: Mapping[str, Any] | None = None,
        now_ms: int = 0,
    ) -> bool:
        """Declare a queue (`Topology.declare`: a client's rules); True when it was created,
        False when an equivalent one exists."""
        try:
            return self.topology.declare(
                self.exchanges.vhost(vhost),
                name,
                durable=durable,
                auto_delete=auto_delete,
                arguments=arguments,
                now_ms=now_ms,
            )
        finally:
            self.state.sync_definitions(full=False)

    def bind(
        self,
        vhost: str,
        source: str,
        destination: str,
        *,
        destination_type: str = "queue",
        routing_key: str = "",
        arguments: Mapping[str, Any] | None = None,
        now_ms: int = 0,
    ) -> None:
        """Bind a queue (`Topology.bind`) or an exchange (`Exchanges.bind_exchange`) to
        exchange `source` (`Topology.bind_destination`)."""
        try:
            self.topology.bind_destination(
                self.exchanges.vhost(vhost),
                source,
                destination_type,
                destination,
                routing_key,
                arguments,
            )
        finally:
            self.state.sync_definitions(full=True)
