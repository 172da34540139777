"""From a parsed `FileConfig` to the core: its `BrokerConfig`, its declarations, its reloads.

Theory of operation: `broker_config` translates the file's users, vhosts, permissions, policies,
address-settings and message-size limit into the core's `BrokerConfig` (plain data). Creating
the `Broker` over its store is the composition root's job (`ringmq.node`). `apply_declarations`
declares the file's exchanges, queues and bindings through the broker's admin API, exactly as a
client's declare would (same validation, same 406 on a mismatching redeclare).
`reload_settings` replaces the address-settings of a running broker and declares what is new
(Artemis' config reload; queues removed from the file stay).

Runs on the loop thread; pure translation apart from the calls into the broker.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any, Final

from ringmq.core import wildcard
from ringmq.core.arguments import ARTEMIS_LEGACY_LVQ_KEY
from ringmq.core.config import BrokerConfig, PermissionConfig, PolicyConfig, UserConfig
from ringmq.core.policies import AddressSettings, PolicyError
from ringmq.server.authconfig import core_cert_login, core_tokens
from ringmq.server.configspec import (
    AddressSetting,
    ConfigError,
    FileConfig,
    QueueSpec,
    queue_arguments,
)

if TYPE_CHECKING:
    from ringmq.core.broker import Broker

log = logging.getLogger(__name__)

# AddressSetting fields -> the core's AddressSettings names (Artemis names): every field of
# AddressSetting is either here, handled below, or refused; none is dropped.
_CORE_SETTING_FIELDS: Final = {
    "default_ring_size": "default-ring-size",
    "default_last_value_key": "default-last-value-key",
    "default_non_destructive": "default-non-destructive",
    "default_exclusive_queue": "default-exclusive-queue",
    "default_group_buckets": "default-group-buckets",
    "default_group_rebalance": "default-group-rebalance",
    "default_group_first_key": "default-group-first-key",
    "address_full_policy": "address-full-policy",
    "max_size_bytes": "max-size-bytes",
    "max_size_messages": "max-size-messages",
    "dead_letter_address": "dead-letter-address",
    "auto_create_dead_letter_resources": "auto-create-dead-letter-resources",
    "dead_letter_queue_prefix": "dead-letter-queue-prefix",
    "dead_letter_queue_suffix": "dead-letter-queue-suffix",
    "expiry_address": "expiry-address",
    "auto_create_expiry_resources": "auto-create-expiry-resources",
    "expiry_queue_prefix": "expiry-queue-prefix",
    "expiry_queue_suffix": "expiry-queue-suffix",
    "max_delivery_attempts": "max-delivery-attempts",
    "redelivery_delay_ms": "redelivery-delay",
    "redelivery_delay_multiplier": "redelivery-delay-multiplier",
    "max_redelivery_delay_ms": "max-redelivery-delay",
    "auto_create_queues": "auto-create-queues",
    "auto_create_addresses": "auto-create-addresses",
    "auto_delete_queues": "auto-delete-queues",
    "auto_delete_addresses": "auto-delete-addresses",
    "default_address_routing_type": "default-address-routing-type",
    "default_queue_routing_type": "default-queue-routing-type",
}

ARTEMIS_MAX_DELIVERY_ATTEMPTS: Final = 10
"""Artemis' default `max-delivery-attempts`, applied to broker.xml configurations."""


def _unsupported(fname: str, value: Any) -> str | None:
    # Why a set field cannot be honoured (refused at start-up), or None when it can.
    match fname:
        case "expiry_delay_ms" if value != -1:
            return "expiry-delay (a default expiration for messages without one) is not supported"
        case "auto_delete_queues_delay_ms" | "auto_delete_queues_message_count":
            return None  # only read with auto-delete-queues, which must be false here
    return None


def core_address_settings(
    settings: tuple[AddressSetting, ...], *, artemis_defaults: bool = False
) -> dict[str, dict[str, Any]]:
    """`match -> {artemis-name: value}` for the core.

    Every set field is passed on or refused: a setting ringmq cannot honour raises
    `ConfigError` naming it (nothing is dropped). With `artemis_defaults` (a broker.xml file),
    Artemis' own defaults that differ from ringmq's are added under `#` as Artemis applies
    them to every address: `max-delivery-attempts` 10.

    Raises:
        ConfigError: an unsupported setting or value, or an invalid combination.
    """
    out: dict[str, dict[str, Any]] = {}
    for s in settings:
        values: dict[str, Any] = {}
        for fname in AddressSetting.__slots__:
            if fname == "match":
                continue
            value = getattr(s, fname)
            if value is None:
                continue
            why = _unsupported(fname, value)
            if why is not None:
                raise ConfigError(f"address-setting {s.match!r}: {why}")
            if fname in _CORE_SETTING_FIELDS:
                values[_CORE_SETTING_FIELDS[fname]] = value
            elif fname == "default_last_value_queue" and value:
                values.setdefault("default-last-value-key", ARTEMIS_LEGACY_LVQ_KEY)
        try:
            AddressSettings.from_dict(values)
        except PolicyError as exc:
            raise ConfigError(f"address-setting {s.match!r}: {exc}") from None
        out[s.match] = values
    if artemis_defaults:
        catch_all = out.setdefault(wildcard.ANY_WORDS, {})
        catch_all.setdefault("max-delivery-attempts", ARTEMIS_MAX_DELIVERY_ATTEMPTS)
    return out


def broker_config(cfg: FileConfig) -> BrokerConfig:
    """The core's start-up configuration from a parsed file."""
    vhosts = ["/"] + [v for v in cfg.vhosts if v != "/"]
    return BrokerConfig(
        users=[
            UserConfig(u.name, password=u.password, password_hash=u.password_hash, tags=u.tags)
            for u in cfg.users
        ],
        vhosts=vhosts,
        permissions=[
            PermissionConfig(p.user, p.vhost, p.configure, p.write, p.read) for p in cfg.permissions
        ],
        policies=[
            PolicyConfig(
                p.name,
                p.pattern,
                dict(p.definition),
                vhost=p.vhost,
                apply_to=p.apply_to,
                priority=p.priority,
            )
            for p in cfg.policies
        ],
        address_settings=core_address_settings(
            cfg.address_settings, artemis_defaults=cfg.kind == "artemis"
        ),
        max_message_size=cfg.limits.max_message_size,
        anonymous_login=cfg.anonymous_login.login,
        consumer_timeout_ms=cfg.limits.consumer_timeout_ms,
        id_cache_size=cfg.id_cache_size,
        persist_id_cache=cfg.persist_id_cache,
        stream_confirm=cfg.stream_confirm,
    )


def apply_auth(broker: Broker, cfg: FileConfig) -> None:
    """Give the broker the file's login settings beside its user table: certificate logins,
    the backends in order and the OAuth 2 token check."""
    broker.auth.cert_login = core_cert_login(cfg.auth)
    broker.auth.backends = cfg.auth.backends
    broker.auth.tokens = core_tokens(cfg.auth)


def _declared_args(q: QueueSpec, cfg: FileConfig) -> dict[str, Any]:
    # The core resolves address-settings by queue name. An Artemis multicast queue lives on an
    # address with another name, so its address' defaults are resolved here and passed as
    # explicit arguments; anycast queues (address == name) are left to the core, so a reload
    # of address-settings still reaches them.
    if q.address is not None and q.address != q.name:
        return queue_arguments(q, cfg.address_settings)
    return dict(q.arguments)


def apply_declarations(broker: Broker, cfg: FileConfig, now_ms: int) -> None:
    """Declare the file's exchanges, queues and bindings (idempotent for unchanged ones)."""
    admin = broker.admin
    for e in cfg.exchanges:
        admin.declare_exchange(
            e.vhost,
            e.name,
            type=e.type,
            durable=e.durable,
            auto_delete=e.auto_delete,
            internal=e.internal,
            arguments=dict(e.arguments),
            now_ms=now_ms,
        )
    for q in cfg.queues:
        admin.declare_queue(
            q.vhost,
            q.name,
            durable=q.durable,
            auto_delete=q.auto_delete,
            arguments=_declared_args(q, cfg),
            now_ms=now_ms,
        )
    for b in cfg.bindings:
        admin.bind(
            b.vhost,
            b.source,
            b.destination,
            destination_type=b.destination_type,
            routing_key=b.routing_key,
            arguments=dict(b.arguments),
            now_ms=now_ms,
        )


def reload_settings(broker: Broker, cfg: FileConfig, now_ms: int) -> None:
    """Replace address-settings with the file's, then declare anything new it lists."""
    broker.replace_address_settings(
        core_address_settings(cfg.address_settings, artemis_defaults=cfg.kind == "artemis"),
        now_ms=now_ms,
    )
    apply_declarations(broker, cfg, now_ms)
