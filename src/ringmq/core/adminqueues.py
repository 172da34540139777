"""The management facade's plumbing and its queue operations (`QueueAdmin`, the base of
`core.admin.Admin`).

Theory of operation: management calls run on the broker's loop thread as core calls made of
owner steps: `begin(now_ms)` starts one (`Broker.begin`), `end(now_ms)` flushes and hands the
call's effects to `emit` (the server's batch writer) or keeps them in `pending` for
`drain_effects()`. The queue operations here read the engine's counters for snapshots, declare
and delete through the core's `Topology`, take messages for `/get` in slices (`MessageGet`:
they stay unacknowledged, owned by no session, until `finish` requeues or acks them), and
change a queue's arguments live (Artemis `updateQueue`). Reads return plain dicts keyed like
the management records; writes validate first and raise `BrokerError` or `ValueError` with
nothing changed.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping
from dataclasses import asdict
from typing import TYPE_CHECKING, Any, ParamSpec, TypeVar

from ringmq.core.effects import Effect
from ringmq.core.errors import BrokerError, Condition
from ringmq.core.exchange import Exchange
from ringmq.core.message import SeqId, form_of
from ringmq.core.settings import SettingsError
from ringmq.core.vhost import QueueEntity, VHost

if TYPE_CHECKING:
    from ringmq.core.broker import Broker

_HEAD_SCAN_MAX = 1000
"""Largest queue whose head_message_timestamp_ms is computed (it costs a scan)."""

_ACK_MODES = ("ack_requeue_true", "reject_requeue_true", "ack_requeue_false")

_P = ParamSpec("_P")
_R = TypeVar("_R")


def _definitions_writer(full: bool) -> Callable[[Callable[_P, _R]], Callable[_P, _R]]:
    # After a call that may change durable definitions (even one that failed half-way), let
    # the broker write what changed to its store (a no-op without a store). Incremental for
    # calls that go through the broker's own queue/exchange hooks (and for users, vhosts,
    # permissions and policies, always diffed whole); `full` for the ones that bypass them.
    def decorate(fn: Callable[_P, _R]) -> Callable[_P, _R]:
        @functools.wraps(fn)
        def wrapper(*args: _P.args, **kwargs: _P.kwargs) -> _R:
            try:
                return fn(*args, **kwargs)
            finally:
                admin = args[0]
                assert isinstance(admin, QueueAdmin)
                admin.broker.definitions_changed(full=full)

        return wrapper

    return decorate


writes_definitions = _definitions_writer(full=False)
"""Write incremental definitions after the call (even one that failed half-way)."""
writes_all_definitions = _definitions_writer(full=True)
"""Write all definitions after the call (calls that bypass the core's change hooks)."""


class QueueAdmin:
    """The facade's plumbing and queue operations (see the module docstring)."""

    def __init__(self, broker: Broker) -> None:
        self.broker = broker
        self.emit: Callable[[list[Effect]], None] | None = None
        self.pending: list[Effect] = []
        self._out: list[Effect] = []

    # ---------------------------------------------------------------- effects plumbing
    def begin(self, now_ms: int) -> None:
        """Start a core call (its effects leave through `end`)."""
        self._out = self.broker.begin(now_ms)

    def end(self, now_ms: int) -> None:
        """End the call: flush, and hand its effects to `emit` (else keep them in `pending`)."""
        self.broker.finish(now_ms)
        effects, self._out = self._out, []
        if effects:
            if self.emit is not None:
                self.emit(effects)
            else:
                self.pending.extend(effects)

    def drain_effects(self) -> list[Effect]:
        """Effects produced by admin calls while no `emit` callback was set."""
        out, self.pending = self.pending, []
        return out

    # ---------------------------------------------------------------- lookups
    def _vh(self, vhost: str) -> VHost:
        vh = self.broker.vhosts.get(vhost)
        if vh is None:
            raise BrokerError(Condition.NOT_FOUND, f"no vhost '{vhost}'")
        return vh

    def _q(self, vhost: str, name: str) -> QueueEntity:
        vh = self._vh(vhost)
        q = vh.queues.get(name)
        if q is None:
            raise BrokerError(Condition.NOT_FOUND, f"no queue '{name}' in vhost '{vhost}'")
        return q

    def _x(self, vhost: str, name: str) -> Exchange:
        vh = self._vh(vhost)
        x = vh.exchanges.get(name)
        if x is None:
            raise BrokerError(Condition.NOT_FOUND, f"no exchange '{name}' in vhost '{vhost}'")
        return x

    # ---------------------------------------------------------------- queues
    def _queue_info(self, q: QueueEntity) -> dict[str, Any]:
        engine = q.queue
        c = engine.counters
        stats = engine.stats()
        st = q.settings
        effective = {
            k: (str(v) if hasattr(v, "value") else v)
            for k, v in asdict(st).items()
            if v is not None and k not in ("sources", "limit")
        }
        if st.limit is not None:
            effective["limit"] = stats["limit"]
        # The head timestamp needs a scan of the waiting messages: only for small queues.
        ready_msgs = engine.ready_messages() if 0 < c.ready <= _HEAD_SCAN_MAX else []
        owner = None
        if q.exclusive_owner is not None:
            conn = self.broker.conns.get(q.exclusive_owner)
            owner = conn.peer if conn is not None and conn.peer else str(q.exclusive_owner)
        return {
            "vhost": q.vhost,
            "name": q.name,
            "durable": q.durable,
            "auto_delete": q.auto_delete,
            "exclusive": q.exclusive_owner is not None,
            "arguments": dict(q.arguments),
            "policy": st.policy_name,
            "effective_settings": effective,
            "messages_ready": engine.ready_count,
            "messages_unacknowledged": c.unacked,
            "messages_scheduled": c.scheduled,
            "messages_paged": c.paged,
            "message_bytes_ready": c.ready_bytes,
            "message_bytes_unacknowledged": c.unacked_bytes,
            "message_bytes_scheduled": c.scheduled_bytes,
            "message_bytes_paged": c.paged_bytes,
            "consumers": len(q.consumers),
            "ring_size": st.ring_size,
            "head_message_timestamp_ms": ready_msgs[0].timestamp_ms if ready_msgs else None,
            "counters": {
                "publish": c.added + c.overflow_rejected,
                "deliver": q.deliver,
                "deliver_no_ack": q.deliver_no_ack,
                "get": q.get,
                "get_no_ack": q.get_no_ack,
                "get_empty": q.get_empty,
                "redeliver": c.redelivered,
                "ack": c.acknowledged,
                "ring_evicted": c.ring_evicted,
                "lvq_replaced": c.lvq_replaced,
                "overflow_rejected": c.overflow_rejected,
                "expired": c.expired,
                "dead_lettered": dict(c.dead_lettered),
            },
            "engine_stats": stats,
            "exclusive_owner": owner,
            "state": "running",
        }

    def queues(self, vhost: str | None = None) -> list[dict[str, Any]]:
        """Snapshots of every queue (of one vhost), sorted by vhost and name.

        Keys are the management port's `QueueInfo` fields; "counters" has its `QueueCounters`
        fields; "engine_stats" is the engine's full `Queue.stats()` (extra).
        """
        out: list[dict[str, Any]] = []
        for vh in sorted(self.broker.vhosts.values(), key=lambda v: v.name):
            if vhost is not None and vh.name != vhost:
                continue
            out.extend(self._queue_info(q) for _, q in sorted(vh.queues.items()))
        return out

    def queue(self, vhost: str, name: str) -> dict[str, Any]:
        """One queue's snapshot (404 when missing)."""
        return self._queue_info(self._q(vhost, name))

    @writes_definitions
    def declare_queue(
        self,
        vhost: str,
        name: str,
        *,
        durable: bool = True,
        auto_delete: bool = False,
        arguments: Mapping[str, Any] | None = None,
        now_ms: int = 0,
    ) -> bool:
        """Declare a queue; True when created, False when an equivalent one exists (406 if not)."""
        vh = self._vh(vhost)
        if not name:
            raise ValueError("queue name must not be empty")
        if name.startswith("amq.") and name not in vh.queues:
            raise BrokerError(
                Condition.ACCESS_REFUSED, f"queue name '{name}' contains reserved prefix 'amq.*'"
            )
        args = dict(arguments or {})
        q = vh.queues.get(name)
        if q is not None:
            if q.durable != durable or q.auto_delete != auto_delete or q.arguments != args:
                raise BrokerError(
                    Condition.PRECONDITION_FAILED,
                    f"inequivalent arguments for queue '{name}' in vhost '{vhost}'",
                )
            return False
        try:
            self.broker.declare_queue(
                vhost, name, durable=durable, auto_delete=auto_delete, arguments=args, now_ms=now_ms
            )
        except SettingsError as exc:
            raise BrokerError(Condition.PRECONDITION_FAILED, str(exc)) from None
        return True

    @writes_definitions
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
        vh = self._vh(vhost)
        q = self._q(vhost, name)
        if if_unused and q.consumers:
            raise BrokerError(
                Condition.PRECONDITION_FAILED, f"queue '{name}' in vhost '{vhost}' in use"
            )
        if if_empty and q.queue.ready_count:
            raise BrokerError(
                Condition.PRECONDITION_FAILED, f"queue '{name}' in vhost '{vhost}' not empty"
            )
        count = q.queue.ready_count
        self.begin(now_ms)
        self.broker.topology.delete_queue(vh, q, now_ms)
        self.end(now_ms)
        return count

    def purge_queue(self, vhost: str, name: str, *, now_ms: int = 0) -> int:
        """Remove every ready message; returns how many."""
        return self.broker.topology.purge(self._q(vhost, name))

    def get_messages(
        self, vhost: str, name: str, *, count: int, ackmode: str, now_ms: int
    ) -> list[dict[str, Any]]:
        """Fetch up to `count` messages, then settle them per RabbitMQ's /get `ackmode`.

        "ack_requeue_true" and "reject_requeue_true" put them back (redelivered),
        "ack_requeue_false" removes them. Returns {exchange, routing_key, body, redelivered,
        properties, message_count}. (`begin_get` takes them in slices.)
        """
        if count < 1:
            raise ValueError("count must be at least 1")
        get = self.begin_get(vhost, name, ackmode=ackmode)
        try:
            return get.fetch(count, now_ms)
        finally:
            get.finish(now_ms)

    def begin_get(self, vhost: str, name: str, *, ackmode: str) -> MessageGet:
        """A /get taken in slices (`MessageGet.fetch`), settled once by `MessageGet.finish`."""
        if ackmode not in _ACK_MODES:
            raise ValueError(f"ackmode must be one of {', '.join(_ACK_MODES)}")
        return MessageGet(self, vhost, name, self._q(vhost, name), ackmode)

    def update_queue(
        self, vhost: str, name: str, settings: dict[str, Any], *, now_ms: int
    ) -> dict[str, Any]:
        """Change a queue's arguments live (Artemis `updateQueue`); returns the new snapshot.

        `settings` holds queue arguments (e.g. {"x-ring-size": 5}); they are merged into the
        declared arguments and the effective settings are re-resolved and applied.
        """
        q = self._q(vhost, name)
        args = dict(q.arguments)
        args.update(settings)
        try:
            new = self.broker.resolve_settings(vhost, name, args)
        except SettingsError as exc:
            raise BrokerError(Condition.PRECONDITION_FAILED, str(exc)) from None
        self.begin(now_ms)
        q.arguments = args
        q.settings = new
        q.queue.update_settings(new, now_ms)
        self.broker.state.track_timers(q)
        self.broker.state.mark(q)
        self.end(now_ms)
        return self._queue_info(q)

    def scheduled(self, vhost: str, name: str) -> list[dict[str, Any]]:
        """Scheduled messages of a queue: {seq, due_ms, routing_key, body, properties}."""
        out = []
        for s in self._q(vhost, name).queue.list_scheduled():
            props = form_of(s.message).describe(s.message.properties_bin)
            out.append(
                {
                    "seq": int(s.seq),
                    "due_ms": s.due_ms,
                    "routing_key": s.message.routing_key,
                    "body": s.message.body,
                    "properties": props,
                }
            )
        return out

    def purge_scheduled(self, vhost: str, name: str, *, now_ms: int = 0) -> int:
        """Drop every scheduled message of a queue."""
        return int(self._q(vhost, name).queue.purge_scheduled())

    def deliver_scheduled_now(
        self, vhost: str, name: str, seqs: list[int] | None, *, now_ms: int
    ) -> int:
        """Release scheduled messages (all, or `seqs`) to the queue head now."""
        q = self._q(vhost, name)
        self.begin(now_ms)
        n = q.queue.deliver_scheduled_now(
            None if seqs is None else [SeqId(s) for s in seqs], now_ms
        )
        self.broker.state.mark(q)
        self.end(now_ms)
        return int(n)


class MessageGet:
    """One management /get, fetched in slices and settled once (RabbitMQ's `ackmode`).

    Fetched messages stay unacknowledged in the queue (owned by no channel) until `finish`,
    so a later slice never sees them again; the caller may yield to the event loop between
    slices. `finish` requeues (redelivered) or acks them all; if the queue was deleted or
    replaced in between, its messages went with it and there is nothing to settle.
    """

    def __init__(
        self, admin: QueueAdmin, vhost: str, name: str, q: QueueEntity, ackmode: str
    ) -> None:
        self.admin = admin
        self.vhost = vhost
        self.name = name
        self.q = q
        self.ackmode = ackmode
        self.seqs: list[SeqId] = []
        self.finished = False

    def _alive(self) -> bool:
        vh = self.admin.broker.vhosts.get(self.vhost)
        return vh is not None and vh.queues.get(self.name) is self.q

    def fetch(self, count: int, now_ms: int) -> list[dict[str, Any]]:
        """Fetch up to `count` more messages (fewer when the queue runs out)."""
        if self.finished or not self._alive():
            return []
        engine = self.q.queue
        self.admin.begin(now_ms)
        got: list[dict[str, Any]] = []
        for _ in range(count):
            d = engine.fetch(now_ms, ack_required=True)
            if d is None:
                break
            self.seqs.append(d.seq)
            props = form_of(d.message).describe(d.message.properties_bin)
            got.append(
                {
                    "exchange": d.message.exchange,
                    "routing_key": d.message.routing_key,
                    "body": d.message.body,
                    "redelivered": d.redelivered,
                    "properties": props,
                    "message_count": engine.ready_count,
                }
            )
        self.admin.broker.state.mark(self.q)
        self.admin.end(now_ms)
        return got

    def finish(self, now_ms: int) -> None:
        """Settle every fetched message as the ack mode says (once; later calls do nothing)."""
        if self.finished:
            return
        self.finished = True
        seqs, self.seqs = self.seqs, []
        if not seqs or not self._alive():
            return
        q, engine = self.q, self.q.queue
        self.admin.begin(now_ms)
        if self.ackmode == "ack_requeue_false":
            engine.ack(seqs)
            dur = self.admin.broker.durability
            if dur is not None and q.durable:
                dur.acked(q, seqs)
        else:
            engine.requeue(seqs, now_ms, count_failure=False)
        self.admin.broker.state.mark(q)
        self.admin.end(now_ms)
