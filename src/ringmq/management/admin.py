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
  address-settings), read from the queue's resolved settings.

Effects of admin calls (deliveries after a publish or a requeue, consumer cancels when a queue
is deleted) leave through the facade's `emit` callback. The server sets it to its batch
writer; when nothing set it (tests, embedding), `CoreAdmin` routes them to
`Runtime.apply_effects` inside `Runtime.run_batch`.

Everything runs on the broker's loop thread; nothing here blocks or locks.
"""

from __future__ import annotations

from dataclasses import fields
from typing import Any, Final

from ringmq.amqp.properties import BasicProperties, encode_properties
from ringmq.amqp.reply_codes import AMQPError
from ringmq.core.effects import Effect
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

SETTING_ARGUMENTS: Final = {
    # PUT .../settings key -> the queue argument the core resolves
    "ring-size": "x-ring-size",
    "max-length": "x-max-length",
    "max-length-bytes": "x-max-length-bytes",
    "overflow": "x-overflow",
    "message-ttl": "x-message-ttl",
    "expires": "x-expires",
    "dead-letter-exchange": "x-dead-letter-exchange",
    "dead-letter-routing-key": "x-dead-letter-routing-key",
    "delivery-limit": "x-delivery-limit",
    "last-value-key": "x-last-value-key",
}
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


class CoreAdmin:
    """`BrokerAdmin` over `Broker.admin` (see the module docstring)."""

    def __init__(self, broker: Any, runtime: Runtime) -> None:
        self.broker = broker
        self.core = broker.admin
        self.runtime = runtime
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
        return None if found is None else UserInfo(**found)

    def permissions(self) -> list[PermissionInfo]:
        return [PermissionInfo(**p) for p in self.core.permissions()]

    # -- queues -------------------------------------------------------------------------

    def _queue(self, d: dict[str, Any]) -> QueueInfo:
        d = dict(d)
        d.pop("engine_stats", None)
        d["counters"] = QueueCounters(**d["counters"])
        entity = self.broker.vhosts[d["vhost"]].queues.get(d["name"])
        if entity is not None:
            d["effective_settings"] = {
                **d["effective_settings"],
                "sources": dict(entity.settings.sources),
            }
        return QueueInfo(**d)

    def queues(self, vhost: str | None = None) -> list[QueueInfo]:
        return [self._queue(d) for d in self.core.queues(vhost)]

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
