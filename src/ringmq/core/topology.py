"""Topology: vhosts, exchanges, queues and bindings; the one implementation of their rules.

Theory of operation
-------------------
`Topology` owns declaring, binding, unbinding, purging and deleting, with RabbitMQ's checks
and texts, for every caller: the protocol adapters (on behalf of a client session, whose
permissions are checked: pass it as `grant`), the management facade and config loading (which
authorise the user themselves and pass no session); recovery recreates stored definitions
without these checks (`restore.py`). Each operation
validates everything before it changes anything, so a refused call leaves no half-done change.

Rules kept here: the default exchange cannot be declared, bound or deleted; `amq.*` names are
reserved for new exchanges and queues; a redeclare must be equivalent (exchange: type, flags,
arguments; queue: flags and the arguments with semantics, as RabbitMQ compares them); a queue
owned exclusively by another connection is locked (405); naming a dead-letter or alternate
exchange in a declare needs write permission on it. Changes to durable objects are recorded
(`State.touch`) and written at the end of the call. Deleting a queue cancels its consumers
(`CancelConsumer` effects to the sessions that asked for such notices), drops its bindings and
auto-deletes exchanges left without any.

Pure: no I/O, no clock.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from ringmq.core.arguments import EQUIVALENCE_ARGUMENTS
from ringmq.core.auth import Access
from ringmq.core.consumers import ConsumerSet
from ringmq.core.durability import EXCHANGE_DEF, QUEUE_DEF
from ringmq.core.effects import CancelConsumer
from ringmq.core.errors import BrokerError, Condition
from ringmq.core.exchange import Exchange
from ringmq.core.resources import Resources
from ringmq.core.routing import (
    EXCHANGE,
    QUEUE,
    DelayedTypeError,
    ExchangeTypeError,
    parse_exchange_type,
)
from ringmq.core.session import Session
from ringmq.core.settings import QueueSettings, SettingsError, resolve_queue_settings
from ringmq.core.state import State
from ringmq.core.texts import as_str, field_type, flag, fmt_value
from ringmq.core.vhost import QueueEntity, VHost

_EXCLUSIVE_LOCKED: Final = (
    "cannot obtain exclusive access to locked queue '{q}' in vhost '{v}'. It could be originally "
    "declared on another connection or the exclusive property value does not match that of the "
    "original declaration."
)


def locked(q: str, vhost: str) -> BrokerError:
    """RESOURCE_LOCKED for a queue another connection owns exclusively."""
    return BrokerError(Condition.RESOURCE_LOCKED, _EXCLUSIVE_LOCKED.format(q=q, v=vhost))


def _not_default(name: str) -> None:
    if name == "":
        raise BrokerError(
            Condition.ACCESS_REFUSED, "operation not permitted on the default exchange"
        )


def _settings_error(exc: SettingsError) -> BrokerError:
    return BrokerError(Condition.PRECONDITION_FAILED, str(exc))


class Topology:
    """Declare, bind, purge and delete (see the module docstring)."""

    def __init__(self, state: State, resources: Resources) -> None:
        self.state = state
        self.resources = resources

    # ------------------------------------------------------------------ lookups
    def add_vhost(self, name: str) -> VHost:
        """Create a vhost with the standard exchanges (idempotent)."""
        vhosts = self.state.vhosts
        vh = vhosts.get(name)
        if vh is None:
            vh = VHost(name, alternate_of=self._alternate_policy)
            vhosts[name] = vh
        return vh

    def _alternate_policy(self, vhost: str, exchange: Exchange) -> str | None:
        pol = self.state.policies.match(exchange.name, "exchange", vhost=vhost)
        if pol is None:
            return None
        return as_str(pol.definition.get("alternate-exchange"))

    def vhost(self, name: str) -> VHost:
        """The vhost `name` (NOT_FOUND when missing)."""
        vh = self.state.vhosts.get(name)
        if vh is None:
            raise BrokerError(Condition.NOT_FOUND, f"no vhost '{name}'")
        return vh

    @staticmethod
    def exchange(vh: VHost, name: str) -> Exchange:
        """Exchange `name` of `vh` (NOT_FOUND when missing)."""
        x = vh.exchanges.get(name)
        if x is None:
            raise BrokerError(Condition.NOT_FOUND, f"no exchange '{name}' in vhost '{vh.name}'")
        return x

    @staticmethod
    def queue(vh: VHost, name: str) -> QueueEntity:
        """Queue `name` of `vh` (NOT_FOUND when missing), whoever owns it."""
        q = vh.queues.get(name)
        if q is None:
            raise BrokerError(Condition.NOT_FOUND, f"no queue '{name}' in vhost '{vh.name}'")
        return q

    @staticmethod
    def queue_name(s: Session, name: str) -> str:
        """`name`, or for an empty name the last queue declared on the session (0-9-1 rule)."""
        if name:
            return name
        if not s.last_queue:
            raise BrokerError(Condition.NOT_FOUND, "no previously declared queue")
        return s.last_queue

    @staticmethod
    def queue_for(s: Session, name: str) -> QueueEntity:
        """Queue `name` as session `s` may use it (NOT_FOUND; RESOURCE_LOCKED when another
        connection owns it exclusively)."""
        vh = s.vhost
        q = vh.queues.get(name)
        if q is None:
            raise BrokerError(Condition.NOT_FOUND, f"no queue '{name}' in vhost '{vh.name}'")
        if q.exclusive_owner is not None and q.exclusive_owner != s.conn_id:
            raise locked(name, vh.name)
        return q

    def _check_arg_exchange(
        self, s: Session, args: Mapping[str, Any], key: str, kind: str, name: str
    ) -> None:
        """RabbitMQ's rule for an exchange named in a declare argument (DLX, AE).

        Naming `x-dead-letter-exchange` on a queue or `alternate-exchange` on an exchange lets
        the declarer's resource publish into that exchange later, so the declarer needs read on
        the resource being declared and write on the named exchange (403 otherwise). A value that
        is not a string is refused with 406 first, as RabbitMQ's `r_arg` does.
        """
        if key not in args:
            return
        target = as_str(args[key])
        if target is None:
            raise BrokerError(
                Condition.PRECONDITION_FAILED,
                f"invalid type '{field_type(args[key])}' for arg '{key}'",
            )
        auth = self.state.auth
        s.check(auth, Access.READ, kind, name)
        s.check(auth, Access.WRITE, "exchange", target)

    # ------------------------------------------------------------------ exchanges
    def declare_exchange(
        self,
        vh: VHost,
        name: str,
        type_name: str,
        *,
        durable: bool,
        auto_delete: bool,
        internal: bool,
        arguments: Mapping[str, Any] | None,
        passive: bool = False,
        grant: Session | None = None,
    ) -> bool:
        """Declare exchange `name` (`passive`: only check it exists); True when created.

        With `grant`, the session's user needs configure on it (and write on a named
        alternate exchange)."""
        # Even a passive declare of the default exchange is refused (RabbitMQ: 403).
        _not_default(name)
        if passive:
            self.exchange(vh, name)
            return False
        auth = self.state.auth
        try:
            kind, routing_type = parse_exchange_type(type_name, arguments)
        except ExchangeTypeError as exc:
            raise BrokerError(Condition.COMMAND_INVALID, str(exc)) from None
        except DelayedTypeError as exc:
            if grant is not None:
                grant.check(auth, Access.CONFIGURE, "exchange", name)
            raise BrokerError(Condition.PRECONDITION_FAILED, str(exc)) from None
        args = dict(arguments or {})
        if grant is not None:
            grant.check(auth, Access.CONFIGURE, "exchange", name)
            self._check_arg_exchange(grant, args, "alternate-exchange", "exchange", name)
        x = vh.exchanges.get(name)
        if x is not None:
            diff = x.equivalent(kind, durable, auto_delete, internal, args)
            if diff is None:
                return False
            given = {"durable": durable, "auto_delete": auto_delete, "internal": internal}
            if diff == "type":
                got, cur = f"'{kind.value}'", f"'{x.type.value}'"
            elif diff in given:
                got, cur = f"'{flag(given[diff])}'", f"'{flag(getattr(x, diff))}'"
            else:
                got, cur = fmt_value(args.get(diff)), fmt_value(x.arguments.get(diff))
            raise BrokerError(
                Condition.PRECONDITION_FAILED,
                f"inequivalent arg '{diff}' for exchange '{name}' in vhost '{vh.name}': "
                f"received {got} but current is {cur}",
            )
        if name.startswith("amq."):
            raise BrokerError(
                Condition.ACCESS_REFUSED,
                f"exchange name '{name}' contains reserved prefix 'amq.*'",
            )
        x = Exchange(
            name,
            kind,
            durable=durable,
            auto_delete=auto_delete,
            internal=internal,
            arguments=args,
            routing_type=routing_type,
        )
        vh.exchanges[name] = x
        vh.invalidate()
        if x.durable:
            self.state.touch(EXCHANGE_DEF, vh.name, name)
        return True

    def delete_exchange(
        self, vh: VHost, name: str, *, if_unused: bool, grant: Session | None = None
    ) -> None:
        """Delete exchange `name` (403 for the default and `amq.*` ones; 406 when bound and
        `if_unused`). A missing exchange is no error for a session (as RabbitMQ); the
        management facade checks existence first."""
        _not_default(name)
        if name.startswith("amq."):
            raise BrokerError(
                Condition.ACCESS_REFUSED,
                f"deletion of system exchange '{name}' in vhost '{vh.name}' not allowed",
            )
        if grant is not None:
            grant.check(self.state.auth, Access.CONFIGURE, "exchange", name)
        x = vh.exchanges.get(name)
        if x is not None:
            if if_unused and x.bindings:
                raise BrokerError(
                    Condition.PRECONDITION_FAILED,
                    f"exchange '{name}' in vhost '{vh.name}' in use",
                )
            self.remove_exchange(vh, x)

    def remove_exchange(self, vh: VHost, x: Exchange) -> None:
        """Remove `x`, its bindings and the bindings to it (no checks)."""
        vh.exchanges.pop(x.name, None)
        if x.durable:
            self.state.touch(EXCHANGE_DEF, vh.name, x.name)
        x.bindings.clear()
        for source in vh.remove_dest((EXCHANGE, x.name)):
            self.maybe_auto_delete_exchange(vh, source)
        vh.invalidate()

    def maybe_auto_delete_exchange(self, vh: VHost, x: Exchange) -> None:
        """Remove auto-delete exchange `x` when its last binding went."""
        if x.auto_delete and not x.bindings and vh.exchanges.get(x.name) is x:
            self.remove_exchange(vh, x)

    def _touch_binding(
        self,
        vh: VHost,
        x: Exchange,
        dest: tuple[str, str],
        routing_key: str,
        arguments: Mapping[str, Any] | None,
    ) -> None:
        # One binding changed: write it after this call (when both ends are durable).
        state = self.state
        if state.durability is not None and x.durable:
            state.durability.touch_binding(vh.name, x.name, dest, routing_key, arguments)
            state.defs_dirty = True

    @staticmethod
    def _bind(
        src: Exchange, dest: tuple[str, str], routing_key: str, args: Mapping[str, Any] | None
    ) -> None:
        try:
            src.bind(dest, routing_key, args)
        except ValueError as exc:
            raise BrokerError(Condition.PRECONDITION_FAILED, str(exc)) from None

    def bind_exchange(
        self,
        vh: VHost,
        source: str,
        destination: str,
        routing_key: str,
        arguments: Mapping[str, Any] | None,
        *,
        grant: Session | None = None,
    ) -> None:
        """Bind exchange `destination` to exchange `source` (write on the destination, read
        on the source for a session)."""
        _not_default(source)
        _not_default(destination)
        if grant is not None:
            auth = self.state.auth
            grant.check(auth, Access.WRITE, "exchange", destination)
            grant.check(auth, Access.READ, "exchange", source)
        src = self.exchange(vh, source)
        self.exchange(vh, destination)
        self._bind(src, (EXCHANGE, destination), routing_key, arguments)
        vh.invalidate()
        self._touch_binding(vh, src, (EXCHANGE, destination), routing_key, arguments)

    def unbind_exchange(
        self,
        vh: VHost,
        source: str,
        destination: str,
        routing_key: str,
        arguments: Mapping[str, Any] | None,
        *,
        grant: Session | None = None,
    ) -> None:
        """Remove an exchange-to-exchange binding; a missing end or binding is no error (the
        binding is gone either way: RabbitMQ's rabbit_binding:remove reports only an absent
        queue, never not_found)."""
        _not_default(source)
        _not_default(destination)
        if grant is not None:
            auth = self.state.auth
            grant.check(auth, Access.WRITE, "exchange", destination)
            grant.check(auth, Access.READ, "exchange", source)
        src = vh.exchanges.get(source)
        if (
            src is not None
            and destination in vh.exchanges
            and src.unbind((EXCHANGE, destination), routing_key, arguments)
        ):
            vh.invalidate()
            self._touch_binding(vh, src, (EXCHANGE, destination), routing_key, arguments)
            self.maybe_auto_delete_exchange(vh, src)

    # ------------------------------------------------------------------ queues
    def resolve_settings(
        self, vhost: str, name: str, arguments: Mapping[str, Any]
    ) -> QueueSettings:
        """Effective settings of queue `name` from its arguments, policy and address settings."""
        state = self.state
        pol = state.policies.match(name, "queue", vhost=vhost)
        return resolve_queue_settings(
            name,
            arguments,
            policy=pol.definition if pol is not None else None,
            address_settings=state.address_settings.resolve(name),
            policy_name=pol.name if pol is not None else None,
        )

    def create_queue(
        self,
        vhost: str,
        name: str,
        *,
        durable: bool = False,
        exclusive_owner: int | None = None,
        auto_delete: bool = False,
        arguments: Mapping[str, Any] | None = None,
        now_ms: int = 0,
    ) -> QueueEntity:
        """Create a queue (no checks beyond settings validation, which raises SettingsError)."""
        state = self.state
        vh = state.vhosts[vhost]
        args = dict(arguments or {})
        settings = self.resolve_settings(vhost, name, args)
        q = QueueEntity(
            name=name,
            vhost=vhost,
            queue=self.resources.new_queue(vhost, name, settings),
            settings=settings,
            durable=durable,
            auto_delete=auto_delete,
            exclusive_owner=exclusive_owner,
            arguments=args,
            consumers=ConsumerSet(single_active=settings.single_active_consumer),
            last_used_ms=now_ms,
        )
        vh.queues[name] = q
        vh.invalidate()
        state.stats["queues_created"] += 1
        if durable and state.durability is not None:
            state.durability.attach(q)
            state.touch(QUEUE_DEF, vhost, name)
        if settings.message_ttl_ms is not None or settings.expires_ms is not None:
            state.track_timers(q)
        if exclusive_owner is not None:
            conn = state.conns.get(exclusive_owner)
            if conn is not None:
                conn.exclusive_queues.add(name)
        return q

    def declare_queue(
        self,
        s: Session,
        name: str,
        *,
        durable: bool,
        exclusive: bool,
        auto_delete: bool,
        arguments: Mapping[str, Any] | None,
        now_ms: int,
    ) -> QueueEntity:
        """Declare a queue for session `s` (an empty name gets a server-chosen `amq.gen-`
        name); an existing one must be equivalent. The session's last declared queue is set."""
        state = self.state
        vh = s.vhost
        state.stats["queues_declared"] += 1
        if name == "":
            name = state.gen_name("amq.gen-")
        elif name.startswith("amq."):
            raise BrokerError(
                Condition.ACCESS_REFUSED, f"queue name '{name}' contains reserved prefix 'amq.*'"
            )
        s.check(state.auth, Access.CONFIGURE, "queue", name)
        existing = vh.queues.get(name)
        args = dict(arguments or {})
        self._check_arg_exchange(s, args, "x-dead-letter-exchange", "queue", name)
        if existing is not None:
            q = existing
            if q.exclusive_owner is not None and q.exclusive_owner != s.conn_id:
                raise locked(name, vh.name)
            self._assert_equivalent(vh, q, durable, exclusive, auto_delete, args)
            q.last_used_ms = now_ms
        else:
            try:
                q = self.create_queue(
                    vh.name,
                    name,
                    durable=durable,
                    exclusive_owner=s.conn_id if exclusive else None,
                    auto_delete=auto_delete,
                    arguments=args,
                    now_ms=now_ms,
                )
            except SettingsError as exc:
                raise _settings_error(exc) from None
        s.last_queue = name
        return q

    def declare_queue_passive(self, s: Session, name: str, now_ms: int) -> QueueEntity:
        """The queue a passive declare names (NOT_FOUND / RESOURCE_LOCKED); it becomes the
        session's last declared queue."""
        q = self.queue_for(s, self.queue_name(s, name))
        q.last_used_ms = now_ms
        s.last_queue = q.name
        return q

    @staticmethod
    def _assert_equivalent(
        vh: VHost,
        q: QueueEntity,
        durable: bool,
        exclusive: bool,
        auto_delete: bool,
        args: dict[str, Any],
    ) -> None:
        def fail(what: str, got: str, cur: str) -> BrokerError:
            return BrokerError(
                Condition.PRECONDITION_FAILED,
                f"inequivalent arg '{what}' for queue '{q.name}' in vhost '{vh.name}': "
                f"received {got} but current is {cur}",
            )

        if durable != q.durable:
            raise fail("durable", f"'{flag(durable)}'", f"'{flag(q.durable)}'")
        if exclusive != (q.exclusive_owner is not None):
            raise locked(q.name, vh.name)
        if auto_delete != q.auto_delete:
            raise fail("auto_delete", f"'{flag(auto_delete)}'", f"'{flag(q.auto_delete)}'")
        if args != q.arguments:
            # As RabbitMQ: only arguments with semantics are compared; others may differ.
            for key in sorted((set(args) | set(q.arguments)) & EQUIVALENCE_ARGUMENTS):
                got, cur = args.get(key), q.arguments.get(key)
                if key == "x-queue-type":
                    got, cur = got or "classic", cur or "classic"
                if got != cur:
                    raise fail(key, fmt_value(args.get(key)), fmt_value(q.arguments.get(key)))

    def bind_queue(
        self,
        s: Session,
        queue: str,
        exchange: str,
        routing_key: str,
        arguments: Mapping[str, Any] | None,
    ) -> None:
        """Bind `queue` to `exchange` for session `s` (an empty routing key with an empty
        queue name binds with the last declared queue's name, as 0-9-1 says)."""
        vh = s.vhost
        qname = self.queue_name(s, queue)
        routing_key = routing_key or (qname if not queue else "")
        _not_default(exchange)
        auth = self.state.auth
        s.check(auth, Access.WRITE, "queue", qname)
        s.check(auth, Access.READ, "exchange", exchange)
        q = self.queue_for(s, qname)
        x = self.exchange(vh, exchange)
        self._bind(x, (QUEUE, q.name), routing_key, arguments)
        vh.invalidate()
        if q.durable:
            self._touch_binding(vh, x, (QUEUE, q.name), routing_key, arguments)

    def unbind_queue(
        self,
        s: Session,
        queue: str,
        exchange: str,
        routing_key: str,
        arguments: Mapping[str, Any] | None,
    ) -> None:
        """Remove a queue binding; a missing queue, exchange or binding is no error (RabbitMQ
        answers unbind-ok: the binding is gone either way). As there, exclusivity is checked
        only when the binding exists."""
        vh = s.vhost
        qname = self.queue_name(s, queue)
        _not_default(exchange)
        auth = self.state.auth
        s.check(auth, Access.WRITE, "queue", qname)
        s.check(auth, Access.READ, "exchange", exchange)
        q = vh.queues.get(qname)
        x = vh.exchanges.get(exchange)
        dest = (QUEUE, qname)
        if q is not None and x is not None and x.has_binding(dest, routing_key, arguments):
            self.queue_for(s, qname)  # 405 when another connection owns it exclusively
            x.unbind(dest, routing_key, arguments)
            vh.invalidate()
            if q.durable:
                self._touch_binding(vh, x, dest, routing_key, arguments)
            self.maybe_auto_delete_exchange(vh, x)

    def purge(self, q: QueueEntity) -> int:
        """Remove every ready message of `q`; returns how many."""
        count = int(q.queue.purge() or 0)
        durability = self.state.durability
        if q.durable and durability is not None:
            durability.purged(q)
        return count

    def purge_for(self, s: Session, queue: str) -> int:
        """Purge `queue` for session `s` (read permission, as RabbitMQ)."""
        qname = self.queue_name(s, queue)
        s.check(self.state.auth, Access.READ, "queue", qname)
        return self.purge(self.queue_for(s, qname))

    def check_delete(self, vh: VHost, q: QueueEntity, *, if_unused: bool, if_empty: bool) -> int:
        """The checks of a queue delete (406 when used or not empty as asked); returns the
        ready messages it holds."""
        if if_unused and q.consumers:
            raise BrokerError(
                Condition.PRECONDITION_FAILED, f"queue '{q.name}' in vhost '{vh.name}' in use"
            )
        if if_empty and q.queue.ready_count:
            raise BrokerError(
                Condition.PRECONDITION_FAILED, f"queue '{q.name}' in vhost '{vh.name}' not empty"
            )
        return q.queue.ready_count

    def delete_for(
        self, s: Session, queue: str, *, if_unused: bool, if_empty: bool
    ) -> tuple[QueueEntity | None, int]:
        """The checks of a queue delete by session `s` (configure permission; locked when
        another connection owns it); returns the queue (None if missing: no error) and its
        ready count. The caller replies, then calls `delete_queue` (RabbitMQ sends delete-ok
        before the cancels of the queue's consumers)."""
        vh = s.vhost
        qname = self.queue_name(s, queue)
        s.check(self.state.auth, Access.CONFIGURE, "queue", qname)
        q = vh.queues.get(qname)
        if q is None:
            return None, 0
        if q.exclusive_owner is not None and q.exclusive_owner != s.conn_id:
            raise locked(qname, vh.name)
        return q, self.check_delete(vh, q, if_unused=if_unused, if_empty=if_empty)

    def delete_queue(self, vh: VHost, q: QueueEntity, now_ms: int) -> None:
        """Remove a queue: cancel its consumers (notifying them), drop its bindings."""
        if vh.queues.get(q.name) is not q:
            return
        state = self.state
        del vh.queues[q.name]
        q.deleted = True
        state.stats["queues_deleted"] += 1
        if q.durable and state.durability is not None:
            state.durability.queue_deleted(q)
            state.touch(QUEUE_DEF, vh.name, q.name)
        q.queue.close()  # release its paged data
        out = state.out
        for consumer in list(q.consumers.all):
            session = consumer.session
            session.consumers.pop(consumer.tag, None)
            if session.conn.cancel_notify and session.conn.sessions.get(session.channel) is session:
                out.append(CancelConsumer(session.conn_id, session.channel, consumer.tag))
        q.consumers = ConsumerSet()
        if q.exclusive_owner is not None:
            conn = state.conns.get(q.exclusive_owner)
            if conn is not None:
                conn.exclusive_queues.discard(q.name)
        for source in vh.remove_dest((QUEUE, q.name)):
            self.maybe_auto_delete_exchange(vh, source)
        state.dirty.pop(id(q), None)
        state.backlog.pop(id(q), None)
        self.resources.maybe_unblock(q)
