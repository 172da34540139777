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
from typing import TYPE_CHECKING, Any

from ringmq.core.config import BrokerConfig, PermissionConfig, PolicyConfig, UserConfig
from ringmq.server.authconfig import core_cert_login, core_tokens
from ringmq.server.configspec import (
    AddressSetting,
    FileConfig,
    QueueSpec,
    queue_arguments,
)

if TYPE_CHECKING:
    from ringmq.core.broker import Broker

log = logging.getLogger(__name__)

# AddressSetting fields the core's AddressSettings understands (Artemis names)
_CORE_SETTING_FIELDS = {
    "default_ring_size": "default-ring-size",
    "default_last_value_key": "default-last-value-key",
    "default_non_destructive": "default-non-destructive",
    "address_full_policy": "address-full-policy",
    "max_size_bytes": "max-size-bytes",
    "max_size_messages": "max-size-messages",
}


def core_address_settings(settings: tuple[AddressSetting, ...]) -> dict[str, dict[str, Any]]:
    """`match -> {artemis-name: value}` for the core, dropping settings it does not implement.

    Unsupported settings that are set are logged once, so nobody believes they act.
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
            if fname in _CORE_SETTING_FIELDS:
                values[_CORE_SETTING_FIELDS[fname]] = value
            elif fname == "default_last_value_queue" and value:
                values.setdefault("default-last-value-key", "_AMQ_LVQ_NAME")
            else:
                log.warning(
                    "address-setting %r: %s is not supported and is ignored",
                    s.match,
                    fname.replace("_", "-"),
                )
        out[s.match] = values
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
        address_settings=core_address_settings(cfg.address_settings),
        max_message_size=cfg.limits.max_message_size,
        anonymous_login=cfg.anonymous_login.login,
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
    broker.replace_address_settings(core_address_settings(cfg.address_settings), now_ms=now_ms)
    apply_declarations(broker, cfg, now_ms)
