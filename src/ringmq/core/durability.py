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
* **definitions**: `sync_definitions` snapshots every durable definition (vhosts, users,
  permissions, policies, durable exchanges, durable non-exclusive queues, bindings between
  durable objects) and writes only the difference with the last snapshot. The broker calls it
  after methods that change definitions; definitions change rarely, so a full snapshot is cheap
  next to the I/O it saves.
* **recovery** (`recover`): definitions first (vhosts, users, permissions, policies, exchanges,
  queues, bindings), then each queue's messages in seq order with their redelivered flags and
  delivery counts, scheduled ones back in the schedule with their due time.

Store keys: a queue is `"<vhost>\\x1f<name>"`; definition keys use the same separator.
Invariants: a seq is in a persisted set iff an ENQUEUE for it was written and no ACK yet; the
broker only writes while it owns the loop thread (no locks).
"""

from __future__ import annotations

import base64
import datetime as dt
import decimal
import json
import logging
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any, Final, Protocol

from ringmq.core.message import Message, SeqId
from ringmq.core.queue import PublishOutcome
from ringmq.core.routing import EXCHANGE, QUEUE, ExchangeType

if TYPE_CHECKING:
    from ringmq.core.broker import Broker
    from ringmq.core.vhost import QueueEntity

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

    # --- definitions -----------------------------------------------------------------------

    def snapshot(self) -> dict[str, dict[str, Any]]:
        """Every durable definition of the broker, kind -> key -> JSON-able value."""
        b = self.broker
        defs: dict[str, dict[str, Any]] = {kind: {} for kind in _KINDS}
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
        for vh in b.vhosts.values():
            durable_x = set()
            for x in vh.exchanges.values():
                if not x.durable:
                    continue
                durable_x.add(x.name)
                if not x.name or x.name.startswith("amq."):
                    continue  # created with the vhost
                defs[EXCHANGE_DEF][f"{vh.name}{SEP}{x.name}"] = {
                    "vhost": vh.name,
                    "name": x.name,
                    "type": x.type.value,
                    "auto_delete": x.auto_delete,
                    "internal": x.internal,
                    "arguments": _args_json(x.arguments),
                }
            durable_q = set()
            for q in vh.queues.values():
                if not q.durable or q.exclusive_owner is not None:
                    continue
                durable_q.add(q.name)
                defs[QUEUE_DEF][queue_key(vh.name, q.name)] = {
                    "vhost": vh.name,
                    "name": q.name,
                    "auto_delete": q.auto_delete,
                    "arguments": _args_json(q.arguments),
                }
            for x in vh.exchanges.values():
                if not x.name or x.name not in durable_x:
                    continue
                for binding in x.bindings.values():
                    kind, dest = binding.dest
                    if (kind == QUEUE and dest not in durable_q) or (
                        kind == EXCHANGE and dest not in durable_x
                    ):
                        continue
                    value = {
                        "vhost": vh.name,
                        "source": x.name,
                        "destination_type": kind,
                        "destination": dest,
                        "routing_key": binding.routing_key,
                        "arguments": _args_json(binding.arguments),
                    }
                    key = json.dumps(
                        [vh.name, x.name, kind, dest, binding.routing_key, value["arguments"]],
                        separators=(",", ":"),
                        sort_keys=True,
                    )
                    defs[BINDING][key] = value
        return defs

    def sync_definitions(self) -> int:
        """Write the definitions that changed since the last call; returns how many writes."""
        now = self.snapshot()
        store = self.store
        writes = 0
        for kind in _KINDS:
            old, new = self._defs[kind], now[kind]
            for key, value in new.items():
                if old.get(key) != value:
                    store.put_definition(kind, key, value)
                    writes += 1
            for key in old.keys() - new.keys():
                store.delete_definition(kind, key)
                writes += 1
        self._defs = now
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
        self._restore_messages(state, now_ms)
        self._defs = {kind: dict(defs.get(kind, {})) for kind in _KINDS}
        self.sync_definitions()  # config-created users, vhosts... and anything refused above

    def _restore_messages(self, state: RecoveredPort, now_ms: int) -> None:
        b = self.broker
        queues: dict[str, QueueEntity] = {}
        for vh in b.vhosts.values():
            for entity in vh.queues.values():
                if entity.durable:
                    queues[queue_key(vh.name, entity.name)] = entity
        for key, messages in state.queues.items():
            found = queues.get(key)
            if found is None:
                log.warning("dropping %d stored messages of unknown queue %r", len(messages), key)
                self.store.drop_queue(key)
                continue
            persisted = self._persisted.setdefault(key, set())
            engine = found.queue
            for m in messages:
                rm: RecoveredMessagePort = m
                persisted.add(rm.seq)
                engine.restore(
                    rm.seq,
                    rm.message,
                    redelivered=rm.redelivered,
                    delivery_count=rm.delivery_count,
                    expiry_ms=rm.expiry_ms,
                    due_ms=rm.due_ms,
                )
            self.recovered_messages += len(messages)
            b.recovered_queue(found, now_ms)
        for key, next_seq in state.next_seq.items():
            target = queues.get(key)
            if target is not None:
                target.queue.resume_seqs(next_seq)
