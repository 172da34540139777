"""`CoreAdmin`: the one facade management calls to read and change the broker.

Theory of operation: every management module (the HTTP API, definitions, authorisation,
browse, health, nodes, metrics and the streams endpoints) reaches the broker only through this
class; it is the single place under `management/` that touches core objects, and it touches
only their public names (the list at the end of `docs/dev/contracts.md`). Calls return the
plain records of `management.records` (or plain values: dicts, ints, `Message`s), never an
engine object a caller could change.

Most verbs go to the core's own facade, `Broker.admin` (`core.admin.Admin`), which returns
dicts keyed like the records; this class turns them into records and adds what the HTTP layer
promises and the core facade leaves to its caller:

* publish properties are validated here (unknown or ill-typed property -> ValueError -> 400)
  before anything is routed;
* `PUT .../settings` takes management names (`ring-size`, `max-length`, `message-ttl`, ...)
  and maps them to the queue arguments the live `update_queue` merges (`x-ring-size`, ...), as
  Artemis' `updateQueue` changes the queue's own configuration;
* queue listings are built from the engine's O(1) counters (`management.queueinfo`);
* the streams API's reservation books (`Broker.streams`) and its bulk publishes, which run on
  an in-process *virtual connection* so that they are exactly AMQP publishes.

Errors: `AMQPError` (NOT_FOUND -> 404, ACCESS_REFUSED -> 403 or 400, others -> 400) or
`ValueError` (bad input -> 400); a failing call leaves the broker unchanged.

Effects of admin calls (deliveries after a publish or a requeue, consumer cancels when a queue
is deleted) leave through the core facade's `emit` callback. The server sets it to its batch
writer; when nothing set it (tests, embedding), `CoreAdmin` routes them to
`Runtime.apply_effects` inside `Runtime.run_batch`. Effects of the streams calls (messages
made ready again) go to `Runtime.apply_effects` at once: those calls already run in a batch.

Everything runs on the broker's loop thread; nothing here blocks or locks.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import asdict, fields
from typing import Any, Final

from ringmq.adapters.amqp091 import Amqp091
from ringmq.amqp.properties import BasicProperties, decode_properties, encode_properties
from ringmq.amqp.reply_codes import AMQPError, ReplyCode
from ringmq.core import arguments
from ringmq.core.auth import Access
from ringmq.core.broker import Broker
from ringmq.core.effects import Effect
from ringmq.core.errors import BrokerError
from ringmq.core.message import Message, SeqId
from ringmq.core.publish import BatchPublished
from ringmq.core.queue.columns import Columns
from ringmq.core.reservations import Lease, Reservations
from ringmq.core.vhost import QueueEntity
from ringmq.management.port import Runtime
from ringmq.management.queueinfo import (
    SettingsView,
    listing_record,
    snapshot_record,
    stream_bounds,
)
from ringmq.management.records import (
    AckMode,
    BindingInfo,
    ChannelInfo,
    ConsumerInfo,
    ExchangeInfo,
    FetchedMessage,
    PermissionInfo,
    PolicyInfo,
    QueueInfo,
    ScheduledInfo,
    UserInfo,
)

SETTING_ARGUMENTS: Final = arguments.SETTING_ARGUMENTS
"""PUT .../settings key -> the queue argument the core resolves (the queue-argument table's)."""
_PROPERTY_NAMES: Final = frozenset(f.name for f in fields(BasicProperties))

Row = tuple[int, int, bool, Message]
"""One message read by the streams API: (position, queue seq, redelivered, message)."""


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
    """A `/get` in progress: messages fetched slice by slice are held until `finish`."""

    def __init__(self, get: Any) -> None:
        self.get = get

    def fetch(self, count: int, now_ms: int) -> list[FetchedMessage]:
        """Up to `count` more messages (fewer when the queue runs out)."""
        return [FetchedMessage(**m) for m in self.get.fetch(count, now_ms)]

    def finish(self, now_ms: int) -> None:
        """Settle everything fetched as the ack mode says (idempotent)."""
        self.get.finish(now_ms)


class CoreAdmin:
    """The management facade over the core `Broker` (see the module docstring)."""

    def __init__(self, broker: Broker, runtime: Runtime) -> None:
        self.broker = broker
        self.core = broker.admin
        self.runtime = runtime
        self.amqp091 = Amqp091(broker)
        """Bulk publishes carry AMQP 0-9-1 properties: the 0-9-1 adapter publishes them."""
        self._settings = SettingsView()
        # Virtual connections of bulk publishes: negative ids never collide with the server's.
        self._virtual_ids = itertools.count(-1, -1)
        if self.core.emit is None:
            self.core.emit = self._emit
        # anything produced before we were attached
        pending = self.core.drain_effects()
        if pending:
            self._emit(pending)

    def _emit(self, effects: list[Effect]) -> None:
        self.runtime.run_batch(lambda: self.runtime.apply_effects(effects))

    # -- node -------------------------------------------------------------------------------

    def alarms(self) -> dict[str, str]:
        """Resource alarms in force: "memory", "disk", "disk_write" -> reason."""
        return self.broker.alarms

    def stats(self) -> dict[str, int]:
        """The core's node-wide totals (connections opened, messages published, ...)."""
        return dict(self.broker.stats)

    # -- users, vhosts ----------------------------------------------------------------------

    def vhosts(self) -> list[str]:
        return list(self.core.vhosts())

    def has_vhost(self, vhost: str) -> bool:
        return vhost in self.broker.vhosts

    def users(self) -> list[UserInfo]:
        return [UserInfo(**u) for u in self.core.users()]

    def authenticate(self, user: str, password: str) -> UserInfo | None:
        found = self.core.authenticate(user, password)
        if found is None:
            return None
        record = self.broker.auth.users.get(user)
        return UserInfo(**found, loopback_only=record is not None and record.loopback_only)

    def permissions(self) -> list[PermissionInfo]:
        return [PermissionInfo(**p) for p in self.core.permissions()]

    def add_vhost(self, name: str) -> bool:
        return bool(self.core.add_vhost(name))

    def delete_vhost(self, name: str, *, now_ms: int) -> None:
        self.core.delete_vhost(name, now_ms=now_ms)

    def add_user(
        self, name: str, *, password: str | None, password_hash: str | None, tags: list[str]
    ) -> None:
        # The core facade creates users without the loopback-only flag; keep RabbitMQ's rule
        # (`loopback_users`, guest by default) across replacements and re-imports.
        auth = self.broker.auth
        old = auth.users.get(name)
        loopback = (
            old.loopback_only if old is not None else name in self.broker.config.loopback_users
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
        """The user has permissions in `vhost` (AMQP's vhost access check)."""
        try:
            self.broker.auth.check_vhost_access(user, vhost)
        except BrokerError:
            return False
        return True

    def check_permission(self, user: str, vhost: str, access: Access, kind: str, name: str) -> None:
        """Raise ACCESS_REFUSED unless `user` may `access` the resource: the AMQP channel's
        own check (`core.auth.AuthDB.check`), not a second matcher."""
        self.broker.auth.check(user, vhost, access, kind, name)

    # -- queues -----------------------------------------------------------------------------

    def _entity(self, vhost: str, name: str) -> QueueEntity:
        vh = self.broker.vhosts.get(vhost)
        if vh is None:
            raise AMQPError(ReplyCode.NOT_FOUND, f"no vhost {vhost!r}")
        q = vh.queues.get(name)
        if q is None or q.deleted:
            raise AMQPError(ReplyCode.NOT_FOUND, f"no queue {name!r} in vhost {vhost!r}")
        return q

    def _persistent(self, q: QueueEntity) -> int:
        # the durability layer's set of the queue's journaled (persistent) live messages
        dur = self.broker.durability
        persisted = dur.persisted(q) if dur is not None else None
        return len(persisted) if persisted else 0

    def _snapshot(self, d: dict[str, Any]) -> QueueInfo:
        q = self.broker.vhosts[d["vhost"]].queues.get(d["name"])
        return snapshot_record(d, q, self._persistent(q) if q is not None else 0)

    def queues(self, vhost: str | None = None) -> list[QueueInfo]:
        """Every queue (of `vhost`), from the engine's O(1) counters (`queueinfo`)."""
        out: list[QueueInfo] = []
        render = self._settings.render
        for vname, vh in sorted(self.broker.vhosts.items()):
            if vhost is not None and vname != vhost:
                continue
            out.extend(
                listing_record(q, render(q.settings), self._persistent(q))
                for _, q in sorted(vh.queues.items())
                if not q.deleted
            )
        self._settings.live_queues = len(out)
        return out

    def queue(self, vhost: str, name: str) -> QueueInfo:
        """One queue's full snapshot (head message timestamp included)."""
        return self._snapshot(self.core.queue(vhost, name))

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
        """Declare (or passively match) a queue; True when it was created."""
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

    def begin_get(self, vhost: str, name: str, *, ackmode: AckMode) -> SlicedGet:
        """A /get taken in slices; raise NOT_FOUND for a missing queue."""
        return SlicedGet(self.core.begin_get(vhost, name, ackmode=ackmode))

    def browse_messages(
        self, vhost: str, name: str, *, count: int, now_ms: int
    ) -> list[FetchedMessage]:
        """Up to `count` ready messages from the head, left in place: nothing is taken, nothing
        is marked redelivered, a last-value queue keeps its newest value (the queue's browse,
        which also leaves a paged tail on disk)."""
        if count < 1:
            raise ValueError("count must be at least 1")
        q = self._entity(vhost, name)
        out = []
        for _pos, _seq, redelivered, m in self.browse_ready(vhost, name, None, count, now_ms):
            props = decode_properties(m.properties_bin)
            out.append(
                FetchedMessage(
                    exchange=m.exchange,
                    routing_key=m.routing_key,
                    body=bytes(m.body),
                    redelivered=redelivered,
                    properties={k: v for k, v in asdict(props).items() if v is not None},
                    message_count=q.queue.ready_count,
                )
            )
        return out

    def update_queue(
        self, vhost: str, name: str, settings: dict[str, Any], *, now_ms: int
    ) -> QueueInfo:
        arguments = settings_arguments(settings)
        return self._snapshot(self.core.update_queue(vhost, name, arguments, now_ms=now_ms))

    def scheduled(self, vhost: str, name: str) -> list[ScheduledInfo]:
        return [ScheduledInfo(**s) for s in self.core.scheduled(vhost, name)]

    def purge_scheduled(self, vhost: str, name: str, *, now_ms: int) -> int:
        return int(self.core.purge_scheduled(vhost, name, now_ms=now_ms))

    def deliver_scheduled_now(
        self, vhost: str, name: str, seqs: list[int] | None, *, now_ms: int
    ) -> int:
        return int(self.core.deliver_scheduled_now(vhost, name, seqs, now_ms=now_ms))

    # -- exchanges and bindings -------------------------------------------------------------

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

    # -- policies, sessions -----------------------------------------------------------------

    def policies(self, vhost: str | None = None) -> list[PolicyInfo]:
        return [PolicyInfo(**p) for p in self.core.policies(vhost)]

    def set_policy(self, policy: PolicyInfo, *, now_ms: int) -> bool:
        return bool(self.core.set_policy(policy, now_ms=now_ms))

    def clear_policy(self, vhost: str, name: str, *, now_ms: int) -> None:
        self.core.clear_policy(vhost, name, now_ms=now_ms)

    def channels(self) -> list[ChannelInfo]:
        return [ChannelInfo(**c) for c in self.core.channels()]

    def consumers(self) -> list[ConsumerInfo]:
        return [ConsumerInfo(**c) for c in self.core.consumers()]

    # -- offset readers: the streams API's reservation books --------------------------------

    def _book(self, vhost: str, name: str) -> tuple[QueueEntity, Reservations[SeqId]]:
        q = self._entity(vhost, name)
        if q.settings.non_destructive:
            raise AMQPError(
                ReplyCode.PRECONDITION_FAILED, f"queue {name!r} is non-destructive: use browse"
            )
        return q, self.broker.streams.book(q)

    def _kick(self, q: QueueEntity, now_ms: int) -> None:
        # Messages went back to the queue: let the broker dispatch them to waiting consumers.
        effects = self.broker.queue_changed(q, now_ms)
        if effects:
            self.runtime.apply_effects(effects)

    def reserve(
        self,
        vhost: str,
        name: str,
        consumer: str,
        start: int,
        max_messages: int,
        *,
        lease_ms: int,
        max_bytes: int | None,
        now_ms: int,
    ) -> dict[str, Any]:
        """Reserve positions from `start` for `consumer` (its lease); the range and bounds."""
        q, _ = self._book(vhost, name)
        r = self.broker.streams.reserve(
            q, consumer, start, max_messages, now_ms, lease_ms=lease_ms, max_bytes=max_bytes
        )
        return {
            "start": r.start,
            "end": r.end,
            "settled": r.settled,
            "next": r.next_pos,
            "skipped": r.skipped,
            "expired": r.expired,
            **stream_bounds(q),
        }

    def read_reserved(
        self, vhost: str, name: str, consumer: str, lo: int, hi: int, *, max_span: int, now_ms: int
    ) -> list[Row]:
        """The messages `consumer` holds at positions [lo, hi) (ValueError: a range wider than
        `max_span`)."""
        _, book = self._book(vhost, name)
        if hi - lo > max_span:
            raise ValueError(f"range too large (at most {max_span} positions)")
        return [
            (e.pos, e.seq, e.redelivered, e.message) for e in book.read(consumer, lo, hi, now_ms)
        ]

    def settle(
        self, vhost: str, name: str, consumer: str, up_to: int, *, now_ms: int
    ) -> dict[str, Any]:
        """Settle `consumer`'s positions below `up_to` (the messages are deleted)."""
        q, book = self._book(vhost, name)
        deleted = self.broker.streams.settle(q, consumer, up_to, now_ms)
        lease = book.lease(consumer)
        return {
            "deleted": deleted,
            "settled": 0 if lease is None else lease.settled,
            **stream_bounds(q),
        }

    def browse_ready(
        self, vhost: str, name: str, after: int | None, limit: int, now_ms: int
    ) -> list[Row]:
        """Ready messages with seq > after, in seq order, left in place (a paged queue is read
        where it is and stays paged: `Queue.browse_ready`); position = seq."""
        q = self._entity(vhost, name)
        cursor = None if after is None else SeqId(after)
        return [
            (d.seq, d.seq, d.redelivered, d.message)
            for d in q.queue.browse_ready(cursor, limit, now_ms)
        ]

    def browse_columns(
        self, vhost: str, name: str, after: int | None, limit: int, now_ms: int
    ) -> Columns:
        """`browse_ready` as columns (`Queue.browse_columns`: paged messages go from their
        page records to the columns without being built); position = seq."""
        q = self._entity(vhost, name)
        return q.queue.browse_columns(None if after is None else SeqId(after), limit, now_ms)

    def drop_lease(self, vhost: str, name: str, consumer: str, *, now_ms: int) -> bool:
        """Forget `consumer`'s lease (its messages become ready again); False if unknown."""
        q, _ = self._book(vhost, name)
        found = self.broker.streams.drop(q, consumer, now_ms)
        if found:
            self._kick(q, now_ms)
        return found

    def stream_info(self, vhost: str, name: str) -> tuple[dict[str, Any], list[Lease[SeqId]]]:
        """A queue's bounds (head included) and its leases."""
        q = self._entity(vhost, name)
        book = self.broker.streams.existing(q)
        leases = list(book.leases()) if book is not None else []
        return stream_bounds(q, head=True), leases

    def expire_leases(self, now_ms: int) -> list[tuple[str, str, list[str]]]:
        """Expire the leases of every book: (vhost, queue, consumers) of each that gave
        messages back (the broker then dispatches them)."""
        out = []
        for q, gone in self.broker.streams.expire(now_ms):
            out.append((q.vhost, q.name, gone))
            self._kick(q, now_ms)
        return out

    # -- bulk publish on a virtual connection -----------------------------------------------

    def open_publisher(self, user: str, vhost: str, *, now_ms: int) -> int:
        """Open a virtual connection of `user` on `vhost`, session 1 in confirm mode (vhost
        access checked as an AMQP login's: BrokerError)."""
        conn_id = next(self._virtual_ids)
        broker = self.broker
        broker.connection_opened(
            conn_id, user, vhost, "http", {"product": "ringmq streams publish"}, now_ms
        )
        broker.channel_opened(conn_id, 1, now_ms)
        session = broker.session(conn_id, 1)
        assert session is not None
        broker.confirms.select(session)
        return conn_id

    def close_publisher(self, conn_id: int, *, now_ms: int) -> list[Effect]:
        """Forget a virtual connection; the effects its close caused."""
        return self.broker.connection_closed(conn_id, now_ms)

    def publish_slice(
        self,
        conn_id: int,
        exchange: str,
        messages: Sequence[tuple[str, bytes, bytes]],
        start: int,
        stop: int,
        *,
        now_ms: int,
    ) -> BatchPublished:
        """`messages[start:stop]` as that many `basic.publish` on the virtual connection
        (errors of the batch are AMQPErrors)."""
        return self.amqp091.publish_batch(conn_id, 1, exchange, messages, start, stop, now_ms)

    def confirms_held(self, conn_id: int) -> int:
        """Publishes of a virtual connection still waiting for their fsync."""
        conn = self.broker.conns.get(conn_id)
        session = None if conn is None else conn.sessions.get(1)
        return 0 if session is None else len(session.confirm_held)
