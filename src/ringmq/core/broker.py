"""The pure broker: AMQP exchange/queue/basic/confirm/tx semantics over the queue engine.

Theory of operation
-------------------
`Broker` is a synchronous state machine owned by the server's loop thread. Every entry point
(`handle`, `channel_opened`, `channel_closed`, `connection_closed`, `tick`, `set_writable`)
takes `now_ms`, mutates state, and returns the list of effects (`ringmq.core.effects`) the
server must apply in order. Errors are raised as `AMQPError` carrying the class and method id of
the offending method; the protocol layer turns soft codes into Channel.Close and hard codes into
Connection.Close, then calls `channel_closed` / `connection_closed`.

Work per call:

1. the method handler validates *before* it mutates (so a raised error leaves no half-done
   change), replies (SendMethod) and marks the queues it touched as *dirty*;
2. `_flush` then, for each dirty queue: dispatches ready messages to consumers with capacity
   (bounded by prefetch credit and by `DISPATCH_BATCH` per call; a queue that still has work is
   kept in the backlog and `next_deadline_ms` asks for an immediate `tick`), and drains the
   queue's dead letters, routing them to its dead-letter exchange with `x-death` headers (which
   may dirty more queues). Replies therefore always precede the deliveries they enable
   (ConsumeOk before the first Deliver). With `defer_dispatch` (set by the server) step 2 waits,
   after a publish that only reached plain queues, for the next non-publish method or for
   `dispatch_pending`, called once per read batch, so a batch of publishes is delivered in one
   pass per queue. Queues whose contents depend on when messages leave (rings and other
   limits, LVQ, priorities, browsing) still dispatch after every publish.

Ownership: `VHost` owns exchanges, queues and route caching; `Session` owns a channel's tags,
unacked map, prefetch, confirms and tx buffer; `ConsumerSet` picks consumers; the engine `Queue`
owns message order, limits, TTL and delivery state. The broker never reads a clock, never does
I/O, and imports nothing from server/, management/ or storage/.

Publisher confirms: transient messages (and all messages unless
`BrokerConfig.delay_persistent_confirms`) are confirmed within the same call. With that flag, a
persistent message that reached a durable queue is held until the storage layer calls
`confirm_stored(conn_id, channel, seqs)` after its fsync.

Publisher flow (RabbitMQ's credit flow, in one thread): a publish that leaves an unbounded
queue *with consumers* holding more than `FLOW_HIGH` ready messages (or `FLOW_HIGH_BYTES`) records
`flow_requests[conn_id] = queue`. The server takes these after each read (`take_flow`), stops
reading that publisher's socket, and reads again once `flow_settled(queue)` (backlog at the low
marks, no consumers left, or the queue gone) or when the consumers stop making progress. The
core only reports; pausing is I/O.

Transactions: publishes and settles are buffered; tx.commit first checks every reject-type limit
for the whole batch (a queue that would refuse any message fails the commit with 406 and nothing
is applied), then applies settles and publishes in order. tx.rollback discards the buffer and
returns every delivered-unacked message of the channel to its queue head (Artemis semantics,
through `Queue.requeue` in consumption order). Their old delivery tags become unknown.

Storage: `Broker(config, store=..., now_ms=...)` recovers durable definitions and persistent
messages before serving, then writes through `ringmq.core.durability.Durability` (persistent
publishes, deliveries, acks, engine removals via `Queue.on_remove`, definitions after the methods
that change them; tx.commit is one store transaction synced before commit-ok). Without a store
nothing is written.

Public API (server/ and management/):
  Broker(config, store=None, now_ms=0);  close();  definitions_changed();  durability
  check_login(mechanism, response, peer_loopback) -> user
  connection_opened(conn_id, user, vhost, peer, client_properties, now_ms)
  channel_opened / channel_closed(conn_id, channel, now_ms) -> effects
  connection_closed(conn_id, now_ms) -> effects (none addressed to that connection)
  handle(conn_id, channel, method, content, now_ms) -> effects   (raises AMQPError)
  tick(now_ms) -> effects;  next_deadline_ms() -> int | None
  set_writable(conn_id, writable, now_ms) -> effects
  confirm_stored(conn_id, channel, seqs) -> effects;  drain_unconfirmed()
  settings_changed(queue_entity, now_ms) -> effects;  replace_address_settings(...)
  admin (`ringmq.core.admin.Admin`), auth (`AuthDB`), policies, address_settings, vhosts,
  conns, stats
"""

from __future__ import annotations

import base64
import logging
import random
import struct
from collections.abc import Callable, Iterable, Mapping, Sequence
from datetime import UTC, datetime
from typing import Any, Final

from ringmq.amqp import spec
from ringmq.amqp.frames import RawContent
from ringmq.amqp.properties import (
    FLAG_CONTENT_TYPE,
    FLAG_DELIVERY_MODE,
    FLAG_EXPIRATION,
    FLAG_HEADERS,
    FLAG_MESSAGE_ID,
    FLAG_PRIORITY,
    FLAG_REPLY_TO,
    FLAGS_INVALID,
    BasicProperties,
    decode_properties,
    encode_properties,
    property_flags,
)
from ringmq.amqp.reply_codes import AMQPError, ReplyCode
from ringmq.amqp.tables import decode_table
from ringmq.core.admin import Admin
from ringmq.core.arguments import EQUIVALENCE_ARGUMENTS
from ringmq.core.auth import Access, AuthDB
from ringmq.core.config import DEFAULT_VHOST, BrokerConfig
from ringmq.core.consumers import Consumer, ConsumerSet
from ringmq.core.dedup import PublishDedup
from ringmq.core.durability import EXCHANGE_DEF, QUEUE_DEF, Durability, StorePort
from ringmq.core.effects import Block, Deliver, Effect, SendContent, SendMethod, Unblock
from ringmq.core.exchange import Exchange
from ringmq.core.message import Message, SeqId
from ringmq.core.policies import AddressSettingsTable, PolicyTable
from ringmq.core.propscan import scan_simple
from ringmq.core.queue import (
    DEFAULT_HEAD_BYTES,
    DEFAULT_HEAD_COUNT,
    BodyStore,
    DeadLetter,
    PublishOutcome,
    Queue,
    SpillStore,
)
from ringmq.core.routing import (
    EXCHANGE,
    QUEUE,
    DelayedTypeError,
    ExchangeType,
    ExchangeTypeError,
    parse_exchange_type,
)
from ringmq.core.session import (
    ChannelMode,
    Conn,
    Session,
    SettleKind,
    TxPublish,
    TxState,
    Unacked,
)
from ringmq.core.settings import LimitAction, QueueSettings, SettingsError, resolve_queue_settings
from ringmq.core.streambooks import StreamBooks
from ringmq.core.vhost import QueueEntity, VHost

log = logging.getLogger(__name__)

DISPATCH_BATCH: Final = 4096
"""Most deliveries one queue makes per call; the rest waits for the next tick (fairness)."""

FLOW_HIGH: Final = 8192
"""Ready backlog of a consumed queue above which its publisher is asked to pause (`flow`)."""
FLOW_LOW: Final = 2048
"""Ready backlog at or below which a paused publisher may read again."""
FLOW_HIGH_BYTES: Final = 4 * 1024 * 1024
"""The same high mark in ready body bytes (half the default in-memory queue head: no paging)."""
FLOW_LOW_BYTES: Final = 1024 * 1024
"""The same low mark in ready body bytes."""

REPLY_TO_QUEUE: Final = "amq.rabbitmq.reply-to"
_REPLY_TO_PREFIX: Final = REPLY_TO_QUEUE + "."
_NEEDS_DECODE: Final = (
    FLAG_HEADERS | FLAG_DELIVERY_MODE | FLAG_PRIORITY | FLAG_EXPIRATION | FLAG_MESSAGE_ID
)
_DECODE_ANY: Final = _NEEDS_DECODE | FLAG_REPLY_TO | FLAGS_INVALID
"""Flags that send a publish's property list to the full decode. The invalid bits are there so
that every publish path refuses such a header as the decode does (never stored, then unread)."""
_FLAGS_CT_DM: Final = FLAG_CONTENT_TYPE | FLAG_DELIVERY_MODE
_REJECTED: Final = PublishOutcome.REJECTED
_TX: Final = ChannelMode.TX
_CONFIRM: Final = ChannelMode.CONFIRM


def _address_full(q: QueueEntity) -> AMQPError:
    """Artemis FAIL without confirms: the producer's send fails (a channel error here)."""
    return AMQPError(
        ReplyCode.PRECONDITION_FAILED,
        f"queue {q.name!r} in vhost {q.vhost!r} is full (address-full-policy FAIL)",
        class_id=spec.BasicPublish.CLASS_ID,
        method_id=spec.BasicPublish.METHOD_ID,
    )


def _only_delivery_mode(pb: bytes) -> int | None:
    """The delivery mode of a property list holding only delivery_mode (and content_type).

    None for any other property list (or a malformed one): the caller then decodes it fully,
    which also reports malformations.
    """
    n = len(pb)
    if n == 3 and pb[0] == 0x10 and pb[1] == 0:  # flags == FLAG_DELIVERY_MODE
        return pb[2]
    if n >= 4 and ((pb[0] << 8) | pb[1]) == _FLAGS_CT_DM and n == pb[2] + 4:
        try:
            str(pb[3:-1], "utf-8")  # content_type must be valid UTF-8, as decoding checks
        except UnicodeDecodeError:
            return None
        return pb[-1]
    return None


EXPIRATION_MAX_MS: Final = 4_294_967_295
"""The largest per-message TTL RabbitMQ accepts (its MAX_EXPIRY_TIMER, 2^32 - 1 ms)."""


def parse_expiration(text: str) -> int:
    """The TTL in ms an `expiration` property sets, read as RabbitMQ reads it.

    RabbitMQ's rabbit_basic:parse_expiration: an optional sign and ASCII digits with nothing
    after (Erlang's string:to_integer, so no other Unicode digit, space or `_` that Python's
    `int` would take), then 0 to `EXPIRATION_MAX_MS`. Anything else is 406 PRECONDITION_FAILED
    with RabbitMQ's text: "invalid expiration '<text>': <reason>".
    """
    if text.isascii() and text.isdigit():  # the common case
        n = int(text)
        if n <= EXPIRATION_MAX_MS:
            return n
    start = 1 if text[:1] in ("+", "-") else 0
    end = start
    while end < len(text) and "0" <= text[end] <= "9":
        end += 1
    if end == start:
        reason = "no_integer"
    elif end < len(text):
        reason = f'{{leftover_string,"{text[end:]}"}}'
    else:
        n = int(text)
        if 0 <= n <= EXPIRATION_MAX_MS:
            return n
        reason = f"{{value_negative,{n}}}" if n < 0 else f"{{value_too_big,{n}}}"
    raise AMQPError(ReplyCode.PRECONDITION_FAILED, f"invalid expiration '{text}': {reason}")


_EXCLUSIVE_LOCKED: Final = (
    "cannot obtain exclusive access to locked queue '{q}' in vhost '{v}'. It could be originally "
    "declared on another connection or the exclusive property value does not match that of the "
    "original declaration."
)

_EQUIVALENCE_ARGS: Final = EQUIVALENCE_ARGUMENTS  # the redeclare rows of QUEUE_ARGUMENTS
"""Queue arguments compared on redeclare (RabbitMQ compares only those with semantics)."""

_Handler = Callable[[Session, Any, RawContent | None, int], None]


def _field_type(value: Any) -> str:
    """The AMQP field-table type name RabbitMQ prints for `value` ('signedint', 'longstr')."""
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, int):
        return "signedint" if -(2**31) <= value < 2**31 else "long"
    if isinstance(value, float):
        return "double"
    if isinstance(value, str | bytes):
        return "longstr"
    if isinstance(value, dict):
        return "table"
    if isinstance(value, list):
        return "array"
    return type(value).__name__


def _fmt_value(value: Any) -> str:
    """RabbitMQ's "the value '10' of type 'signedint'" for inequivalent-arg texts."""
    if value is None:
        return "none"
    kind = _field_type(value)
    shown = value.decode("utf-8", "replace") if isinstance(value, bytes) else value
    if isinstance(shown, bool):
        shown = str(shown).lower()
    return f"the value '{shown}' of type '{kind}'"


def _flag(value: bool) -> str:
    return "true" if value else "false"


def _as_str(value: Any) -> str | None:
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    return value if isinstance(value, str) else None


_ALARM_KEYS: Final = {"memory": -1, "disk": -2, "disk_write": -3}
"""Resource alarms share `_blocking` with Artemis BLOCK queues (keyed by id(queue) > 0)."""


class BatchPublished:
    """What `Broker.publish_batch` did.

    Attributes:
        effects: the effects to apply, in order (confirms, deliveries, blocks...).
        published: messages of the batch taken by the broker (routed, refused with a nack or
            dropped as duplicates), from `start` on.
        error: the channel or connection error the next message raised (None if none).
        blocked: the last published message blocked the connection (a resource limit).
    """

    __slots__ = ("blocked", "effects", "error", "published")

    def __init__(self, effects: list[Effect]) -> None:
        self.effects = effects
        self.published = 0
        self.error: AMQPError | None = None
        self.blocked = False


class Broker:
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
        self.config = config = config or BrokerConfig()
        self.auth = AuthDB()
        self.policies = PolicyTable()
        self.address_settings = AddressSettingsTable()
        self.vhosts: dict[str, VHost] = {}
        self.conns: dict[int, Conn] = {}
        self._rng = random.Random(config.name_seed)  # noqa: S311 - names, not secrets
        self._dirty: dict[int, QueueEntity] = {}
        self._backlog: dict[int, QueueEntity] = {}
        self._out: list[Effect] = []
        self._now_ms = 0
        self._reply_sessions: dict[str, tuple[Session, str]] = {}
        self.dedup = PublishDedup()  # message_id de-duplication (core/dedup.py)
        self._admin: Admin | None = None
        # Artemis address-full BLOCK: queue id -> blocked conn ids, conn id -> blocking queue ids
        self._blocked_by: dict[int, tuple[QueueEntity, set[int]]] = {}
        self._blocking: dict[int, set[int]] = {}
        # Paging (bounded queue heads) and resource alarms (memory / disk): see enable_paging
        self._spill_factory: Callable[[str, str], SpillStore] | None = None
        self._body_factory: Callable[[str, str], BodyStore] | None = None
        self._head_bound = (DEFAULT_HEAD_COUNT, DEFAULT_HEAD_BYTES)
        self._alarms: dict[str, str] = {}  # resource -> reason, while the alarm is on
        self._address_fail: QueueEntity | None = None  # set by _route_publish (Artemis FAIL)
        self._timed: dict[int, QueueEntity] = {}
        self._unconfirmed: list[tuple[int, int, int]] = []
        self._holding: dict[int, tuple[VHost, Exchange]] = {}
        self.defer_dispatch = False
        """When True, `handle` leaves dispatching after a publish to plain queues (no limit, LVQ,
        priorities or browsing: nothing that depends on when a message leaves) to
        `dispatch_pending`, which the server calls at the end of each read batch."""
        self._eager = False  # a publish of this call reached a queue that must dispatch now
        self.flow_requests: dict[int, QueueEntity] = {}
        """Publishers (conn id) whose last publish left a consumed queue over FLOW_HIGH."""
        self.max_message_size = config.max_message_size
        self.stats: dict[str, int] = {
            "published": 0,
            "delivered": 0,
            "returned": 0,
            "unroutable": 0,
            "confirmed": 0,
            "nacked": 0,
            "dead_lettered": 0,
            # churn, as rabbitmq_prometheus counts it (*_opened_total, queues_declared_total...)
            "connections_opened": 0,
            "connections_closed": 0,
            "channels_opened": 0,
            "channels_closed": 0,
            "queues_declared": 0,
            "queues_created": 0,
            "queues_deleted": 0,
        }
        users = list(config.users)
        if not users:
            self.auth.add_user(
                config.default_user,
                password=config.default_password,
                tags=("administrator",),
                loopback_only=config.default_user in config.loopback_users,
            )
        for u in users:
            if u.password is not None:
                self.auth.add_user(
                    u.name,
                    password=u.password,
                    tags=u.tags,
                    loopback_only=u.name in config.loopback_users,
                )
            else:
                self.auth.add_user(
                    u.name,
                    password_hash=u.password_hash,
                    tags=u.tags,
                    loopback_only=u.name in config.loopback_users,
                )
        for name in {DEFAULT_VHOST, *config.vhosts}:
            self.add_vhost(name)
        if config.permissions:
            for p in config.permissions:
                self.auth.set_permissions(p.user, p.vhost, p.configure, p.write, p.read)
        elif not users:
            self.auth.set_permissions(config.default_user, DEFAULT_VHOST)
        for pol in config.policies:
            self.policies.set(
                pol.name,
                pol.pattern,
                pol.definition,
                vhost=pol.vhost,
                apply_to=pol.apply_to,
                priority=pol.priority,
            )
        for match, settings in config.address_settings.items():
            self.address_settings.set(match, settings)
        self._handlers: dict[type, _Handler] = {
            spec.ExchangeDeclare: self._exchange_declare,
            spec.ExchangeDelete: self._exchange_delete,
            spec.ExchangeBind: self._exchange_bind,
            spec.ExchangeUnbind: self._exchange_unbind,
            spec.QueueDeclare: self._queue_declare,
            spec.QueueBind: self._queue_bind,
            spec.QueueUnbind: self._queue_unbind,
            spec.QueuePurge: self._queue_purge,
            spec.QueueDelete: self._queue_delete,
            spec.BasicQos: self._basic_qos,
            spec.BasicConsume: self._basic_consume,
            spec.BasicCancel: self._basic_cancel,
            spec.BasicPublish: self._basic_publish,
            spec.BasicGet: self._basic_get,
            spec.BasicAck: self._basic_ack,
            spec.BasicReject: self._basic_reject,
            spec.BasicNack: self._basic_nack,
            spec.BasicRecover: self._basic_recover,
            spec.BasicRecoverAsync: self._basic_recover,
            spec.ConfirmSelect: self._confirm_select,
            spec.TxSelect: self._tx_select,
            spec.TxCommit: self._tx_commit,
            spec.TxRollback: self._tx_rollback,
        }
        self._defs_dirty = False
        self.streams = StreamBooks(self)
        """Reservation books of offset readers (the streams API), durable with the queues."""
        self.durability: Durability | None = None
        if store is not None:
            self.durability = Durability(self, store)
            self.durability.recover(now_ms)
            self.dedup.journal = self.durability.dedup_recorded
            self.dedup.unjournal = self.durability.dedup_discarded

    @property
    def admin(self) -> Admin:
        """The management facade (`ringmq.core.admin.Admin`), created on first use."""
        admin = self._admin
        if admin is None:
            admin = self._admin = Admin(self)
        return admin

    def replace_address_settings(
        self, settings: Mapping[str, Mapping[str, Any]], *, now_ms: int = 0
    ) -> None:
        """Replace the Artemis address settings and re-apply every queue's settings."""
        self.admin.replace_address_settings(settings, now_ms=now_ms)

    # ================================================================== durability
    def definitions_changed(self, *, full: bool = True) -> None:
        """Write durable definitions that changed (management calls it after its edits).

        `full=False` (after AMQP methods) looks only at what `_touch` recorded."""
        self._defs_dirty = False
        if self.durability is not None:
            self.durability.sync_definitions(full=full)

    def _touch_binding(
        self,
        vh: VHost,
        x: Exchange,
        dest: tuple[str, str],
        routing_key: str,
        arguments: Mapping[str, Any] | None,
    ) -> None:
        # One binding changed: write it after this call (when both ends are durable).
        if self.durability is not None and x.durable:
            self.durability.touch_binding(vh.name, x.name, dest, routing_key, arguments)
            self._defs_dirty = True

    def _touch(self, kind: str, vhost: str, name: str) -> None:
        # A durable queue/exchange or an exchange's bindings changed: write it after this call.
        if self.durability is not None:
            self.durability.touch(kind, vhost, name)
            self._defs_dirty = True

    def close(self) -> None:
        """Shut down: sync and close the store (the next start is a clean one)."""
        if self.durability is not None:
            self.definitions_changed()
            self.durability.store.close()

    def restore_held(self, vh: VHost, x: Exchange, seq: int, msg: Message, due_ms: int) -> None:
        """Recovery: delayed exchange `x` holds `msg` again (number `seq`) until `due_ms`."""
        x.hold(msg, due_ms, seq)
        self._holding[id(x)] = (vh, x)

    def restore_exchange(
        self,
        vhost: str,
        name: str,
        kind: ExchangeType,
        *,
        auto_delete: bool,
        internal: bool,
        arguments: Mapping[str, Any],
    ) -> None:
        """Recreate a durable exchange (recovery)."""
        vh = self.add_vhost(vhost)
        routing_type = None
        if kind is ExchangeType.DELAYED:
            raw = _as_str(arguments.get("x-delayed-type"))
            routing_type = ExchangeType(raw) if raw else ExchangeType.DIRECT
        vh.exchanges[name] = Exchange(
            name,
            kind,
            durable=True,
            auto_delete=auto_delete,
            internal=internal,
            arguments=arguments,
            routing_type=routing_type,
        )
        vh.invalidate()

    def restore_queue(
        self,
        vhost: str,
        name: str,
        *,
        auto_delete: bool,
        arguments: Mapping[str, Any],
        now_ms: int,
    ) -> None:
        """Recreate a durable queue (recovery); one whose settings no longer validate is
        skipped with a log line (its messages are dropped from the store)."""
        self.add_vhost(vhost)
        try:
            self.declare_queue(
                vhost,
                name,
                durable=True,
                auto_delete=auto_delete,
                arguments=arguments,
                now_ms=now_ms,
            )
        except SettingsError as exc:
            log.warning("stored queue %r in vhost %r refused at recovery: %s", name, vhost, exc)

    def restore_binding(
        self,
        vhost: str,
        source: str,
        dest: tuple[str, str],
        routing_key: str,
        arguments: Mapping[str, Any],
    ) -> None:
        """Recreate a binding between durable objects (recovery); dangling ones are skipped."""
        vh = self.vhosts.get(vhost)
        if vh is None:
            return
        x = vh.exchanges.get(source)
        kind, name = dest
        present = vh.queues if kind == QUEUE else vh.exchanges
        if x is None or name not in present:
            return
        try:
            x.bind((kind, name), routing_key, arguments)
        except ValueError:
            log.warning("stored binding %s -> %s refused at recovery", source, name)
        vh.invalidate()

    def recovered_queue(self, q: QueueEntity, now_ms: int) -> None:
        """Recovery put messages back into `q`: arm its timers (TTL, schedule)."""
        self._timed[id(q)] = q
        self._mark(q)

    # ================================================================== connection lifecycle
    def add_vhost(self, name: str) -> VHost:
        """Create a vhost with the standard exchanges (idempotent)."""
        vh = self.vhosts.get(name)
        if vh is None:
            vh = VHost(name, alternate_of=self._alternate_policy)
            self.vhosts[name] = vh
        return vh

    def _alternate_policy(self, vhost: str, exchange: Exchange) -> str | None:
        pol = self.policies.match(exchange.name, "exchange", vhost=vhost)
        if pol is None:
            return None
        return _as_str(pol.definition.get("alternate-exchange"))

    def check_login(self, mechanism: str, response: bytes, peer_loopback: bool) -> str:
        """Authenticate a Connection.StartOk response; return the user name.

        PLAIN is `\\0user\\0password`; AMQPLAIN is a field table without its length prefix
        holding LOGIN and PASSWORD. Raises ACCESS_REFUSED on bad credentials (and for the
        loopback-only default user from a remote peer), COMMAND_INVALID for an unknown mechanism.
        """
        if mechanism == "PLAIN":
            parts = response.split(b"\x00")
            if len(parts) != 3:
                raise AMQPError(ReplyCode.ACCESS_REFUSED, "malformed PLAIN response")
            user, password = parts[1], parts[2]
        elif mechanism == "AMQPLAIN":
            try:
                table, _ = decode_table(struct.pack(">I", len(response)) + response, 0)
            except AMQPError:
                raise AMQPError(ReplyCode.ACCESS_REFUSED, "malformed AMQPLAIN response") from None
            login, pw = table.get("LOGIN"), table.get("PASSWORD")
            user = login.encode() if isinstance(login, str) else bytes(login or b"")
            password = pw.encode() if isinstance(pw, str) else bytes(pw or b"")
        else:
            raise AMQPError(
                ReplyCode.COMMAND_INVALID, f"unknown authentication mechanism '{mechanism}'"
            )
        name = user.decode("utf-8", "replace")
        self.auth.login(mechanism, name, password.decode("utf-8", "replace"), peer_loopback)
        return name

    def connection_opened(
        self,
        conn_id: int,
        user: str,
        vhost: str,
        peer: str = "",
        client_properties: Mapping[str, Any] | None = None,
        now_ms: int = 0,
    ) -> None:
        """Register an authenticated connection that opened `vhost`.

        Raises NOT_ALLOWED when the vhost does not exist or the user has no access to it.
        """
        if vhost not in self.vhosts:
            raise AMQPError(ReplyCode.NOT_ALLOWED, f"vhost {vhost} not found")
        self.auth.check_vhost_access(user, vhost)
        self.conns[conn_id] = Conn(
            conn_id, user, vhost, peer, dict(client_properties or {}), now_ms
        )
        self.stats["connections_opened"] += 1

    def channel_opened(self, conn_id: int, channel: int, now_ms: int) -> list[Effect]:
        """Create the core state of a newly opened channel (the server sends OpenOk)."""
        conn = self.conns[conn_id]
        session = Session(conn, channel, self.vhosts[conn.vhost])
        conn.sessions[channel] = session
        self.stats["channels_opened"] += 1
        return []

    def channel_closed(self, conn_id: int, channel: int, now_ms: int) -> list[Effect]:
        """Forget a channel: roll back its tx, requeue its unacked messages, drop consumers."""
        out: list[Effect] = []
        self._out = out
        self._now_ms = now_ms
        conn = self.conns.get(conn_id)
        if conn is None:
            return out
        session = conn.sessions.pop(channel, None)
        if session is not None:
            self.stats["channels_closed"] += 1
            self._close_session(session, now_ms)
        self._flush(now_ms)
        if self._defs_dirty:
            self.definitions_changed(full=False)
        return out

    def connection_closed(self, conn_id: int, now_ms: int) -> list[Effect]:
        """Forget a connection: close its channels, then delete its exclusive queues."""
        out: list[Effect] = []
        self._out = out
        self._now_ms = now_ms
        conn = self.conns.pop(conn_id, None)
        if conn is None:
            return out
        self.stats["connections_closed"] += 1
        self.stats["channels_closed"] += len(conn.sessions)
        for qid in self._blocking.pop(conn_id, ()):
            entry = self._blocked_by.get(qid)
            if entry is not None:
                entry[1].discard(conn_id)
        for session in list(conn.sessions.values()):
            self._close_session(session, now_ms)
        conn.sessions.clear()
        vh = self.vhosts.get(conn.vhost)
        if vh is not None:
            for qname in sorted(conn.exclusive_queues):
                q = vh.queues.get(qname)
                if q is not None:
                    self._delete_queue(vh, q, now_ms)
        self._flush(now_ms)
        if self._defs_dirty:
            self.definitions_changed(full=False)
        return [e for e in out if e.conn_id != conn_id]

    def _close_session(self, session: Session, now_ms: int) -> None:
        entries: list[Unacked] = []
        if session.tx is not None:
            for _kind, settled in session.tx.settles:
                entries.extend(settled)
            session.tx = None
        entries.extend(session.take_all())
        entries.sort(key=lambda e: e.tag)  # consumption order
        self._settle(entries, SettleKind.REQUEUE, now_ms)
        for consumer in list(session.consumers.values()):
            self._remove_consumer(consumer, now_ms)
        session.consumers.clear()
        if session.reply_to_token is not None:
            self._reply_sessions.pop(session.reply_to_token, None)
            session.reply_to_token = None

    def set_writable(self, conn_id: int, writable: bool, now_ms: int) -> list[Effect]:
        """Pause (False) or resume (True) deliveries to a connection (socket back-pressure)."""
        out: list[Effect] = []
        self._out = out
        self._now_ms = now_ms
        conn = self.conns.get(conn_id)
        if conn is None or conn.writable == writable:
            return out
        conn.writable = writable
        if writable:
            for session in conn.sessions.values():
                for consumer in session.consumers.values():
                    self._mark(consumer.queue)
            self._flush(now_ms)
        if self._defs_dirty:
            self.definitions_changed(full=False)
        return out

    # ================================================================== publisher flow
    def take_flow(self) -> list[tuple[int, QueueEntity]]:
        """Publishers to pause, with the queue they fill; clears the requests.

        A connection that consumes itself is never returned: pausing its reads would also
        stop its acks, and with them the draining it waits for.
        """
        requests = self.flow_requests
        out: list[tuple[int, QueueEntity]] = []
        for conn_id, q in requests.items():
            conn = self.conns.get(conn_id)
            if conn is None or any(s.consumers for s in conn.sessions.values()):
                continue
            out.append((conn_id, q))
        requests.clear()
        return out

    @staticmethod
    def flow_settled(q: QueueEntity) -> bool:
        """True when a publisher paused for `q` may read again."""
        if q.deleted or not q.consumers.all:
            return True
        counters = q.queue.counters
        return q.queue.ready_count <= FLOW_LOW and counters.ready_bytes <= FLOW_LOW_BYTES

    # ================================================================== method dispatch
    def handle(
        self,
        conn_id: int,
        channel: int,
        method: Any,
        content: RawContent | None,
        now_ms: int,
    ) -> list[Effect]:
        """Apply one exchange/queue/basic/confirm/tx method received on an open channel.

        Returns the effects to apply in order. Raises AMQPError (class_id/method_id set) on a
        protocol error; the caller closes the channel or connection and then reports it with
        `channel_closed` / `connection_closed`.
        """
        if type(method) is spec.BasicPublish:
            return self._handle_publish(conn_id, channel, method, content, now_ms)
        return self._handle(conn_id, channel, method, content, now_ms)

    def _handle(
        self,
        conn_id: int,
        channel: int,
        method: Any,
        content: RawContent | None,
        now_ms: int,
    ) -> list[Effect]:
        # Every method the generic way: look up its handler, map errors, flush.
        out: list[Effect] = []
        self._out = out
        self._now_ms = now_ms
        session = self.conns[conn_id].sessions.get(channel)
        if session is None:
            raise AMQPError(
                ReplyCode.CHANNEL_ERROR,
                f"expected 'channel.open' on channel {channel}",
                class_id=method.CLASS_ID,
                method_id=method.METHOD_ID,
            )
        handler = self._handlers.get(type(method))
        if handler is None:
            raise AMQPError(
                ReplyCode.COMMAND_INVALID,
                f"method {getattr(method, 'NAME', type(method).__name__)} not handled by the core",
                class_id=getattr(method, "CLASS_ID", 0),
                method_id=getattr(method, "METHOD_ID", 0),
            )
        try:
            handler(session, method, content, now_ms)
        except AMQPError as exc:
            if not exc.class_id:
                exc.class_id = method.CLASS_ID
                exc.method_id = method.METHOD_ID
            raise
        except SettingsError as exc:
            raise AMQPError(
                ReplyCode.PRECONDITION_FAILED,
                str(exc),
                class_id=method.CLASS_ID,
                method_id=method.METHOD_ID,
            ) from None
        if self._dirty and (
            not self.defer_dispatch or self._eager or type(method) is not spec.BasicPublish
        ):
            self._eager = False
            self._flush(now_ms)
        if self._defs_dirty:
            self.definitions_changed(full=False)
        return out

    def _handle_publish(
        self,
        conn_id: int,
        channel: int,
        m: spec.BasicPublish,
        content: RawContent | None,
        now_ms: int,
    ) -> list[Effect]:
        # `_handle` for one basic.publish: the same outcome, the common case done inline.
        # The hot path of every publisher. It takes the publishes `_basic_publish` +
        # `_route_publish` would handle without a detour: an open non-tx channel, an existing,
        # writable (already checked) exchange that is not internal or delayed, a property list
        # with nothing the core decodes but delivery_mode, at least one queue reached, no
        # resource alarm. Everything else goes to `_handle`, before anything has changed.
        s = self.conns[conn_id].sessions.get(channel)
        if s is None or s.mode is _TX or content is None or m.immediate:
            return self._handle(conn_id, channel, m, content, now_ms)
        vh = s.vhost
        name = m.exchange
        x = vh.exchanges.get(name)
        body = content.body
        pb = content.properties_bin
        if (
            x is None
            or x.internal
            or s.perm_generation != self.auth.generation
            or name not in s.write_ok
            or len(body) > self.max_message_size
            or self._alarms
            or len(pb) < 2
        ):
            return self._handle(conn_id, channel, m, content, now_ms)
        flags = (pb[0] << 8) | pb[1]
        if not flags & _DECODE_ANY:
            persistent = False
        elif flags == FLAG_DELIVERY_MODE and len(pb) == 3:  # `_only_delivery_mode`'s first case
            persistent = pb[2] == 2
        else:
            mode = _only_delivery_mode(pb)
            if mode is None:
                return self._handle(conn_id, channel, m, content, now_ms)
            persistent = mode == 2
        rk = m.routing_key
        if name == "":
            # A queue name; reply-to pseudo queues ("amq." names) are never declared queues.
            q0 = vh.queues.get(rk)
            if q0 is None:
                return self._handle(conn_id, channel, m, content, now_ms)
            queues: tuple[QueueEntity, ...] = (q0,)
        else:
            if x.type is ExchangeType.DELAYED:
                return self._handle(conn_id, channel, m, content, now_ms)
            queues = vh.route(x, rk, None)
            if not queues:
                return self._handle(conn_id, channel, m, content, now_ms)
        out: list[Effect] = []
        self._out = out
        self._now_ms = now_ms
        # Positional: no keyword matching (headers, priority, expiration, persistent, id, time).
        msg = Message(name, rk, pb, body, None, 0, None, persistent, None, now_ms)
        self.stats["published"] += 1
        seq = s.next_publish_seq() if s.mode is _CONFIRM else 0
        # `_route_publish`'s per-queue steps, for a message without headers (so never
        # scheduled or sender-selected), TTL or message id.
        refused = stored = False
        fail: QueueEntity | None = None
        dirty = self._dirty
        for q in queues:
            engine = q.queue
            outcome = engine.publish(msg, now_ms)
            if outcome is _REJECTED:
                refused = True
                limit = q.settings.limit
                if limit is not None and limit.family == "address":
                    fail = q
            else:
                if persistent and q.durable:
                    dur = self.durability
                    if dur is None or dur.published(q, msg, outcome, now_ms):
                        stored = True
            dirty[id(q)] = q
            st = q.settings
            limit = st.limit
            if limit is None and st.lvq_key is None and not st.non_destructive:
                if st.max_priority:
                    self._eager = True
                counters = engine.counters
                if (
                    counters.ready > FLOW_HIGH or counters.ready_bytes > FLOW_HIGH_BYTES
                ) and q.consumers.all:
                    self.flow_requests[conn_id] = q
            else:
                # A ring counts what waits: deliver before the next publish. Nothing to do now
                # when this queue is the only dirty one and has no consumer, no dead letters
                # to move and no blocked publisher (`_flush` would only mark it clean).
                if (
                    q.consumers.all
                    or st.dead_letter_exchange is not None
                    or len(dirty) > 1
                    or self._blocked_by
                ):
                    self._eager = True
                if limit is not None and limit.action is LimitAction.BLOCK and engine.over_limit:
                    self._block(conn_id, q)
        if fail is not None and not seq:
            # As after `_route_publish`: a limited queue was published to, so the next command
            # flushes (this error skips the flush below).
            self._eager = True
            raise _address_full(fail)
        if seq:
            self._confirm_publish(s, seq, refused, stored)
        if self._eager and dirty:
            self._eager = False
            self._flush(now_ms)
        elif dirty and not self.defer_dispatch:
            self._flush(now_ms)
        if self._defs_dirty:
            self.definitions_changed(full=False)
        return out

    def dispatch_pending(self, now_ms: int) -> list[Effect]:
        """Deliver what the `handle` calls of a read batch made deliverable (`defer_dispatch`).

        One dispatch per queue per batch instead of one per publish: the queue hands out the
        whole batch to its consumers in one pass.
        """
        out: list[Effect] = []
        if self._dirty:
            self._out = out
            self._now_ms = now_ms
            self._flush(now_ms)
            if self._defs_dirty:
                self.definitions_changed(full=False)
        return out

    def _reply(self, session: Session, method: Any) -> None:
        self._out.append(SendMethod(session.conn_id, session.channel, method))

    # ================================================================== permissions
    def _check(self, session: Session, access: Access, kind: str, name: str) -> None:
        # Successful checks are cached per channel; any permission change bumps the generation.
        key = (access.value, kind, name)
        if session.perm_generation == self.auth.generation and key in session.perm_ok:
            return
        conn = session.conn
        self.auth.check(conn.user, conn.vhost, access, kind, name)
        if session.perm_generation != self.auth.generation:
            session.perm_ok.clear()
            session.write_ok.clear()
            session.perm_generation = self.auth.generation
        session.perm_ok.add(key)

    def _check_arg_exchange(
        self, s: Session, args: dict[str, Any], key: str, kind: str, name: str
    ) -> None:
        """RabbitMQ's rule for an exchange named in a declare argument (DLX, AE).

        Naming `x-dead-letter-exchange` on a queue or `alternate-exchange` on an exchange lets
        the declarer's resource publish into that exchange later, so the declarer needs read on
        the resource being declared and write on the named exchange (403 otherwise). A value that
        is not a string is refused with 406 first, as RabbitMQ's `r_arg` does.
        """
        if key not in args:
            return
        target = _as_str(args[key])
        if target is None:
            raise AMQPError(
                ReplyCode.PRECONDITION_FAILED,
                f"invalid type '{_field_type(args[key])}' for arg '{key}'",
            )
        self._check(s, Access.READ, kind, name)
        self._check(s, Access.WRITE, "exchange", target)

    @staticmethod
    def _vhost(session: Session) -> VHost:
        return session.vhost

    # ================================================================== exchanges
    def _get_exchange(self, vh: VHost, name: str) -> Exchange:
        x = vh.exchanges.get(name)
        if x is None:
            raise AMQPError(ReplyCode.NOT_FOUND, f"no exchange '{name}' in vhost '{vh.name}'")
        return x

    @staticmethod
    def _not_default(name: str) -> None:
        if name == "":
            raise AMQPError(
                ReplyCode.ACCESS_REFUSED, "operation not permitted on the default exchange"
            )

    def _exchange_declare(
        self, s: Session, m: spec.ExchangeDeclare, _c: RawContent | None, now_ms: int
    ) -> None:
        vh = self._vhost(s)
        name = m.exchange
        # Even a passive declare of the default exchange is refused (RabbitMQ: 403).
        self._not_default(name)
        if m.passive:
            self._get_exchange(vh, name)
            if not m.no_wait:
                self._reply(s, spec.ExchangeDeclareOk())
            return
        try:
            kind, routing_type = parse_exchange_type(m.type, m.arguments)
        except ExchangeTypeError as exc:
            raise AMQPError(ReplyCode.COMMAND_INVALID, str(exc)) from None
        except DelayedTypeError as exc:
            self._check(s, Access.CONFIGURE, "exchange", name)
            raise AMQPError(ReplyCode.PRECONDITION_FAILED, str(exc)) from None
        self._check(s, Access.CONFIGURE, "exchange", name)
        args = dict(m.arguments or {})
        self._check_arg_exchange(s, args, "alternate-exchange", "exchange", name)
        x = vh.exchanges.get(name)
        if x is None:
            if name.startswith("amq."):
                raise AMQPError(
                    ReplyCode.ACCESS_REFUSED,
                    f"exchange name '{name}' contains reserved prefix 'amq.*'",
                )
            x = Exchange(
                name,
                kind,
                durable=m.durable,
                auto_delete=m.auto_delete,
                internal=m.internal,
                arguments=args,
                routing_type=routing_type,
            )
            vh.exchanges[name] = x
            vh.invalidate()
            if x.durable:
                self._touch(EXCHANGE_DEF, vh.name, name)
        else:
            diff = x.equivalent(kind, m.durable, m.auto_delete, m.internal, args)
            if diff is not None:
                if diff == "type":
                    got, cur = f"'{kind.value}'", f"'{x.type.value}'"
                elif diff in ("durable", "auto_delete", "internal"):
                    got = f"'{_flag(getattr(m, diff))}'"
                    cur = f"'{_flag(getattr(x, diff))}'"
                else:
                    got, cur = _fmt_value(args.get(diff)), _fmt_value(x.arguments.get(diff))
                raise AMQPError(
                    ReplyCode.PRECONDITION_FAILED,
                    f"inequivalent arg '{diff}' for exchange '{name}' in vhost '{vh.name}': "
                    f"received {got} but current is {cur}",
                )
        if not m.no_wait:
            self._reply(s, spec.ExchangeDeclareOk())

    def _exchange_delete(
        self, s: Session, m: spec.ExchangeDelete, _c: RawContent | None, now_ms: int
    ) -> None:
        vh = self._vhost(s)
        name = m.exchange
        self._not_default(name)
        if name.startswith("amq."):
            raise AMQPError(
                ReplyCode.ACCESS_REFUSED,
                f"deletion of system exchange '{name}' in vhost '{vh.name}' not allowed",
            )
        self._check(s, Access.CONFIGURE, "exchange", name)
        x = vh.exchanges.get(name)
        if x is not None:
            if m.if_unused and x.bindings:
                raise AMQPError(
                    ReplyCode.PRECONDITION_FAILED,
                    f"exchange '{name}' in vhost '{vh.name}' in use",
                )
            self._delete_exchange(vh, x)
        if not m.no_wait:
            self._reply(s, spec.ExchangeDeleteOk())

    def _delete_exchange(self, vh: VHost, x: Exchange) -> None:
        vh.exchanges.pop(x.name, None)
        if x.durable:
            self._touch(EXCHANGE_DEF, vh.name, x.name)
        x.bindings.clear()
        for source in vh.remove_dest((EXCHANGE, x.name)):
            self._maybe_auto_delete_exchange(vh, source)
        vh.invalidate()

    def _maybe_auto_delete_exchange(self, vh: VHost, x: Exchange) -> None:
        if x.auto_delete and not x.bindings and vh.exchanges.get(x.name) is x:
            self._delete_exchange(vh, x)

    def _exchange_bind(
        self, s: Session, m: spec.ExchangeBind, _c: RawContent | None, now_ms: int
    ) -> None:
        vh = self._vhost(s)
        self._not_default(m.source)
        self._not_default(m.destination)
        self._check(s, Access.WRITE, "exchange", m.destination)
        self._check(s, Access.READ, "exchange", m.source)
        src = self._get_exchange(vh, m.source)
        self._get_exchange(vh, m.destination)
        self._bind(src, (EXCHANGE, m.destination), m.routing_key, m.arguments)
        vh.invalidate()
        self._touch_binding(vh, src, (EXCHANGE, m.destination), m.routing_key, m.arguments)
        if not m.no_wait:
            self._reply(s, spec.ExchangeBindOk())

    def _exchange_unbind(
        self, s: Session, m: spec.ExchangeUnbind, _c: RawContent | None, now_ms: int
    ) -> None:
        vh = self._vhost(s)
        self._not_default(m.source)
        self._not_default(m.destination)
        self._check(s, Access.WRITE, "exchange", m.destination)
        self._check(s, Access.READ, "exchange", m.source)
        # A missing source or destination is no error: the binding is gone either way
        # (RabbitMQ's rabbit_binding:remove reports only an *absent* queue, never not_found).
        src = vh.exchanges.get(m.source)
        if (
            src is not None
            and m.destination in vh.exchanges
            and src.unbind((EXCHANGE, m.destination), m.routing_key, m.arguments)
        ):
            vh.invalidate()
            self._touch_binding(vh, src, (EXCHANGE, m.destination), m.routing_key, m.arguments)
            self._maybe_auto_delete_exchange(vh, src)
        if not m.no_wait:
            self._reply(s, spec.ExchangeUnbindOk())

    @staticmethod
    def _bind(
        src: Exchange, dest: tuple[str, str], routing_key: str, args: Mapping[str, Any] | None
    ) -> None:
        try:
            src.bind(dest, routing_key, args)
        except ValueError as exc:
            raise AMQPError(ReplyCode.PRECONDITION_FAILED, str(exc)) from None

    # ================================================================== queues
    def _queue_name(self, s: Session, name: str) -> str:
        # AMQP 0-9-1: an empty queue name means the last queue declared on the channel.
        if name:
            return name
        if not s.last_queue:
            raise AMQPError(ReplyCode.NOT_FOUND, "no previously declared queue")
        return s.last_queue

    def _get_queue(self, s: Session, name: str) -> QueueEntity:
        vh = self._vhost(s)
        q = vh.queues.get(name)
        if q is None:
            raise AMQPError(ReplyCode.NOT_FOUND, f"no queue '{name}' in vhost '{vh.name}'")
        if q.exclusive_owner is not None and q.exclusive_owner != s.conn_id:
            raise AMQPError(ReplyCode.RESOURCE_LOCKED, _EXCLUSIVE_LOCKED.format(q=name, v=vh.name))
        return q

    def _gen_name(self, prefix: str) -> str:
        raw = self._rng.getrandbits(128).to_bytes(16, "big")
        return prefix + base64.urlsafe_b64encode(raw).decode("ascii").rstrip("=")

    def resolve_settings(
        self, vhost: str, name: str, arguments: Mapping[str, Any]
    ) -> QueueSettings:
        """Effective settings of queue `name` from its arguments, policy and address settings."""
        pol = self.policies.match(name, "queue", vhost=vhost)
        return resolve_queue_settings(
            name,
            arguments,
            policy=pol.definition if pol is not None else None,
            address_settings=self.address_settings.resolve(name),
            policy_name=pol.name if pol is not None else None,
        )

    def declare_queue(
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
        """Create a queue (no checks beyond settings validation; used by handlers and admin)."""
        vh = self.vhosts[vhost]
        args = dict(arguments or {})
        settings = self.resolve_settings(vhost, name, args)
        q = QueueEntity(
            name=name,
            vhost=vhost,
            queue=self._new_queue(vhost, name, settings),
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
        self.stats["queues_created"] += 1
        if durable and self.durability is not None:
            self.durability.attach(q)
            self._touch(QUEUE_DEF, vhost, name)
        if settings.message_ttl_ms is not None or settings.expires_ms is not None:
            self._track_timers(q)
        if exclusive_owner is not None:
            conn = self.conns.get(exclusive_owner)
            if conn is not None:
                conn.exclusive_queues.add(name)
        return q

    def _queue_declare(
        self, s: Session, m: spec.QueueDeclare, _c: RawContent | None, now_ms: int
    ) -> None:
        vh = self._vhost(s)
        name = m.queue
        if m.passive:
            if name == REPLY_TO_QUEUE or name.startswith(_REPLY_TO_PREFIX):
                if not m.no_wait:
                    self._reply(s, spec.QueueDeclareOk(queue=name))
                return
            q = self._get_queue(s, self._queue_name(s, name))
            q.last_used_ms = now_ms
            s.last_queue = q.name
            if not m.no_wait:
                self._reply(
                    s,
                    spec.QueueDeclareOk(
                        queue=q.name,
                        message_count=q.queue.ready_count,
                        consumer_count=len(q.consumers),
                    ),
                )
            return
        self.stats["queues_declared"] += 1
        generated = name == ""
        if generated:
            name = self._gen_name("amq.gen-")
        elif name.startswith("amq."):
            raise AMQPError(
                ReplyCode.ACCESS_REFUSED, f"queue name '{name}' contains reserved prefix 'amq.*'"
            )
        self._check(s, Access.CONFIGURE, "queue", name)
        existing = vh.queues.get(name)
        args = dict(m.arguments or {})
        self._check_arg_exchange(s, args, "x-dead-letter-exchange", "queue", name)
        if existing is not None:
            q = existing
            if q.exclusive_owner is not None and q.exclusive_owner != s.conn_id:
                raise AMQPError(
                    ReplyCode.RESOURCE_LOCKED, _EXCLUSIVE_LOCKED.format(q=name, v=vh.name)
                )
            self._assert_queue_equivalent(vh, q, m, args)
            q.last_used_ms = now_ms
        else:
            try:
                q = self.declare_queue(
                    vh.name,
                    name,
                    durable=m.durable,
                    exclusive_owner=s.conn_id if m.exclusive else None,
                    auto_delete=m.auto_delete,
                    arguments=args,
                    now_ms=now_ms,
                )
            except SettingsError as exc:
                raise AMQPError(ReplyCode.PRECONDITION_FAILED, str(exc)) from None
        s.last_queue = name
        if not m.no_wait:
            self._reply(
                s,
                spec.QueueDeclareOk(
                    queue=name, message_count=q.queue.ready_count, consumer_count=len(q.consumers)
                ),
            )

    @staticmethod
    def _assert_queue_equivalent(
        vh: VHost, q: QueueEntity, m: spec.QueueDeclare, args: dict[str, Any]
    ) -> None:
        def fail(what: str, got: str, cur: str) -> AMQPError:
            return AMQPError(
                ReplyCode.PRECONDITION_FAILED,
                f"inequivalent arg '{what}' for queue '{q.name}' in vhost '{vh.name}': "
                f"received {got} but current is {cur}",
            )

        if m.durable != q.durable:
            raise fail("durable", f"'{_flag(m.durable)}'", f"'{_flag(q.durable)}'")
        if m.exclusive != (q.exclusive_owner is not None):
            raise AMQPError(
                ReplyCode.RESOURCE_LOCKED, _EXCLUSIVE_LOCKED.format(q=q.name, v=vh.name)
            )
        if m.auto_delete != q.auto_delete:
            raise fail("auto_delete", f"'{_flag(m.auto_delete)}'", f"'{_flag(q.auto_delete)}'")
        if args != q.arguments:
            # As RabbitMQ: only arguments with semantics are compared; others may differ.
            for key in sorted((set(args) | set(q.arguments)) & _EQUIVALENCE_ARGS):
                got, cur = args.get(key), q.arguments.get(key)
                if key == "x-queue-type":
                    got, cur = got or "classic", cur or "classic"
                if got != cur:
                    raise fail(key, _fmt_value(args.get(key)), _fmt_value(q.arguments.get(key)))

    def _queue_bind(
        self, s: Session, m: spec.QueueBind, _c: RawContent | None, now_ms: int
    ) -> None:
        vh = self._vhost(s)
        qname = self._queue_name(s, m.queue)
        routing_key = m.routing_key or (qname if not m.queue else "")
        self._not_default(m.exchange)
        self._check(s, Access.WRITE, "queue", qname)
        self._check(s, Access.READ, "exchange", m.exchange)
        q = self._get_queue(s, qname)
        x = self._get_exchange(vh, m.exchange)
        self._bind(x, (QUEUE, q.name), routing_key, m.arguments)
        vh.invalidate()
        if q.durable:
            self._touch_binding(vh, x, (QUEUE, q.name), routing_key, m.arguments)
        if not m.no_wait:
            self._reply(s, spec.QueueBindOk())

    def _queue_unbind(
        self, s: Session, m: spec.QueueUnbind, _c: RawContent | None, now_ms: int
    ) -> None:
        vh = self._vhost(s)
        qname = self._queue_name(s, m.queue)
        self._not_default(m.exchange)
        self._check(s, Access.WRITE, "queue", qname)
        self._check(s, Access.READ, "exchange", m.exchange)
        # A missing queue or exchange is no error: the binding is gone either way, so
        # RabbitMQ answers unbind-ok (rabbit_binding:remove reports only an *absent* queue).
        # As there, exclusivity is checked only when the binding exists.
        q = vh.queues.get(qname)
        x = vh.exchanges.get(m.exchange)
        dest = (QUEUE, qname)
        if q is not None and x is not None and x.has_binding(dest, m.routing_key, m.arguments):
            self._get_queue(s, qname)  # 405 when another connection owns it exclusively
            x.unbind(dest, m.routing_key, m.arguments)
            vh.invalidate()
            if q.durable:
                self._touch_binding(vh, x, dest, m.routing_key, m.arguments)
            self._maybe_auto_delete_exchange(vh, x)
        self._reply(s, spec.QueueUnbindOk())

    def _queue_purge(
        self, s: Session, m: spec.QueuePurge, _c: RawContent | None, now_ms: int
    ) -> None:
        qname = self._queue_name(s, m.queue)
        self._check(s, Access.READ, "queue", qname)
        q = self._get_queue(s, qname)
        count = q.queue.purge()
        if q.durable and self.durability is not None:
            self.durability.purged(q)
        if not m.no_wait:
            self._reply(s, spec.QueuePurgeOk(message_count=int(count or 0)))

    def _queue_delete(
        self, s: Session, m: spec.QueueDelete, _c: RawContent | None, now_ms: int
    ) -> None:
        vh = self._vhost(s)
        qname = self._queue_name(s, m.queue)
        self._check(s, Access.CONFIGURE, "queue", qname)
        q = vh.queues.get(qname)
        count = 0
        if q is not None:
            if q.exclusive_owner is not None and q.exclusive_owner != s.conn_id:
                raise AMQPError(
                    ReplyCode.RESOURCE_LOCKED, _EXCLUSIVE_LOCKED.format(q=qname, v=vh.name)
                )
            if m.if_unused and q.consumers:
                raise AMQPError(
                    ReplyCode.PRECONDITION_FAILED, f"queue '{qname}' in vhost '{vh.name}' in use"
                )
            if m.if_empty and q.queue.ready_count:
                raise AMQPError(
                    ReplyCode.PRECONDITION_FAILED, f"queue '{qname}' in vhost '{vh.name}' not empty"
                )
            count = q.queue.ready_count
        # delete-ok goes before the basic.cancel of the queue's consumers, this channel's
        # included (RabbitMQ's order; py-amqp fails a delete whose reply comes after a cancel)
        if not m.no_wait:
            self._reply(s, spec.QueueDeleteOk(message_count=count))
        if q is not None:
            self._delete_queue(vh, q, now_ms)

    def _delete_queue(self, vh: VHost, q: QueueEntity, now_ms: int) -> None:
        """Remove a queue: cancel its consumers (notifying them), drop its bindings."""
        if vh.queues.get(q.name) is not q:
            return
        del vh.queues[q.name]
        q.deleted = True
        self.stats["queues_deleted"] += 1
        if q.durable and self.durability is not None:
            self.durability.queue_deleted(q)
            self._touch(QUEUE_DEF, vh.name, q.name)
        q.queue.close()  # release its paged data
        for consumer in list(q.consumers.all):
            session = consumer.session
            session.consumers.pop(consumer.tag, None)
            if session.conn.cancel_notify and session.conn.sessions.get(session.channel) is session:
                self._out.append(
                    SendMethod(
                        session.conn_id,
                        session.channel,
                        spec.BasicCancel(consumer_tag=consumer.tag, no_wait=True),
                    )
                )
        q.consumers = ConsumerSet()
        if q.exclusive_owner is not None:
            conn = self.conns.get(q.exclusive_owner)
            if conn is not None:
                conn.exclusive_queues.discard(q.name)
        for source in vh.remove_dest((QUEUE, q.name)):
            self._maybe_auto_delete_exchange(vh, source)
        self._dirty.pop(id(q), None)
        self._backlog.pop(id(q), None)
        self._maybe_unblock(q)

    # ================================================================== consumers
    def _basic_qos(self, s: Session, m: spec.BasicQos, _c: RawContent | None, now_ms: int) -> None:
        if m.prefetch_size:
            raise AMQPError(ReplyCode.NOT_IMPLEMENTED, f"prefetch_size!=0 ({m.prefetch_size})")
        if m.global_:
            s.global_prefetch = m.prefetch_count
        else:
            s.prefetch_count = m.prefetch_count
        self._reply(s, spec.BasicQosOk())
        for consumer in s.consumers.values():
            self._mark(consumer.queue)

    def _basic_consume(
        self, s: Session, m: spec.BasicConsume, _c: RawContent | None, now_ms: int
    ) -> None:
        tag = m.consumer_tag or self._gen_name("amq.ctag-")
        if tag in s.consumers or (s.reply_to_token is not None and s.reply_tag == tag):
            raise AMQPError(ReplyCode.NOT_ALLOWED, f"attempt to reuse consumer tag '{tag}'")
        if m.queue == REPLY_TO_QUEUE:
            self._consume_reply_to(s, m, tag)
            return
        qname = self._queue_name(s, m.queue)
        self._check(s, Access.READ, "queue", qname)
        q = self._get_queue(s, qname)
        vh_name = s.conn.vhost
        if q.consumers and (m.exclusive or q.consumers.exclusive):
            raise AMQPError(
                ReplyCode.ACCESS_REFUSED, f"queue '{qname}' in vhost '{vh_name}' in exclusive use"
            )
        args = dict(m.arguments or {})
        prio = args.get("x-priority", 0)
        if isinstance(prio, bool) or not isinstance(prio, int):
            raise AMQPError(
                ReplyCode.PRECONDITION_FAILED, f"invalid x-priority {prio!r}: must be an integer"
            )
        consumer = Consumer(
            tag=tag,
            session=s,
            queue=q,
            no_ack=m.no_ack,
            exclusive=m.exclusive,
            priority=prio,
            prefetch=s.prefetch_count,
            arguments=args,
        )
        s.consumers[tag] = consumer
        q.consumers.add(consumer)
        q.had_consumer = True
        q.last_used_ms = now_ms
        if not m.no_wait:
            self._reply(s, spec.BasicConsumeOk(consumer_tag=tag))
        self._mark(q)

    def _consume_reply_to(self, s: Session, m: spec.BasicConsume, tag: str) -> None:
        if not m.no_ack:
            raise AMQPError(ReplyCode.PRECONDITION_FAILED, "reply consumer cannot acknowledge")
        if s.reply_to_token is not None:
            raise AMQPError(ReplyCode.PRECONDITION_FAILED, "reply consumer already set")
        token = self._gen_name("")
        s.reply_to_token = token
        s.reply_tag = tag
        self._reply_sessions[token] = (s, tag)
        if not m.no_wait:
            self._reply(s, spec.BasicConsumeOk(consumer_tag=tag))

    def _basic_cancel(
        self, s: Session, m: spec.BasicCancel, _c: RawContent | None, now_ms: int
    ) -> None:
        consumer = s.consumers.pop(m.consumer_tag, None)
        if consumer is not None:
            self._remove_consumer(consumer, now_ms)
        elif s.reply_to_token is not None and s.reply_tag == m.consumer_tag:
            self._reply_sessions.pop(s.reply_to_token, None)
            s.reply_to_token = None
        if not m.no_wait:
            self._reply(s, spec.BasicCancelOk(consumer_tag=m.consumer_tag))

    def _remove_consumer(self, consumer: Consumer, now_ms: int) -> None:
        q = consumer.queue
        if not q.consumers.remove(consumer):
            return
        q.last_used_ms = now_ms
        if q.auto_delete and not q.consumers and q.had_consumer and not q.deleted:
            vh = self.vhosts.get(q.vhost)
            if vh is not None:
                self._delete_queue(vh, q, now_ms)
                return
        self._mark(q)

    # ================================================================== publishing
    def _build_message(
        self, exchange: str, routing_key: str, content: RawContent, now_ms: int
    ) -> tuple[Message, BasicProperties | None]:
        pb = content.properties_bin
        msg = Message(exchange, routing_key, pb, content.body, timestamp_ms=now_ms)
        flags = property_flags(pb)
        if not flags & _DECODE_ANY:
            return msg, None
        props = decode_properties(pb)
        msg.headers = props.headers
        msg.priority = props.priority or 0
        msg.persistent = props.delivery_mode == 2
        msg.message_id = props.message_id
        if props.expiration is not None:
            msg.expiration_ms = parse_expiration(props.expiration)
        return msg, props

    def check_publish(self, conn_id: int, channel: int, method: Any) -> None:
        """The checks of a basic.publish that need no content, run when its method arrives.

        The exchange exists, is not internal and the user may write to it; `immediate` is
        refused. The protocol layer calls it before the body is received, so a refused publish
        costs no buffered body. Raises AMQPError (class and method ids of basic.publish);
        `handle` repeats the checks (cached) when the whole command arrives.
        """
        conn = self.conns.get(conn_id)
        s = conn.sessions.get(channel) if conn is not None else None
        if s is None or type(method) is not spec.BasicPublish:
            return  # `handle` reports these with the whole command
        try:
            self._publish_exchange(s, method.exchange)
            if method.immediate:
                raise AMQPError(ReplyCode.NOT_IMPLEMENTED, "immediate=true")
        except AMQPError as exc:
            exc.class_id, exc.method_id = method.CLASS_ID, method.METHOD_ID
            raise

    def block_for_alarms(self, conn_id: int) -> list[Effect]:
        """Block `conn_id` as a publish would while a resource alarm is on (no-op otherwise).

        For a connection with content in flight: its publish is not complete yet, but its body
        is what the alarm is about (RabbitMQ blocks at the publish method).
        """
        out: list[Effect] = []
        self._out = out
        if self._alarms and conn_id in self.conns:
            self._alarm_publish(conn_id)
        return out

    def _publish_exchange(self, s: Session, name: str) -> tuple[VHost, Exchange]:
        """The exchange a publish on `s` names, checked: exists, not internal, writable."""
        vh = s.vhost
        x = vh.exchanges.get(name)
        if x is None:
            raise AMQPError(ReplyCode.NOT_FOUND, f"no exchange '{name}' in vhost '{vh.name}'")
        if x.internal:
            raise AMQPError(
                ReplyCode.ACCESS_REFUSED,
                f"cannot publish to internal exchange '{name}' in vhost '{vh.name}'",
            )
        if s.perm_generation != self.auth.generation or name not in s.write_ok:
            self._check(s, Access.WRITE, "exchange", name)
            s.write_ok.add(name)
        return vh, x

    def _publish_message(
        self, s: Session, exchange: str, routing_key: str, pb: bytes, body: bytes, now_ms: int
    ) -> Message:
        """The message of one publish: size checked, the properties the core needs read."""
        if len(body) > self.max_message_size:
            raise AMQPError(
                ReplyCode.PRECONDITION_FAILED,
                f"message size {len(body)} is larger than configured max size "
                f"{self.max_message_size}",
            )
        if len(pb) >= 2 and not ((pb[0] << 8) | pb[1]) & _DECODE_ANY:
            # Hot path: no property the core needs; keep the header raw (STYLE: re-send as is).
            return Message(exchange, routing_key, pb, body, timestamp_ms=now_ms)
        if (mode := _only_delivery_mode(pb)) is not None:
            # Nearly as hot: clients set delivery_mode (and often content_type) on every publish.
            msg = Message(exchange, routing_key, pb, body, timestamp_ms=now_ms)
            msg.persistent = mode == 2
            return msg
        if (simple := scan_simple(pb)) is not None:
            # message_id (and a few plain fields) without headers, priority, TTL or reply_to:
            # read what the core needs from the raw bytes (core/propscan.py).
            msg = Message(exchange, routing_key, pb, body, timestamp_ms=now_ms)
            msg.persistent = simple[0] == 2
            msg.message_id = simple[1]
            return msg
        msg, props = self._build_message(
            exchange, routing_key, RawContent(60, len(body), pb, body), now_ms
        )
        if props is not None and props.reply_to == REPLY_TO_QUEUE:
            if s.reply_to_token is None:
                raise AMQPError(ReplyCode.PRECONDITION_FAILED, "fast reply consumer does not exist")
            props.reply_to = _REPLY_TO_PREFIX + s.reply_to_token
            msg.properties_bin = encode_properties(props)
        return msg

    def _basic_publish(
        self, s: Session, m: spec.BasicPublish, content: RawContent | None, now_ms: int
    ) -> None:
        vh, x = self._publish_exchange(s, m.exchange)
        if content is None:
            raise AMQPError(ReplyCode.UNEXPECTED_FRAME, "basic.publish without content")
        if len(content.body) > self.max_message_size:
            raise AMQPError(
                ReplyCode.PRECONDITION_FAILED,
                f"message size {len(content.body)} is larger than configured max size "
                f"{self.max_message_size}",
            )
        if m.immediate:
            raise AMQPError(ReplyCode.NOT_IMPLEMENTED, "immediate=true")
        msg = self._publish_message(
            s, m.exchange, m.routing_key, content.properties_bin, content.body, now_ms
        )
        self.stats["published"] += 1
        if self._alarms:
            self._alarm_publish(s.conn_id)
        if s.mode is ChannelMode.TX:
            assert s.tx is not None
            s.tx.publishes.append(TxPublish(m.exchange, m.routing_key, m.mandatory, msg))
            return
        seq = s.next_publish_seq() if s.mode is ChannelMode.CONFIRM else 0
        self._address_fail = None
        refused, stored = self._route_publish(vh, x, msg, m.mandatory, s, now_ms)
        fail = self._pop_address_fail()
        if fail is not None and not seq:
            # Artemis FAIL without confirms: the producer's send fails (a channel error here);
            # under confirms the nack below says it (RabbitMQ reject-publish stays silent).
            raise _address_full(fail)
        if seq:
            self._confirm_publish(s, seq, refused, stored)

    def _confirm_publish(self, s: Session, seq: int, refused: bool, stored: bool) -> None:
        # The confirm of one publish on a confirm channel: nack when a queue refused it, held
        # for the fsync when it was persisted (`delay_persistent_confirms`), else ack now.
        if refused:
            self.stats["nacked"] += 1
            s.confirm_held.discard(seq)
            self._send_confirms(s, [], nack=seq)
        elif stored and self.config.delay_persistent_confirms:
            s.confirm_held.add(seq)
            self._unconfirmed.append((s.conn_id, s.channel, seq))
        else:
            self._send_confirms(s, [seq])

    def publish_batch(
        self,
        conn_id: int,
        channel: int,
        exchange: str,
        messages: Sequence[tuple[str, bytes, bytes]],
        start: int,
        stop: int,
        now_ms: int,
    ) -> BatchPublished:
        """Publish `messages[start:stop]` ((routing key, raw properties, body) each) to
        `exchange` on an open channel, as that many `basic.publish` (mandatory and immediate
        false) would, with one confirm step per batch.

        Same semantics as one `handle(basic.publish)` per message: the exchange and write
        permission are checked (once), each message is routed, de-duplicated by message_id,
        subject to its queues' limits and overflow (a refusal nacks that message's publish
        seq), persisted (its confirm held for the fsync under `delay_persistent_confirms`),
        and counted against resource alarms. What differs: the acks of the batch's confirmed
        publishes are coalesced and sent once at the end (a nack first sends the acks before
        it, so the order on the channel is kept), and queues are dispatched once at the end
        (as `defer_dispatch` does for a read batch; queues that must deliver before the next
        publish, e.g. rings, still are at once).

        The batch stops early at the first message whose publish raises (a channel or
        connection error: `error` is set, `published` counts the messages before it; the
        caller closes the channel) or that blocks the connection (`blocked`; that message is
        published). Raises AMQPError only when the channel is not open.
        """
        session = self.conns[conn_id].sessions.get(channel)
        if session is None:
            raise AMQPError(
                ReplyCode.CHANNEL_ERROR,
                f"expected 'channel.open' on channel {channel}",
                class_id=spec.BasicPublish.CLASS_ID,
                method_id=spec.BasicPublish.METHOD_ID,
            )
        if session.mode is ChannelMode.TX:
            return self._publish_batch_tx(conn_id, channel, exchange, messages, start, stop, now_ms)
        out: list[Effect] = []
        self._out = out
        self._now_ms = now_ms
        done = BatchPublished(out)
        s = session
        released: list[int] = []
        try:
            vh, x = self._publish_exchange(s, exchange)
            confirm = s.mode is ChannelMode.CONFIRM
            delay = self.config.delay_persistent_confirms
            held = s.confirm_held
            stats = self.stats
            route = self._route_publish
            build = self._publish_message
            for i in range(start, stop):
                rk, pb, body = messages[i]
                msg = build(s, exchange, rk, pb, body, now_ms)
                stats["published"] += 1
                n_out = len(out)
                if self._alarms:
                    self._alarm_publish(conn_id)
                seq = s.next_publish_seq() if confirm else 0
                self._address_fail = None
                refused, stored = route(vh, x, msg, False, s, now_ms)
                fail = self._pop_address_fail()
                if fail is not None and not seq:
                    raise _address_full(fail)
                if seq:
                    if refused:
                        if released:
                            self._send_confirms(s, released)
                            released = []
                        stats["nacked"] += 1
                        held.discard(seq)
                        self._send_confirms(s, [], nack=seq)
                    elif stored and delay:
                        held.add(seq)
                        self._unconfirmed.append((conn_id, channel, seq))
                    else:
                        released.append(seq)
                done.published += 1
                if self._eager and self._dirty:
                    self._eager = False
                    self._flush(now_ms)
                if len(out) != n_out and any(
                    type(e) is Block and e.conn_id == conn_id for e in out[n_out:]
                ):
                    done.blocked = True
                    break
        except AMQPError as exc:
            if not exc.class_id:
                exc.class_id = spec.BasicPublish.CLASS_ID
                exc.method_id = spec.BasicPublish.METHOD_ID
            done.error = exc
        if released:
            self._send_confirms(s, released)
        if self._dirty and (not self.defer_dispatch or self._eager):
            self._eager = False
            self._flush(now_ms)
        if self._defs_dirty:
            self.definitions_changed(full=False)
        return done

    def _publish_batch_tx(
        self,
        conn_id: int,
        channel: int,
        exchange: str,
        messages: Sequence[tuple[str, bytes, bytes]],
        start: int,
        stop: int,
        now_ms: int,
    ) -> BatchPublished:
        # A transactional channel only buffers publishes: nothing to batch, go one by one.
        done = BatchPublished([])
        methods: dict[str, spec.BasicPublish] = {}
        for i in range(start, stop):
            rk, pb, body = messages[i]
            method = methods.get(rk)
            if method is None:
                method = methods[rk] = spec.BasicPublish(exchange=exchange, routing_key=rk)
            try:
                done.effects.extend(
                    self.handle(
                        conn_id, channel, method, RawContent(60, len(body), pb, body), now_ms
                    )
                )
            except AMQPError as exc:
                done.error = exc
                break
            done.published += 1
        return done

    def _route_publish(
        self,
        vh: VHost,
        x: Exchange,
        msg: Message,
        mandatory: bool,
        s: Session | None,
        now_ms: int,
    ) -> tuple[bool, bool]:
        """Route one message and enqueue it; returns (refused by some queue, persisted)."""
        if x.type is ExchangeType.DELAYED:
            delay = (msg.headers or {}).get("x-delay")
            if isinstance(delay, int) and not isinstance(delay, bool) and delay > 0:
                due = now_ms + delay
                held = x.hold(msg, due)
                self._holding[id(x)] = (vh, x)
                dur = self.durability
                return False, dur is not None and dur.held(vh.name, x, held, msg, due)
        rk = msg.routing_key
        if x.name == "" and rk.startswith(_REPLY_TO_PREFIX):
            if self._deliver_reply(rk, msg):
                return False, False
            queues: tuple[QueueEntity, ...] = ()
        else:
            queues = vh.route(x, rk, msg.headers)
            hdrs = msg.headers
            if hdrs and ("CC" in hdrs or "BCC" in hdrs):
                queues, msg = self._sender_selected(vh, x, msg, queues)
            if msg.message_id is not None and queues:
                # x-message-deduplication-window-ms (core/dedup.py): drop duplicates.
                queues = tuple(self.dedup.admit(vh.name, x, queues, msg.message_id, now_ms))
                if not queues:
                    return False, False
        if not queues:
            self.stats["unroutable"] += 1
            if mandatory and s is not None:
                self.stats["returned"] += 1
                self._out.append(
                    SendContent(
                        s.conn_id,
                        s.channel,
                        spec.BasicReturn(
                            reply_code=ReplyCode.NO_ROUTE,
                            reply_text="NO_ROUTE",
                            exchange=x.name,
                            routing_key=rk,
                        ),
                        msg,
                    )
                )
            return False, False
        refused = False
        stored = False
        dirty = self._dirty
        for q in queues:
            engine = q.queue
            outcome = engine.publish(msg, now_ms)
            if outcome is PublishOutcome.REJECTED:
                refused = True
                limit = q.settings.limit
                if limit is not None and limit.family == "address":
                    self._address_fail = q
                if msg.message_id is not None:
                    self.dedup.refused(vh.name, x, q, msg.message_id)
            else:
                if outcome is PublishOutcome.SCHEDULED or msg.expiration_ms is not None:
                    self._timed[id(q)] = q
                if msg.persistent and q.durable:
                    dur = self.durability
                    if dur is None or dur.published(q, msg, outcome, now_ms):
                        stored = True
            dirty[id(q)] = q
            st = q.settings
            if (
                st.limit is not None
                or st.lvq_key is not None
                or st.max_priority
                or st.non_destructive
            ):
                self._eager = True  # e.g. a ring counts pending: deliver before the next publish
            counters = engine.counters
            if (
                s is not None
                and (counters.ready > FLOW_HIGH or counters.ready_bytes > FLOW_HIGH_BYTES)
                and q.consumers.all
                and st.limit is None  # a ring or max-length queue applies its own overflow
                and st.lvq_key is None
                and not st.non_destructive  # browsers never drain it
            ):
                self.flow_requests[s.conn_id] = q
            limit = q.settings.limit
            if (
                limit is not None
                and s is not None
                and limit.action is LimitAction.BLOCK
                and engine.over_limit
            ):
                self._block(s.conn_id, q)
        return refused, stored

    # --- paging and resource alarms ------------------------------------------------------

    def _pop_address_fail(self) -> QueueEntity | None:
        # The Artemis FAIL queue that refused the last routed publish, if any.
        fail, self._address_fail = self._address_fail, None
        return fail

    def _new_queue(self, vhost: str, name: str, settings: QueueSettings) -> Queue:
        factory = self._spill_factory
        if factory is None:
            return Queue(name, settings)
        q = Queue(name, settings, spill=factory(vhost, name))
        q.set_memory_bound(*self._head_bound)
        self._flow_to_disk(vhost, q)
        return q

    def _flow_to_disk(self, vhost: str, q: Queue) -> None:
        # Qpid flow_to_disk / Artemis PAGE limits page bodies one by one: give them disk.
        limit = q.settings.limit
        if (
            self._body_factory is not None
            and limit is not None
            and limit.action is LimitAction.FLOW_TO_DISK
        ):
            q.set_body_store(self._body_factory(vhost, q.name))

    def enable_paging(
        self,
        spill_factory: Callable[[str, str], SpillStore],
        head_count: int = DEFAULT_HEAD_COUNT,
        head_bytes: int = DEFAULT_HEAD_BYTES,
        body_store_factory: Callable[[str, str], BodyStore] | None = None,
    ) -> None:
        """Let every queue (existing and future) page beyond an in-memory head.

        `spill_factory(vhost, queue)` returns a fresh `SpillStore` per queue (the server passes
        `storage.bodystore.SpillDirectory`). Queues then keep at most `head_count` ready
        messages / `head_bytes` ready body bytes in memory; see `set_memory_bound`.
        `body_store_factory(vhost, queue)`, when given, backs queues declared with a
        flow-to-disk limit (Qpid flow_to_disk, Artemis PAGE), whose bodies past the limit are
        written out one by one and read back on delivery.
        """
        self._spill_factory = spill_factory
        self._body_factory = body_store_factory
        self._head_bound = (head_count, head_bytes)
        for vh in self.vhosts.values():
            for q in vh.queues.values():
                q.queue.set_spill(spill_factory(vh.name, q.name))
                q.queue.set_memory_bound(head_count, head_bytes)
                self._flow_to_disk(vh.name, q.queue)

    @property
    def memory_bound(self) -> tuple[int, int]:
        """The per-queue in-memory head bound in force: (messages, body bytes)."""
        return self._head_bound

    def set_memory_bound(self, head_count: int, head_bytes: int) -> int:
        """Change every queue's in-memory bound (the server tightens it under memory
        pressure); a lower bound pages the excess out at once. Returns messages paged out."""
        self._head_bound = (head_count, head_bytes)
        paged = 0
        for vh in self.vhosts.values():
            for q in vh.queues.values():
                before = q.queue.spilled
                q.queue.set_memory_bound(head_count, head_bytes)
                paged += max(0, q.queue.spilled - before)
        return paged

    def memory_held_bytes(self) -> int:
        """Message body bytes held in memory by all queues (paged bodies excluded); O(queues)."""
        return sum(
            q.queue.counters.memory_bytes for vh in self.vhosts.values() for q in vh.queues.values()
        )

    @property
    def alarms(self) -> dict[str, str]:
        """Resource alarms in force: resource ("memory", "disk") -> reason."""
        return dict(self._alarms)

    def set_alarm(self, resource: str, reason: str | None) -> list[Effect]:
        """Raise (`reason` given) or clear (None) a resource alarm, as RabbitMQ's
        memory/disk alarms: while any alarm is on, a connection that publishes is blocked
        (connection.blocked, reading paused) right after that publish; consumers that do not
        publish keep running. Clearing the last alarm unblocks them (unless an Artemis BLOCK
        address still holds them)."""
        out: list[Effect] = []
        self._out = out
        key = _ALARM_KEYS[resource]
        if reason is not None:
            self._alarms[resource] = reason
            return out
        if self._alarms.pop(resource, None) is None:
            return out
        for conn_id in sorted(self._blocking):
            blocking = self._blocking[conn_id]
            if key in blocking:
                blocking.discard(key)
                if not blocking:
                    del self._blocking[conn_id]
                    out.append(Unblock(conn_id))
        return out

    def _alarm_publish(self, conn_id: int) -> None:
        # A publish while an alarm is on: block this connection (once per alarm).
        blocking = self._blocking.setdefault(conn_id, set())
        was_blocked = bool(blocking)
        reasons = []
        for resource, reason in sorted(self._alarms.items()):
            key = _ALARM_KEYS[resource]
            if key not in blocking:
                blocking.add(key)
                reasons.append(reason)
        if reasons and not was_blocked:
            self._out.append(Block(conn_id, "; ".join(reasons)))

    def _block(self, conn_id: int, q: QueueEntity) -> None:
        # Artemis address-full-policy BLOCK: stop reading from publishers to a full queue.
        blocking = self._blocking.setdefault(conn_id, set())
        if not blocking:
            self._out.append(Block(conn_id, f"queue '{q.name}' in vhost '{q.vhost}' is full"))
        blocking.add(id(q))
        self._blocked_by.setdefault(id(q), (q, set()))[1].add(conn_id)

    def _maybe_unblock(self, q: QueueEntity) -> None:
        if q.deleted or not q.queue.over_limit:
            entry = self._blocked_by.pop(id(q), None)
            if entry is None:
                return
            for conn_id in sorted(entry[1]):
                blocking = self._blocking.get(conn_id)
                if blocking is None:
                    continue
                blocking.discard(id(q))
                if not blocking:
                    del self._blocking[conn_id]
                    self._out.append(Unblock(conn_id))

    @staticmethod
    def _sender_selected(
        vh: VHost, x: Exchange, msg: Message, queues: tuple[QueueEntity, ...]
    ) -> tuple[tuple[QueueEntity, ...], Message]:
        """RabbitMQ sender-selected distribution: also route with the keys in the CC and BCC
        headers (lists of strings); BCC is removed from the message before delivery."""
        headers = msg.headers or {}
        found = {id(q): q for q in queues}
        for name in ("CC", "BCC"):
            keys = headers.get(name)
            if not isinstance(keys, list):
                continue
            for key in keys:
                k = _as_str(key)
                if k is not None:
                    for q in vh.route(x, k, headers):
                        found.setdefault(id(q), q)
        if "BCC" in headers:
            props = decode_properties(msg.properties_bin)
            stripped = {k: v for k, v in headers.items() if k != "BCC"}
            props.headers = stripped
            msg = Message(
                msg.exchange,
                msg.routing_key,
                encode_properties(props),
                msg.body,
                headers=stripped,
                priority=msg.priority,
                expiration_ms=msg.expiration_ms,
                persistent=msg.persistent,
                message_id=msg.message_id,
                timestamp_ms=msg.timestamp_ms,
            )
        return tuple(found.values()), msg

    def _deliver_reply(self, routing_key: str, msg: Message) -> bool:
        entry = self._reply_sessions.get(routing_key[len(_REPLY_TO_PREFIX) :])
        if entry is None:
            return False
        session, tag = entry
        self._out.append(
            SendContent(
                session.conn_id,
                session.channel,
                spec.BasicDeliver(
                    consumer_tag=tag,
                    delivery_tag=session.next_untracked_tag(),
                    redelivered=False,
                    exchange=msg.exchange,
                    routing_key=routing_key,
                ),
                msg,
            )
        )
        self.stats["delivered"] += 1
        return True

    def _send_confirms(self, s: Session, released: list[int], nack: int = 0) -> None:
        out = self._out
        if nack:
            out.append(SendMethod(s.conn_id, s.channel, spec.BasicNack(delivery_tag=nack)))
            if s.confirm_floor == nack - 1 and not s.confirm_held:
                s.confirm_floor = nack
            return
        for tag, multiple in s.confirm_acks(released):
            self.stats["confirmed"] += 1
            out.append(
                SendMethod(s.conn_id, s.channel, spec.BasicAck(delivery_tag=tag, multiple=multiple))
            )

    def drain_unconfirmed(self) -> list[tuple[int, int, int]]:
        """Storage hook: (conn_id, channel, publish seq) of confirms held since the last call.

        With `BrokerConfig.delay_persistent_confirms`, a persistent message that reached a
        durable queue is not confirmed at once. The server drains this list after each batch,
        waits for the group-commit fsync covering that batch, then calls `confirm_stored`.
        """
        out, self._unconfirmed = self._unconfirmed, []
        return out

    def confirm_stored(self, conn_id: int, channel: int, seqs: Iterable[int]) -> list[Effect]:
        """Storage hook: the publishes `seqs` of a confirm channel are durable; ack them.

        Only meaningful with `BrokerConfig.delay_persistent_confirms`; unknown seqs are ignored.
        """
        out: list[Effect] = []
        self._out = out
        conn = self.conns.get(conn_id)
        session = conn.sessions.get(channel) if conn is not None else None
        if session is None:
            return out
        released = [q for q in seqs if q in session.confirm_held]
        if released:
            self._send_confirms(session, released)
        return out

    def fail_unconfirmed(self, conn_id: int, channel: int, seqs: Iterable[int]) -> list[Effect]:
        """Storage hook: the store could not make publishes `seqs` durable (write or fsync
        failed); nack them (one basic.nack each) so the publisher may retry. Unknown seqs are
        ignored."""
        out: list[Effect] = []
        self._out = out
        conn = self.conns.get(conn_id)
        s = conn.sessions.get(channel) if conn is not None else None
        if s is None:
            return out
        held = s.confirm_held
        failed = sorted(q for q in seqs if q in held)
        for q in failed:
            held.discard(q)
            out.append(SendMethod(conn_id, channel, spec.BasicNack(delivery_tag=q)))
        if failed:
            self.stats["nacked"] += len(failed)
            s.confirm_floor = (min(held) - 1) if held else s.publish_seq
        return out

    # ================================================================== consuming and settling
    def _basic_get(self, s: Session, m: spec.BasicGet, _c: RawContent | None, now_ms: int) -> None:
        qname = self._queue_name(s, m.queue)
        self._check(s, Access.READ, "queue", qname)
        q = self._get_queue(s, qname)
        q.last_used_ms = now_ms
        if id(q) in self._dirty:
            # Publishes earlier in this read batch wait for `dispatch_pending`; RabbitMQ's queue
            # handles them before this get: their consumers are served and, what nobody took,
            # expired (a TTL 0 message) first.
            self._flush(now_ms)
        d = q.queue.fetch(now_ms, ack_required=not m.no_ack)
        # RabbitMQ drops the expired heads the fetch exposed before it counts what is left
        q.queue.drop_expired(now_ms)
        self._mark(q)
        if d is None:
            q.get_empty += 1
            self._reply(s, spec.BasicGetEmpty())
            return
        if m.no_ack:
            q.get_no_ack += 1
        else:
            q.get += 1
        msg = d.message
        if not m.no_ack and q.durable and self.durability is not None:
            persisted = self.durability.persisted(q)
            if persisted and d.seq in persisted:
                self.durability.delivered(q, d.seq, d.delivery_count)
        tag = s.next_untracked_tag() if m.no_ack else s.track(Unacked(q, d.seq, None))
        self.stats["delivered"] += 1
        self._out.append(
            SendContent(
                s.conn_id,
                s.channel,
                spec.BasicGetOk(
                    delivery_tag=tag,
                    redelivered=d.redelivered,
                    exchange=msg.exchange,
                    routing_key=msg.routing_key,
                    message_count=q.queue.ready_count,
                ),
                msg,
            )
        )

    def _settle_method(
        self, s: Session, tag: int, multiple: bool, kind: SettleKind, now_ms: int
    ) -> None:
        entries = s.take(tag, multiple)
        if s.mode is ChannelMode.TX:
            assert s.tx is not None
            s.tx.settles.append((kind, entries))
            return
        self._settle(entries, kind, now_ms)
        if s.global_prefetch:
            for consumer in s.consumers.values():
                self._mark(consumer.queue)

    def _basic_ack(self, s: Session, m: spec.BasicAck, _c: RawContent | None, now_ms: int) -> None:
        self._settle_method(s, m.delivery_tag, m.multiple, SettleKind.ACK, now_ms)

    def _basic_nack(
        self, s: Session, m: spec.BasicNack, _c: RawContent | None, now_ms: int
    ) -> None:
        kind = SettleKind.REQUEUE if m.requeue else SettleKind.REJECT
        self._settle_method(s, m.delivery_tag, m.multiple, kind, now_ms)

    def _basic_reject(
        self, s: Session, m: spec.BasicReject, _c: RawContent | None, now_ms: int
    ) -> None:
        kind = SettleKind.REQUEUE if m.requeue else SettleKind.REJECT
        self._settle_method(s, m.delivery_tag, False, kind, now_ms)

    def _basic_recover(self, s: Session, m: Any, _c: RawContent | None, now_ms: int) -> None:
        if not m.requeue:
            raise AMQPError(ReplyCode.NOT_IMPLEMENTED, "requeue=false")
        self._settle(s.take_all(), SettleKind.REQUEUE, now_ms)
        if isinstance(m, spec.BasicRecover):
            self._reply(s, spec.BasicRecoverOk())
        for consumer in s.consumers.values():
            self._mark(consumer.queue)

    def _settle(self, entries: list[Unacked], kind: SettleKind, now_ms: int) -> None:
        """Apply ack/requeue/reject to deliveries, grouped per queue, in delivery order."""
        if not entries:
            return
        groups: dict[int, tuple[QueueEntity, list[SeqId]]] = {}
        for e in entries:
            q = e.queue
            if e.browse or q.deleted:
                if e.consumer is not None:
                    self._mark(q)
                continue
            g = groups.get(id(q))
            if g is None:
                groups[id(q)] = (q, [e.seq])
            else:
                g[1].append(e.seq)
        for q, seqs in groups.values():
            engine = q.queue
            match kind:
                case SettleKind.ACK:
                    self.ack_seqs(q, seqs)
                case SettleKind.REQUEUE:
                    engine.requeue(seqs, now_ms)
                case SettleKind.REJECT:
                    engine.reject(seqs, now_ms)
            self._dirty[id(q)] = q

    def ack_seqs(self, q: QueueEntity, seqs: list[SeqId]) -> None:
        """Delete delivered-unacked messages of `q` and journal the persisted ones' ACKs.

        The one ack path: AMQP basic.ack and the streams API's settle both end here; the
        ACK records reach the OS at the end of the batch and are durable after the next
        group fsync (server/commit.py).
        """
        q.queue.ack(seqs)
        if q.durable and self.durability is not None:
            self.durability.acked(q, seqs)

    # ================================================================== confirm and tx
    def _confirm_select(
        self, s: Session, m: spec.ConfirmSelect, _c: RawContent | None, now_ms: int
    ) -> None:
        if s.mode is ChannelMode.TX:
            raise AMQPError(ReplyCode.PRECONDITION_FAILED, "cannot switch from tx to confirm mode")
        s.mode = ChannelMode.CONFIRM
        if not m.no_wait:
            self._reply(s, spec.ConfirmSelectOk())

    def _tx_select(self, s: Session, m: spec.TxSelect, _c: RawContent | None, now_ms: int) -> None:
        if s.mode is ChannelMode.CONFIRM:
            raise AMQPError(ReplyCode.PRECONDITION_FAILED, "cannot switch from confirm to tx mode")
        if s.tx is None:
            s.tx = TxState()
        s.mode = ChannelMode.TX
        self._reply(s, spec.TxSelectOk())

    def _require_tx(self, s: Session) -> TxState:
        if s.mode is not ChannelMode.TX or s.tx is None:
            raise AMQPError(ReplyCode.PRECONDITION_FAILED, "channel is not transactional")
        return s.tx

    def _tx_commit(self, s: Session, m: spec.TxCommit, _c: RawContent | None, now_ms: int) -> None:
        tx = self._require_tx(s)
        vh = self._vhost(s)
        # 1. Route everything first and check reject-type limits for the whole batch.
        routed: list[tuple[TxPublish, Exchange]] = []
        adds: dict[int, tuple[QueueEntity, int, int]] = {}
        for p in tx.publishes:
            x = vh.exchanges.get(p.exchange)
            if x is None:
                raise AMQPError(
                    ReplyCode.NOT_FOUND, f"no exchange '{p.exchange}' in vhost '{vh.name}'"
                )
            routed.append((p, x))
            if x.type is ExchangeType.DELAYED:
                continue
            for q in vh.route(x, p.routing_key, p.message.headers):
                _, n, nbytes = adds.get(id(q), (q, 0, 0))
                adds[id(q)] = (q, n + 1, nbytes + p.message.size)
        for q, n, nbytes in adds.values():
            reason = q.queue.would_refuse(n, nbytes)
            if reason is not None:
                raise AMQPError(
                    ReplyCode.PRECONDITION_FAILED,
                    f"tx.commit refused: queue '{q.name}' in vhost '{vh.name}' {reason}; "
                    "nothing was committed",
                )
        # 2. Apply settles in order, then publishes in order.
        settles, tx.settles = tx.settles, []
        tx.publishes = []
        dur = self.durability
        if dur is not None:
            failure = getattr(dur.store, "failure", None)
            if failure is not None:  # a disk write failed: commit-ok could not mean durable
                raise AMQPError(
                    ReplyCode.PRECONDITION_FAILED,
                    f"tx.commit refused: the message store cannot write to disk ({failure}); "
                    "nothing was committed",
                )
            dur.store.tx_begin()  # replayed whole or not at all
        for kind, entries in settles:
            self._settle(entries, kind, now_ms)
        for p, x in routed:
            self._route_publish(vh, x, p.message, p.mandatory, s, now_ms)
        if dur is not None:
            dur.store.tx_commit()
            try:
                dur.store.sync()  # commit-ok means durable (AMQP tx semantics)
            except OSError as exc:
                raise AMQPError(
                    ReplyCode.PRECONDITION_FAILED,
                    f"tx.commit failed: the message store could not write to disk ({exc}); "
                    "the transaction may be partly applied and is not durable",
                ) from exc
        for consumer in s.consumers.values():
            self._mark(consumer.queue)
        self._reply(s, spec.TxCommitOk())

    def _tx_rollback(
        self, s: Session, m: spec.TxRollback, _c: RawContent | None, now_ms: int
    ) -> None:
        tx = self._require_tx(s)
        entries: list[Unacked] = []
        for _kind, settled in tx.settles:
            entries.extend(settled)
        tx.settles = []
        tx.publishes = []
        entries.extend(s.take_all())
        entries.sort(key=lambda e: e.tag)
        # Every delivered-unacked message returns to its queue's head in consumption order.
        self._settle(entries, SettleKind.REQUEUE, now_ms)
        for consumer in s.consumers.values():
            self._mark(consumer.queue)
        self._reply(s, spec.TxRollbackOk())

    # ================================================================== dispatch
    def _mark(self, q: QueueEntity) -> None:
        if not q.deleted:
            self._dirty[id(q)] = q

    def _flush(self, now_ms: int) -> None:
        """Dispatch and drain dead letters of dirty queues until nothing changes (bounded)."""
        dirty = self._dirty
        rounds = 0
        while dirty and rounds < 10_000:
            rounds += 1
            _, q = dirty.popitem()
            if q.deleted:
                continue
            st = q.settings
            if st.message_ttl_ms is not None or st.expires_ms is not None:
                self._timed[id(q)] = q
            if q.consumers.all:
                if st.non_destructive:
                    self._dispatch_browse(q, now_ms)
                else:
                    self._dispatch(q, now_ms)
            # What no consumer took at once and has reached its expiry leaves now, as RabbitMQ
            # drops expired heads after an enqueue (a TTL 0 message never waits for the timer).
            q.queue.drop_expired(now_ms)
            if st.dead_letter_exchange is not None:  # the engine dead-letters only with a DLX
                self._drain_dead_letters(q, now_ms)
            if self._blocked_by and id(q) in self._blocked_by:
                self._maybe_unblock(q)

    def _dispatch(self, q: QueueEntity, now_ms: int) -> None:
        # Hot path: locals only; one fetch + one tracked delivery + one effect per message.
        engine = q.queue
        consumers = q.consumers
        pick = consumers.pick
        fetch = engine.fetch
        append = self._out.append
        budget = DISPATCH_BATCH
        no_ack_count = 0
        dur = self.durability
        persisted = dur.persisted(q) if dur is not None else None
        counters = engine.counters  # ready_count = ready + paged, without the property call
        while counters.ready or counters.paged:
            if not budget:
                self._backlog[id(q)] = q
                break
            c = pick()
            if c is None:
                break
            no_ack = c.no_ack
            d = fetch(now_ms, not no_ack)
            if d is None:
                break
            s = c.session
            if no_ack:
                tag = s.next_tag
                s.next_tag = tag + 1
                no_ack_count += 1
            else:
                tag = s.track(Unacked(q, d.seq, c))
                if persisted and d.seq in persisted:
                    assert dur is not None
                    dur.delivered(q, d.seq, d.delivery_count)
            append(Deliver(s.conn_id, s.channel, c.tag, tag, d.redelivered, d.message))
            budget -= 1
        delivered = DISPATCH_BATCH - budget
        if delivered:
            self.stats["delivered"] += delivered
            q.deliver += delivered - no_ack_count
            q.deliver_no_ack += no_ack_count

    def _dispatch_browse(self, q: QueueEntity, now_ms: int) -> None:
        # Non-destructive queues: every consumer reads the whole queue through its own cursor.
        engine = q.queue
        out = self._out
        budget = DISPATCH_BATCH
        for c in list(q.consumers.all):
            s = c.session
            # What `has_capacity` allows, counted once: each tracked delivery below raises the
            # consumer's and the channel's unacked count by one, as a check per message would.
            want = budget if c.has_capacity() else 0
            if want and not c.no_ack:
                if c.prefetch:
                    want = min(want, c.prefetch - c.unacked)
                if s.global_prefetch:
                    want = min(want, s.global_prefetch - s.global_unacked)
            if want <= 0:
                continue
            for d in engine.browse_many(c.cursor, want, now_ms):
                c.cursor = d.seq
                if c.no_ack:
                    tag = s.next_untracked_tag()
                else:
                    tag = s.track(Unacked(q, d.seq, c, browse=True))
                out.append(Deliver(s.conn_id, s.channel, c.tag, tag, d.redelivered, d.message))
                budget -= 1
            if not budget:
                break
        if not budget:
            self._backlog[id(q)] = q

    # ================================================================== dead-lettering
    def _drain_dead_letters(self, q: QueueEntity, now_ms: int) -> None:
        dead = q.queue.drain_dead_letters()
        if not dead:
            return
        vh = self.vhosts.get(q.vhost)
        if vh is None:
            return
        for item in dead:
            dlx = vh.exchanges.get(item.exchange)
            if dlx is None:
                continue
            self._dead_letter(vh, dlx, item, now_ms)

    def _dead_letter(self, vh: VHost, dlx: Exchange, dead: DeadLetter, now_ms: int) -> None:
        """Route one dead letter to its DLX with RabbitMQ's `x-death` bookkeeping."""
        msg = dead.message
        reason = str(dead.reason)
        qname = dead.queue
        props = decode_properties(msg.properties_bin)
        headers = dict(props.headers or {})
        routing_keys = [msg.routing_key]
        cc = headers.get("CC")
        if isinstance(cc, list):
            routing_keys.extend(str(k) for k in cc)
        deaths = [d for d in headers.get("x-death", []) if isinstance(d, dict)]
        rejected_in_history = any(_as_str(d.get("reason")) == "rejected" for d in deaths)
        entry: dict[str, Any] | None = None
        for d in deaths:
            if _as_str(d.get("queue")) == qname and _as_str(d.get("reason")) == reason:
                entry = d
                break
        if entry is not None:
            deaths.remove(entry)
            entry = dict(entry)
            entry["count"] = int(entry.get("count", 0)) + 1
            entry["time"] = datetime.fromtimestamp(now_ms // 1000, UTC)
        else:
            entry = {
                "count": 1,
                "reason": reason,
                "queue": qname,
                "time": datetime.fromtimestamp(now_ms // 1000, UTC),
                "exchange": msg.exchange,
                "routing-keys": routing_keys,
            }
            if props.expiration is not None:
                entry["original-expiration"] = props.expiration
        deaths.insert(0, entry)
        headers["x-death"] = deaths
        headers.setdefault("x-first-death-reason", reason)
        headers.setdefault("x-first-death-queue", qname)
        headers.setdefault("x-first-death-exchange", msg.exchange)
        headers["x-last-death-reason"] = reason
        headers["x-last-death-queue"] = qname
        headers["x-last-death-exchange"] = msg.exchange
        props.headers = headers
        props.expiration = None
        rk = dead.routing_key if dead.routing_key is not None else msg.routing_key
        new = Message(
            dlx.name,
            rk,
            encode_properties(props),
            msg.body,
            headers=headers,
            priority=msg.priority,
            expiration_ms=None,
            persistent=msg.persistent,
            message_id=msg.message_id,
            timestamp_ms=now_ms,
        )
        targets = vh.route(dlx, rk, headers) if dlx.type is not ExchangeType.DELAYED else ()
        self.stats["dead_lettered"] += 1
        for target in targets:
            # RabbitMQ drops a dead letter that would cycle back to a queue it already died
            # in, unless a client rejection is part of the cycle.
            if (
                not rejected_in_history
                and reason != "rejected"
                and any(_as_str(d.get("queue")) == target.name for d in deaths)
            ):
                continue
            if not target.deleted:
                outcome = target.queue.publish(new, now_ms)
                if outcome is PublishOutcome.SCHEDULED:
                    self._timed[id(target)] = target
                if new.persistent and target.durable and self.durability is not None:
                    self.durability.published(target, new, outcome, now_ms)
                self._dirty[id(target)] = target

    # ================================================================== timers
    def _track_timers(self, q: QueueEntity) -> None:
        """Remember a queue that may have timer work (TTL, x-expires, scheduled messages)."""
        self._timed[id(q)] = q

    def settings_changed(self, q: QueueEntity, now_ms: int) -> list[Effect]:
        """Call after changing `q.settings` (and `q.queue.update_settings`) from outside."""
        return self.queue_changed(q, now_ms)

    def queue_changed(self, q: QueueEntity, now_ms: int) -> list[Effect]:
        """Call after changing a queue outside the AMQP path: its settings, or messages put
        back by a lease (Spark streams) or an admin call.

        Registers the queue's timers (TTL, x-expires) and dispatches what became deliverable.
        """
        out: list[Effect] = []
        self._out = out
        self._now_ms = now_ms
        self._track_timers(q)
        self._mark(q)
        self._flush(now_ms)
        if self._defs_dirty:
            self.definitions_changed(full=False)
        return out

    def tick(self, now_ms: int) -> list[Effect]:
        """Run timers: queue TTLs, `x-expires`, delayed exchanges, and pending dispatch.

        Only queues that ever had timer work (`_timed`) and exchanges holding delayed messages
        are visited, so a broker with many plain queues ticks in O(timed).
        """
        out: list[Effect] = []
        self._out = out
        self._now_ms = now_ms
        if self._backlog:
            for q in self._backlog.values():
                self._mark(q)
            self._backlog.clear()
        for key, q in list(self._timed.items()):
            if q.deleted:
                del self._timed[key]
                continue
            deadline = q.queue.next_deadline_ms()
            if deadline is not None and deadline <= now_ms:
                q.queue.tick(now_ms)
                self._mark(q)
            expires = q.expires_at_ms()
            if expires is not None and expires <= now_ms:
                vh = self.vhosts.get(q.vhost)
                if vh is not None:
                    self._delete_queue(vh, q, now_ms)
        for key, (vh, x) in list(self._holding.items()):
            due = x.next_due_ms()
            if due is None or vh.exchanges.get(x.name) is not x:
                del self._holding[key]
                continue
            if due <= now_ms:
                released = x.take_due(now_ms)
                for _, msg in released:
                    self._route_publish(vh, x, _undelayed(msg), False, None, now_ms)
                if self.durability is not None:
                    self.durability.released(vh.name, x, [n for n, _ in released])
        self._flush(now_ms)
        if self._defs_dirty:
            self.definitions_changed(full=False)
        return out

    def next_deadline_ms(self) -> int | None:
        """Earliest time `tick` has work (an immediate time when dispatch is pending)."""
        if self._backlog or self._dirty:
            return self._now_ms
        best: int | None = None
        for q in self._timed.values():
            for t in (q.queue.next_deadline_ms(), q.expires_at_ms()):
                if t is not None and (best is None or t < best):
                    best = t
        for _vh, x in self._holding.values():
            t = x.next_due_ms()
            if t is not None and (best is None or t < best):
                best = t
        return best


def _undelayed(msg: Message) -> Message:
    """The message a delayed exchange routes when due: same content, delay consumed."""
    headers = dict(msg.headers or {})
    headers.pop("x-delay", None)
    return Message(
        msg.exchange,
        msg.routing_key,
        msg.properties_bin,
        msg.body,
        headers=headers or None,
        priority=msg.priority,
        expiration_ms=msg.expiration_ms,
        persistent=msg.persistent,
        message_id=msg.message_id,
        timestamp_ms=msg.timestamp_ms,
    )
