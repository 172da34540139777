"""`CoreAdmin`: the `BrokerAdmin` port over the real `core.broker.Broker`.

Theory of operation: reads are snapshots of the broker's public objects (vhosts, queue
entities and their engine counters, exchanges and bindings, sessions and consumers, the auth
and policy tables). Writes that AMQP can express go through the broker's own front door, as
RabbitMQ's management plugin uses an internal AMQP connection: a management pseudo-connection
(negative conn ids, never used by the server) per vhost opens channels and calls
`Broker.handle()` with `QueueDeclare`, `QueuePurge`, `BasicGet`, `BasicPublish`, ... so every
validation, permission and equivalence rule of the core applies unchanged and a refused
request changes nothing. Replies addressed to the pseudo-connection are read here (GetOk,
PurgeOk, Return); every other effect (deliveries to consumers, cancels) is handed to the
server through `Runtime.apply_effects` inside `Runtime.run_batch`. A channel error closes and
replaces that management channel, as a client would.

Writes AMQP cannot express (runtime settings, policies, scheduled messages) change the queue
entity and then let `Broker.tick` dispatch what became deliverable. Runtime settings set on a
queue directly (`PUT .../settings`, e.g. `{"ring-size": 5}`) are kept as per-queue overrides
that win over arguments and policy whenever the queue's settings are re-resolved here.

Everything runs on the broker's loop thread; nothing here blocks or locks.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from dataclasses import fields
from typing import Any, Final

from ringmq.amqp import spec
from ringmq.amqp.frames import RawContent
from ringmq.amqp.properties import BasicProperties, decode_properties, encode_properties
from ringmq.amqp.reply_codes import AMQPError, ReplyCode
from ringmq.core.auth import verify_password
from ringmq.core.effects import Effect, SendContent, SendMethod
from ringmq.core.routing import QUEUE
from ringmq.core.settings import QueueSettings
from ringmq.core.vhost import QueueEntity
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

log = logging.getLogger(__name__)

_BASIC_CLASS: Final = 60
_FIRST_CONN_ID: Final = -1_000_000
"""Management pseudo-connections use ids the server never hands out (it counts from 1)."""

_SETTING_KEYS: Final = {
    # PUT .../settings key -> the policy-definition key the core's resolver understands
    "ring-size": "ring-size",
    "ring_size": "ring-size",
    "max-length": "max-length",
    "max-length-bytes": "max-length-bytes",
    "overflow": "overflow",
    "message-ttl": "message-ttl",
    "expires": "expires",
    "dead-letter-exchange": "dead-letter-exchange",
    "dead-letter-routing-key": "dead-letter-routing-key",
    "delivery-limit": "delivery-limit",
}


_OVERRIDE_FIELDS: Final = {"message-ttl": "message_ttl_ms", "expires": "expires_ms"}


def _properties_dict(props: BasicProperties) -> dict[str, Any]:
    return {
        f.name: getattr(props, f.name) for f in fields(props) if getattr(props, f.name) is not None
    }


def _properties(raw: dict[str, Any]) -> BasicProperties:
    known = {f.name for f in fields(BasicProperties)}
    unknown = set(raw) - known
    if unknown:
        raise ValueError(f"unknown message properties: {', '.join(sorted(unknown))}")
    props = BasicProperties(**raw)
    try:
        encode_properties(props)
    except (AMQPError, TypeError, ValueError, OverflowError) as exc:
        raise ValueError(f"bad message properties: {exc}") from None
    return props


def _settings_dict(s: QueueSettings) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for f in fields(s):
        value = getattr(s, f.name)
        if f.name == "sources":
            out["sources"] = dict(value)
        elif f.name == "limit":
            out["limit"] = (
                None
                if value is None
                else {
                    "family": value.family,
                    "counts": str(value.counts),
                    "max_count": value.max_count,
                    "max_bytes": value.max_bytes,
                    "action": str(value.action),
                }
            )
        elif value is not None and value is not False and value != -1:
            out[f.name] = str(value) if hasattr(value, "value") else value
    out["ring_size"] = s.ring_size
    return out


class _Pseudo:
    """One management pseudo-connection on a vhost with a current channel number."""

    def __init__(self, conn_id: int) -> None:
        self.conn_id = conn_id
        self.channel = 0


class CoreAdmin:
    """`BrokerAdmin` over a `core.broker.Broker` (see the module docstring)."""

    def __init__(self, broker: Any, runtime: Runtime) -> None:
        self.broker = broker
        self.runtime = runtime
        self._pseudo: dict[str, _Pseudo] = {}
        self._next_id = _FIRST_CONN_ID
        self._overrides: dict[tuple[str, str], dict[str, Any]] = {}

    # -- plumbing -----------------------------------------------------------------------

    def _apply(self, effects: Iterable[Effect]) -> None:
        rest = [e for e in effects if e.conn_id >= 0]
        if rest:
            self.runtime.run_batch(lambda: self.runtime.apply_effects(rest))

    def _admin_user(self, vhost: str) -> str:
        auth = self.broker.auth
        users = sorted(auth.users.values(), key=lambda u: "administrator" not in u.tags)
        for u in users:
            if (u.name, vhost) in auth.permissions:
                return str(u.name)
        raise AMQPError(ReplyCode.ACCESS_REFUSED, f"no user has access to vhost {vhost!r}")

    def _session(self, vhost: str, now_ms: int) -> _Pseudo:
        if vhost not in self.broker.vhosts:
            raise AMQPError(ReplyCode.NOT_FOUND, f"no vhost {vhost!r}")
        p = self._pseudo.get(vhost)
        if p is None:
            self._next_id -= 1
            p = _Pseudo(self._next_id)
            self.broker.connection_opened(
                p.conn_id,
                self._admin_user(vhost),
                vhost,
                "management",
                {"product": "ringmq management"},
                now_ms,
            )
            self._pseudo[vhost] = p
        if p.channel == 0 or p.channel not in self.broker.conns[p.conn_id].sessions:
            p.channel = p.channel % 65535 + 1
            self.broker.channel_opened(p.conn_id, p.channel, now_ms)
        return p

    def _call(
        self, vhost: str, method: Any, now_ms: int, content: RawContent | None = None
    ) -> list[Effect]:
        """Run one AMQP method on the vhost's management channel; return the replies to it."""
        p = self._session(vhost, now_ms)
        try:
            effects = self.broker.handle(p.conn_id, p.channel, method, content, now_ms)
        except AMQPError:
            # The core validated before mutating; close the channel as the server would.
            self._apply(self.broker.channel_closed(p.conn_id, p.channel, now_ms))
            p.channel = 0
            raise
        self._apply(effects)
        return [e for e in effects if e.conn_id == p.conn_id]

    def _entity(self, vhost: str, name: str) -> QueueEntity:
        vh = self.broker.vhosts.get(vhost)
        if vh is None:
            raise AMQPError(ReplyCode.NOT_FOUND, f"no vhost {vhost!r}")
        q: QueueEntity | None = vh.queues.get(name)
        if q is None or q.deleted:
            raise AMQPError(ReplyCode.NOT_FOUND, f"no queue {name!r} in vhost {vhost!r}")
        return q

    def _kick(self, q: QueueEntity, now_ms: int) -> None:
        # Ask the core to dispatch a queue whose state changed outside an AMQP method. The
        # broker has no public "mark dirty"; `_mark` + `tick` is what its own timers do.
        mark: Callable[[QueueEntity], None] | None = getattr(self.broker, "_mark", None)
        if mark is not None:
            mark(q)
        self._apply(self.broker.tick(now_ms))

    # -- users, vhosts ------------------------------------------------------------------

    def vhosts(self) -> list[str]:
        return sorted(self.broker.vhosts)

    def users(self) -> list[UserInfo]:
        return [
            UserInfo(u.name, list(u.tags), u.password_hash or "")
            for u in sorted(self.broker.auth.users.values(), key=lambda u: u.name)
        ]

    def authenticate(self, user: str, password: str) -> UserInfo | None:
        u = self.broker.auth.users.get(user)
        if u is None or u.password_hash is None or not verify_password(password, u.password_hash):
            return None
        return UserInfo(u.name, list(u.tags), u.password_hash)

    def permissions(self) -> list[PermissionInfo]:
        return [
            PermissionInfo(user, vhost, p.configure, p.write, p.read)
            for (user, vhost), p in sorted(self.broker.auth.permissions.items())
        ]

    # -- queues -------------------------------------------------------------------------

    def _info(self, q: QueueEntity) -> QueueInfo:
        c = q.queue.counters
        owner = q.exclusive_owner
        return QueueInfo(
            vhost=q.vhost,
            name=q.name,
            durable=q.durable,
            auto_delete=q.auto_delete,
            exclusive=owner is not None,
            arguments=dict(q.arguments),
            policy=q.settings.policy_name,
            effective_settings=self._effective(q),
            messages_ready=c.ready,
            messages_unacknowledged=c.unacked,
            messages_scheduled=c.scheduled,
            messages_paged=c.paged,
            message_bytes_ready=c.ready_bytes,
            message_bytes_unacknowledged=c.unacked_bytes,
            message_bytes_scheduled=c.scheduled_bytes,
            message_bytes_paged=c.paged_bytes,
            consumers=len(q.consumers),
            ring_size=q.settings.ring_size,
            counters=QueueCounters(
                publish=c.added,
                deliver=c.delivered,
                redeliver=c.redelivered,
                ack=c.acknowledged,
                ring_evicted=c.ring_evicted,
                lvq_replaced=c.lvq_replaced,
                overflow_rejected=c.overflow_rejected,
                expired=c.expired,
                dead_lettered=dict(c.dead_lettered),
            ),
            exclusive_owner=str(owner) if owner is not None else None,
        )

    def _effective(self, q: QueueEntity) -> dict[str, Any]:
        out = _settings_dict(q.settings)
        extra = self._overrides.get((q.vhost, q.name))
        if extra:
            # Runtime overrides reach the resolver as policy keys; show where they came from.
            sources = out.setdefault("sources", {})
            for key in extra:
                field_name = _OVERRIDE_FIELDS.get(key, key.replace("-", "_"))
                if field_name in sources:
                    sources[field_name] = "runtime"
            out["runtime_overrides"] = dict(extra)
        return out

    def queues(self, vhost: str | None = None) -> list[QueueInfo]:
        out: list[QueueInfo] = []
        for vname, vh in sorted(self.broker.vhosts.items()):
            if vhost is not None and vname != vhost:
                continue
            out.extend(self._info(q) for _, q in sorted(vh.queues.items()) if not q.deleted)
        return out

    def queue(self, vhost: str, name: str) -> QueueInfo:
        return self._info(self._entity(vhost, name))

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
        existed = name in self.broker.vhosts.get(vhost, _NoVhost).queues
        self._session(vhost, now_ms)
        method = spec.QueueDeclare(
            queue=name, durable=durable, auto_delete=auto_delete, arguments=arguments
        )
        self._call(vhost, method, now_ms)
        return not existed

    def delete_queue(
        self, vhost: str, name: str, *, if_unused: bool, if_empty: bool, now_ms: int
    ) -> int:
        self._entity(vhost, name)
        self._overrides.pop((vhost, name), None)
        method = spec.QueueDelete(queue=name, if_unused=if_unused, if_empty=if_empty)
        for e in self._call(vhost, method, now_ms):
            if isinstance(e, SendMethod) and isinstance(e.method, spec.QueueDeleteOk):
                return int(e.method.message_count)
        return 0

    def purge_queue(self, vhost: str, name: str, *, now_ms: int) -> int:
        self._entity(vhost, name)
        for e in self._call(vhost, spec.QueuePurge(queue=name), now_ms):
            if isinstance(e, SendMethod) and isinstance(e.method, spec.QueuePurgeOk):
                return int(e.method.message_count)
        return 0

    def get_messages(
        self, vhost: str, name: str, *, count: int, ackmode: AckMode, now_ms: int
    ) -> list[FetchedMessage]:
        self._entity(vhost, name)
        got: list[FetchedMessage] = []
        last_tag = 0
        for _ in range(count):
            replies = self._call(vhost, spec.BasicGet(queue=name, no_ack=False), now_ms)
            content = next((e for e in replies if isinstance(e, SendContent)), None)
            if content is None:
                break
            ok = content.method
            last_tag = ok.delivery_tag
            msg = content.message
            got.append(
                FetchedMessage(
                    exchange=ok.exchange,
                    routing_key=ok.routing_key,
                    body=msg.body,
                    redelivered=ok.redelivered,
                    properties=_properties_dict(decode_properties(msg.properties_bin))
                    if msg.properties_bin
                    else {},
                    message_count=ok.message_count,
                )
            )
        if last_tag:
            if ackmode == "ack_requeue_false":
                settle: Any = spec.BasicAck(delivery_tag=last_tag, multiple=True)
            else:
                settle = spec.BasicNack(delivery_tag=last_tag, multiple=True, requeue=True)
            self._call(vhost, settle, now_ms)
        return got

    def _resolve(self, q: QueueEntity, extra: dict[str, Any]) -> QueueSettings:
        settings: QueueSettings = self.broker.resolve_settings(q.vhost, q.name, q.arguments)
        if not extra:
            return settings
        # Overrides win over arguments and policy: resolve them as arguments of their own and
        # let the resolver validate; then take the overridden fields from that result.
        from ringmq.core.settings import resolve_queue_settings

        pol = self.broker.policies.match(q.name, "queue", vhost=q.vhost)
        merged = dict(pol.definition) if pol is not None else {}
        merged.update(extra)
        if "ring-size" in extra:
            for k in ("max-length", "max-length-bytes", "overflow"):
                merged.pop(k, None)
        args = {
            k: v
            for k, v in q.arguments.items()
            if not (
                "ring-size" in extra
                and k in ("x-ring-size", "x-max-length", "x-max-length-bytes", "x-overflow")
            )
            and k.removeprefix("x-") not in extra
        }
        return resolve_queue_settings(
            q.name,
            args,
            policy=merged,
            address_settings=self.broker.address_settings.resolve(q.name),
            policy_name=pol.name if pol is not None else None,
        )

    def update_queue(
        self, vhost: str, name: str, settings: dict[str, Any], *, now_ms: int
    ) -> QueueInfo:
        q = self._entity(vhost, name)
        extra = dict(self._overrides.get((vhost, name), {}))
        for key, value in settings.items():
            target = _SETTING_KEYS.get(key)
            if target is None:
                allowed = ", ".join(sorted(k for k in _SETTING_KEYS if "_" not in k))
                raise ValueError(f"unknown setting {key!r} (known: {allowed})")
            if value is None:
                extra.pop(target, None)
            else:
                extra[target] = value
        new = self._resolve(q, extra)  # raises SettingsError (a ValueError) before any change
        q.queue.update_settings(new, now_ms)
        q.settings = new
        if extra:
            self._overrides[(vhost, name)] = extra
        else:
            self._overrides.pop((vhost, name), None)
        self._kick(q, now_ms)
        return self._info(q)

    def reapply_settings(self, vhost: str, now_ms: int) -> None:
        """Re-resolve every queue of a vhost (after a policy change)."""
        for q in list(self.broker.vhosts[vhost].queues.values()):
            new = self._resolve(q, self._overrides.get((vhost, q.name), {}))
            if new != q.settings:
                q.queue.update_settings(new, now_ms)
                q.settings = new
                self._kick(q, now_ms)

    def scheduled(self, vhost: str, name: str) -> list[ScheduledInfo]:
        q = self._entity(vhost, name)
        return [
            ScheduledInfo(
                seq=int(s.seq),
                due_ms=s.due_ms,
                routing_key=s.message.routing_key,
                body=s.message.body,
                properties=dict(s.message.headers or {}),
            )
            for s in q.queue.list_scheduled()
        ]

    def purge_scheduled(self, vhost: str, name: str, *, now_ms: int) -> int:
        return int(self._entity(vhost, name).queue.purge_scheduled())

    def deliver_scheduled_now(
        self, vhost: str, name: str, seqs: list[int] | None, *, now_ms: int
    ) -> int:
        q = self._entity(vhost, name)
        from ringmq.core.message import SeqId

        moved = int(
            q.queue.deliver_scheduled_now(
                None if seqs is None else [SeqId(s) for s in seqs], now_ms
            )
        )
        self._kick(q, now_ms)
        return moved

    # -- exchanges and bindings ---------------------------------------------------------

    def exchanges(self, vhost: str | None = None) -> list[ExchangeInfo]:
        out: list[ExchangeInfo] = []
        for vname, vh in sorted(self.broker.vhosts.items()):
            if vhost is not None and vname != vhost:
                continue
            out.extend(
                ExchangeInfo(
                    vhost=vname,
                    name=x.name,
                    type=str(getattr(x.type, "value", x.type)),
                    durable=x.durable,
                    auto_delete=x.auto_delete,
                    internal=x.internal,
                    arguments=dict(x.arguments),
                )
                for _, x in sorted(vh.exchanges.items())
            )
        return out

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
        existed = name in self.broker.vhosts.get(vhost, _NoVhost).exchanges
        method = spec.ExchangeDeclare(
            exchange=name,
            type=type,
            durable=durable,
            auto_delete=auto_delete,
            internal=internal,
            arguments=arguments,
        )
        self._call(vhost, method, now_ms)
        return not existed

    def delete_exchange(self, vhost: str, name: str, *, if_unused: bool, now_ms: int) -> None:
        self._call(vhost, spec.ExchangeDelete(exchange=name, if_unused=if_unused), now_ms)

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
        content = RawContent(_BASIC_CLASS, len(body), encode_properties(props), body)
        method = spec.BasicPublish(exchange=exchange, routing_key=routing_key, mandatory=True)
        replies = self._call(vhost, method, now_ms, content)
        return not any(
            isinstance(e, SendContent) and isinstance(e.method, spec.BasicReturn) for e in replies
        )

    def bindings(self, vhost: str | None = None) -> list[BindingInfo]:
        out: list[BindingInfo] = []
        for vname, vh in sorted(self.broker.vhosts.items()):
            if vhost is not None and vname != vhost:
                continue
            # RabbitMQ lists the default exchange's implicit binding of every queue first.
            out.extend(BindingInfo(vname, "", qname, "queue", qname) for qname in sorted(vh.queues))
            for xname, x in sorted(vh.exchanges.items()):
                for b in x.bindings.values():
                    kind, dest = b.dest
                    out.append(
                        BindingInfo(
                            vhost=vname,
                            source=xname,
                            destination=dest,
                            destination_type="queue" if kind == QUEUE else "exchange",
                            routing_key=b.routing_key,
                            arguments=dict(b.arguments),
                        )
                    )
        return out

    def _bind_method(self, b: BindingInfo, bind: bool) -> Any:
        if b.destination_type == "queue":
            cls: Any = spec.QueueBind if bind else spec.QueueUnbind
            return cls(
                queue=b.destination,
                exchange=b.source,
                routing_key=b.routing_key,
                arguments=b.arguments,
            )
        cls = spec.ExchangeBind if bind else spec.ExchangeUnbind
        return cls(
            destination=b.destination,
            source=b.source,
            routing_key=b.routing_key,
            arguments=b.arguments,
        )

    def bind(self, binding: BindingInfo, *, now_ms: int) -> None:
        self._call(binding.vhost, self._bind_method(binding, True), now_ms)

    def unbind(self, binding: BindingInfo, *, now_ms: int) -> None:
        self._call(binding.vhost, self._bind_method(binding, False), now_ms)

    # -- policies -----------------------------------------------------------------------

    def policies(self, vhost: str | None = None) -> list[PolicyInfo]:
        return [
            PolicyInfo(
                vhost=p.vhost,
                name=p.name,
                pattern=p.pattern,
                definition=dict(p.definition),
                priority=p.priority,
                apply_to=str(getattr(p.apply_to, "value", p.apply_to)),
            )
            for p in self.broker.policies.list(vhost)
        ]

    def set_policy(self, policy: PolicyInfo, *, now_ms: int) -> bool:
        if policy.vhost not in self.broker.vhosts:
            raise AMQPError(ReplyCode.NOT_FOUND, f"no vhost {policy.vhost!r}")
        table = self.broker.policies
        old = table.get(policy.name, vhost=policy.vhost)
        table.set(
            policy.name,
            policy.pattern,
            policy.definition,
            vhost=policy.vhost,
            apply_to=policy.apply_to,
            priority=policy.priority,
        )
        try:
            self.reapply_settings(policy.vhost, now_ms)
        except ValueError:
            # A queue cannot take the new policy: restore the old table, nothing changes.
            if old is None:
                table.clear(policy.name, vhost=policy.vhost)
            else:
                table.set(
                    old.name,
                    old.pattern,
                    old.definition,
                    vhost=old.vhost,
                    apply_to=old.apply_to,
                    priority=old.priority,
                )
            raise
        return old is None

    def clear_policy(self, vhost: str, name: str, *, now_ms: int) -> None:
        if not self.broker.policies.clear(name, vhost=vhost):
            raise AMQPError(ReplyCode.NOT_FOUND, f"no policy {name!r} in vhost {vhost!r}")
        self.reapply_settings(vhost, now_ms)

    # -- sessions -----------------------------------------------------------------------

    def _client_conns(self) -> list[Any]:
        return [c for cid, c in sorted(self.broker.conns.items()) if cid >= 0]

    def channels(self) -> list[ChannelInfo]:
        out = []
        for conn in self._client_conns():
            for number, s in sorted(conn.sessions.items()):
                mode = str(getattr(s.mode, "name", s.mode)).lower()
                out.append(
                    ChannelInfo(
                        conn_id=conn.conn_id,
                        number=number,
                        consumer_count=len(s.consumers),
                        messages_unacknowledged=len(s.unacked),
                        prefetch_count=s.prefetch_count,
                        global_prefetch_count=s.global_prefetch,
                        confirm=mode == "confirm",
                        transactional=s.tx is not None or mode == "tx",
                    )
                )
        return out

    def consumers(self) -> list[ConsumerInfo]:
        out = []
        for conn in self._client_conns():
            for number, s in sorted(conn.sessions.items()):
                for tag, c in sorted(s.consumers.items()):
                    out.append(
                        ConsumerInfo(
                            conn_id=conn.conn_id,
                            channel=number,
                            consumer_tag=tag,
                            vhost=c.queue.vhost,
                            queue=c.queue.name,
                            ack_required=not c.no_ack,
                            exclusive=c.exclusive,
                            prefetch_count=c.prefetch or s.prefetch_count,
                            arguments=dict(c.arguments),
                        )
                    )
        return out


class _NoVhostType:
    queues: dict[str, Any] = {}
    exchanges: dict[str, Any] = {}


_NoVhost: Final = _NoVhostType()
