"""Which durable definitions the broker writes to the store, and when (`DefinitionSync`).

Theory of operation
-------------------
`DefinitionSync` reads the broker's definitions from a `ports.Registry` (the broker's `State`)
and writes them through a `storeport.DefinitionStorePort`. It owns a cache of the definitions
the store holds (kind -> key -> JSON-able
value: vhosts, users, permissions, policies, durable exchanges, durable non-exclusive queues,
bindings between durable objects), two indexes of the cached bindings (by source, by
destination), and the objects touched since the last sync.

After an AMQP method the broker `touch`es the queues/exchanges it created or deleted and
`touch_binding`s what it bound or unbound; `sync(full=False)` writes only those (plus the
stored bindings from/to a touched object, and the few vhosts, users, permissions and policies,
diffed whole), so a declare costs O(1) whatever the number of queues. `full=True` (management
edits that bypass the hooks, recovery) diffs a whole `snapshot`. Every write goes through
`_put`, which writes only a changed value and keeps the cache and binding indexes in step.

With `everything` the same sync serves the shards' definitions feed (`core/deffeed.py`):
its sink is the feed, not a store, and it keeps every queue, exchange and binding (transient
and exclusive ones too; a queue's value names its shard), not only the durable ones.

Invariant: after a sync, the cache equals what the store holds, and equals `snapshot()` for
everything touched. Values use `args_json` for AMQP tables (tagged JSON for bytes, decimals,
timestamps and nested tables; `args_back` reverses it). One owner thread (the broker's).
"""

from __future__ import annotations

import base64
import datetime as dt
import decimal
import json
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from ringmq.core.routing import EXCHANGE, QUEUE
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
    DefinitionStorePort,
    queue_key,
)

if TYPE_CHECKING:
    from ringmq.core.entities import QueueEntity
    from ringmq.core.exchange import Exchange
    from ringmq.core.ports import Registry
    from ringmq.core.vhost import VHost


def _to_json(value: Any) -> Any:
    # AMQP table values -> JSON with tags for the types JSON lacks (round-trips `_from_json`).
    if value is None or isinstance(value, bool | int | float | str):
        return value
    if isinstance(value, bytes | bytearray | memoryview):
        return {"$bytes": base64.b64encode(bytes(value)).decode("ascii")}
    if isinstance(value, decimal.Decimal):
        return {"$decimal": str(value)}
    if isinstance(value, dt.datetime):
        return {"$time": value.isoformat()}
    if isinstance(value, Mapping):
        return {"$table": {str(k): _to_json(v) for k, v in value.items()}}
    if isinstance(value, list | tuple):
        return [_to_json(v) for v in value]
    return str(value)


def _from_json(value: Any) -> Any:
    if isinstance(value, list):
        return [_from_json(v) for v in value]
    if isinstance(value, dict):
        if "$bytes" in value:
            return base64.b64decode(value["$bytes"])
        if "$decimal" in value:
            return decimal.Decimal(value["$decimal"])
        if "$time" in value:
            return dt.datetime.fromisoformat(value["$time"])
        if "$table" in value:
            return {k: _from_json(v) for k, v in value["$table"].items()}
    return value


def args_json(args: Mapping[str, Any]) -> dict[str, Any]:
    """AMQP arguments as a JSON-able dict (tagged values; `args_back` reverses it)."""
    return {str(k): _to_json(v) for k, v in args.items()}


def args_back(args: Mapping[str, Any] | None) -> dict[str, Any]:
    """Stored arguments back as AMQP values (the reverse of `args_json`)."""
    return {k: _from_json(v) for k, v in (args or {}).items()}


class DefinitionSync:
    """The broker's durable definitions and their writes to the store (module docstring).

    Args:
        registry: where the definitions are read (the broker's `State`).
        store: where they are written.
        exchange_gone: called with an exchange's definition key when its definition is
            deleted (the owner drops what the exchange held in the store).
        everything: keep every definition, durable or not (the shards' feed, module
            docstring), each queue and exchange with its `durable` flag and each queue with
            its `exclusive` flag and owning `shard`.
    """

    def __init__(
        self,
        registry: Registry,
        store: DefinitionStorePort,
        exchange_gone: Callable[[str], None],
        *,
        everything: bool = False,
    ) -> None:
        self.registry = registry
        self.store = store
        self.exchange_gone = exchange_gone
        self.everything = everything
        self.cache: dict[str, dict[str, Any]] = {kind: {} for kind in KINDS}
        # binding keys by (vhost, source) and by (vhost, destination kind, destination)
        self._by_source: dict[tuple[str, str], set[str]] = {}
        self._by_dest: dict[tuple[str, str, str], set[str]] = {}
        self._touched_q: set[tuple[str, str]] = set()
        self._touched_x: set[tuple[str, str]] = set()
        self._touched_b: list[tuple[str, str, tuple[str, str], str, dict[str, Any]]] = []

    def load(self, defs: Mapping[str, Mapping[str, Any]]) -> None:
        """Take the recovered definitions as what the store holds (recovery)."""
        self.cache = {kind: dict(defs.get(kind, {})) for kind in KINDS}
        for key, ref in self.cache[BINDING].items():
            src = (ref["vhost"], ref["source"])
            self._by_source.setdefault(src, set()).add(key)
            dst = (ref["vhost"], ref["destination_type"], ref["destination"])
            self._by_dest.setdefault(dst, set()).add(key)

    def touch_binding(
        self,
        vhost: str,
        source: str,
        dest: tuple[str, str],
        routing_key: str,
        arguments: Mapping[str, Any] | None,
    ) -> None:
        """One binding was added or removed (bind/unbind): the next incremental sync writes it."""
        self._touched_b.append((vhost, source, dest, routing_key, dict(arguments or {})))

    def touch(self, kind: str, vhost: str, name: str) -> None:
        """A durable queue or exchange (`QUEUE_DEF`/`EXCHANGE_DEF`) was created or deleted, or
        an exchange's bindings changed: the next incremental sync looks at it (and at the
        bindings from it, or to it)."""
        (self._touched_q if kind == QUEUE_DEF else self._touched_x).add((vhost, name))

    def _kept(self, durable: bool, exclusive: bool = False) -> bool:
        # Whether an object of these flags is kept: durable, not exclusive ones for a store.
        return self.everything or (durable and not exclusive)

    def _queue_def(self, vhost: str, q: QueueEntity | None) -> dict[str, Any] | None:
        if q is None or not self._kept(q.durable, q.exclusive_owner is not None):
            return None
        value = {
            "vhost": vhost,
            "name": q.name,
            "auto_delete": q.auto_delete,
            "arguments": args_json(q.arguments),
        }
        if self.everything:
            value |= {
                "durable": q.durable,
                "exclusive": q.exclusive_owner is not None,
                "shard": q.shard,
            }
        elif q.owner is not None:
            value["shard"] = q.owner  # a copy shard 0 keeps: recovered as a copy
        return value

    def _exchange_def(self, vhost: str, x: Exchange | None) -> dict[str, Any] | None:
        if x is None or not self._kept(x.durable) or not x.name or x.name.startswith("amq."):
            return None  # the default and amq.* exchanges come with the vhost
        value = {
            "vhost": vhost,
            "name": x.name,
            "type": x.type.value,
            "auto_delete": x.auto_delete,
            "internal": x.internal,
            "arguments": args_json(x.arguments),
        }
        if self.everything:
            value["durable"] = x.durable
        return value

    def _binding(
        self,
        vh: VHost | None,
        vhost: str,
        source: str,
        dest: tuple[str, str],
        routing_key: str,
        arguments: Mapping[str, Any],
    ) -> tuple[str, dict[str, Any] | None]:
        # (key, value) of one binding; value None unless it exists between durable objects.
        kind, name = dest
        args = args_json(arguments)
        key = json.dumps(
            [vhost, source, kind, name, routing_key, args], separators=(",", ":"), sort_keys=True
        )
        if vh is None or not source:
            return key, None
        x = vh.exchanges.get(source)
        if x is None or not self._kept(x.durable):
            return key, None
        if not x.has_binding(dest, routing_key, arguments):
            return key, None
        if kind == QUEUE:
            q = vh.queues.get(name)
            if q is None or not self._kept(q.durable, q.exclusive_owner is not None):
                return key, None
        else:
            d = vh.exchanges.get(name)
            if d is None or not self._kept(d.durable):
                return key, None
        value = {
            "vhost": vhost,
            "source": source,
            "destination_type": kind,
            "destination": name,
            "routing_key": routing_key,
            "arguments": args,
        }
        return key, value

    def _bindings_from(self, vh: VHost, x: Exchange) -> dict[str, dict[str, Any]]:
        # Bindings of a durable source to durable destinations (key -> value).
        out: dict[str, dict[str, Any]] = {}
        if not x.name or not self._kept(x.durable):
            return out
        for b in x.bindings.values():
            key, value = self._binding(vh, vh.name, x.name, b.dest, b.routing_key, b.arguments)
            if value is not None:
                out[key] = value
        return out

    def _small_defs(self) -> dict[str, dict[str, Any]]:
        # vhosts, users, permissions, policies: few, changed by management; diffed whole.
        b = self.registry
        defs: dict[str, dict[str, Any]] = {
            VHOST: {},
            USER: {},
            PERMISSION: {},
            TOPIC_PERMISSION: {},
            POLICY: {},
            PARAMETER: {},
            GLOBAL_PARAMETER: {},
        }
        limits = b.limits
        for name in b.vhosts:
            defs[VHOST][name] = {"name": name}
            if name in limits.vhosts:  # `/api/vhost-limits`, kept with the vhost
                defs[VHOST][name]["limits"] = dict(limits.vhosts[name])
        for user in b.auth.users.values():
            defs[USER][user.name] = {
                "name": user.name,
                "password_hash": user.password_hash,
                "tags": list(user.tags),
                "loopback_only": user.loopback_only,
            }
            if user.name in limits.users:  # `/api/user-limits`, as RabbitMQ's user `limits`
                defs[USER][user.name]["limits"] = dict(limits.users[user.name])
        for (user_name, vhost), perm in b.auth.permissions.items():
            defs[PERMISSION][f"{vhost}{SEP}{user_name}"] = {
                "user": user_name,
                "vhost": vhost,
                "configure": perm.configure,
                "write": perm.write,
                "read": perm.read,
            }
        for t in b.auth.topics:
            defs[TOPIC_PERMISSION][f"{t.vhost}{SEP}{t.user}{SEP}{t.exchange}"] = {
                "user": t.user,
                "vhost": t.vhost,
                "exchange": t.exchange,
                "write": t.write,
                "read": t.read,
            }
        for pol in b.policies.list():
            defs[POLICY][f"{pol.vhost}{SEP}{pol.name}"] = {
                "name": pol.name,
                "vhost": pol.vhost,
                "pattern": pol.pattern,
                "apply_to": str(pol.apply_to),
                "priority": pol.priority,
                "definition": args_json(pol.definition),
            }
        params = b.parameters  # runtime parameters kept from definitions (core/parameters.py)
        for (vhost, component, name), value in params.vhost.items():
            defs[PARAMETER][f"{vhost}{SEP}{component}{SEP}{name}"] = {
                "vhost": vhost,
                "component": component,
                "name": name,
                "value": value,
            }
        for name, value in params.globals.items():
            defs[GLOBAL_PARAMETER][name] = {"name": name, "value": value}
        return defs

    def snapshot(self) -> dict[str, dict[str, Any]]:
        """Every durable definition of the broker, kind -> key -> JSON-able value (O(all))."""
        defs: dict[str, dict[str, Any]] = {kind: {} for kind in KINDS} | self._small_defs()
        for vh in self.registry.vhosts.values():
            for x in vh.exchanges.values():
                value = self._exchange_def(vh.name, x)
                if value is not None:
                    defs[EXCHANGE_DEF][f"{vh.name}{SEP}{x.name}"] = value
                defs[BINDING].update(self._bindings_from(vh, x))
            for q in vh.queues.values():
                value = self._queue_def(vh.name, q)
                if value is not None:
                    defs[QUEUE_DEF][queue_key(vh.name, q.name)] = value
        return defs

    def _put(self, kind: str, key: str, value: dict[str, Any] | None) -> int:
        # Write one definition if it changed (None: delete); keep the cache and the binding
        # indexes in step. Returns the number of writes (0 or 1).
        cache = self.cache[kind]
        old = cache.get(key)
        if value == old:
            return 0
        if kind == BINDING:
            ref = old if value is None else value
            assert ref is not None
            src = (ref["vhost"], ref["source"])
            dst = (ref["vhost"], ref["destination_type"], ref["destination"])
            if value is None:
                self._by_source.get(src, set()).discard(key)
                self._by_dest.get(dst, set()).discard(key)
            else:
                self._by_source.setdefault(src, set()).add(key)
                self._by_dest.setdefault(dst, set()).add(key)
        if value is None:
            del cache[key]
            self.store.delete_definition(kind, key)
            if kind == EXCHANGE_DEF:
                self.exchange_gone(key)  # its held messages (delayed exchange) go with it
        else:
            cache[key] = value
            self.store.put_definition(kind, key, value)
        return 1

    def sync(self, *, full: bool = True) -> int:
        """Write the definitions that changed; returns how many writes.

        `full` diffs a snapshot of everything (management edits, recovery). Otherwise only the
        queues and exchanges passed to `touch` since the last sync, and the bindings from or to
        them, are looked at (AMQP declares, binds and deletes: O(touched), not O(all)); the few
        vhosts, users, permissions and policies are diffed whole either way.
        """
        writes = 0
        if full:
            now = self.snapshot()
            for kind in KINDS:
                old, new = self.cache[kind], now[kind]
                for key in old.keys() - new.keys():
                    writes += self._put(kind, key, None)
                for key, value in new.items():
                    writes += self._put(kind, key, value)
            self._touched_q.clear()
            self._touched_x.clear()
            self._touched_b.clear()
            return writes
        small = self._small_defs()
        for kind, new in small.items():
            for key in self.cache[kind].keys() - new.keys():
                writes += self._put(kind, key, None)
            for key, value in new.items():
                writes += self._put(kind, key, value)
        vhosts = self.registry.vhosts
        for vhost, name in self._touched_q:
            vh = vhosts.get(vhost)
            q = vh.queues.get(name) if vh is not None else None
            writes += self._put(QUEUE_DEF, queue_key(vhost, name), self._queue_def(vhost, q))
        for vhost, name in self._touched_x:
            vh = vhosts.get(vhost)
            x = vh.exchanges.get(name) if vh is not None else None
            writes += self._put(EXCHANGE_DEF, f"{vhost}{SEP}{name}", self._exchange_def(vhost, x))
        # bindings: the ones bound or unbound, and the stored ones from/to a created or deleted
        # queue or exchange (a deleted object took its bindings with it)
        keys: set[str] = set()
        for touched, kind in ((self._touched_q, QUEUE), (self._touched_x, EXCHANGE)):
            for vhost, name in touched:
                keys.update(self._by_dest.get((vhost, kind, name), ()))
                if kind == EXCHANGE:
                    keys.update(self._by_source.get((vhost, name), ()))
        for key in keys:
            v = self.cache[BINDING].get(key)
            if v is None:
                continue
            vhost = v["vhost"]
            _, value = self._binding(
                vhosts.get(vhost),
                vhost,
                v["source"],
                (v["destination_type"], v["destination"]),
                v["routing_key"],
                args_back(v["arguments"]),
            )
            writes += self._put(BINDING, key, value)
        for vhost, source, dest, routing_key, args in self._touched_b:
            key, value = self._binding(vhosts.get(vhost), vhost, source, dest, routing_key, args)
            writes += self._put(BINDING, key, value)
        self._touched_b.clear()
        self._touched_q.clear()
        self._touched_x.clear()
        return writes
