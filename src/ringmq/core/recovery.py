"""Recovery: the broker's definitions and messages back from a store at startup.

Theory of operation
-------------------
`Durability.recover` runs once, when the broker is built, before anything is served. It takes
the store's recovered state (`storeport.RecoveredPort`) and calls, in this order:

1. `restore_definitions`: vhosts, users (a stored user set without the default user keeps it
   deleted, as RabbitMQ creates the default user on a blank database only), permissions,
   policies (a refused one is logged and skipped), exchanges, queues, bindings.
2. `restore_messages`: each durable queue's messages in seq order with their redelivered
   flags and delivery counts; scheduled ones back in the schedule with their due time. A store
   that reads messages lazily (`LazyRecoveredPort`) lets a pageable queue take only its
   in-memory head (`Queue.memory_bound`); the rest stays on disk and is paged in as the queue
   drains (`Queue.restore_spilled`), so recovery memory does not grow with the backlog.
   Messages of an unknown queue are dropped from the store (logged); a delayed exchange's held
   messages are held again (`Restorer.held`), overdue ones released by the next tick.
   Every restored seq joins the persisted set of its store key (`track`) before its restore,
   so an older LVQ value it replaces is acked in the store.

No state of its own: the registry and the restore steps (`ports.Registry`, `ports.Restorer`),
the store and the persisted sets are passed in.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping
from typing import TYPE_CHECKING, Any

from ringmq.core.defsync import args_back
from ringmq.core.message import SeqId
from ringmq.core.queue import Queue
from ringmq.core.routing import ExchangeType
from ringmq.core.storeport import (
    BINDING,
    DELAYED_PREFIX,
    EXCHANGE_DEF,
    GLOBAL_PARAMETER,
    PARAMETER,
    PERMISSION,
    POLICY,
    QUEUE_DEF,
    SEP,
    TOPIC_PERMISSION,
    USER,
    VHOST,
    LazyRecoveredPort,
    RecoveredMessagePort,
    RecoveredPort,
    RecoveredTailPort,
    StorePort,
    queue_key,
)

if TYPE_CHECKING:
    from ringmq.core.entities import QueueEntity
    from ringmq.core.ports import Registry, Restorer

log = logging.getLogger(__name__)


def restore_definitions(
    b: Registry, restore: Restorer, defs: Mapping[str, Mapping[str, Any]], now_ms: int
) -> None:
    """Recreate the stored definitions in `b` (step 1 of the module docstring)."""
    for value in defs.get(VHOST, {}).values():
        restore.vhost(str(value["name"]))
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
    for kind, table in ((VHOST, b.limits.vhosts), (USER, b.limits.users)):
        for value in defs.get(kind, {}).values():
            stored = value.get("limits")
            if isinstance(stored, dict) and stored:
                table[str(value["name"])] = {str(k): int(v) for k, v in stored.items()}
    for value in defs.get(PARAMETER, {}).values():  # kept, not acted on (core/parameters.py)
        b.parameters.set(
            str(value["vhost"]), str(value["component"]), str(value["name"]), value["value"]
        )
    for value in defs.get(GLOBAL_PARAMETER, {}).values():
        b.parameters.set_global(str(value["name"]), value["value"])
    for value in defs.get(PERMISSION, {}).values():
        b.auth.set_permissions(
            str(value["user"]),
            str(value["vhost"]),
            str(value["configure"]),
            str(value["write"]),
            str(value["read"]),
        )
    for value in defs.get(TOPIC_PERMISSION, {}).values():
        try:
            b.auth.set_topic_permission(
                str(value["user"]),
                str(value["vhost"]),
                str(value["exchange"]),
                str(value["write"]),
                str(value["read"]),
            )
        except ValueError:
            log.warning("stored topic permission of %r refused at recovery", value.get("user"))
    for value in defs.get(POLICY, {}).values():
        try:
            b.policies.set(
                str(value["name"]),
                str(value["pattern"]),
                args_back(value.get("definition")),
                vhost=str(value["vhost"]),
                apply_to=str(value.get("apply_to", "all")),
                priority=int(value.get("priority", 0)),
            )
        except ValueError:
            log.warning("stored policy %r refused at recovery", value.get("name"))
    for value in defs.get(EXCHANGE_DEF, {}).values():
        restore.exchange(
            str(value["vhost"]),
            str(value["name"]),
            ExchangeType(value["type"]),
            auto_delete=bool(value.get("auto_delete", False)),
            internal=bool(value.get("internal", False)),
            arguments=args_back(value.get("arguments")),
        )
    for value in defs.get(QUEUE_DEF, {}).values():
        shard = value.get("shard")
        restore.queue(
            str(value["vhost"]),
            str(value["name"]),
            auto_delete=bool(value.get("auto_delete", False)),
            arguments=args_back(value.get("arguments")),
            now_ms=now_ms,
            shard=None if shard is None else int(shard),
        )
    for value in defs.get(BINDING, {}).values():
        restore.binding(
            str(value["vhost"]),
            str(value["source"]),
            (str(value["destination_type"]), str(value["destination"])),
            str(value["routing_key"]),
            args_back(value.get("arguments")),
        )


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


def restore_messages(
    b: Registry,
    restore: Restorer,
    store: StorePort,
    state: RecoveredPort,
    track: Callable[[str], set[SeqId]],
    now_ms: int,
) -> int:
    """Put the recovered messages back (step 2 of the module docstring); returns how many.
    `track(key)` is the persisted-seq set of store key `key`."""
    recovered = 0
    queues: dict[str, QueueEntity] = {}
    for vh in b.vhosts.values():
        for entity in vh.queues.values():
            if entity.durable:
                queues[queue_key(vh.name, entity.name)] = entity
    for key, messages in state.queues.items():
        if key.startswith(DELAYED_PREFIX):
            recovered += restore_held(b, restore, store, key, messages, track, now_ms)
            continue
        found = queues.get(key)
        if found is None:
            log.warning("dropping %d stored messages of unknown queue %r", len(messages), key)
            store.drop_queue(key)
            continue
        persisted = track(key)
        engine = found.queue
        tail: RecoveredTailPort | None = None
        if isinstance(messages, LazyRecoveredPort) and engine.pageable:
            # a long backlog: its head in memory, the rest paged in from the store
            persisted.update(messages.seqs)  # type: ignore[arg-type]
            head, tail = messages.split(*engine.memory_bound)
            put: Iterable[Any] = head
        else:
            put = messages
        restore_recovered(engine, put, tail, persisted)
        recovered += len(messages)
        restore.recovered_queue(found, now_ms)
    for key, next_seq in state.next_seq.items():
        if key.startswith(DELAYED_PREFIX):
            continue  # an exchange numbers on from its highest held message
        target = queues.get(key)
        if target is not None:
            target.queue.resume_seqs(next_seq)
    return recovered


def restore_held(
    b: Registry,
    restore: Restorer,
    store: StorePort,
    key: str,
    messages: Iterable[Any],
    track: Callable[[str], set[SeqId]],
    now_ms: int,
) -> int:
    """A delayed exchange's journaled messages: held again with their due times (overdue ones
    are released by the broker's next tick). Returns how many."""
    vhost, _, name = key[len(DELAYED_PREFIX) :].partition(SEP)
    vh = b.vhosts.get(vhost)
    x = vh.exchanges.get(name) if vh is not None else None
    if vh is None or x is None or not x.durable or x.type is not ExchangeType.DELAYED:
        log.warning("dropping stored messages held by unknown delayed exchange %r", key)
        store.drop_queue(key)
        return 0
    persisted = track(key)
    n = 0
    for m in messages:
        rm: RecoveredMessagePort = m
        persisted.add(rm.seq)
        due = rm.due_ms if rm.due_ms is not None else now_ms
        restore.held(vh, x, int(rm.seq), rm.message, due)
        n += 1
    return n
