"""Topology: queues and their bindings; the one implementation of their rules.

Theory of operation
-------------------
`Topology` owns declaring, binding, unbinding, purging and deleting queues, with RabbitMQ's
checks and texts, for every caller: the protocol adapters (on behalf of a client session,
whose permissions are checked), the management facade and config loading (which authorise the
user themselves); exchanges are `exchanges.Exchanges`' and recovery recreates stored
definitions without these checks (`restore.py`). A client's calls take its session; the
others take the vhost (`declare`, `bind`, `unbind`, `bind_destination`, `check_delete` +
`delete_queue`, `delete_vhost`) and share the same rules. A new queue is placed on a shard
here (`placement.place`, once, by its leader locator). Settings are applied here too, live:
a queue's own arguments changed (`update_arguments`, Artemis `updateQueue`), or re-resolved
after a policy or address-settings change (`reapply_settings`, `replace_address_settings`).
Each operation validates everything before it changes anything, so a refused call leaves no
half-done change. Lookups by name and bindings are its base's (`bindings.QueueBindings`).

Rules kept here: `amq.*` names are reserved for new queues; a redeclare must be equivalent
(flags and the arguments with semantics, as RabbitMQ compares them: the table of
`core.arguments`); a queue owned exclusively by another connection is locked (405); naming a
dead-letter exchange in a declare needs write permission on it; an empty queue name means the
session's last declared queue (0-9-1's rule, harmless elsewhere). Changes to durable objects
are recorded (`State.touch`) and written at the end of the call. Deleting a queue cancels its
consumers (`CancelConsumer` effects to the sessions that asked for such notices), drops its
bindings and auto-deletes exchanges left without any.

Pure: no I/O, no clock.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

from ringmq.core import queuetypes
from ringmq.core.arguments import EQUIVALENCE_ARGUMENTS
from ringmq.core.asks import stays_local
from ringmq.core.auth import Access
from ringmq.core.bindings import QueueBindings, locked
from ringmq.core.effects import CancelConsumer, CloseConnection
from ringmq.core.entities import ELSEWHERE, ConsumerSet, QueueEntity
from ringmq.core.errors import BrokerError, Condition
from ringmq.core.exchanges import Exchanges
from ringmq.core.placement import place
from ringmq.core.resources import Resources
from ringmq.core.routing import (
    QUEUE,
)
from ringmq.core.session import Session
from ringmq.core.settings import QueueSettings, SettingsError, resolve_queue_settings
from ringmq.core.state import State
from ringmq.core.storeport import QUEUE_DEF, queue_key
from ringmq.core.streamlog import (
    STREAM,
    MemoryStreamLog,
    StreamLog,
    StreamSpec,
    StreamStorePort,
    check_stream_declare,
    stream_spec,
)
from ringmq.core.texts import flag, fmt_value
from ringmq.core.vhost import VHost


@dataclass(frozen=True, slots=True)
class Declared:
    """What a queue declare answers (plain values, as every protocol reports them)."""

    name: str
    message_count: int
    consumer_count: int


def _declared(q: QueueEntity) -> Declared:
    if q.stream is not None:  # RabbitMQ answers a stream's message count (`stat/1`)
        return Declared(q.name, q.stream.index.count, len(q.consumers))
    return Declared(q.name, q.queue.ready_count, len(q.consumers))


THIS_SHARD: Final = 0
"""The shard this broker is, and every connection's: one until `--shards N`
(docs/dev/shards.md), when the parent gives each shard its index and shard 0 the counts."""


def cancel_consumers(state: State, q: QueueEntity) -> None:
    """End every consumer of `q`, whose queue went (deleted here, or its owner shard ended
    the subscription of a copy): each client that asked for it is told (the consumer cancel
    notification); their unacked deliveries stay with their sessions."""
    out = state.out
    for consumer in list(q.consumers.all):
        session = consumer.session
        session.consumers.pop(consumer.tag, None)
        if session.conn.cancel_notify and session.conn.sessions.get(session.channel) is session:
            out.append(CancelConsumer(session.conn_id, session.channel, consumer.tag))
    q.consumers = ConsumerSet(single_active=q.settings.single_active_consumer)


def _settings_error(exc: SettingsError) -> BrokerError:
    return BrokerError(Condition.PRECONDITION_FAILED, str(exc))


class Topology(QueueBindings):
    """Queues and their bindings (see the module docstring; lookups and bindings are
    `QueueBindings`')."""

    def __init__(self, state: State, resources: Resources, exchanges: Exchanges) -> None:
        self.state = state
        self.resources = resources
        self.exchanges = exchanges

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

    def update_arguments(self, q: QueueEntity, arguments: Mapping[str, Any], now_ms: int) -> None:
        """Merge `arguments` into `q`'s declared ones and apply the settings they resolve to,
        live (Artemis `updateQueue`); PRECONDITION_FAILED with nothing changed when invalid."""
        args = dict(q.arguments)
        args.update(arguments)
        try:
            new = self.resolve_settings(q.vhost, q.name, args)
        except SettingsError as exc:
            raise _settings_error(exc) from None
        q.arguments = args
        self._apply_settings(q, new, now_ms)

    def reapply_settings(self, vh: VHost, now_ms: int) -> None:
        """Re-resolve the settings of every queue of `vh` (a policy or an address setting
        changed) and apply those that changed; a queue whose settings would become invalid
        keeps its old ones."""
        for q in vh.queues.values():
            try:
                new = self.resolve_settings(vh.name, q.name, q.arguments)
            except SettingsError:
                continue
            if new != q.settings:
                self._apply_settings(q, new, now_ms)
        vh.invalidate()

    def replace_address_settings(
        self, settings: Mapping[str, Mapping[str, Any]], now_ms: int
    ) -> None:
        """Replace every Artemis address setting, then re-apply queue settings everywhere."""
        table = self.state.address_settings
        for match in list(table.list()):
            table.clear(match)
        for match, values in settings.items():
            table.set(match, values)
        for vh in list(self.state.vhosts.values()):
            self.reapply_settings(vh, now_ms)

    def _apply_settings(self, q: QueueEntity, new: QueueSettings, now_ms: int) -> None:
        # The engine applies them at once (a shorter limit drops or dead-letters now); the
        # flush dispatches what changed and the timers see a new TTL.
        q.settings = new
        q.queue.update_settings(new, now_ms)
        if q.stream is not None:
            q.stream.set_spec(stream_spec(q.name, q.arguments, new.max_length_bytes))
            q.stream.enforce(now_ms)
        self.state.track_timers(q)
        self.state.mark(q)

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
        # Placed once, here, for every way a queue is made (declare, management, config,
        # recovery, dead-letter queues): this shard, unless shard 0 makes the step of another
        # shard's client (`State.connection_shard`, core/askrun.py), when a queue placed on
        # that shard is made there from the feed and copied here (`create_copy`).
        shard = place(
            settings.queue_leader_locator,
            connection_shard=state.connection_shard,
            queues_per_shard=self._queues_per_shard(),
            exclusive=exclusive_owner is not None,
            auto_delete=auto_delete,
        )
        if shard != THIS_SHARD:
            return self.create_copy(
                vhost,
                name,
                shard,
                durable=durable,
                auto_delete=auto_delete,
                arguments=args,
                now_ms=now_ms,
            )
        log: StreamLog | None = None
        if args.get("x-queue-type") in (STREAM, STREAM.encode()):
            check_stream_declare(
                name,
                vhost,
                durable=durable,
                exclusive=exclusive_owner is not None,
                auto_delete=auto_delete,
                arguments=args,
            )
            log = self._open_stream(vhost, name, stream_spec(name, args, settings.max_length_bytes))
        q = self._entity(vhost, name, settings, args, durable, auto_delete, exclusive_owner)
        q.last_used_ms = now_ms
        q.stream = log
        vh.queues[name] = q
        if log is not None:
            state.streams[id(q)] = q
            log.enforce(now_ms)
        vh.invalidate()
        state.stats["queues_created"] += 1
        if durable and state.durability is not None:
            state.durability.attach(q)
        state.touch(QUEUE_DEF, vhost, name, durable=durable)
        if settings.message_ttl_ms is not None or settings.expires_ms is not None:
            state.track_timers(q)
        if exclusive_owner is not None:
            conn = state.conns.get(exclusive_owner)
            if conn is not None:
                conn.exclusive_queues.add(name)
        return q

    def _queues_per_shard(self) -> list[int]:
        # The queue count of each shard (this one's copies say where the others' live).
        state = self.state
        counts = [0] * max(state.shards, state.connection_shard + 1)
        if len(counts) == 1:
            counts[0] = sum(len(v.queues) for v in state.vhosts.values())
            return counts
        for vh in state.vhosts.values():
            for q in vh.queues.values():
                shard = q.shard
                if shard < len(counts):
                    counts[shard] += 1
        return counts

    def create_copy(
        self,
        vhost: str,
        name: str,
        owner: int,
        *,
        durable: bool = False,
        exclusive: bool = False,
        auto_delete: bool = False,
        arguments: Mapping[str, Any] | None = None,
        now_ms: int = 0,
    ) -> QueueEntity:
        """Create this shard's copy of queue `name`, which shard `owner` owns: routed to
        like any queue, and what reaches it is forwarded (core/forwarding.py). It holds no
        messages (the owner keeps them), is written to this shard's store with its owner when
        durable and this shard owns the definitions (shard 0: recovery makes it a copy
        again), and an exclusive one belongs to a connection on another shard (nobody here
        may use it)."""
        state = self.state
        vh = state.vhosts[vhost]
        args = dict(arguments or {})
        settings = self.resolve_settings(vhost, name, args)
        q = self._entity(
            vhost, name, settings, args, durable, auto_delete, ELSEWHERE if exclusive else None
        )
        q.last_used_ms = now_ms
        q.owner = owner
        vh.queues[name] = q
        vh.invalidate()
        # stored where the definitions are this shard's own (shard 0, which placed it), so
        # that its routing survives a restart; a shard that follows shard 0 has it from the
        # feed again
        state.touch(QUEUE_DEF, vhost, name, durable=durable and state.asks is None)
        return q

    def _entity(
        self,
        vhost: str,
        name: str,
        settings: QueueSettings,
        args: dict[str, Any],
        durable: bool,
        auto_delete: bool,
        exclusive_owner: int | None,
    ) -> QueueEntity:
        # A queue's entity, its engine and consumer set made for its settings (a queue of
        # this shard or a copy).
        return QueueEntity(
            name=name,
            vhost=vhost,
            queue=self.resources.new_queue(vhost, name, settings),
            settings=settings,
            durable=durable,
            auto_delete=auto_delete,
            exclusive_owner=exclusive_owner,
            arguments=args,
            consumers=ConsumerSet(single_active=settings.single_active_consumer),
        )

    def _open_stream(self, vhost: str, name: str, spec: StreamSpec) -> StreamLog:
        # A stream's log: segment files with a store that keeps streams (recovered when it
        # existed), else in memory (a broker without a data directory).
        dur = self.state.durability
        store: object = dur.store if dur is not None else None
        if isinstance(store, StreamStorePort):
            return store.open_stream(queue_key(vhost, name), spec, name)
        return MemoryStreamLog(spec, name)

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
    ) -> Declared:
        """Declare a queue for session `s` (an empty name gets a server-chosen `amq.gen-`
        name); an existing one must be equivalent. The session's last declared queue is set."""
        state = self.state
        vh = s.vhost
        state.stats["queues_declared"] += 1
        if name == "":
            queuetypes.check_server_named(arguments or {})
            name = state.gen_name("amq.gen-")
        elif name.startswith("amq."):
            raise BrokerError(
                Condition.ACCESS_REFUSED, f"queue name '{name}' contains reserved prefix 'amq.*'"
            )
        s.check(state.auth, Access.CONFIGURE, "queue", name)
        existing = vh.queues.get(name)
        args = dict(arguments or {})
        self.exchanges.check_arg_exchange(s, args, "x-dead-letter-exchange", "queue", name)
        if existing is not None:
            q = existing
            if q.exclusive_owner is not None and q.exclusive_owner != s.conn_id:
                raise locked(name, vh.name)
            self._assert_equivalent(vh, q, durable, exclusive, auto_delete, args)
            q.last_used_ms = now_ms
        else:
            queuetypes.check_declare(
                vh.name,
                name,
                durable=durable,
                exclusive=exclusive,
                auto_delete=auto_delete,
                arguments=args,
            )
            if state.limits.vhosts:
                state.limits.check_queue(vh.name, len(vh.queues), name)
            if not (exclusive or auto_delete or name.startswith("amq.gen-")):
                state.elsewhere(
                    s,
                    "queue.declare",
                    vh.name,
                    name=name,
                    durable=durable,
                    auto_delete=auto_delete,
                    arguments=args,
                )
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
        return _declared(q)

    def declare_queue_passive(self, s: Session, name: str, now_ms: int) -> Declared:
        """The queue a passive declare names (NOT_FOUND / RESOURCE_LOCKED); it becomes the
        session's last declared queue."""
        q = self.queue_for(s, self.queue_name(s, name))
        q.last_used_ms = now_ms
        s.last_queue = q.name
        return _declared(q)

    def declare(
        self,
        vh: VHost,
        name: str,
        *,
        durable: bool,
        auto_delete: bool,
        arguments: Mapping[str, Any] | None,
        now_ms: int,
    ) -> bool:
        """Declare queue `name` of `vh` for a caller with no session (the management API,
        config loading: they authorise their user themselves); True when created, False when
        an equivalent one exists. The rules are a client's declare's (`declare_queue`)."""
        if not name:
            raise ValueError("queue name must not be empty")
        args = dict(arguments or {})
        q = vh.queues.get(name)
        if q is not None:
            self._assert_equivalent(vh, q, durable, False, auto_delete, args)
            q.last_used_ms = now_ms
            return False
        if name.startswith("amq."):
            raise BrokerError(
                Condition.ACCESS_REFUSED, f"queue name '{name}' contains reserved prefix 'amq.*'"
            )
        queuetypes.check_declare(
            vh.name, name, durable=durable, exclusive=False, auto_delete=auto_delete, arguments=args
        )
        try:
            self.create_queue(
                vh.name,
                name,
                durable=durable,
                auto_delete=auto_delete,
                arguments=args,
                now_ms=now_ms,
            )
        except SettingsError as exc:
            raise _settings_error(exc) from None
        return True

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
        return self.purge(self.local_queue_for(s, qname))

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
    ) -> tuple[str, int]:
        """The checks of a queue delete by session `s` (configure permission; locked when
        another connection owns it); returns the queue's name ("" when it does not exist: no
        error) and its ready count. The caller replies, then calls `delete_named` (RabbitMQ
        sends delete-ok before the cancels of the queue's consumers)."""
        vh = s.vhost
        qname = self.queue_name(s, queue)
        s.check(self.state.auth, Access.CONFIGURE, "queue", qname)
        q = vh.queues.get(qname)
        if q is None:
            return "", 0
        if q.exclusive_owner is not None and q.exclusive_owner != s.conn_id:
            raise locked(qname, vh.name)
        if not stays_local(q):
            self.state.elsewhere(
                s, "queue.delete", vh.name, queue=qname, if_unused=if_unused, if_empty=if_empty
            )
        if q.owner is not None and self.state.feed is None:
            # its owner deletes it, told by shard 0's feed: refused on a shard without one
            self.local_queue_for(s, qname)
        return qname, self.check_delete(vh, q, if_unused=if_unused, if_empty=if_empty)

    def delete_named(self, s: Session, name: str, now_ms: int) -> None:
        """Delete queue `name` of the session's vhost (checked by `delete_for`)."""
        q = s.vhost.queues.get(name)
        if q is not None:
            self.delete_queue(s.vhost, q, now_ms)

    def delete_vhost(self, vh: VHost, now_ms: int) -> None:
        """Delete a vhost: its connections are closed (CONNECTION_FORCED), its queues deleted
        and its permissions cleared."""
        state = self.state
        for conn in list(state.conns.values()):
            if conn.vhost == vh.name:
                state.out.append(
                    CloseConnection(conn.conn_id, Condition.CONNECTION_FORCED, "vhost deleted")
                )
        for q in list(vh.queues.values()):
            self.delete_queue(vh, q, now_ms)
        del state.vhosts[vh.name]
        state.limits.forget_vhost(vh.name)
        auth = state.auth
        for user, vhost in list(auth.permissions):
            if vhost == vh.name:
                auth.clear_permissions(user, vhost)
        auth.topics.forget_vhost(vh.name)

    def delete_queue(
        self, vh: VHost, q: QueueEntity, now_ms: int, *, keep_bindings: bool = False
    ) -> None:
        """Remove a queue: cancel its consumers (notifying them), drop its bindings (unless
        `keep_bindings`: a copy made again under the same name keeps what routes to it)."""
        if vh.queues.get(q.name) is not q:
            return
        state = self.state
        del vh.queues[q.name]
        q.deleted = True
        state.stats["queues_deleted"] += 1
        if q.durable and q.owner is None and state.durability is not None:
            state.durability.queue_deleted(q)
        stored = q.owner is None or state.asks is None  # as `create_copy` stores a copy
        state.touch(QUEUE_DEF, vh.name, q.name, durable=q.durable and stored)
        q.queue.close()  # release its paged data
        if q.stream is not None:
            q.stream.delete()
            state.streams.pop(id(q), None)
        cancel_consumers(state, q)
        if q.exclusive_owner is not None:
            conn = state.conns.get(q.exclusive_owner)
            if conn is not None:
                conn.exclusive_queues.discard(q.name)
        if not keep_bindings:
            for source in vh.remove_dest((QUEUE, q.name)):
                self.exchanges.maybe_auto_delete_exchange(vh, source)
        state.dirty.pop(id(q), None)
        state.backlog.pop(id(q), None)
        self.resources.maybe_unblock(q)
