"""What the broker persists through the `Store` port, and how it comes back at startup.

Theory of operation
-------------------
`Durability` sits between the `Broker` and a store (the storage layer's `Store`; this module
only names the calls it makes, `StorePort`, so core/ imports nothing from storage/). It owns:

* **the persisted-seq sets**: for every durable queue, the seqs of its messages that are in the
  store (`is_persistent`: durable queue and delivery_mode 2). Only those produce ACK and
  DELIVERY_COUNT records, so transient traffic through a durable queue writes nothing.
* **engine removals**: each durable queue's engine gets an `on_remove` callback; a seq the
  engine drops by itself (ring eviction, drop-head, LVQ replacement, expiry, purge,
  dead-lettering, delivery limit, no-ack fetch) is acked in the store if it was persisted.
  Client acks go through `acked`; deliveries with ack required through `delivered`.
* **definitions** (vhosts, users, permissions, policies, durable exchanges, durable
  non-exclusive queues, bindings between durable objects): a cache of what the store holds.
  After an AMQP method the broker `touch`es the queues/exchanges it created or deleted and
  `touch_binding`s what it bound or unbound; `sync_definitions(full=False)` writes only those
  (plus the stored bindings from/to a touched object, and the few vhosts, users, permissions
  and policies, diffed whole), so a declare costs O(1) whatever the number of queues.
  `full=True` (management edits that bypass the hooks, recovery) diffs a whole snapshot.
* **recovery** (`recover`): definitions first (vhosts, users, permissions, policies, exchanges,
  queues, bindings), then each queue's messages in seq order with their redelivered flags and
  delivery counts, scheduled ones back in the schedule with their due time. A store that reads
  messages lazily (`LazyRecoveredPort`) lets a pageable queue take only its in-memory head
  (`Queue.memory_bound`); the rest stays on disk and is paged in as the queue drains
  (`Queue.restore_spilled`), so recovery memory does not grow with the backlog.

* **delayed exchanges**: a persistent message held by a durable `x-delayed-message` exchange
  is journaled under the exchange's own store key (`delayed_key`) with its due time, acked
  when the exchange releases it (after it was routed, so a crash in between duplicates rather
  than loses), and dropped with the exchange. Recovery holds it again.

Store keys: a queue is `"<vhost>\\x1f<name>"`; definition keys use the same separator; a
delayed exchange's held messages are `"\\x1fx-delayed\\x1f<vhost>\\x1f<name>"`.
Invariants: a seq is in a persisted set iff an ENQUEUE for it was written and no ACK yet; the
broker only writes while it owns the loop thread (no locks).
"""

from __future__ import annotations

import base64
import datetime as dt
import decimal
import gc
import json
import logging
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any, Final, Protocol, runtime_checkable

from ringmq.core.message import Message, SeqId
from ringmq.core.queue import PublishOutcome, Queue, SpillStore
from ringmq.core.routing import EXCHANGE, QUEUE, ExchangeType
from ringmq.core.streambooks import LEASE

if TYPE_CHECKING:
    from ringmq.core.broker import Broker
    from ringmq.core.exchange import Exchange
    from ringmq.core.vhost import QueueEntity, VHost

log = logging.getLogger(__name__)

SEP: Final = "\x1f"

VHOST: Final = "vhost"
USER: Final = "user"
PERMISSION: Final = "permission"
POLICY: Final = "policy"
EXCHANGE_DEF: Final = "exchange"
QUEUE_DEF: Final = "queue"
BINDING: Final = "binding"
_KINDS: Final = (VHOST, USER, PERMISSION, POLICY, EXCHANGE_DEF, QUEUE_DEF, BINDING)


class RecoveredMessagePort(Protocol):
    """One recovered message (storage's `RecoveredMessage`)."""

    seq: SeqId
    message: Message
    redelivered: bool
    delivery_count: int
    expiry_ms: int | None
    due_ms: int | None


class RecoveredTailPort(Protocol):
    """The part of a recovered backlog left on disk (storage's `RecoveredTail`)."""

    @property
    def spill(self) -> SpillStore: ...  # read-only: storage's concrete spill store fits

    count: int
    nbytes: int
    redelivered: bool
    delivery_counts: dict[SeqId, int]
    expiring: bool
    below: SeqId


@runtime_checkable
class LazyRecoveredPort(Protocol):
    """A recovered queue read from disk on demand (storage's `RecoveredQueue`)."""

    seqs: list[int]

    def __len__(self) -> int: ...

    def split(
        self, max_count: int, max_bytes: int
    ) -> tuple[list[Any], RecoveredTailPort | None]: ...


class RecoveredPort(Protocol):
    """What `recover()` returns (storage's `RecoveredState`)."""

    clean: bool
    definitions: dict[str, dict[str, Any]]
    queues: dict[str, list[Any]]
    next_seq: dict[str, int]


class StorePort(Protocol):
    """The store calls the broker makes (a subset of storage's `Store`)."""

    def enqueue(
        self,
        queue: str,
        seq: SeqId,
        message: Message,
        *,
        expiry_ms: int | None = None,
        due_ms: int | None = None,
        delivery_count: int = 0,
    ) -> int: ...

    def ack(self, queue: str, seqs: Iterable[SeqId]) -> int: ...

    def delivered(self, queue: str, seq: SeqId, delivery_count: int) -> int: ...

    def drop_queue(self, queue: str) -> int: ...

    def dedup_record(self, scope: str, message_id: str, at_ms: int) -> int: ...

    def dedup_discard(self, scope: str, message_id: str) -> int: ...

    def dedup_due(self) -> bool: ...

    def dedup_rewrite(self, window: Mapping[str, Iterable[tuple[str, int]]]) -> None: ...

    def put_definition(self, kind: str, key: str, value: Mapping[str, Any]) -> int: ...

    def delete_definition(self, kind: str, key: str) -> int: ...

    def tx_begin(self) -> None: ...

    def tx_commit(self) -> int: ...

    def sync(self) -> int: ...

    def recover(self) -> Any: ...

    def close(self) -> None: ...


def queue_key(vhost: str, name: str) -> str:
    """The store's name for queue `name` of `vhost`."""
    return f"{vhost}{SEP}{name}"


def restore_recovered(
    engine: Queue,
    head: Iterable[Any],
    tail: RecoveredTailPort | None,
    persisted: set[SeqId] | None = None,
) -> None:
    """Put recovered messages back into `engine`: `head` (`RecoveredMessagePort`s, in seq
    order) in memory, then `tail` (if any) as its paged backlog. Each head seq joins
    `persisted` before its restore, so an older LVQ value it replaces is acked in the store."""
    for m in head:
        rm: RecoveredMessagePort = m
        if persisted is not None:
            persisted.add(rm.seq)
        engine.restore(
            rm.seq,
            rm.message,
            redelivered=rm.redelivered,
            delivery_count=rm.delivery_count,
            expiry_ms=rm.expiry_ms,
            due_ms=rm.due_ms,
        )
    if tail is not None:
        engine.restore_spilled(
            tail.spill,
            tail.count,
            tail.nbytes,
            redelivered=tail.redelivered,
            delivery_counts=tail.delivery_counts,
            expiring=tail.expiring,
            below=tail.below,
        )


DELAYED_PREFIX: Final = f"{SEP}x-delayed{SEP}"


def delayed_key(vhost: str, name: str) -> str:
    """The store's name for the messages held by delayed exchange `name` of `vhost`."""
    return f"{DELAYED_PREFIX}{vhost}{SEP}{name}"


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


def _args_json(args: Mapping[str, Any]) -> dict[str, Any]:
    return {str(k): _to_json(v) for k, v in args.items()}


def _args_back(args: Mapping[str, Any] | None) -> dict[str, Any]:
    return {k: _from_json(v) for k, v in (args or {}).items()}


class Durability:
    """The broker's writes to, and recovery from, a store (see the module docstring).

    Args:
        broker: the owning broker (definitions are read from it).
        store: the store; every call happens on the broker's thread.
    """

    def __init__(self, broker: Broker, store: StorePort) -> None:
        self.broker = broker
        self.store = store
        self._persisted: dict[str, set[SeqId]] = {}
        self._by_entity: dict[int, tuple[str, set[SeqId]]] = {}  # id(QueueEntity) -> key, seqs
        self._defs: dict[str, dict[str, Any]] = {kind: {} for kind in _KINDS}
        # binding keys by (vhost, source) and by (vhost, destination kind, destination)
        self._by_source: dict[tuple[str, str], set[str]] = {}
        self._by_dest: dict[tuple[str, str, str], set[str]] = {}
        self._touched_q: set[tuple[str, str]] = set()
        self._touched_x: set[tuple[str, str]] = set()
        self._touched_b: list[tuple[str, str, tuple[str, str], str, dict[str, Any]]] = []
        self.recovered_messages = 0
        self.clean = True

    # --- queues and messages ----------------------------------------------------------------

    def attach(self, q: QueueEntity) -> None:
        """Start tracking a durable queue: engine removals of persisted seqs become ACKs."""
        key = queue_key(q.vhost, q.name)
        persisted = self._persisted.setdefault(key, set())
        self._by_entity[id(q)] = (key, persisted)
        store = self.store

        def removed(seq: SeqId) -> None:
            if seq in persisted:
                persisted.discard(seq)
                store.ack(key, (seq,))

        q.queue.on_remove = removed

    def persisted(self, q: QueueEntity) -> set[SeqId] | None:
        """The persisted seqs of a durable queue (None for queues the store ignores)."""
        entry = self._by_entity.get(id(q))
        return entry[1] if entry is not None else None

    def published(self, q: QueueEntity, msg: Message, outcome: PublishOutcome, now_ms: int) -> bool:
        """After `q.queue.publish(msg)`: persist it when it stayed. Returns True if written."""
        if outcome is not PublishOutcome.ENQUEUED and outcome is not PublishOutcome.SCHEDULED:
            return False
        entry = self._by_entity.get(id(q))
        if entry is None:
            return False
        engine = q.queue
        seq = engine.last_seq
        expiry_ms, due_ms = engine.timing_of(msg, now_ms)
        self.store.enqueue(entry[0], seq, msg, expiry_ms=expiry_ms, due_ms=due_ms)
        entry[1].add(seq)
        return True

    def delivered(self, q: QueueEntity, seq: SeqId, delivery_count: int) -> None:
        """A persisted message was handed out with ack required."""
        entry = self._by_entity.get(id(q))
        if entry is not None:
            self.store.delivered(entry[0], seq, delivery_count)

    def acked(self, q: QueueEntity, seqs: Iterable[SeqId]) -> None:
        """Client acks of `q` (after `q.queue.ack(seqs)`)."""
        entry = self._by_entity.get(id(q))
        if entry is None or not entry[1]:
            return
        persisted = entry[1]
        done = [s for s in seqs if s in persisted]
        if done:
            persisted.difference_update(done)
            self.store.ack(entry[0], done)

    def purged(self, q: QueueEntity) -> None:
        """After `q.queue.purge()`: ack what the purge removed without telling `on_remove`
        (the paged tail is dropped wholesale). Survivors are the unacked and scheduled ones."""
        entry = self._by_entity.get(id(q))
        if entry is None or not entry[1]:
            return
        engine = q.queue
        alive = set(engine.unacked_seqs())
        alive.update(m.seq for m in engine.list_scheduled())
        gone = sorted(entry[1] - alive)
        if gone:
            entry[1].difference_update(gone)
            self.store.ack(entry[0], gone)

    def queue_deleted(self, q: QueueEntity) -> None:
        """A queue is gone: drop its messages from the store."""
        key = queue_key(q.vhost, q.name)
        self._by_entity.pop(id(q), None)
        if self._persisted.pop(key, None) is not None:
            self.store.drop_queue(key)
        q.queue.on_remove = None

    # --- de-duplication window -------------------------------------------------------------

    def dedup_recorded(self, scope: str, message_id: str, at_ms: int) -> None:
        """A durable scope accepted `message_id` (written before the message it let through,
        so the same fsync covers both); the log is rewritten when it grew enough."""
        store = self.store
        store.dedup_record(scope, message_id, at_ms)
        if store.dedup_due():
            store.dedup_rewrite(self.broker.dedup.live())

    def dedup_discarded(self, scope: str, message_id: str) -> None:
        """A durable scope forgot `message_id` (the publish was refused)."""
        self.store.dedup_discard(scope, message_id)

    # --- delayed exchanges ------------------------------------------------------------------

    def held(self, vhost: str, x: Exchange, seq: int, msg: Message, due_ms: int) -> bool:
        """Delayed exchange `x` holds `msg` (its number `seq`) until `due_ms`: journal it when
        the exchange is durable and the message persistent. Returns True if written."""
        if not (x.durable and msg.persistent):
            return False
        key = delayed_key(vhost, x.name)
        self.store.enqueue(key, SeqId(seq), msg, expiry_ms=None, due_ms=due_ms)
        self._persisted.setdefault(key, set()).add(SeqId(seq))
        return True

    def released(self, vhost: str, x: Exchange, seqs: Iterable[int]) -> None:
        """Delayed exchange `x` routed its held messages `seqs`: ack the journaled ones."""
        key = delayed_key(vhost, x.name)
        persisted = self._persisted.get(key)
        if not persisted:
            return
        done = [SeqId(s) for s in seqs if s in persisted]
        if done:
            persisted.difference_update(done)
            self.store.ack(key, done)

    # --- definitions -----------------------------------------------------------------------

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

    @staticmethod
    def _queue_def(vhost: str, q: QueueEntity | None) -> dict[str, Any] | None:
        if q is None or not q.durable or q.exclusive_owner is not None:
            return None
        return {
            "vhost": vhost,
            "name": q.name,
            "auto_delete": q.auto_delete,
            "arguments": _args_json(q.arguments),
        }

    @staticmethod
    def _exchange_def(vhost: str, x: Exchange | None) -> dict[str, Any] | None:
        if x is None or not x.durable or not x.name or x.name.startswith("amq."):
            return None  # the default and amq.* exchanges come with the vhost
        return {
            "vhost": vhost,
            "name": x.name,
            "type": x.type.value,
            "auto_delete": x.auto_delete,
            "internal": x.internal,
            "arguments": _args_json(x.arguments),
        }

    @staticmethod
    def _binding(
        vh: VHost | None,
        vhost: str,
        source: str,
        dest: tuple[str, str],
        routing_key: str,
        arguments: Mapping[str, Any],
    ) -> tuple[str, dict[str, Any] | None]:
        # (key, value) of one binding; value None unless it exists between durable objects.
        kind, name = dest
        args = _args_json(arguments)
        key = json.dumps(
            [vhost, source, kind, name, routing_key, args], separators=(",", ":"), sort_keys=True
        )
        if vh is None or not source:
            return key, None
        x = vh.exchanges.get(source)
        if x is None or not x.durable or not x.has_binding(dest, routing_key, arguments):
            return key, None
        if kind == QUEUE:
            q = vh.queues.get(name)
            if q is None or not q.durable or q.exclusive_owner is not None:
                return key, None
        else:
            d = vh.exchanges.get(name)
            if d is None or not d.durable:
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
        if not x.name or not x.durable:
            return out
        for b in x.bindings.values():
            key, value = self._binding(vh, vh.name, x.name, b.dest, b.routing_key, b.arguments)
            if value is not None:
                out[key] = value
        return out

    def _small_defs(self) -> dict[str, dict[str, Any]]:
        # vhosts, users, permissions, policies: few, changed by management; diffed whole.
        b = self.broker
        defs: dict[str, dict[str, Any]] = {VHOST: {}, USER: {}, PERMISSION: {}, POLICY: {}}
        for name in b.vhosts:
            defs[VHOST][name] = {"name": name}
        for user in b.auth.users.values():
            defs[USER][user.name] = {
                "name": user.name,
                "password_hash": user.password_hash,
                "tags": list(user.tags),
                "loopback_only": user.loopback_only,
            }
        for (user_name, vhost), perm in b.auth.permissions.items():
            defs[PERMISSION][f"{vhost}{SEP}{user_name}"] = {
                "user": user_name,
                "vhost": vhost,
                "configure": perm.configure,
                "write": perm.write,
                "read": perm.read,
            }
        for pol in b.policies.list():
            defs[POLICY][f"{pol.vhost}{SEP}{pol.name}"] = {
                "name": pol.name,
                "vhost": pol.vhost,
                "pattern": pol.pattern,
                "apply_to": str(pol.apply_to),
                "priority": pol.priority,
                "definition": _args_json(pol.definition),
            }
        return defs

    def snapshot(self) -> dict[str, dict[str, Any]]:
        """Every durable definition of the broker, kind -> key -> JSON-able value (O(all))."""
        defs: dict[str, dict[str, Any]] = {kind: {} for kind in _KINDS} | self._small_defs()
        for vh in self.broker.vhosts.values():
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
        cache = self._defs[kind]
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
            if kind == EXCHANGE_DEF and self._persisted.pop(DELAYED_PREFIX + key, None) is not None:
                self.store.drop_queue(DELAYED_PREFIX + key)  # its held messages went with it
        else:
            cache[key] = value
            self.store.put_definition(kind, key, value)
        return 1

    def sync_definitions(self, *, full: bool = True) -> int:
        """Write the definitions that changed; returns how many writes.

        `full` diffs a snapshot of everything (management edits, recovery). Otherwise only the
        queues and exchanges passed to `touch` since the last sync, and the bindings from or to
        them, are looked at (AMQP declares, binds and deletes: O(touched), not O(all)); the few
        vhosts, users, permissions and policies are diffed whole either way.
        """
        writes = 0
        if full:
            now = self.snapshot()
            for kind in _KINDS:
                old, new = self._defs[kind], now[kind]
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
            for key in self._defs[kind].keys() - new.keys():
                writes += self._put(kind, key, None)
            for key, value in new.items():
                writes += self._put(kind, key, value)
        vhosts = self.broker.vhosts
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
            v = self._defs[BINDING].get(key)
            if v is None:
                continue
            vhost = v["vhost"]
            _, value = self._binding(
                vhosts.get(vhost),
                vhost,
                v["source"],
                (v["destination_type"], v["destination"]),
                v["routing_key"],
                _args_back(v["arguments"]),
            )
            writes += self._put(BINDING, key, value)
        for vhost, source, dest, routing_key, args in self._touched_b:
            key, value = self._binding(vhosts.get(vhost), vhost, source, dest, routing_key, args)
            writes += self._put(BINDING, key, value)
        self._touched_b.clear()
        self._touched_q.clear()
        self._touched_x.clear()
        return writes

    # --- recovery ---------------------------------------------------------------------------

    def recover(self, now_ms: int) -> None:
        """Rebuild definitions and queue contents from the store (once, at construction)."""
        state: RecoveredPort = self.store.recover()
        self.clean = state.clean
        b = self.broker
        defs = state.definitions
        for value in defs.get(VHOST, {}).values():
            b.add_vhost(str(value["name"]))
        stored_users = defs.get(USER, {})
        default = b.config.default_user
        if stored_users and not b.config.users and default not in stored_users:
            # RabbitMQ creates the default user on a blank database only: deleted stays deleted.
            b.auth.delete_user(default)
        for value in defs.get(USER, {}).values():
            b.auth.add_user(
                str(value["name"]),
                password_hash=value.get("password_hash"),
                tags=tuple(value.get("tags", ())),
                loopback_only=bool(value.get("loopback_only", False)),
            )
        for value in defs.get(PERMISSION, {}).values():
            b.auth.set_permissions(
                str(value["user"]),
                str(value["vhost"]),
                str(value["configure"]),
                str(value["write"]),
                str(value["read"]),
            )
        for value in defs.get(POLICY, {}).values():
            try:
                b.policies.set(
                    str(value["name"]),
                    str(value["pattern"]),
                    _args_back(value.get("definition")),
                    vhost=str(value["vhost"]),
                    apply_to=str(value.get("apply_to", "all")),
                    priority=int(value.get("priority", 0)),
                )
            except ValueError:
                log.warning("stored policy %r refused at recovery", value.get("name"))
        for value in defs.get(EXCHANGE_DEF, {}).values():
            b.restore_exchange(
                str(value["vhost"]),
                str(value["name"]),
                ExchangeType(value["type"]),
                auto_delete=bool(value.get("auto_delete", False)),
                internal=bool(value.get("internal", False)),
                arguments=_args_back(value.get("arguments")),
            )
        for value in defs.get(QUEUE_DEF, {}).values():
            b.restore_queue(
                str(value["vhost"]),
                str(value["name"]),
                auto_delete=bool(value.get("auto_delete", False)),
                arguments=_args_back(value.get("arguments")),
                now_ms=now_ms,
            )
        for value in defs.get(BINDING, {}).values():
            b.restore_binding(
                str(value["vhost"]),
                str(value["source"]),
                (str(value["destination_type"]), str(value["destination"])),
                str(value["routing_key"]),
                _args_back(value.get("arguments")),
            )
        # Millions of new long-lived objects: cyclic GC passes would rescan them all, again
        # and again, for nothing (the store's replay does the same).
        gc_was_enabled = gc.isenabled()
        gc.disable()
        try:
            self._restore_messages(state, now_ms)
        finally:
            if gc_was_enabled:
                gc.enable()
        # The de-duplication windows of durable scopes, trimmed, then stored again compacted.
        b.dedup.restore(getattr(state, "dedup", {}), b.vhosts, now_ms)
        self.store.dedup_rewrite(b.dedup.live())
        # Leases of the streams API last: they take their held messages back from the queues.
        b.streams.recover(defs.get(LEASE, {}), now_ms)
        self._defs = {kind: dict(defs.get(kind, {})) for kind in _KINDS}
        for key, ref in self._defs[BINDING].items():
            src = (ref["vhost"], ref["source"])
            self._by_source.setdefault(src, set()).add(key)
            dst = (ref["vhost"], ref["destination_type"], ref["destination"])
            self._by_dest.setdefault(dst, set()).add(key)
        self.sync_definitions()  # config-created users, vhosts... and anything refused above

    def _restore_messages(self, state: RecoveredPort, now_ms: int) -> None:
        b = self.broker
        queues: dict[str, QueueEntity] = {}
        for vh in b.vhosts.values():
            for entity in vh.queues.values():
                if entity.durable:
                    queues[queue_key(vh.name, entity.name)] = entity
        for key, messages in state.queues.items():
            if key.startswith(DELAYED_PREFIX):
                self._restore_held(key, messages, now_ms)
                continue
            found = queues.get(key)
            if found is None:
                log.warning("dropping %d stored messages of unknown queue %r", len(messages), key)
                self.store.drop_queue(key)
                continue
            persisted = self._persisted.setdefault(key, set())
            engine = found.queue
            tail: RecoveredTailPort | None = None
            if isinstance(messages, LazyRecoveredPort) and engine.pageable:
                # a long backlog: its head in memory, the rest paged in from the store
                persisted.update(messages.seqs)  # type: ignore[arg-type]
                head, tail = messages.split(*engine.memory_bound)
                restore: Iterable[Any] = head
            else:
                restore = messages
            restore_recovered(engine, restore, tail, persisted)
            self.recovered_messages += len(messages)
            b.recovered_queue(found, now_ms)
        for key, next_seq in state.next_seq.items():
            if key.startswith(DELAYED_PREFIX):
                continue  # an exchange numbers on from its highest held message
            target = queues.get(key)
            if target is not None:
                target.queue.resume_seqs(next_seq)

    def _restore_held(self, key: str, messages: Iterable[Any], now_ms: int) -> None:
        # A delayed exchange's journaled messages: held again with their due times (overdue
        # ones are released by the broker's next tick).
        b = self.broker
        vhost, _, name = key[len(DELAYED_PREFIX) :].partition(SEP)
        vh = b.vhosts.get(vhost)
        x = vh.exchanges.get(name) if vh is not None else None
        if vh is None or x is None or not x.durable or x.type is not ExchangeType.DELAYED:
            log.warning("dropping stored messages held by unknown delayed exchange %r", key)
            self.store.drop_queue(key)
            return
        persisted = self._persisted.setdefault(key, set())
        n = 0
        for m in messages:
            rm: RecoveredMessagePort = m
            persisted.add(rm.seq)
            due = rm.due_ms if rm.due_ms is not None else now_ms
            b.restore_held(vh, x, int(rm.seq), rm.message, due)
            n += 1
        self.recovered_messages += n
