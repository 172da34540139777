"""What the management layer needs from the broker and the server: two narrow ports.

Theory of operation: management/ never reaches into the core's internals. It talks to
`BrokerAdmin` (a synchronous facade over the pure core; every call runs on the broker's own
loop thread, so no locks) and to `Runtime` (the server's live connections and listeners).
Both are `Protocol`s so the HTTP layer, the metrics renderer and the tests depend only on
these names. `ringmq.management.admin` adapts the real `core.Broker` to `BrokerAdmin`.

The records below are plain read-only snapshots taken at call time; the HTTP layer turns them
into RabbitMQ's JSON shapes. Errors: ports raise `AMQPError` (NOT_FOUND -> HTTP 404,
PRECONDITION_FAILED/ACCESS_REFUSED/... -> 400) or `ValueError` (bad input -> 400); a failing
call must leave the broker unchanged.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol, TypeVar

from ringmq.core.auth import Access
from ringmq.core.effects import Effect

_T = TypeVar("_T")

AckMode = Literal["ack_requeue_true", "reject_requeue_true", "ack_requeue_false"]
"""What `/get` does with fetched messages, as RabbitMQ's management API names it."""


@dataclass(slots=True)
class QueueCounters:
    """Monotonic per-queue totals since the queue was declared (or the broker started)."""

    publish: int = 0
    deliver: int = 0
    deliver_no_ack: int = 0
    get: int = 0
    get_no_ack: int = 0
    get_empty: int = 0
    redeliver: int = 0
    ack: int = 0
    ring_evicted: int = 0
    lvq_replaced: int = 0
    overflow_rejected: int = 0
    expired: int = 0
    dead_lettered: dict[str, int] = field(default_factory=dict)
    """Dead-lettered totals by reason: maxlen, expired, rejected, delivery_limit."""


@dataclass(slots=True)
class QueueInfo:
    """A snapshot of one queue's identity, settings and depth."""

    vhost: str
    name: str
    durable: bool = True
    auto_delete: bool = False
    exclusive: bool = False
    arguments: dict[str, Any] = field(default_factory=dict)
    policy: str | None = None
    effective_settings: dict[str, Any] = field(default_factory=dict)
    """What the queue resolved from x-arguments, policies and address-settings."""
    messages_ready: int = 0
    """Messages that can be delivered now, paged ones included (as RabbitMQ counts them)."""
    messages_unacknowledged: int = 0
    messages_scheduled: int = 0
    messages_paged: int = 0
    """The part of `messages_ready` whose bodies are paged to disk."""
    message_bytes_ready: int = 0
    message_bytes_unacknowledged: int = 0
    message_bytes_scheduled: int = 0
    message_bytes_paged: int = 0
    messages_persistent: int = 0
    message_bytes_persistent: int = 0
    consumers: int = 0
    ring_size: int = -1
    """Artemis ring size in force, -1 when the queue is not a ring."""
    head_message_timestamp_ms: int | None = None
    counters: QueueCounters = field(default_factory=QueueCounters)
    exclusive_owner: str | None = None
    state: str = "running"

    @property
    def messages(self) -> int:
        """The seed's messageCount: ready (paged included) + unacknowledged + scheduled."""
        return self.messages_ready + self.messages_unacknowledged + self.messages_scheduled

    @property
    def message_bytes(self) -> int:
        return (
            self.message_bytes_ready
            + self.message_bytes_unacknowledged
            + self.message_bytes_scheduled
        )


@dataclass(slots=True)
class ExchangeInfo:
    vhost: str
    name: str
    type: str
    durable: bool = True
    auto_delete: bool = False
    internal: bool = False
    arguments: dict[str, Any] = field(default_factory=dict)
    publish_in: int = 0
    publish_out: int = 0


@dataclass(slots=True)
class BindingInfo:
    vhost: str
    source: str
    destination: str
    destination_type: Literal["queue", "exchange"]
    routing_key: str
    arguments: dict[str, Any] = field(default_factory=dict)


@dataclass(slots=True)
class PolicyInfo:
    vhost: str
    name: str
    pattern: str
    definition: dict[str, Any]
    priority: int = 0
    apply_to: str = "all"


@dataclass(slots=True)
class UserInfo:
    name: str
    tags: list[str] = field(default_factory=list)
    password_hash: str = ""
    loopback_only: bool = False
    """May log in only from a loopback address (RabbitMQ's `loopback_users`, e.g. guest)."""


@dataclass(slots=True)
class PermissionInfo:
    user: str
    vhost: str
    configure: str = ".*"
    write: str = ".*"
    read: str = ".*"


@dataclass(slots=True)
class FetchedMessage:
    """One message returned by `/get` (fetched, then settled as the ack mode says)."""

    exchange: str
    routing_key: str
    body: bytes
    redelivered: bool
    properties: dict[str, Any]
    message_count: int
    """Messages left ready in the queue after this fetch (basic.get-ok's message-count)."""


@dataclass(slots=True)
class ScheduledInfo:
    """A message waiting for its delivery time."""

    seq: int
    due_ms: int
    routing_key: str
    body: bytes
    properties: dict[str, Any] = field(default_factory=dict)


@dataclass(slots=True)
class ChannelInfo:
    conn_id: int
    number: int
    consumer_count: int = 0
    messages_unacknowledged: int = 0
    prefetch_count: int = 0
    global_prefetch_count: int = 0
    confirm: bool = False
    transactional: bool = False
    state: str = "running"


@dataclass(slots=True)
class ConsumerInfo:
    conn_id: int
    channel: int
    consumer_tag: str
    vhost: str
    queue: str
    ack_required: bool = True
    exclusive: bool = False
    prefetch_count: int = 0
    arguments: dict[str, Any] = field(default_factory=dict)
    active: bool = True


@dataclass(slots=True)
class ConnectionInfo:
    """A live client connection, as the server sees it."""

    conn_id: int
    name: str
    """RabbitMQ style: "127.0.0.1:53210 -> 127.0.0.1:5672"."""
    user: str
    vhost: str
    peer_host: str
    peer_port: int
    host: str
    port: int
    connected_at_ms: int
    state: str = "running"
    """running, blocking (alarm raised, not yet published), blocked, closing."""
    blocked_reason: str | None = None
    channels: int = 0
    client_properties: dict[str, Any] = field(default_factory=dict)
    recv_oct: int = 0
    send_oct: int = 0
    heartbeat_s: int = 0
    frame_max: int = 0
    channel_max: int = 0
    auth_mechanism: str = "PLAIN"


@dataclass(slots=True)
class ListenerInfo:
    protocol: str
    ip_address: str
    port: int


class MessageGet(Protocol):
    """A /get in progress: messages fetched slice by slice are held until `finish`."""

    def fetch(self, count: int, now_ms: int) -> list[FetchedMessage]:
        """Up to `count` more messages (fewer when the queue runs out)."""
        ...

    def finish(self, now_ms: int) -> None:
        """Settle everything fetched as the ack mode says (idempotent)."""
        ...


class BrokerAdmin(Protocol):
    """The synchronous management facade over the core (see module docstring)."""

    # users and vhosts
    def vhosts(self) -> list[str]: ...
    def users(self) -> list[UserInfo]: ...
    def authenticate(self, user: str, password: str) -> UserInfo | None: ...
    def permissions(self) -> list[PermissionInfo]: ...
    def add_vhost(self, name: str) -> bool: ...
    def delete_vhost(self, name: str, *, now_ms: int) -> None: ...
    def add_user(
        self, name: str, *, password: str | None, password_hash: str | None, tags: list[str]
    ) -> None: ...
    def delete_user(self, name: str) -> bool: ...
    def set_permissions(self, permission: PermissionInfo) -> None: ...
    def clear_permissions(self, user: str, vhost: str) -> bool: ...
    def has_vhost_access(self, user: str, vhost: str) -> bool:
        """The user has permissions in `vhost` (AMQP's vhost access check)."""
        ...

    def check_permission(self, user: str, vhost: str, access: Access, kind: str, name: str) -> None:
        """Raise ACCESS_REFUSED unless `user` may `access` the resource (AMQP's check)."""
        ...

    # queues
    def queues(self, vhost: str | None = None) -> list[QueueInfo]: ...
    def queue(self, vhost: str, name: str) -> QueueInfo: ...
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
        ...

    def delete_queue(
        self, vhost: str, name: str, *, if_unused: bool, if_empty: bool, now_ms: int
    ) -> int: ...
    def purge_queue(self, vhost: str, name: str, *, now_ms: int) -> int: ...
    def get_messages(
        self, vhost: str, name: str, *, count: int, ackmode: AckMode, now_ms: int
    ) -> list[FetchedMessage]: ...
    def begin_get(self, vhost: str, name: str, *, ackmode: AckMode) -> MessageGet:
        """A /get taken in slices; raise NOT_FOUND for a missing queue."""
        ...

    def browse_messages(
        self, vhost: str, name: str, *, count: int, now_ms: int
    ) -> list[FetchedMessage]:
        """Up to `count` ready messages from the head without taking them (the console's peek)."""
        ...

    def update_queue(
        self, vhost: str, name: str, settings: dict[str, Any], *, now_ms: int
    ) -> QueueInfo: ...
    def scheduled(self, vhost: str, name: str) -> list[ScheduledInfo]: ...
    def purge_scheduled(self, vhost: str, name: str, *, now_ms: int) -> int: ...
    def deliver_scheduled_now(
        self, vhost: str, name: str, seqs: list[int] | None, *, now_ms: int
    ) -> int: ...

    # exchanges and bindings
    def exchanges(self, vhost: str | None = None) -> list[ExchangeInfo]: ...
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
    ) -> bool: ...
    def delete_exchange(self, vhost: str, name: str, *, if_unused: bool, now_ms: int) -> None: ...
    def publish(
        self,
        vhost: str,
        exchange: str,
        routing_key: str,
        body: bytes,
        properties: dict[str, Any],
        *,
        now_ms: int,
    ) -> bool: ...
    def bindings(self, vhost: str | None = None) -> list[BindingInfo]: ...
    def bind(self, binding: BindingInfo, *, now_ms: int) -> None: ...
    def unbind(self, binding: BindingInfo, *, now_ms: int) -> None: ...

    # policies
    def policies(self, vhost: str | None = None) -> list[PolicyInfo]: ...
    def set_policy(self, policy: PolicyInfo, *, now_ms: int) -> bool: ...
    def clear_policy(self, vhost: str, name: str, *, now_ms: int) -> None: ...

    # sessions
    def channels(self) -> list[ChannelInfo]: ...
    def consumers(self) -> list[ConsumerInfo]: ...


class Runtime(Protocol):
    """What the server tells management about live connections and itself."""

    node: str
    started_at_ms: int

    def connections(self) -> list[ConnectionInfo]: ...
    def close_connection(self, name: str, reason: str) -> bool:
        """Close the named connection with 320 CONNECTION_FORCED; False if unknown."""
        ...

    def listeners(self) -> list[ListenerInfo]: ...
    def run_batch(self, fn: Callable[[], _T]) -> _T:
        """Run a core call made outside a client read; flush the writes it caused."""
        ...

    def apply_effects(self, effects: Iterable[Effect]) -> None:
        """Apply effects the core returned to a management call (deliveries, closes...)."""
        ...
