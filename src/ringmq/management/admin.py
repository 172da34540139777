"""`CoreAdmin`: the one facade management calls to read and change the broker.

Theory of operation: every management module (the HTTP API, definitions, authorisation, browse,
health, nodes, metrics and the streams endpoints) reaches the broker only through this class (with
its bases `accessfacade.AccessFacade`, users and permissions, and `streamfacade.StreamsFacade`); it
is the single place under `management/` that touches core objects (with the record builders it
calls, `corerecords` and `queueinfo`), and it touches only their public names (the list at the end
of `docs/dev/contracts.md`). It calls the core's owners directly, as a protocol adapter does, except
for declarations by name, which go through the core's one facade for callers without a session
(`Broker.admin`, `core.admin.Declarations`), as config loading's do: `declare_exchange` and
`declare_queue` are that facade's own methods, `bind` passes it a binding record's fields.
`Exchanges` and `Topology` for unbinds, purges, deletes and live settings, `Publisher` for a
publish, `Delivery` for a /get, `Timers` for scheduled messages, `AuthDB` for users and permissions,
the policy table, and the reservation books (`Broker.streams`). Calls return the plain records of
`management.records` (or plain values: dicts, ints, `Message`s), never an engine object a caller
could change.

What the HTTP layer promises beyond the owners' rules is added here:

* publish properties are validated (unknown or ill-typed property -> ValueError -> 400)
  before anything is routed;
* `PUT .../settings` takes management names (`ring-size`, `max-length`, `message-ttl`, ...)
  and maps them to the queue arguments merged into the queue's own (`x-ring-size`, ...), as
  Artemis' `updateQueue` changes the queue's own configuration;
* a /get takes messages in slices that stay unacknowledged, owned by no session, until it
  settles them as its `ackmode` says (`SlicedGet`);
* queue listings are built from the engine's O(1) counters (`management.queueinfo`);
* users created here keep RabbitMQ's loopback-only rule (`loopback_users`, guest by default)
  across replacements and re-imports (`accessfacade`);
* the streams API's bulk publishes run on an in-process *virtual connection*, so that they are
  exactly AMQP publishes.

Errors: `BrokerError` (NOT_FOUND -> 404, others -> 400; the bulk publish's are `AMQPError`s)
or `ValueError` (bad input -> 400); a failing call leaves the broker unchanged.

A call that may affect clients (deliveries after a publish, a requeue or a settings change,
consumer cancels when a queue is deleted, connection closes when a vhost is) runs as one core
call (`call`): its effects go to `Runtime.apply_effects` inside `Runtime.run_batch`, so they
are flushed as one batch. Calls that change durable definitions write them after the call
(even one that failed half-way).

Everything runs on the broker's loop thread; nothing here blocks or locks.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import fields
from typing import Any, Final, ParamSpec, TypeVar

from ringmq.amqp.properties import BasicProperties, encode_properties
from ringmq.amqp.reply_codes import AMQPError
from ringmq.core import arguments
from ringmq.core.broker import Broker
from ringmq.core.effects import Effect
from ringmq.core.entities import QueueEntity
from ringmq.core.errors import BrokerError, Condition
from ringmq.core.limits import TenantLimits
from ringmq.core.message import FORM_AMQP091, SeqId, form
from ringmq.core.parameters import Parameters
from ringmq.core.published import UNROUTABLE
from ringmq.core.vhost import VHost
from ringmq.management import corerecords
from ringmq.management.accessfacade import AccessFacade, writes
from ringmq.management.port import Runtime
from ringmq.management.queueinfo import SettingsView, listing_record, snapshot_record
from ringmq.management.records import (
    AckMode,
    BindingInfo,
    ChannelInfo,
    ConsumerInfo,
    ExchangeInfo,
    FetchedMessage,
    PolicyInfo,
    QueueInfo,
    ScheduledInfo,
)
from ringmq.management.streamfacade import StreamsFacade

SETTING_ARGUMENTS: Final = arguments.SETTING_ARGUMENTS
"""PUT .../settings key -> the queue argument the core resolves (the queue-argument table's)."""
_PROPERTY_NAMES: Final = frozenset(f.name for f in fields(BasicProperties))
_ACK_MODES: Final = ("ack_requeue_true", "reject_requeue_true", "ack_requeue_false")

_P = ParamSpec("_P")
_R = TypeVar("_R")


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


class SlicedGet:
    """A `/get` in progress (RabbitMQ's `ackmode`): messages fetched slice by slice stay
    unacknowledged in the queue, owned by no session, until `finish`, so a later slice never
    sees them again and the caller may yield to the event loop between slices. `finish`
    requeues (redelivered) or acks them all; if the queue was deleted or replaced in between,
    its messages went with it and there is nothing to settle."""

    def __init__(self, admin: CoreAdmin, vhost: str, q: QueueEntity, ackmode: str) -> None:
        self.admin = admin
        self.vhost = vhost
        self.q = q
        self.ackmode = ackmode
        self.seqs: list[SeqId] = []
        self.finished = False

    def _alive(self) -> bool:
        vh = self.admin.broker.vhosts.get(self.vhost)
        return vh is not None and vh.queues.get(self.q.name) is self.q

    def fetch(self, count: int, now_ms: int) -> list[FetchedMessage]:
        """Up to `count` more messages (fewer when the queue runs out)."""
        if self.finished or not self._alive():
            return []
        got: list[FetchedMessage] = []
        with self.admin.call(now_ms):
            for _ in range(count):
                t = self.admin.broker.delivery.take(self.q, now_ms)
                if t is None:
                    break
                self.seqs.append(t.seq)
                got.append(corerecords.fetched(t.message, t.redelivered, t.message_count))
        return got

    def finish(self, now_ms: int) -> None:
        """Settle everything fetched as the ack mode says (once; later calls do nothing)."""
        if self.finished:
            return
        self.finished = True
        seqs, self.seqs = self.seqs, []
        if not seqs or not self._alive():
            return
        delivery = self.admin.broker.delivery
        with self.admin.call(now_ms):
            if self.ackmode == "ack_requeue_false":
                delivery.ack_seqs(self.q, seqs)
            else:
                delivery.requeue_seqs(self.q, seqs, now_ms)


class CoreAdmin(AccessFacade, StreamsFacade):
    """The management facade over the core `Broker` (see the module docstring); the users and
    permissions calls are `AccessFacade`'s, the streams endpoints' `StreamsFacade`'s."""

    def __init__(self, broker: Broker, runtime: Runtime) -> None:
        super().__init__(broker, runtime)
        self._settings = SettingsView()
        # Declaring an exchange or a queue by name is the core's one facade's own method
        # (`Broker.admin`, `core.admin.Declarations`: a client's rules, then the definitions
        # written), which config loading calls too: the same methods, not wrappers.
        declarations = broker.admin
        self.declare_exchange = declarations.declare_exchange
        self.declare_queue = declarations.declare_queue

    def _emit(self, effects: list[Effect]) -> None:
        if effects:
            self.runtime.run_batch(lambda: self.runtime.apply_effects(effects))

    @contextmanager
    def call(self, now_ms: int) -> Iterator[None]:
        """One core call made of owner steps (`Broker.call`: the queues it touched are
        dispatched at its end) whose effects are applied as one batch (`Runtime.run_batch`);
        a call that raises is aborted and applies nothing."""
        with self.broker.call(now_ms) as out:
            yield
        self._emit(out)

    def _entity(self, vhost: str, name: str) -> QueueEntity:
        return self.broker.topology.queue(self._vhost(vhost), name)

    def _vhosts(self, vhost: str | None) -> list[VHost]:
        # Vhosts by name, or the one named (none when it does not exist).
        return [vh for n, vh in sorted(self.broker.vhosts.items()) if vhost in (None, n)]

    # -- node -------------------------------------------------------------------------------

    def alarms(self) -> dict[str, str]:
        """Resource alarms in force: "memory", "disk", "disk_write" -> reason."""
        return self.broker.alarms

    def stats(self) -> dict[str, int]:
        """The core's node-wide totals (connections opened, messages published, ...)."""
        return dict(self.broker.stats)

    def counts_by_protocol(self) -> dict[str, dict[str, int]]:
        """Message counters by protocol label (received, confirmed, delivered..., acknowledged)."""
        return self.broker.counts_by_protocol()

    # -- vhosts ------------------------------------------------------------------------------

    def vhosts(self) -> list[str]:
        return sorted(self.broker.vhosts)

    def has_vhost(self, vhost: str) -> bool:
        return vhost in self.broker.vhosts

    @writes(full=False)
    def add_vhost(self, name: str) -> bool:
        """Create a vhost; False when it existed."""
        if not name:
            raise ValueError("vhost name must not be empty")
        existed = name in self.broker.vhosts
        self.broker.add_vhost(name)
        return not existed

    @writes(full=True)
    def delete_vhost(self, name: str, *, now_ms: int) -> None:
        """Delete a vhost: its connections are closed (320) and its queues dropped."""
        vh = self._vhost(name)
        with self.call(now_ms):
            self.broker.topology.delete_vhost(vh, now_ms)
        self.broker.admin.parameters.forget_vhost(name)  # its runtime parameters go with it

    # -- queues -----------------------------------------------------------------------------

    def _persistent(self, q: QueueEntity) -> int:
        # the durability layer's set of the queue's journaled (persistent) live messages
        dur = self.broker.durability
        persisted = dur.persisted(q) if dur is not None else None
        return len(persisted) if persisted else 0

    def _snapshot(self, q: QueueEntity) -> QueueInfo:
        owner = None
        if q.exclusive_owner is not None:
            conn = self.broker.conns.get(q.exclusive_owner)
            owner = conn.peer if conn is not None and conn.peer else str(q.exclusive_owner)
        return snapshot_record(q, self._settings.render(q.settings), self._persistent(q), owner)

    def queues(self, vhost: str | None = None) -> list[QueueInfo]:
        """Every queue (of `vhost`), from the engine's O(1) counters (`queueinfo`)."""
        render = self._settings.render
        out = [
            listing_record(q, render(q.settings), self._persistent(q))
            for vh in self._vhosts(vhost)
            for _, q in sorted(vh.queues.items())
            if not q.deleted
        ]
        self._settings.live_queues = len(out)
        return out

    def queue(self, vhost: str, name: str) -> QueueInfo:
        """One queue's full snapshot (head message timestamp included)."""
        return self._snapshot(self._entity(vhost, name))

    @writes(full=False)
    def delete_queue(
        self,
        vhost: str,
        name: str,
        *,
        if_unused: bool = False,
        if_empty: bool = False,
        now_ms: int = 0,
    ) -> int:
        """Delete a queue; returns the ready messages it held (406 on if-unused/if-empty)."""
        vh = self._vhost(vhost)
        topology = self.broker.topology
        q = topology.queue(vh, name)
        count = topology.check_delete(vh, q, if_unused=if_unused, if_empty=if_empty)
        with self.call(now_ms):
            topology.delete_queue(vh, q, now_ms)
        return count

    def purge_queue(self, vhost: str, name: str, *, now_ms: int = 0) -> int:
        """Remove every ready message; returns how many."""
        return self.broker.topology.purge(self._entity(vhost, name))

    def get_messages(
        self, vhost: str, name: str, *, count: int, ackmode: AckMode, now_ms: int
    ) -> list[FetchedMessage]:
        """Fetch up to `count` messages, then settle them as `ackmode` says (`begin_get`)."""
        if count < 1:
            raise ValueError("count must be at least 1")
        get = self.begin_get(vhost, name, ackmode=ackmode)
        try:
            return get.fetch(count, now_ms)
        finally:
            get.finish(now_ms)

    def begin_get(self, vhost: str, name: str, *, ackmode: AckMode) -> SlicedGet:
        """A /get taken in slices; "ack_requeue_true" and "reject_requeue_true" put the
        messages back (redelivered), "ack_requeue_false" removes them. NOT_FOUND for a
        missing queue."""
        if ackmode not in _ACK_MODES:
            raise ValueError(f"ackmode must be one of {', '.join(_ACK_MODES)}")
        return SlicedGet(self, vhost, self._entity(vhost, name), ackmode)

    def browse_messages(
        self, vhost: str, name: str, *, count: int, now_ms: int
    ) -> list[FetchedMessage]:
        """Up to `count` ready messages from the head, left in place: nothing is taken, nothing
        is marked redelivered, a last-value queue keeps its newest value (the queue's browse,
        which also leaves a paged tail on disk)."""
        if count < 1:
            raise ValueError("count must be at least 1")
        q = self._entity(vhost, name)
        rows = self.browse_ready(vhost, name, None, count, now_ms)
        ready = q.queue.ready_count
        return [corerecords.fetched(m, redelivered, ready) for _, _, redelivered, m in rows]

    def update_queue(
        self, vhost: str, name: str, settings: dict[str, Any], *, now_ms: int
    ) -> QueueInfo:
        """Change a queue's arguments live (`settings` by management or argument name,
        merged into the declared ones); returns the new snapshot."""
        args = settings_arguments(settings)
        q = self._entity(vhost, name)
        with self.call(now_ms):
            self.broker.topology.update_arguments(q, args, now_ms)
        return self._snapshot(q)

    def scheduled(self, vhost: str, name: str) -> list[ScheduledInfo]:
        """Scheduled messages of a queue, by due time."""
        return [
            corerecords.scheduled(int(s.seq), s.due_ms, s.message)
            for s in self._entity(vhost, name).queue.list_scheduled()
        ]

    def purge_scheduled(self, vhost: str, name: str, *, now_ms: int) -> int:
        return self.broker.timers.purge_scheduled(self._entity(vhost, name))

    def deliver_scheduled_now(
        self, vhost: str, name: str, seqs: list[int] | None, *, now_ms: int
    ) -> int:
        """Release scheduled messages (all, or `seqs`) to the queue head now."""
        q = self._entity(vhost, name)
        with self.call(now_ms):
            return self.broker.timers.deliver_scheduled_now(
                q, None if seqs is None else [SeqId(s) for s in seqs], now_ms
            )

    def groups(self, vhost: str, name: str) -> list[dict[str, Any]]:
        """The message groups of a queue that have an owner (core/groups.py), by group key:
        Artemis' `listGroups`, with the owner's consumer tag and channel."""
        q = self._entity(vhost, name)
        groups = q.queue.groups
        if groups is None:
            return []
        out: list[dict[str, Any]] = []
        for key, b in groups.bindings():
            c = b.owner
            s = c.session
            out.append(
                {
                    "group": b.group,
                    "bucket": key if isinstance(key, int) else None,
                    "consumer_tag": c.tag,
                    "channel_details": {
                        "connection_name": s.conn.peer,
                        "number": s.channel,
                    },
                    "bound_at": b.since_ms,
                    "delivered": b.delivered,
                }
            )
        return out

    def reset_groups(self, vhost: str, name: str, group: str | None, *, now_ms: int) -> int:
        """Unbind group `group` of a queue (None: all), as Artemis' `resetGroup` /
        `resetAllGroups`: their next messages go to whoever takes them. Returns how many."""
        q = self._entity(vhost, name)
        groups = q.queue.groups
        if groups is None:
            return 0
        n = groups.reset(group)
        self._emit(self.broker.queue_changed(q, now_ms))  # waiting messages may go out now
        return n

    # -- exchanges and bindings -------------------------------------------------------------

    def exchanges(self, vhost: str | None = None) -> list[ExchangeInfo]:
        return corerecords.exchanges(self._vhosts(vhost))

    @writes(full=False)
    def delete_exchange(
        self, vhost: str, name: str, *, if_unused: bool = False, now_ms: int = 0
    ) -> None:
        """Delete an exchange (403 for the default and amq.* ones, 404 when missing, 406 if
        used and if_unused)."""
        vh = self._vhost(vhost)
        exchanges = self.broker.exchanges
        if name and not name.startswith("amq."):
            exchanges.exchange(vh, name)
        exchanges.delete_exchange(vh, name, if_unused=if_unused)

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
        """Publish as RabbitMQ's API does (`properties`: AMQP 0-9-1 basic properties by
        name); True when some queue was reached."""
        props = _properties(properties)
        vh = self._vhost(vhost)
        x = self.broker.exchanges.exchange(vh, exchange)
        msg = form(FORM_AMQP091).compose(exchange, routing_key, props, body, now_ms)
        with self.call(now_ms):
            done = self.broker.publisher.publish_without_session(
                msg, vhost=vh, exchange=x, now_ms=now_ms
            )
        return done.outcome != UNROUTABLE

    def bindings(self, vhost: str | None = None) -> list[BindingInfo]:
        return corerecords.bindings(self._vhosts(vhost))

    def bind(self, binding: BindingInfo, *, now_ms: int) -> None:
        """Create a binding (`Declarations.bind`)."""
        b = binding
        self.broker.admin.bind(
            b.vhost,
            b.source,
            b.destination,
            destination_type=b.destination_type,
            routing_key=b.routing_key,
            arguments=b.arguments,
            now_ms=now_ms,
        )

    @writes(full=True)
    def unbind(self, binding: BindingInfo, *, now_ms: int) -> None:
        """Remove a binding; 404 when it does not exist."""
        b = binding
        if not self.broker.topology.unbind_destination(
            self._vhost(b.vhost),
            b.source,
            b.destination_type,
            b.destination,
            b.routing_key,
            b.arguments,
        ):
            raise BrokerError(
                Condition.NOT_FOUND, f"no binding {b.source} -> {b.destination} '{b.routing_key}'"
            )

    # -- policies, sessions -----------------------------------------------------------------

    def policies(self, vhost: str | None = None) -> list[PolicyInfo]:
        return [corerecords.policy(p) for p in self.broker.policies.list(vhost)]

    @writes(full=False)
    def set_policy(self, policy: PolicyInfo, *, now_ms: int) -> bool:
        """Create or replace a policy and re-apply the settings of every queue of its vhost
        (a queue whose settings would become invalid keeps its old ones); True when created.
        ValueError (PolicyError) for a bad definition."""
        p = policy
        vh = self._vhost(p.vhost)
        table = self.broker.policies
        existed = table.get(p.name, vhost=p.vhost) is not None
        table.set(
            p.name,
            p.pattern,
            p.definition,
            vhost=p.vhost,
            apply_to=p.apply_to,
            priority=p.priority,
        )
        with self.call(now_ms):
            self.broker.topology.reapply_settings(vh, now_ms)
        return not existed

    @writes(full=False)
    def clear_policy(self, vhost: str, name: str, *, now_ms: int) -> None:
        """Delete a policy (404 when missing) and re-apply settings in its vhost."""
        if not self.broker.policies.clear(name, vhost=vhost):
            raise BrokerError(Condition.NOT_FOUND, f"no policy '{name}' in vhost '{vhost}'")
        vh = self._vhost(vhost)
        with self.call(now_ms):
            self.broker.topology.reapply_settings(vh, now_ms)

    # -- vhost and user limits (core/limits.py; `kind` is "vhost" or "user") ---------------
    def limits(self) -> TenantLimits:
        return self.broker.limits

    @writes(full=False)
    def set_limit(self, kind: str, key: str, name: str, value: object) -> None:
        t = self.broker.limits
        (t.set_vhost if kind == "vhost" else t.set_user)(key, name, value)

    def parameters(self) -> Parameters:
        """Runtime parameters kept from definitions (`core/parameters.py`), read only."""
        return self.broker.admin.parameters

    @writes(full=False)
    def set_parameter(self, vhost: str | None, component: str, name: str, value: Any) -> None:
        """Keep a vhost's parameter, or a global one (`vhost` None)."""
        table = self.broker.admin.parameters
        if vhost is None:
            table.set_global(name, value)
        else:
            table.set(vhost, component, name, value)

    @writes(full=False)
    def clear_parameter(self, vhost: str | None, component: str, name: str) -> bool:
        """Forget a vhost's parameter, or a global one (`vhost` None); whether it was kept."""
        table = self.broker.admin.parameters
        return table.clear_global(name) if vhost is None else table.clear(vhost, component, name)

    @writes(full=False)
    def clear_limit(self, kind: str, key: str, name: str) -> bool:
        t = self.broker.limits
        return (t.clear_vhost if kind == "vhost" else t.clear_user)(key, name)

    def channels(self) -> list[ChannelInfo]:
        return corerecords.channels(c for _, c in sorted(self.broker.conns.items()))

    def consumers(self) -> list[ConsumerInfo]:
        return corerecords.consumers(c for _, c in sorted(self.broker.conns.items()))
