"""The broker core: the owners of the engine composed, and the calls every protocol makes.

Theory of operation
-------------------
`Broker` is a synchronous state machine owned by the server's loop thread. It composes the
owners of the core, each in its own module, around one shared `State` (registry and call in
progress, `state.py`):

* `Exchanges` (exchanges.py): vhosts, exchanges and exchange bindings;
* `Topology` (topology.py): queues and their bindings; declare, bind, purge, delete;
* `Publisher` (publish.py): the one publish pipeline (classify, route, enqueue each, confirm);
* `Delivery` (delivery.py): consume, get, settle; `Dispatcher` (dispatch.py): the dispatch of
  dirty queues (`flush`);
* `DeadLetters` (deadletter.py): dead letters routed with `x-death`;
* `Confirms` and `Transactions` (transactions.py);
* `Resources` (resources.py): paging bounds, alarms, Artemis BLOCK/FAIL, publisher flow;
* `Timers` (timers.py): TTLs, `x-expires`, schedules and delayed exchanges (`tick`);
* `Restore` (restore.py): durable definitions recreated at recovery;
* `Forwards` (forwarding.py): publishes and dead letters for queues another shard owns;
  `Remotes` (remotes.py): the subscriptions of their copies' consumers.

The calls that bring answers from outside a call (the store's fsync, other shards' owners)
are `Answers` (answers.py), the broker's base class.

The broker itself owns the lifecycle of connections and sessions, the configuration it starts
from, and recovery from a store. Protocol adapters (`ringmq.adapters.amqp091` for AMQP 0-9-1)
and the management facade turn their requests into calls on the owners inside one core call
(`with broker.call(now_ms, publish=...) as out:`, the call protocol of `call.py`); every other
entry point here is a whole call: it takes `now_ms`, mutates state, and returns the effects
(`ringmq.core.effects`) the server must apply in order. Errors
are `BrokerError`s with a protocol-neutral `Condition`; each adapter maps them. The core never
reads a clock, never does I/O, and imports no protocol, server, management or storage module.

Work per call: the owners validate *before* they mutate (a refused call leaves no half-done
change), append effects to `State.out` and mark the queues they touched as dirty; the end of
the call (`Calls.end`, one rule for every caller) then flushes (dispatch, dead letters,
unblocking) and writes the durable definitions the call changed. With `defer_dispatch` (set by
the server), a publish that reached only plain queues leaves the flush to `dispatch_pending`,
called once per read batch, so a batch of publishes is delivered in one pass per queue.

Storage: `Broker(config, store=..., now_ms=...)` recovers durable definitions and persistent
messages before serving, then writes through `ringmq.core.durability.Durability`. Without a
store nothing is written.

Composition: `Broker.__init__` is the core's composition root (no other core module imports
this one; `tests/unit/core/test_imports.py`). It builds, in one order and each from the parts
it calls: the owners around `State`, the by-name declarations (`admin.py`), the
configuration's users, vhosts and policies, the stream books, then with a store the storage
glue, which takes the ports of `ports.py` (`Registry`: `State`; `Restorer`: `Restore`;
`LeaseRecovery`: the stream books), recovers, and only then journals de-duplication.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any

from ringmq.core.admin import Declarations
from ringmq.core.answers import Answers
from ringmq.core.auth import AuthDB, ExternalGrant
from ringmq.core.call import Calls, CallScope
from ringmq.core.config import DEFAULT_VHOST, BrokerConfig
from ringmq.core.deadletter import DeadLetters
from ringmq.core.dedup import PublishDedup
from ringmq.core.delivery import Delivery
from ringmq.core.dispatch import Dispatcher
from ringmq.core.durability import Durability
from ringmq.core.effects import CloseConnection, Effect
from ringmq.core.entities import QueueEntity
from ringmq.core.errors import BrokerError, Condition
from ringmq.core.exchanges import Exchanges
from ringmq.core.forwarding import Forwards
from ringmq.core.limits import TenantLimits
from ringmq.core.message import Message, SeqId
from ringmq.core.policies import AddressSettingsTable, PolicyTable
from ringmq.core.publish import Publisher
from ringmq.core.publishbatch import BatchPublished, publish_batch
from ringmq.core.queue import (
    DEFAULT_HEAD_BYTES,
    DEFAULT_HEAD_COUNT,
    BodyStore,
    RunColumns,
    SpillStore,
)
from ringmq.core.remotes import Remotes
from ringmq.core.resources import Resources
from ringmq.core.restore import Restore
from ringmq.core.session import Conn, ProtocolCounts, Session
from ringmq.core.settings import QueueSettings
from ringmq.core.state import State
from ringmq.core.storeport import StorePort
from ringmq.core.streambooks import StreamBooks
from ringmq.core.streamsac import ActiveGroups
from ringmq.core.timers import Timers
from ringmq.core.topology import Topology
from ringmq.core.transactions import Confirms, Transactions
from ringmq.core.vhost import VHost


class Broker(Answers):
    """The broker core (see the module docstring for the theory of operation).

    Args:
        config: users, vhosts, permissions, policies, limits; defaults to guest/guest on "/".
        store: where durable definitions and persistent messages go (`ringmq.storage`'s
            `FileStore` or `MemoryStore`); None keeps everything in memory. Its contents are
            recovered here, before the broker serves anything.
        now_ms: wall time of the start (recovered TTLs and schedules are judged against it).
    """

    def __init__(
        self, config: BrokerConfig | None = None, store: StorePort | None = None, now_ms: int = 0
    ) -> None:
        # The one place the core is composed (module docstring).
        config = config or BrokerConfig()
        self.state = state = State(config)
        self.resources = Resources(state)
        self.exchanges = Exchanges(state)
        self.topology = Topology(state, self.resources, self.exchanges)
        self.forwards = Forwards()
        """Publishes and dead letters for other shards' queues (forwarding.py)."""
        self.dead_letters = DeadLetters(state, self.topology.create_queue, self.forwards)
        self.remotes = Remotes()
        """Subscriptions of copies of other shards' queues (remotes.py)."""
        self.dispatcher = Dispatcher(state, self.resources, self.dead_letters, self.remotes)
        """The dispatch of the queues each call touched (dispatch.py), at the call's end."""
        self.delivery = Delivery(state, self.topology, self.dispatcher, self.remotes)
        self.stream_groups = ActiveGroups()
        """Single active consumer groups on streams (the stream protocol's)."""
        self.confirms = Confirms(state)
        self.calls = Calls(state, self.dispatcher.flush)
        """The call protocol (`call.py`): every call starts and ends through it."""
        self.publisher = Publisher(
            state, self.resources, self.delivery, self.confirms, self.calls, self.forwards
        )
        # The call protocol's one-publish call is the pipeline's (`Publisher.publish_call`).
        self.calls.pipeline = self.publisher.publish_call
        self.transactions = Transactions(state, self.publisher, self.delivery)
        self.timers = Timers(state, self.topology, self.publisher)
        self.restore = Restore(state, self.topology, self.publisher)
        self.admin = Declarations(state, self.exchanges, self.topology)
        """Declarations by vhost name (config loading, management), and the hook that applies
        the effects of calls made outside a client read (`emit`, set by the composition root
        of the node)."""
        self._load(config)
        self.streams = StreamBooks(state.vhosts, self.delivery.ack_seqs, store)
        """Reservation books of offset readers (the streams API), durable with the queues."""
        if store is not None:
            dur = Durability(store, state)
            # Before recovery: recreated durable queues attach to it (`Topology.create_queue`).
            state.durability = dur
            dur.recover(now_ms, self.restore, self.streams)
            # After recovery: the windows it restored are in the store already.
            state.dedup.journal = dur.dedup_recorded
            state.dedup.unjournal = dur.dedup_discarded

    def _load(self, config: BrokerConfig) -> None:
        # Users, vhosts, permissions, policies and address settings of the configuration.
        state = self.state
        auth = state.auth
        users = list(config.users)
        if not users:
            auth.add_user(
                config.default_user,
                password=config.default_password,
                tags=("administrator",),
                loopback_only=config.default_user in config.loopback_users,
            )
        for u in users:
            loopback_only = u.name in config.loopback_users
            if u.password is not None:
                auth.add_user(u.name, password=u.password, tags=u.tags, loopback_only=loopback_only)
            else:
                auth.add_user(
                    u.name, password_hash=u.password_hash, tags=u.tags, loopback_only=loopback_only
                )
        for name in {DEFAULT_VHOST, *config.vhosts}:
            self.exchanges.add_vhost(name)
        if config.permissions:
            for p in config.permissions:
                auth.set_permissions(p.user, p.vhost, p.configure, p.write, p.read)
        elif not users:
            auth.set_permissions(config.default_user, DEFAULT_VHOST)
        for pol in config.policies:
            state.policies.set(
                pol.name,
                pol.pattern,
                pol.definition,
                vhost=pol.vhost,
                apply_to=pol.apply_to,
                priority=pol.priority,
            )
        for match, settings in config.address_settings.items():
            state.address_settings.set(match, settings)

    # ================================================================== shared registry
    @property
    def config(self) -> BrokerConfig:
        """The configuration the broker started from."""
        return self.state.config

    @property
    def auth(self) -> AuthDB:
        """Users and permissions."""
        return self.state.auth

    @property
    def policies(self) -> PolicyTable:
        """RabbitMQ policies."""
        return self.state.policies

    @property
    def limits(self) -> TenantLimits:
        """Vhost and user limits (`core/limits.py`), set by the management API."""
        return self.state.limits

    @property
    def address_settings(self) -> AddressSettingsTable:
        """Artemis address settings."""
        return self.state.address_settings

    @property
    def vhosts(self) -> dict[str, VHost]:
        """Vhosts by name."""
        return self.state.vhosts

    @property
    def conns(self) -> dict[int, Conn]:
        """Open connections by id."""
        return self.state.conns

    @property
    def stats(self) -> dict[str, int]:
        """Broker-wide counters (published, delivered, churn...)."""
        return self.state.stats

    def counts_by_protocol(self) -> dict[str, dict[str, int]]:
        """Message counters of sessions, by the protocol label their connection opened with
        (`ProtocolCounts` names), as plain values."""
        return {
            p: {k: getattr(c, k) for k in ProtocolCounts.__slots__}
            for p, c in self.state.by_protocol.items()
        }

    @property
    def dedup(self) -> PublishDedup:
        """Publish de-duplication by message id."""
        return self.state.dedup

    @property
    def durability(self) -> Durability | None:
        """The storage glue, None without a store."""
        return self.state.durability

    @property
    def defer_dispatch(self) -> bool:
        """When True, dispatching after a publish to plain queues waits for
        `dispatch_pending` (the server sets it and calls that once per read batch)."""
        return self.state.defer_dispatch

    @defer_dispatch.setter
    def defer_dispatch(self, value: bool) -> None:
        self.state.defer_dispatch = value

    @property
    def max_message_size(self) -> int:
        """Largest body a publish may carry."""
        return self.publisher.max_message_size

    @property
    def flow_requests(self) -> dict[int, QueueEntity]:
        """Publishers (conn id) whose last publish left a consumed queue over FLOW_HIGH."""
        return self.resources.flow_requests

    def session(self, conn_id: int, channel: int) -> Session | None:
        """The open session `channel` of connection `conn_id`, None when not open."""
        conn = self.state.conns.get(conn_id)
        return conn.sessions.get(channel) if conn is not None else None

    # ================================================================== calls
    def call(self, now_ms: int, *, publish: bool = False) -> CallScope:
        """One core call made of owner steps (adapters, management), as a `with` block that
        gives the call's effect list: `with broker.call(now_ms) as out: ...`.

        At a normal exit the call's dirty queues are dispatched, unless the server defers
        dispatch (`defer_dispatch`), the call published (`publish=True`) and no publish
        reached a queue that must dispatch at once (the one rule: `Calls.end`); then the
        durable definitions it changed are written. An exception aborts the call (no
        dispatch, nothing written). Calls nest safely (`call.py`).
        """
        return CallScope(self.calls, now_ms, publish)

    def dispatch_pending(self, now_ms: int) -> list[Effect]:
        """Deliver what the publishes of a read batch made deliverable (`defer_dispatch`).

        One dispatch per queue per batch instead of one per publish: the queue hands out the
        whole batch to its consumers in one pass.
        """
        return self.calls.dispatch_pending(now_ms)

    def queue_changed(self, q: QueueEntity, now_ms: int) -> list[Effect]:
        """Call after changing a queue outside a protocol's path: its settings, or messages
        put back by a lease (Spark streams) or an admin call. Registers the queue's timers
        (TTL, x-expires) and dispatches what became deliverable."""
        with self.call(now_ms) as out:
            self.state.track_timers(q)
            self.state.mark(q)
        return out

    settings_changed = queue_changed

    def tick(self, now_ms: int) -> list[Effect]:
        """Run timers: queue TTLs, `x-expires`, delayed exchanges, and pending dispatch."""
        with self.call(now_ms) as out:
            self.timers.tick(now_ms)
            # connections whose OAuth 2 token expired are closed, as RabbitMQ's
            out.extend(
                CloseConnection(c, Condition.ACCESS_REFUSED, "credential expired")
                for c in self.state.auth.expire_grants(now_ms)
                if c in self.state.conns
            )
        return out

    def next_deadline_ms(self) -> int | None:
        """Earliest time `tick` has work (an immediate time when dispatch is pending)."""
        # Asked after every batch (the server's deadline timer): no list, no comprehension.
        due = self.timers.next_deadline_ms()
        grant = self.state.auth.next_expiry_ms()
        if grant is not None and (due is None or grant < due):
            return grant
        return due

    # ================================================================== connections
    def add_vhost(self, name: str) -> VHost:
        """Create a vhost with the standard exchanges (idempotent)."""
        return self.exchanges.add_vhost(name)

    def connection_opened(
        self,
        conn_id: int,
        user: str,
        vhost: str,
        peer: str = "",
        client_properties: Mapping[str, Any] | None = None,
        now_ms: int = 0,
        protocol: str = "amqp091",
        grant: ExternalGrant | None = None,
        *,
        parks: bool = False,
    ) -> None:
        """Register an authenticated connection that opened `vhost` (NOT_ALLOWED when the
        vhost does not exist or the user has no access to it). `protocol` labels its message
        counters (`State.by_protocol`); `grant` is its login's (`core.auth.Identity`);
        `parks`: its adapter parks a command shard 0 makes (`Conn.parks`, core/asks.py)."""
        state = self.state
        if vhost not in state.vhosts:
            raise BrokerError(Condition.NOT_ALLOWED, f"vhost {vhost} not found")
        state.auth.check_vhost_access(user, vhost, grant)
        state.limits.check_connection(state.conns.values(), user, vhost)
        counts = state.by_protocol.get(protocol)
        if counts is None:
            counts = state.by_protocol[protocol] = ProtocolCounts()
        state.conns[conn_id] = Conn(
            conn_id,
            user,
            vhost,
            peer,
            dict(client_properties or {}),
            now_ms,
            protocol=protocol,
            counts=counts,
            grant=grant,
            parks=parks,
        )
        state.auth.watch(conn_id, grant)
        state.stats["connections_opened"] += 1

    def channel_opened(
        self, conn_id: int, channel: int, now_ms: int, *, vhost: str | None = None
    ) -> list[Effect]:
        """Create the core state of a newly opened session. Over the user's `max-channels`
        no session is made and the answer is a `CloseConnection` (RabbitMQ closes the
        connection with NOT_ALLOWED). `vhost`: the session's, when not its connection's (a
        shard link serves every vhost on one connection); NOT_FOUND when it does not exist,
        NOT_ALLOWED when the connection's user may not use it."""
        state = self.state
        conn = state.conns[conn_id]
        vh = state.vhosts[conn.vhost] if vhost is None else self.exchanges.vhost(vhost)
        if vh.name != conn.vhost:
            state.auth.check_vhost_access(conn.user, vh.name, conn.grant)
        if state.limits.users:
            refusal = state.limits.channel_refusal(state.conns.values(), conn.user)
            if refusal is not None:
                return [CloseConnection(conn_id, Condition.NOT_ALLOWED, refusal)]
        conn.sessions[channel] = Session(conn, channel, vh)
        state.stats["channels_opened"] += 1
        return []

    def channel_closed(self, conn_id: int, channel: int, now_ms: int) -> list[Effect]:
        """Forget a session: roll back its tx, requeue its unacked messages, drop consumers."""
        state = self.state
        with self.call(now_ms) as out:
            conn = state.conns.get(conn_id)
            if conn is None:
                return out
            session = conn.sessions.pop(channel, None)
            if session is not None:
                state.stats["channels_closed"] += 1
                self.delivery.close_session(session, now_ms)
            self.dispatcher.flush(now_ms)  # even with no queue dirty: draining consumers
        return out

    def connection_closed(self, conn_id: int, now_ms: int) -> list[Effect]:
        """Forget a connection: close its sessions, then delete its exclusive queues."""
        state = self.state
        with self.call(now_ms) as out:
            conn = state.conns.pop(conn_id, None)
            if conn is None:
                return out
            state.auth.watch(conn_id, None)
            if state.asks is not None:
                state.asks.forget(conn_id)
            state.stats["connections_closed"] += 1
            state.stats["channels_closed"] += len(conn.sessions)
            self.resources.forget_connection(conn_id)
            for session in list(conn.sessions.values()):
                self.delivery.close_session(session, now_ms)
            conn.sessions.clear()
            vh = state.vhosts.get(conn.vhost)
            if vh is not None:
                for qname in sorted(conn.exclusive_queues):
                    q = vh.queues.get(qname)
                    if q is not None:
                        self.topology.delete_queue(vh, q, now_ms)
            self.dispatcher.flush(now_ms)  # even with no queue dirty: draining consumers
        return [e for e in out if e.conn_id != conn_id]

    def set_writable(self, conn_id: int, writable: bool, now_ms: int) -> list[Effect]:
        """Pause (False) or resume (True) deliveries to a connection (socket back-pressure)."""
        state = self.state
        with self.call(now_ms) as out:
            conn = state.conns.get(conn_id)
            if conn is None or conn.writable == writable:
                return out
            conn.writable = writable
            if writable:
                for session in conn.sessions.values():
                    for consumer in session.consumers.values():
                        state.mark(consumer.queue)
        return out

    # ================================================================== publishing
    def publish_batch(
        self,
        conn_id: int,
        channel: int,
        exchange: str,
        messages: Iterable[Message],
        now_ms: int,
        columns: RunColumns | None = None,
    ) -> BatchPublished:
        """Publish a batch on an open session with one confirm step and one dispatch per
        batch (`publishbatch.publish_batch`; `columns`: publishes before `messages`, as
        columns); NOT_FOUND... errors stop the batch (`error`). Raises CHANNEL_ERROR only
        when the session is not open."""
        s = self.session(conn_id, channel)
        if s is None:
            raise BrokerError(
                Condition.CHANNEL_ERROR, f"expected 'channel.open' on channel {channel}"
            )
        with self.call(now_ms, publish=True):
            return publish_batch(
                self.publisher,
                messages,
                session=s,
                exchange=exchange,
                flush=self.dispatcher.flush,
                now_ms=now_ms,
                columns=columns,
            )

    def ack_seqs(self, q: QueueEntity, seqs: list[SeqId]) -> None:
        """Delete delivered-unacked messages of `q` (`Delivery.ack_seqs`: the one ack path)."""
        self.delivery.ack_seqs(q, seqs)

    # ================================================================== resources
    def take_flow(self) -> list[tuple[int, QueueEntity]]:
        """Publishers to pause, with the queue they fill (`Resources.take_flow`)."""
        return self.resources.take_flow()

    @staticmethod
    def flow_settled(q: QueueEntity) -> bool:
        """True when a publisher paused for `q` may read again."""
        return Resources.flow_settled(q)

    def enable_paging(
        self,
        spill_factory: Callable[[str, str], SpillStore],
        head_count: int = DEFAULT_HEAD_COUNT,
        head_bytes: int = DEFAULT_HEAD_BYTES,
        body_store_factory: Callable[[str, str], BodyStore] | None = None,
    ) -> None:
        """Let every queue page beyond an in-memory head (`Resources.enable_paging`)."""
        self.resources.enable_paging(spill_factory, head_count, head_bytes, body_store_factory)

    @property
    def memory_bound(self) -> tuple[int, int]:
        """The per-queue in-memory head bound in force: (messages, body bytes)."""
        return self.resources.memory_bound

    def set_memory_bound(self, head_count: int, head_bytes: int) -> int:
        """Change every queue's in-memory bound; returns messages paged out."""
        return self.resources.set_memory_bound(head_count, head_bytes)

    def memory_held_bytes(self) -> int:
        """Message body bytes held in memory by all queues (paged bodies excluded)."""
        return self.resources.memory_held_bytes()

    @property
    def alarms(self) -> dict[str, str]:
        """Resource alarms in force: resource ("memory", "disk") -> reason."""
        return dict(self.resources.alarms_on)

    def set_alarm(self, resource: str, reason: str | None) -> list[Effect]:
        """Raise (`reason` given) or clear (None) a resource alarm, as RabbitMQ's memory and
        disk alarms: while any alarm is on, a connection that publishes is blocked right after
        that publish; clearing the last alarm unblocks them (unless an Artemis BLOCK address
        still holds them)."""
        with self.call(self.state.now_ms) as out:
            self.resources.set_alarm(resource, reason)
        return out

    def block_for_alarms(self, conn_id: int) -> list[Effect]:
        """Block `conn_id` as a publish would while a resource alarm is on (no-op otherwise):
        for a connection with content in flight, whose body is what the alarm is about."""
        state = self.state
        with self.call(state.now_ms) as out:
            if self.resources.alarms_on and conn_id in state.conns:
                self.resources.alarm_publish(conn_id)
        return out

    # ================================================================== settings
    def resolve_settings(
        self, vhost: str, name: str, arguments: Mapping[str, Any]
    ) -> QueueSettings:
        """Effective settings of queue `name` from its arguments, policy and address settings."""
        return self.topology.resolve_settings(vhost, name, arguments)

    def replace_address_settings(
        self, settings: Mapping[str, Mapping[str, Any]], *, now_ms: int = 0
    ) -> None:
        """Replace the Artemis address settings and re-apply every queue's settings; the
        effects (deliveries, dead letters of a new limit) go to `admin.apply`."""
        with self.call(now_ms) as out:
            self.topology.replace_address_settings(settings, now_ms)
        self.admin.apply(out)

    # ================================================================== durability
    def definitions_changed(self, *, full: bool = True) -> None:
        """Write durable definitions that changed (management calls it after its edits)."""
        self.state.sync_definitions(full=full)

    def close(self) -> None:
        """Shut down: sync and close the store (the next start is a clean one)."""
        dur = self.state.durability
        if dur is not None:
            self.definitions_changed()
            dur.store.close()

    def recovered_queue(self, q: QueueEntity, now_ms: int) -> None:
        """Recovery put messages back into `q`: arm its timers (TTL, schedule)."""
        self.restore.recovered_queue(q, now_ms)
