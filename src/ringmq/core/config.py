"""Static broker configuration: users, vhosts, permissions, policies and limits.

`BrokerConfig` is plain data. The broker copies what it needs at start-up; the management API
changes users, vhosts and permissions through `Broker.auth` afterwards, not through this object.
Policies and address settings are kept as raw definitions so this module needs nothing from the
queue engine; the broker turns them into the engine's `PolicyTable` / `AddressSettingsTable`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Final

from ringmq.core.streamspec import ConfirmRule

DEFAULT_MAX_MESSAGE_SIZE: Final = 16 * 1024 * 1024
"""RabbitMQ's default `max_message_size` (16 MiB since 4.0; 128 MiB in 3.8-3.13)."""
DEFAULT_CONSUMER_TIMEOUT_MS: Final = 30 * 60 * 1000
"""RabbitMQ's default `consumer_timeout` (30 minutes)."""

DEFAULT_VHOST: Final = "/"


@dataclass(slots=True)
class UserConfig:
    """A user. Give either `password` (hashed at start-up) or `password_hash`.

    Attributes:
        name: user name.
        password: clear-text password, hashed when the broker starts.
        password_hash: RabbitMQ-style base64 salted SHA-256 hash (see `ringmq.core.auth`).
        tags: management tags such as "administrator" or "monitoring".
    """

    name: str
    password: str | None = None
    password_hash: str | None = None
    tags: tuple[str, ...] = ()


@dataclass(slots=True)
class PermissionConfig:
    """Configure/write/read regular expressions of one user in one vhost (RabbitMQ semantics)."""

    user: str
    vhost: str = DEFAULT_VHOST
    configure: str = ".*"
    write: str = ".*"
    read: str = ".*"


@dataclass(slots=True)
class PolicyConfig:
    """A RabbitMQ-style policy: `pattern` (regex on names), `definition` keys like `max-length`.

    Attributes:
        name: policy name (unique per vhost).
        pattern: regular expression matched against queue/exchange names.
        definition: policy keys (`max-length`, `overflow`, `dead-letter-exchange`,
            `alternate-exchange`, `message-ttl`, `expires`, ...).
        vhost: the vhost it applies to.
        apply_to: "queues", "exchanges" or "all".
        priority: higher wins when several match.
    """

    name: str
    pattern: str
    definition: dict[str, Any]
    vhost: str = DEFAULT_VHOST
    apply_to: str = "all"
    priority: int = 0


@dataclass(slots=True)
class BrokerConfig:
    """Everything the pure core needs to know at start-up.

    Attributes:
        users: users; empty means the single default user below.
        vhosts: vhost names; "/" is always created.
        permissions: per-user per-vhost permissions; the default user gets full access to "/".
        policies: RabbitMQ-style policies.
        address_settings: Artemis-style address settings, `match` pattern -> settings mapping,
            handed to the queue engine's `AddressSettingsTable`.
        max_message_size: largest accepted body in bytes (406 above it).
        consumer_timeout_ms: RabbitMQ's `consumer_timeout`: a delivery unacknowledged this long
            closes its channel (PRECONDITION_FAILED); a queue's `x-consumer-timeout` or policy
            `consumer-timeout` overrides it. None: no timeout.
        id_cache_size: Artemis' `id-cache-size`: `_AMQ_DUPL_ID`s remembered per address.
        persist_id_cache: Artemis' `persist-id-cache`: those ids survive a restart.
        default_user / default_password: created when `users` is empty (guest/guest).
        loopback_users: users that may only log in from a loopback address.
        anonymous_login: the (user, password) an anonymous client logs in as, checked as any
            login (so guest only from loopback): AMQP 1.0 SASL ANONYMOUS or no SASL, MQTT
            without a user name, STOMP without `login` (RabbitMQ 4's `anonymous_login_user`
            and `anonymous_login_pass`); None refuses anonymous logins.
        name_seed: seed of the generator for `amq.gen-*` queue names and `amq.ctag-*` tags
            (deterministic in tests).
        delay_persistent_confirms: when True, confirms of persistent messages routed to durable
            queues are held until `Broker.confirm_stored` is called by the storage layer.
        stream_confirm: when a publish that reaches only stream queues is confirmed, under
            `delay_persistent_confirms`: after the fsync covering it (`FSYNCED`), or once it
            is handed to the OS (`WRITTEN`: held until the server's end-of-batch write-out,
            `Broker.drain_unwritten`), as RabbitMQ's streams do.
    """

    users: list[UserConfig] = field(default_factory=list)
    vhosts: list[str] = field(default_factory=lambda: [DEFAULT_VHOST])
    permissions: list[PermissionConfig] = field(default_factory=list)
    policies: list[PolicyConfig] = field(default_factory=list)
    address_settings: dict[str, dict[str, Any]] = field(default_factory=dict)
    max_message_size: int = DEFAULT_MAX_MESSAGE_SIZE
    consumer_timeout_ms: int | None = DEFAULT_CONSUMER_TIMEOUT_MS
    id_cache_size: int = 20_000
    persist_id_cache: bool = True
    default_user: str = "guest"
    default_password: str = "guest"  # noqa: S105 - RabbitMQ's well-known loopback-only default
    loopback_users: tuple[str, ...] = ("guest",)
    anonymous_login: tuple[str, str] | None = ("guest", "guest")
    name_seed: int | None = None
    delay_persistent_confirms: bool = False
    stream_confirm: ConfirmRule = ConfirmRule.FSYNCED
