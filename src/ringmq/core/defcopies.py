"""A shard's copy of shard 0's definitions, kept by applying its feed (`DefinitionCopies`).

Theory of operation
-------------------
Shard 0's feed (`core/deffeed.py`) is a sequence of `DefinitionChange`s, each stating what
one definition key holds now (None: deleted). `DefinitionCopies` applies them in order
(`Broker.apply_definitions`, one core call), which is idempotent and tolerant of order inside
one sync (a binding whose queue went is skipped, a queue deleted with its vhost is already
gone). A queue the change places on this shard is created here as this shard's own (stored in
its store when durable); any other becomes a copy owned by its shard (`Topology.create_copy`):
routed to, forwarded (core/forwarding.py), consumed through the owner (core/remotes.py). A
policy change re-resolves the settings of the vhost's queues, as on shard 0. The changes are
made with the owners' own steps (no client checks: shard 0 checked them), inside the caller's
core call, so a deleted vhost closes its connections here too and a deleted queue cancels its
consumers here too. Not yet: a queue of this shard that shard 0 moved or whose arguments it
updated keeps what it has (logged); an exclusive queue placed here comes with its connection,
not from the feed.

Pure: no I/O, no clock (`now_ms` is an argument).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Iterable, Mapping
from typing import TYPE_CHECKING, Any

from ringmq.core.deffeed import DefinitionChange, definitions_view
from ringmq.core.defsync import args_back
from ringmq.core.routing import QUEUE, ExchangeType
from ringmq.core.settings import SettingsError
from ringmq.core.storeport import (
    BINDING,
    EXCHANGE_DEF,
    GLOBAL_PARAMETER,
    KINDS,
    PARAMETER,
    PERMISSION,
    POLICY,
    QUEUE_DEF,
    SEP,
    TOPIC_PERMISSION,
    USER,
    VHOST,
)

if TYPE_CHECKING:
    from ringmq.core.restore import Restore
    from ringmq.core.state import State
    from ringmq.core.topology import Topology
    from ringmq.core.vhost import VHost

log = logging.getLogger(__name__)

__all__ = ["DefinitionCopies"]


class DefinitionCopies:
    """A shard's copy of shard 0's definitions, kept by applying its changes (module
    docstring).

    Args:
        state: this shard's registry.
        restore, topology: the owners whose steps make the changes (recovery's, with no
            client checks, and the topology's).
        shard: this shard's index (a queue placed on it is its own, not a copy).
    """

    def __init__(self, state: State, restore: Restore, topology: Topology, shard: int) -> None:
        self.state = state
        self.restore = restore
        self.exchanges = topology.exchanges
        self.topology = topology
        self.shard = shard
        self._apply: dict[str, Callable[[str, Mapping[str, Any] | None, int], None]] = {
            VHOST: self._vhost,
            USER: self._user,
            PERMISSION: self._permission,
            TOPIC_PERMISSION: self._topic_permission,
            POLICY: self._policy,
            PARAMETER: self._parameter,
            GLOBAL_PARAMETER: self._global_parameter,
            EXCHANGE_DEF: self._exchange,
            QUEUE_DEF: self._queue,
            BINDING: self._binding,
        }

    def apply(self, changes: Iterable[DefinitionChange], now_ms: int) -> None:
        """Apply `changes` in order (inside a core call: the caller's). A change this shard
        cannot read (an unknown kind, a value without its fields) is logged and skipped."""
        for c in changes:
            step = self._apply.get(c.kind)
            try:
                if step is None:
                    raise ValueError(f"unknown kind {c.kind!r}")
                step(c.key, c.value, now_ms)
            except (KeyError, TypeError, ValueError) as exc:
                log.warning("definition change %d (%s %r) skipped: %r", c.seq, c.kind, c.key, exc)

    def replace(self, snapshot: list[DefinitionChange], now_ms: int) -> None:
        """Make this shard's definitions `snapshot` (every definition of shard 0 as a put):
        what it does not name is deleted first, bindings before what they join, vhosts
        last; but this shard's own queues stay (their messages are here: logged, never
        dropped on shard 0's word alone), then the snapshot is applied."""
        named = {(c.kind, c.key) for c in snapshot}
        here = definitions_view(self.state)
        gone: list[DefinitionChange] = []
        for kind in reversed(KINDS):
            for key in here[kind]:
                if (kind, key) in named:
                    continue
                if kind == QUEUE_DEF:
                    vh, vhost, name = self._in_vhost(key)
                    q = vh.queues.get(name) if vh is not None else None
                    if q is not None and q.owner is None:
                        log.warning("queue %r of vhost %r not on shard 0: kept", name, vhost)
                        continue
                gone.append(DefinitionChange(0, kind, key, None))
        self.apply(gone, now_ms)
        self.apply(snapshot, now_ms)

    # --- the small definitions --------------------------------------------------------------

    def _vhost(self, key: str, value: Mapping[str, Any] | None, now_ms: int) -> None:
        vhosts = self.state.vhosts
        if value is None:
            vh = vhosts.get(key)
            if vh is not None:
                self.topology.delete_vhost(vh, now_ms)
            return
        self.exchanges.add_vhost(key)
        _limits(self.state.limits.vhosts, key, value)

    def _user(self, key: str, value: Mapping[str, Any] | None, now_ms: int) -> None:
        auth = self.state.auth
        if value is None:
            auth.delete_user(key)
            self.state.limits.forget_user(key)
            return
        auth.add_user(
            key,
            password_hash=value.get("password_hash"),
            tags=tuple(value.get("tags", ())),
            loopback_only=bool(value.get("loopback_only", False)),
        )
        _limits(self.state.limits.users, key, value)

    def _permission(self, key: str, value: Mapping[str, Any] | None, now_ms: int) -> None:
        vhost, user = key.split(SEP, 1)
        auth = self.state.auth
        if value is None:
            auth.clear_permissions(user, vhost)
        else:
            auth.set_permissions(
                user, vhost, str(value["configure"]), str(value["write"]), str(value["read"])
            )

    def _topic_permission(self, key: str, value: Mapping[str, Any] | None, now_ms: int) -> None:
        vhost, user, exchange = key.split(SEP, 2)
        auth = self.state.auth
        if value is None:
            auth.clear_topic_permission(user, vhost, exchange)
        else:
            auth.set_topic_permission(
                user, vhost, exchange, str(value["write"]), str(value["read"])
            )

    def _policy(self, key: str, value: Mapping[str, Any] | None, now_ms: int) -> None:
        vhost, name = key.split(SEP, 1)
        policies = self.state.policies
        if value is None:
            policies.clear(name, vhost=vhost)
        else:
            policies.set(
                name,
                str(value["pattern"]),
                args_back(value.get("definition")),
                vhost=vhost,
                apply_to=str(value.get("apply_to", "all")),
                priority=int(value.get("priority", 0)),
            )
        vh = self.state.vhosts.get(vhost)
        if vh is not None:
            self.topology.reapply_settings(vh, now_ms)

    def _parameter(self, key: str, value: Mapping[str, Any] | None, now_ms: int) -> None:
        vhost, component, name = key.split(SEP, 2)
        if value is None:
            self.state.parameters.clear(vhost, component, name)
        else:
            self.state.parameters.set(vhost, component, name, value["value"])

    def _global_parameter(self, key: str, value: Mapping[str, Any] | None, now_ms: int) -> None:
        if value is None:
            self.state.parameters.clear_global(key)
        else:
            self.state.parameters.set_global(key, value["value"])

    # --- exchanges, queues, bindings -------------------------------------------------------

    def _in_vhost(self, key: str) -> tuple[VHost | None, str, str]:
        # A queue's or exchange's key: its vhost (None: gone), the vhost's name and its name
        vhost, name = key.split(SEP, 1)
        return self.state.vhosts.get(vhost), vhost, name

    def _exchange(self, key: str, value: Mapping[str, Any] | None, now_ms: int) -> None:
        vh, vhost, name = self._in_vhost(key)
        if vh is None:
            return
        x = vh.exchanges.get(name)
        if value is None:
            if x is not None:
                self.exchanges.remove_exchange(vh, x)
            return
        durable = bool(value.get("durable", True))
        kind = ExchangeType(value["type"])
        arguments = args_back(value.get("arguments"))
        auto_delete = bool(value.get("auto_delete", False))
        internal = bool(value.get("internal", False))
        if x is not None and (x.type, x.durable, x.auto_delete, x.internal, x.arguments) == (
            kind,
            durable,
            auto_delete,
            internal,
            arguments,
        ):
            return  # a redeclare that differs is refused on shard 0: only a missed delete
            # and declare changes one, and the new one (made below) replaces it in place,
            # the bindings to it kept (a snapshot names those that still hold)
        self.restore.exchange(
            vhost,
            name,
            kind,
            auto_delete=auto_delete,
            internal=internal,
            arguments=arguments,
            durable=durable,
        )
        self.state.touch(EXCHANGE_DEF, vhost, name, durable=durable)

    def _queue(self, key: str, value: Mapping[str, Any] | None, now_ms: int) -> None:
        vh, vhost, name = self._in_vhost(key)
        if vh is None:
            return
        q = vh.queues.get(name)
        if value is None:
            if q is not None:
                self.topology.delete_queue(vh, q, now_ms)
            return
        arguments = args_back(value.get("arguments"))
        shard = int(value.get("shard", 0))
        durable = bool(value.get("durable", True))
        auto_delete = bool(value.get("auto_delete", False))
        exclusive = bool(value.get("exclusive", False))
        if q is not None:
            mine = q.owner is None
            now = (self.shard if mine else q.owner, q.arguments, q.durable, q.auto_delete)
            if now == (shard, arguments, durable, auto_delete) and (
                mine or (q.exclusive_owner is not None) == exclusive
            ):
                return
            if mine:  # its arguments updated (Artemis updateQueue), or moved away
                log.warning("queue %r of vhost %r changed on shard 0: kept", name, vhost)
                return
            # a copy holds nothing: made again, what routes to it kept (a missed delete and
            # declare, seen in a snapshot)
            self.topology.delete_queue(vh, q, now_ms, keep_bindings=True)
        try:
            if shard != self.shard:
                self.topology.create_copy(
                    vhost,
                    name,
                    shard,
                    durable=durable,
                    exclusive=exclusive,
                    auto_delete=auto_delete,
                    arguments=arguments,
                    now_ms=now_ms,
                )
            elif not exclusive:  # an exclusive one of ours is made with its connection
                self.topology.create_queue(
                    vhost,
                    name,
                    durable=durable,
                    auto_delete=auto_delete,
                    arguments=arguments,
                    now_ms=now_ms,
                )
        except SettingsError as exc:  # valid on shard 0: its policies are not here yet
            log.warning("queue %r of vhost %r not copied: %s", name, vhost, exc)

    def _binding(self, key: str, value: Mapping[str, Any] | None, now_ms: int) -> None:
        vhost, source, kind, name, routing_key, raw = json.loads(key)
        vh = self.state.vhosts.get(vhost)
        if vh is None or source not in vh.exchanges:
            return
        arguments = args_back(raw)
        present = vh.queues if kind == QUEUE else vh.exchanges
        if name not in present:
            return
        topology = self.topology
        dest_type = "queue" if kind == QUEUE else "exchange"
        if value is None:
            topology.unbind_destination(vh, source, dest_type, name, routing_key, arguments)
        elif not vh.exchanges[source].has_binding((kind, name), routing_key, arguments):
            topology.bind_destination(vh, source, dest_type, name, routing_key, arguments)


def _limits(table: dict[str, dict[str, int]], name: str, value: Mapping[str, Any]) -> None:
    # A vhost's or user's limits as the change states them (none: cleared).
    stored = value.get("limits")
    if isinstance(stored, dict) and stored:
        table[name] = {str(k): int(v) for k, v in stored.items()}
    else:
        table.pop(name, None)
