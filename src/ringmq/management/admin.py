"""`CoreAdmin`: the `BrokerAdmin` port over the core's own facade, `Broker.admin`.

Theory of operation: `ringmq.core.admin.Admin` (the broker helper's synchronous facade) does the
work and returns plain dicts keyed like this port's records; this adapter turns them into the
records, and adds the few things the HTTP layer promises that the facade leaves to its caller:

* publish properties are validated here (unknown or ill-typed property -> ValueError -> 400)
  before anything is routed;
* `PUT .../settings` takes management names (`ring-size`, `max-length`, `message-ttl`, ...)
  and maps them to the queue arguments the facade's live `update_queue` merges
  (`x-ring-size`, ...), as Artemis' `updateQueue` changes the queue's own configuration;
* `effective_settings` also says where each value came from (`sources`: argument, policy,
  address-settings), read from the queue's resolved settings;
* listings (`queues()`, read by /api/queues, rates and /metrics) are built straight from the
  engine's O(1) counters of the public `QueueEntity` objects, because the facade's per-queue
  snapshot also walks the ready messages for the head timestamp (O(depth)); GET of one queue
  uses the facade's full snapshot. `test_admin.py` checks that both paths agree.

Effects of admin calls (deliveries after a publish or a requeue, consumer cancels when a queue
is deleted) leave through the facade's `emit` callback. The server sets it to its batch
writer; when nothing set it (tests, embedding), `CoreAdmin` routes them to
`Runtime.apply_effects` inside `Runtime.run_batch`.

Everything runs on the broker's loop thread; nothing here blocks or locks.
"""

from __future__ import annotations

from dataclasses import asdict, fields
from typing import Any, Final

from ringmq.amqp.properties import BasicProperties, decode_properties, encode_properties
from ringmq.amqp.reply_codes import AMQPError, ReplyCode
from ringmq.core import arguments
from ringmq.core.auth import Access
from ringmq.core.effects import Effect
from ringmq.core.settings import QueueSettings
from ringmq.management.port import (
    AckMode,
    BindingInfo,
    ChannelInfo,
    ConsumerInfo,
    ExchangeInfo,
    FetchedMessage,
    PermissionInfo,
    PolicyInfo,
    QueueCounters,
    QueueInfo,
    Runtime,
    ScheduledInfo,
    UserInfo,
)

SETTING_ARGUMENTS: Final = arguments.SETTING_ARGUMENTS
"""PUT .../settings key -> the queue argument the core resolves (the queue-argument table's)."""
_PROPERTY_NAMES: Final = frozenset(f.name for f in fields(BasicProperties))


def _properties(raw: dict[str, Any]) -> dict[str, Any]:
    unknown = set(raw) - _PROPERTY_NAMES
    if unknown:
        raise ValueError(f"unknown message properties: {', '.join(sorted(unknown))}")
    try:
        encode_properties(BasicProperties(**raw))
    except (AMQPError, TypeError, ValueError, OverflowError, AttributeError) as exc:
        raise ValueError(f"bad message properties: {exc}") from None
    return raw


def settings_arguments(settings: dict[str, Any]) -> dict[str, Any]:
    """Management setting names to queue arguments (`x-*`/`qpid.*` pass through)."""
    out: dict[str, Any] = {}
    for key, value in settings.items():
        if key.startswith(("x-", "qpid.")):
            out[key] = value
            continue
        arg = SETTING_ARGUMENTS.get(key.replace("_", "-"))
        if arg is None:
            known = ", ".join(sorted(SETTING_ARGUMENTS))
            raise ValueError(f"unknown setting {key!r} (known: {known}, or any x-* argument)")
        out[arg] = value
    return out


class _SlicedGet:
    """The `MessageGet` port over the facade's `core.admin.MessageGet` (dicts to records)."""

    def __init__(self, get: Any) -> None:
        self.get = get

    def fetch(self, count: int, now_ms: int) -> list[FetchedMessage]:
        return [FetchedMessage(**m) for m in self.get.fetch(count, now_ms)]

    def finish(self, now_ms: int) -> None:
        self.get.finish(now_ms)


class CoreAdmin:
    """`BrokerAdmin` over `Broker.admin` (see the module docstring)."""

    def __init__(self, broker: Any, runtime: Runtime) -> None:
        self.broker = broker
        self.core = broker.admin
        self.runtime = runtime
        self._settings_cache: dict[int, tuple[QueueSettings, dict[str, Any]]] = {}
        self._queue_count = 0
        if self.core.emit is None:
            self.core.emit = self._emit
        # anything produced before we were attached
        pending = self.core.drain_effects()
        if pending:
            self._emit(pending)

    def _emit(self, effects: list[Effect]) -> None:
        self.runtime.run_batch(lambda: self.runtime.apply_effects(effects))

    # -- users, vhosts ------------------------------------------------------------------

    def vhosts(self) -> list[str]:
        return list(self.core.vhosts())

    def users(self) -> list[UserInfo]:
        return [UserInfo(**u) for u in self.core.users()]

    def authenticate(self, user: str, password: str) -> UserInfo | None:
        found = self.core.authenticate(user, password)
        if found is None:
            return None
        record = self.broker.auth.users.get(user)
        return UserInfo(**found, loopback_only=bool(getattr(record, "loopback_only", False)))

    def permissions(self) -> list[PermissionInfo]:
        return [PermissionInfo(**p) for p in self.core.permissions()]

    def add_vhost(self, name: str) -> bool:
        return bool(self.core.add_vhost(name))

    def delete_vhost(self, name: str, *, now_ms: int) -> None:
        self.core.delete_vhost(name, now_ms=now_ms)

    def add_user(
        self, name: str, *, password: str | None, password_hash: str | None, tags: list[str]
    ) -> None:
        # The facade creates users without the loopback-only flag; keep RabbitMQ's rule
        # (`loopback_users`, guest by default) across replacements and re-imports.
        auth = self.broker.auth
        old = auth.users.get(name)
        loopback = (
            old.loopback_only
            if old is not None
            else name in getattr(self.broker.config, "loopback_users", ())
        )
        self.core.add_user(name, password=password, password_hash=password_hash, tags=tuple(tags))
        auth.users[name].loopback_only = loopback

    def delete_user(self, name: str) -> bool:
        return bool(self.core.delete_user(name))

    def set_permissions(self, permission: PermissionInfo) -> None:
        p = permission
        self.core.set_permissions(p.user, p.vhost, p.configure, p.write, p.read)

    def clear_permissions(self, user: str, vhost: str) -> bool:
        return bool(self.core.clear_permissions(user, vhost))

    def has_vhost_access(self, user: str, vhost: str) -> bool:
        try:
            self.broker.auth.check_vhost_access(user, vhost)
        except AMQPError:
            return False
        return True

    def check_permission(self, user: str, vhost: str, access: Access, kind: str, name: str) -> None:
        # The AMQP channel's own check (core.auth.AuthDB.check), not a second matcher.
        self.broker.auth.check(user, vhost, access, kind, name)

    # -- queues -------------------------------------------------------------------------

    def _queue(self, d: dict[str, Any]) -> QueueInfo:
        """A record from the facade's full snapshot (one queue: head timestamp included)."""
        d = dict(d)
        d.pop("engine_stats", None)
        d["counters"] = QueueCounters(**d["counters"])
        # the facade reports ready bytes without the paged ones; ready messages include them
        d["message_bytes_ready"] += d["message_bytes_paged"]
        entity = self.broker.vhosts[d["vhost"]].queues.get(d["name"])
        if entity is not None:
            d["messages_persistent"] = self._persistent(entity)
            d["effective_settings"] = {
                **d["effective_settings"],
                "sources": dict(entity.settings.sources),
            }
        return QueueInfo(**d)

    def _settings(self, settings: QueueSettings) -> dict[str, Any]:
        # Settings objects are frozen and replaced on change: render each one once.
        hit = self._settings_cache.get(id(settings))
        if hit is not None and hit[0] is settings:
            return hit[1]
        out: dict[str, Any] = {
            f.name: (str(v) if hasattr(v, "value") else v)
            for f in fields(settings)
            if (v := getattr(settings, f.name)) is not None and f.name not in ("sources", "limit")
        }
        limit = settings.limit
        if limit is not None:
            out["limit"] = {
                "family": limit.family,
                "counts": str(limit.counts),
                "max_count": limit.max_count,
                "max_bytes": limit.max_bytes,
                "action": str(limit.action),
            }
        out["sources"] = dict(settings.sources)
        if len(self._settings_cache) > 4 * (self._queue_count + 64):
            self._settings_cache.clear()
        self._settings_cache[id(settings)] = (settings, out)
        return out

    def _persistent(self, q: Any) -> int:
        # the durability layer's set of the queue's journaled (persistent) live messages
        dur = self.broker.durability
        persisted = dur.persisted(q) if dur is not None else None
        return len(persisted) if persisted else 0

    def _fast(self, q: Any) -> QueueInfo:
        """A listing record read straight from the engine's O(1) counters.

        The facade's snapshot also computes the head message's timestamp and the engine's
        full stats, which costs O(depth) on deep queues; listings, rates and /metrics read
        every queue, so they take this path (`head_message_timestamp` only on GET one queue).
        """
        c = q.queue.counters
        st = q.settings
        return QueueInfo(
            vhost=q.vhost,
            name=q.name,
            durable=q.durable,
            auto_delete=q.auto_delete,
            exclusive=q.exclusive_owner is not None,
            arguments=q.arguments,
            policy=st.policy_name,
            effective_settings=self._settings(st),
            messages_ready=c.ready + c.paged,
            messages_unacknowledged=c.unacked,
            messages_scheduled=c.scheduled,
            messages_paged=c.paged,
            message_bytes_ready=c.ready_bytes + c.paged_bytes,
            message_bytes_unacknowledged=c.unacked_bytes,
            message_bytes_scheduled=c.scheduled_bytes,
            message_bytes_paged=c.paged_bytes,
            messages_persistent=self._persistent(q),
            consumers=len(q.consumers),
            ring_size=st.ring_size,
            counters=QueueCounters(
                publish=c.added + c.overflow_rejected,
                deliver=q.deliver,
                deliver_no_ack=q.deliver_no_ack,
                get=q.get,
                get_no_ack=q.get_no_ack,
                get_empty=q.get_empty,
                redeliver=c.redelivered,
                ack=c.acknowledged,
                ring_evicted=c.ring_evicted,
                lvq_replaced=c.lvq_replaced,
                overflow_rejected=c.overflow_rejected,
                expired=c.expired,
                dead_lettered=c.dead_lettered,
            ),
            exclusive_owner=None if q.exclusive_owner is None else str(q.exclusive_owner),
        )

    def queues(self, vhost: str | None = None) -> list[QueueInfo]:
        out: list[QueueInfo] = []
        for vname, vh in sorted(self.broker.vhosts.items()):
            if vhost is not None and vname != vhost:
                continue
            out.extend(self._fast(q) for _, q in sorted(vh.queues.items()) if not q.deleted)
        self._queue_count = len(out)
        return out

    def queue(self, vhost: str, name: str) -> QueueInfo:
        return self._queue(self.core.queue(vhost, name))

    def declare_queue(
        self,
        vhost: str,
        name: str,
        *,
        durable: bool,
        auto_delete: bool,
        arguments: dict[str, Any],
        now_ms: int,
    ) -> bool:
        return bool(
            self.core.declare_queue(
                vhost,
                name,
                durable=durable,
                auto_delete=auto_delete,
                arguments=arguments,
                now_ms=now_ms,
            )
        )

    def delete_queue(
        self, vhost: str, name: str, *, if_unused: bool, if_empty: bool, now_ms: int
    ) -> int:
        return int(
            self.core.delete_queue(
                vhost, name, if_unused=if_unused, if_empty=if_empty, now_ms=now_ms
            )
        )

    def purge_queue(self, vhost: str, name: str, *, now_ms: int) -> int:
        return int(self.core.purge_queue(vhost, name, now_ms=now_ms))

    def get_messages(
        self, vhost: str, name: str, *, count: int, ackmode: AckMode, now_ms: int
    ) -> list[FetchedMessage]:
        got = self.core.get_messages(vhost, name, count=count, ackmode=ackmode, now_ms=now_ms)
        return [FetchedMessage(**m) for m in got]

    def begin_get(self, vhost: str, name: str, *, ackmode: AckMode) -> _SlicedGet:
        return _SlicedGet(self.core.begin_get(vhost, name, ackmode=ackmode))

    def browse_messages(
        self, vhost: str, name: str, *, count: int, now_ms: int
    ) -> list[FetchedMessage]:
        """Up to `count` ready messages from the head, left in place: nothing is taken, nothing
        is marked redelivered, a last-value queue keeps its newest value (the queue's browse,
        which also leaves a paged tail on disk)."""
        if count < 1:
            raise ValueError("count must be at least 1")
        entity = self.broker.vhosts.get(vhost)
        q = entity.queues.get(name) if entity is not None else None
        if q is None or q.deleted:
            raise AMQPError(ReplyCode.NOT_FOUND, f"no queue '{name}' in vhost '{vhost}'")
        engine = q.queue
        out = []
        for d in engine.browse_ready(None, count, now_ms):
            props = decode_properties(d.message.properties_bin)
            out.append(
                FetchedMessage(
                    exchange=d.message.exchange,
                    routing_key=d.message.routing_key,
                    body=bytes(d.message.body),
                    redelivered=d.redelivered,
                    properties={k: v for k, v in asdict(props).items() if v is not None},
                    message_count=engine.ready_count,
                )
            )
        return out

    def update_queue(
        self, vhost: str, name: str, settings: dict[str, Any], *, now_ms: int
    ) -> QueueInfo:
        arguments = settings_arguments(settings)
        return self._queue(self.core.update_queue(vhost, name, arguments, now_ms=now_ms))

    def scheduled(self, vhost: str, name: str) -> list[ScheduledInfo]:
        return [ScheduledInfo(**s) for s in self.core.scheduled(vhost, name)]

    def purge_scheduled(self, vhost: str, name: str, *, now_ms: int) -> int:
        return int(self.core.purge_scheduled(vhost, name, now_ms=now_ms))

    def deliver_scheduled_now(
        self, vhost: str, name: str, seqs: list[int] | None, *, now_ms: int
    ) -> int:
        return int(self.core.deliver_scheduled_now(vhost, name, seqs, now_ms=now_ms))

    # -- exchanges and bindings ---------------------------------------------------------

    def exchanges(self, vhost: str | None = None) -> list[ExchangeInfo]:
        return [ExchangeInfo(**x) for x in self.core.exchanges(vhost)]

    def declare_exchange(
        self,
        vhost: str,
        name: str,
        *,
        type: str,
        durable: bool,
        auto_delete: bool,
        internal: bool,
        arguments: dict[str, Any],
        now_ms: int,
    ) -> bool:
        return bool(
            self.core.declare_exchange(
                vhost,
                name,
                type=type,
                durable=durable,
                auto_delete=auto_delete,
                internal=internal,
                arguments=arguments,
                now_ms=now_ms,
            )
        )

    def delete_exchange(self, vhost: str, name: str, *, if_unused: bool, now_ms: int) -> None:
        self.core.delete_exchange(vhost, name, if_unused=if_unused, now_ms=now_ms)

    def publish(
        self,
        vhost: str,
        exchange: str,
        routing_key: str,
        body: bytes,
        properties: dict[str, Any],
        *,
        now_ms: int,
    ) -> bool:
        props = _properties(properties)
        return bool(self.core.publish(vhost, exchange, routing_key, body, props, now_ms=now_ms))

    def bindings(self, vhost: str | None = None) -> list[BindingInfo]:
        return [BindingInfo(**b) for b in self.core.bindings(vhost)]

    def bind(self, binding: BindingInfo, *, now_ms: int) -> None:
        self.core.bind(binding, now_ms=now_ms)

    def unbind(self, binding: BindingInfo, *, now_ms: int) -> None:
        self.core.unbind(binding, now_ms=now_ms)

    # -- policies -----------------------------------------------------------------------

    def policies(self, vhost: str | None = None) -> list[PolicyInfo]:
        return [PolicyInfo(**p) for p in self.core.policies(vhost)]

    def set_policy(self, policy: PolicyInfo, *, now_ms: int) -> bool:
        return bool(self.core.set_policy(policy, now_ms=now_ms))

    def clear_policy(self, vhost: str, name: str, *, now_ms: int) -> None:
        self.core.clear_policy(vhost, name, now_ms=now_ms)

    # -- sessions -----------------------------------------------------------------------

    def channels(self) -> list[ChannelInfo]:
        return [ChannelInfo(**c) for c in self.core.channels()]

    def consumers(self) -> list[ConsumerInfo]:
        return [ConsumerInfo(**c) for c in self.core.consumers()]
