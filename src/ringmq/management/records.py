"""The management layer's records: plain read-only snapshots of broker state.

`admin.CoreAdmin` (the facade over the core) takes them at call time and returns them; the HTTP
layer (`shapes`) turns them into RabbitMQ's JSON shapes, `definitions` into RabbitMQ's
definitions document, `metrics` into Prometheus text. They hold values only, never an engine
object, so nothing that reads them can change the broker.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

if TYPE_CHECKING:
    from ringmq.core.auth import ExternalGrant

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
    type: str = "classic"
    """`x-queue-type`: "classic", "quorum" or "stream" (then `stream` says where its log stands)."""
    stream: dict[str, int] | None = None
    """A stream queue's log: first and last offsets, next offset, bytes and segments."""
    shard: int = 0
    """The shard the queue was placed on (`x-queue-leader-locator`, core/placement.py)."""

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
    grant: ExternalGrant | None = field(default=None, compare=False, repr=False)
    """For a user a token or LDAP logged in: its grant (a frozen value), which answers this
    request's checks instead of the permission tables."""


@dataclass(slots=True)
class PermissionInfo:
    user: str
    vhost: str
    configure: str = ".*"
    write: str = ".*"
    read: str = ".*"


@dataclass(slots=True)
class TopicPermissionInfo:
    """RabbitMQ's topic permission: `write`/`read` regexes for routing keys on one exchange."""

    user: str
    vhost: str
    exchange: str
    write: str
    read: str


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
