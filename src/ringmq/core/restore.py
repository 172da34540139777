"""Recovery: durable exchanges, queues and bindings recreated from the store.

Theory of operation: `Durability.recover` reads the definitions log and calls these (recovery's
`ports.Restorer`) before the broker serves anything. They recreate without the checks of a client's
declare (the objects were valid when they were declared): an exchange keeps its type and
flags, a queue is created with its stored arguments (one whose settings no longer validate
is skipped with a log line and its messages are dropped), a binding whose ends are gone is
skipped.

Pure: no I/O, no clock.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from ringmq.core.entities import QueueEntity
from ringmq.core.exchange import Exchange
from ringmq.core.message import Message
from ringmq.core.publish import Publisher
from ringmq.core.routing import QUEUE, ExchangeType
from ringmq.core.settings import SettingsError
from ringmq.core.state import State
from ringmq.core.texts import as_str
from ringmq.core.topology import Topology
from ringmq.core.vhost import VHost

log = logging.getLogger(__name__)


class Restore:
    """Recreates stored definitions (see the module docstring)."""

    def __init__(self, state: State, topology: Topology, publisher: Publisher) -> None:
        self.state = state
        self.topology = topology
        self.publisher = publisher

    def vhost(self, name: str) -> VHost:
        """The vhost `name`, created with its standard exchanges if missing (recovery)."""
        return self.topology.exchanges.add_vhost(name)

    def recovered_queue(self, q: QueueEntity, now_ms: int) -> None:
        """Recovery put messages back into `q`: arm its timers (TTL, schedule)."""
        self.state.track_timers(q)
        self.state.mark(q)

    def held(self, vh: VHost, x: Exchange, seq: int, msg: Message, due_ms: int) -> None:
        """Delayed exchange `x` holds `msg` again (number `seq`) until `due_ms`."""
        x.hold(msg, due_ms, seq)
        self.publisher.holding[id(x)] = (vh, x)

    def exchange(
        self,
        vhost: str,
        name: str,
        kind: ExchangeType,
        *,
        auto_delete: bool,
        internal: bool,
        arguments: Mapping[str, Any],
        durable: bool = True,
    ) -> None:
        """Recreate an exchange (durable at recovery; either from the shards' definitions
        feed, core/defcopies.py)."""
        vh = self.vhost(vhost)
        routing_type = None
        if kind is ExchangeType.DELAYED:
            raw = as_str(arguments.get("x-delayed-type"))
            routing_type = ExchangeType(raw) if raw else ExchangeType.DIRECT
        vh.exchanges[name] = Exchange(
            name,
            kind,
            durable=durable,
            auto_delete=auto_delete,
            internal=internal,
            arguments=arguments,
            routing_type=routing_type,
        )
        vh.invalidate()

    def queue(
        self,
        vhost: str,
        name: str,
        *,
        auto_delete: bool,
        arguments: Mapping[str, Any],
        now_ms: int,
        shard: int | None = None,
    ) -> None:
        """Recreate a durable queue (recovery); one whose settings no longer validate is
        skipped with a log line (its messages are dropped from the store). With `shard`, the
        copy of that shard's queue that shard 0 placed there (`Topology.create_copy`)."""
        self.vhost(vhost)
        try:
            if shard is not None:
                self.topology.create_copy(
                    vhost, name, shard, durable=True, auto_delete=auto_delete,
                    arguments=arguments, now_ms=now_ms,
                )  # fmt: skip
                return
            self.topology.create_queue(
                vhost,
                name,
                durable=True,
                auto_delete=auto_delete,
                arguments=arguments,
                now_ms=now_ms,
            )
        except SettingsError as exc:
            log.warning("stored queue %r in vhost %r refused at recovery: %s", name, vhost, exc)

    def binding(
        self,
        vhost: str,
        source: str,
        dest: tuple[str, str],
        routing_key: str,
        arguments: Mapping[str, Any],
    ) -> None:
        """Recreate a binding between durable objects (recovery); dangling ones are skipped."""
        vh = self.state.vhosts.get(vhost)
        if vh is None:
            return
        x = vh.exchanges.get(source)
        kind, name = dest
        present = vh.queues if kind == QUEUE else vh.exchanges
        if x is None or name not in present:
            return
        try:
            x.bind((kind, name), routing_key, arguments)
        except ValueError:
            log.warning("stored binding %s -> %s refused at recovery", source, name)
        vh.invalidate()
