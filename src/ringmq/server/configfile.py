"""Configuration files: `load_config` for TOML (ringmq's own schema) and Artemis `broker.xml`.

Theory of operation: `load_config(path)` reads one file into a `FileConfig` (the records of
`configspec.py`), a tree of plain frozen dataclasses that knows nothing about the core. An `.xml`
file, or one starting with `<`, goes to the Artemis reader (`brokerxml.py`); anything else is
TOML, read here: the schema documented in docs/configuration.md, where unknown keys are errors
naming their path. This module only parses and validates, so it is testable without a broker;
the names of `configspec.py` and `brokerxml.py` stay importable from here. The typed table
reader is `configtable.Table`; sections with a module of their own: `[auth]`
(`authconfig.py`) and `[cluster]` (`clusterconfig.py`).
"""

from __future__ import annotations

import tomllib
from pathlib import Path
from typing import Final

from ringmq.core.config import DEFAULT_CONSUMER_TIMEOUT_MS
from ringmq.core.streamspec import ConfirmRule
from ringmq.server.authconfig import parse_auth
from ringmq.server.brokerxml import parse_artemis_xml
from ringmq.server.clusterconfig import parse_cluster
from ringmq.server.configspec import (
    ARG_LAST_VALUE,
    ARG_LAST_VALUE_KEY,
    ARG_NON_DESTRUCTIVE,
    ARG_RING_SIZE,
    ARG_SINGLE_ACTIVE,
    DEFAULT_AMQPS_PORT,
    DEFAULT_CHANNEL_MAX,
    DEFAULT_FRAME_MAX,
    DEFAULT_HEARTBEAT_S,
    DEFAULT_MAX_MESSAGE_SIZE,
    DEFAULT_REFRESH_PERIOD_MS,
    DEFAULT_STREAM_FRAME_MAX,
    FULL_POLICIES,
    MAX_PORT,
    OFF_WORDS,
    AddressSetting,
    AnonymousLoginSpec,
    AuthSpec,
    BindingSpec,
    CertLoginSpec,
    ConfigError,
    ExchangeSpec,
    FileConfig,
    LimitsSpec,
    ListenSpec,
    ManagementSpec,
    PermissionSpec,
    PolicySpec,
    ProxySpec,
    QueueSpec,
    TLSSpec,
    UserSpec,
    artemis_match,
    parse_port,
    queue_arguments,
    resolve_address_settings,
)
from ringmq.server.configtable import Table, table, tables

__all__ = [
    "ARG_LAST_VALUE",
    "ARG_LAST_VALUE_KEY",
    "ARG_NON_DESTRUCTIVE",
    "ARG_RING_SIZE",
    "ARG_SINGLE_ACTIVE",
    "DEFAULT_AMQPS_PORT",
    "DEFAULT_CHANNEL_MAX",
    "DEFAULT_FRAME_MAX",
    "DEFAULT_HEARTBEAT_S",
    "DEFAULT_MAX_MESSAGE_SIZE",
    "DEFAULT_REFRESH_PERIOD_MS",
    "DEFAULT_STREAM_FRAME_MAX",
    "MAX_PORT",
    "OFF_WORDS",
    "AddressSetting",
    "AnonymousLoginSpec",
    "AuthSpec",
    "BindingSpec",
    "CertLoginSpec",
    "ConfigError",
    "ExchangeSpec",
    "FileConfig",
    "LimitsSpec",
    "ListenSpec",
    "ManagementSpec",
    "PermissionSpec",
    "PolicySpec",
    "QueueSpec",
    "TLSSpec",
    "UserSpec",
    "artemis_match",
    "load_config",
    "parse_artemis_xml",
    "parse_port",
    "parse_toml",
    "queue_arguments",
    "resolve_address_settings",
]


def _port_or_off(t: Table, key: str) -> int | None:
    value = t.value(key, (int, str), 'a port number or "off"')
    if value is None:
        return None
    if isinstance(value, int) and not -1 <= value <= MAX_PORT:
        bound = f"<= {MAX_PORT}" if value > MAX_PORT else ">= -1"
        raise ConfigError(f"{t.where}.{key}: must be {bound}, got {value}")
    try:
        return parse_port(str(value))
    except ValueError:
        raise ConfigError(
            f'{t.where}.{key}: expected a port number or "off", got {value!r}'
        ) from None


def load_config(path: str | Path) -> FileConfig:
    """Read a TOML or Artemis XML configuration file.

    Raises:
        ConfigError: the file is missing, malformed or has unknown/ill-typed keys.
    """
    p = Path(path)
    try:
        data = p.read_bytes()
    except OSError as exc:
        raise ConfigError(f"{p}: cannot read: {exc.strerror}") from exc
    head = data.lstrip()[:1]
    if p.suffix.lower() == ".xml" or head == b"<":
        return parse_artemis_xml(data, source=p)
    return parse_toml(data.decode("utf-8"), source=p)


_TOP_KEYS: Final = frozenset(
    {
        "server",
        "limits",
        "tls",
        "amqp10",
        "auth",
        "management",
        "cluster",
        "users",
        "vhosts",
        "permissions",
        "policies",
        "address_settings",
        "exchanges",
        "queues",
        "bindings",
    }
)


def parse_toml(text: str, *, source: Path | None = None) -> FileConfig:
    """Parse ringmq's TOML configuration (schema in docs/configuration.md)."""
    where = str(source) if source else "<toml>"
    try:
        doc = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{where}: {exc}") from exc
    unknown = sorted(set(doc) - _TOP_KEYS)
    if unknown:
        raise ConfigError(f"{where}: unknown section(s) {', '.join(map(repr, unknown))}")

    listen = ListenSpec()
    refresh: int | None = None
    stream_confirm = ConfirmRule.FSYNCED
    if (t := table(doc, "server", where)) is not None:
        data_dir = t.opt_str("data_dir")
        listen = ListenSpec(
            host=t.opt_str("host"),
            amqp_port=_port_or_off(t, "amqp_port"),
            http_port=_port_or_off(t, "http_port"),
            stomp_port=_port_or_off(t, "stomp_port"),
            mqtt_port=_port_or_off(t, "mqtt_port"),
            stream_port=_port_or_off(t, "stream_port"),
            web_stomp_port=_port_or_off(t, "web_stomp_port"),
            web_mqtt_port=_port_or_off(t, "web_mqtt_port"),
            web_amqp_port=_port_or_off(t, "web_amqp_port"),
            shard_link_port=_port_or_off(t, "shard_link_port"),
            shard_link_secret=t.opt_str("shard_link_secret"),
            shard_index=t.opt_int("shard_index"),
            data_dir=Path(data_dir) if data_dir else None,
            amqp_bind=t.opt_str("amqp_bind"),
            amqps_bind=t.opt_str("amqps_bind"),
            http_bind=t.opt_str("http_bind"),
        )
        refresh = t.opt_int("config_refresh_period_ms", minimum=1)
        rule = t.opt_str("stream_confirm")
        if rule is not None:
            try:
                stream_confirm = parse_stream_confirm(rule)
            except ValueError as exc:
                raise ConfigError(f"{t.where}.stream_confirm: {exc}") from None
        t.done()

    limits = LimitsSpec()
    if (t := table(doc, "limits", where)) is not None:
        limits = LimitsSpec(
            max_message_size=_req(
                t.opt_int("max_message_size", DEFAULT_MAX_MESSAGE_SIZE, minimum=1)
            ),
            heartbeat_s=_req(t.opt_int("heartbeat_s", DEFAULT_HEARTBEAT_S)),
            frame_max=_req(t.opt_int("frame_max", DEFAULT_FRAME_MAX, minimum=4096)),
            stream_frame_max=_req(
                t.opt_int("stream_frame_max", DEFAULT_STREAM_FRAME_MAX, minimum=4096)
            ),
            channel_max=_req(t.opt_int("channel_max", DEFAULT_CHANNEL_MAX)),
            max_connections=t.opt_int("max_connections", minimum=1),
            handshake_timeout_ms=_req(t.opt_int("handshake_timeout_ms", 10_000, minimum=1)),
            consumer_timeout_ms=t.opt_int("consumer_timeout_ms", DEFAULT_CONSUMER_TIMEOUT_MS)
            or None,
        )
        t.done()

    tls: TLSSpec | None = None
    if (t := table(doc, "tls", where)) is not None:
        ca = t.opt_str("ca_file")
        tls = TLSSpec(
            cert_file=Path(t.req_str("cert_file")),
            key_file=Path(t.req_str("key_file")),
            ca_file=Path(ca) if ca else None,
            port=_req(t.opt_int("port", DEFAULT_AMQPS_PORT, maximum=MAX_PORT)),
            verify_peer=bool(t.opt_bool("verify_peer", False)),
            https=bool(t.opt_bool("https", False)),
            stomp_port=t.opt_int("stomp_port", maximum=MAX_PORT),
            mqtt_port=t.opt_int("mqtt_port", maximum=MAX_PORT),
            stream_port=t.opt_int("stream_port", maximum=MAX_PORT),
            web_stomp_port=t.opt_int("web_stomp_port", maximum=MAX_PORT),
            web_mqtt_port=t.opt_int("web_mqtt_port", maximum=MAX_PORT),
            web_amqp_port=t.opt_int("web_amqp_port", maximum=MAX_PORT),
        )
        t.done()

    anonymous = AnonymousLoginSpec()
    anonymous_keys = ("anonymous_login_user", "anonymous_login_pass")
    auth = table(doc, "auth", where)
    amqp10 = table(doc, "amqp10", where)
    if auth is not None and amqp10 is not None and any(k in auth for k in anonymous_keys):
        raise ConfigError(
            f"{where}: [auth] and [amqp10] both set the anonymous login: keep [auth] "
            "(anonymous_login_user, anonymous_login_pass)"
        )
    auth_spec = AuthSpec()
    if auth is not None:
        # one [auth] table: the anonymous login beside the mechanisms and backends
        if any(k in auth for k in anonymous_keys):
            anonymous = _anonymous(auth, anonymous_keys)
        auth_spec = parse_auth(auth)
        auth.done()
    if amqp10 is not None:  # the older spelling of the same setting
        anonymous = _anonymous(amqp10, ("anonymous_user", "anonymous_password"))
        amqp10.done()

    # [cluster]: the client-facing keys (server/proxy.py) and, when any of its keys is
    # given, the etcd control plane's (ringmq.cluster): one table, every key checked once
    proxy = ProxySpec()
    cluster = None
    if (t := table(doc, "cluster", where)) is not None:
        proxy, cluster = parse_cluster(t)
        t.done()

    management = ManagementSpec()
    if (t := table(doc, "management", where)) is not None:
        management = _management(t, auth_spec)
        t.done()

    users = []
    for t in tables(doc, "users", where):
        u = UserSpec(
            name=t.req_str("name"),
            password=t.opt_str("password"),
            password_hash=t.opt_str("password_hash"),
            tags=t.str_list("tags"),
        )
        if (u.password is None) == (u.password_hash is None):
            raise ConfigError(f"{t.where}: give exactly one of 'password' and 'password_hash'")
        t.done()
        users.append(u)

    vhosts = []
    for t in tables(doc, "vhosts", where):
        vhosts.append(t.req_str("name"))
        t.done()

    perms = []
    for t in tables(doc, "permissions", where):
        perms.append(
            PermissionSpec(
                user=t.req_str("user"),
                vhost=t.opt_str("vhost", "/") or "/",
                configure=t.opt_str("configure", ".*") or "",
                write=t.opt_str("write", ".*") or "",
                read=t.opt_str("read", ".*") or "",
            )
        )
        t.done()

    policies = []
    for t in tables(doc, "policies", where):
        apply_to = t.opt_str("apply_to", "all") or "all"
        if apply_to not in {"all", "queues", "exchanges", "classic_queues"}:
            raise ConfigError(f"{t.where}.apply_to: unknown value {apply_to!r}")
        policies.append(
            PolicySpec(
                name=t.req_str("name"),
                pattern=t.req_str("pattern"),
                definition=t.table("definition"),
                vhost=t.opt_str("vhost", "/") or "/",
                apply_to=apply_to,
                priority=_req(t.opt_int("priority", 0, minimum=-(2**31))),
            )
        )
        t.done()

    settings = []
    for t in tables(doc, "address_settings", where):
        full = t.opt_str("address_full_policy")
        if full is not None and full.upper() not in FULL_POLICIES:
            raise ConfigError(f"{t.where}.address_full_policy: unknown value {full!r}")
        settings.append(
            AddressSetting(
                match=t.req_str("match"),
                default_ring_size=t.opt_int("default_ring_size", minimum=-1),
                default_last_value_key=t.opt_str("default_last_value_key"),
                default_last_value_queue=t.opt_bool("default_last_value_queue"),
                default_non_destructive=t.opt_bool("default_non_destructive"),
                default_exclusive_queue=t.opt_bool("default_exclusive_queue"),
                default_group_buckets=t.opt_int("default_group_buckets", minimum=-1),
                default_group_rebalance=t.opt_bool("default_group_rebalance"),
                default_group_first_key=t.opt_str("default_group_first_key"),
                address_full_policy=full.upper() if full else None,
                max_size_bytes=t.opt_int("max_size_bytes", minimum=-1),
                max_size_messages=t.opt_int("max_size_messages", minimum=-1),
                dead_letter_address=t.opt_str("dead_letter_address"),
                auto_create_dead_letter_resources=t.opt_bool("auto_create_dead_letter_resources"),
                dead_letter_queue_prefix=t.opt_str("dead_letter_queue_prefix"),
                dead_letter_queue_suffix=t.opt_str("dead_letter_queue_suffix"),
                expiry_address=t.opt_str("expiry_address"),
                auto_create_expiry_resources=t.opt_bool("auto_create_expiry_resources"),
                expiry_queue_prefix=t.opt_str("expiry_queue_prefix"),
                expiry_queue_suffix=t.opt_str("expiry_queue_suffix"),
                expiry_delay_ms=t.opt_int("expiry_delay_ms", minimum=-1),
                max_delivery_attempts=t.opt_int("max_delivery_attempts", minimum=-1),
                redelivery_delay_ms=t.opt_int("redelivery_delay_ms"),
                redelivery_delay_multiplier=t.opt_float("redelivery_delay_multiplier"),
                max_redelivery_delay_ms=t.opt_int("max_redelivery_delay_ms"),
                auto_create_queues=t.opt_bool("auto_create_queues"),
                auto_create_addresses=t.opt_bool("auto_create_addresses"),
                auto_delete_queues=t.opt_bool("auto_delete_queues"),
                auto_delete_addresses=t.opt_bool("auto_delete_addresses"),
                auto_delete_queues_delay_ms=t.opt_int("auto_delete_queues_delay_ms"),
                auto_delete_queues_message_count=t.opt_int(
                    "auto_delete_queues_message_count", minimum=-1
                ),
                default_address_routing_type=t.opt_str("default_address_routing_type"),
                default_queue_routing_type=t.opt_str("default_queue_routing_type"),
            )
        )
        t.done()

    exchanges = []
    for t in tables(doc, "exchanges", where):
        exchanges.append(
            ExchangeSpec(
                name=t.req_str("name"),
                type=t.opt_str("type", "direct") or "direct",
                vhost=t.opt_str("vhost", "/") or "/",
                durable=bool(t.opt_bool("durable", True)),
                auto_delete=bool(t.opt_bool("auto_delete", False)),
                internal=bool(t.opt_bool("internal", False)),
                arguments=t.table("arguments"),
            )
        )
        t.done()

    queues = []
    for t in tables(doc, "queues", where):
        queues.append(
            QueueSpec(
                name=t.req_str("name"),
                vhost=t.opt_str("vhost", "/") or "/",
                durable=bool(t.opt_bool("durable", True)),
                exclusive=False,
                auto_delete=bool(t.opt_bool("auto_delete", False)),
                arguments=t.table("arguments"),
            )
        )
        t.done()

    bindings = []
    for t in tables(doc, "bindings", where):
        dtype = t.opt_str("destination_type", "queue") or "queue"
        if dtype not in {"queue", "exchange"}:
            raise ConfigError(f"{t.where}.destination_type: must be 'queue' or 'exchange'")
        bindings.append(
            BindingSpec(
                source=t.req_str("source"),
                destination=t.req_str("destination"),
                vhost=t.opt_str("vhost", "/") or "/",
                destination_type=dtype,
                routing_key=t.opt_str("routing_key", "") or "",
                arguments=t.table("arguments"),
            )
        )
        t.done()

    return FileConfig(
        source=source,
        kind="toml",
        listen=listen,
        limits=limits,
        tls=tls,
        anonymous_login=anonymous,
        management=management,
        cluster=cluster,
        auth=auth_spec,
        users=tuple(users),
        vhosts=tuple(vhosts),
        permissions=tuple(perms),
        policies=tuple(policies),
        address_settings=tuple(settings),
        exchanges=tuple(exchanges),
        queues=tuple(queues),
        bindings=tuple(bindings),
        proxy=proxy,
        refresh_period_ms=refresh,
        stream_confirm=stream_confirm,
    )


def parse_stream_confirm(text: str) -> ConfirmRule:
    """A stream confirm rule from the file or the command line: `fsynced` or `written`."""
    try:
        return ConfirmRule(text.strip().lower())
    except ValueError:
        rules = " or ".join(repr(r.value) for r in ConfirmRule)
        raise ValueError(f"unknown stream confirm rule {text!r} ({rules})") from None


def _anonymous(t: Table, keys: tuple[str, str]) -> AnonymousLoginSpec:
    # the user: a user name, or "off"/"none"/false (no anonymous logins)
    user = t.value(keys[0], (str, bool), 'a user name or "off"')
    return AnonymousLoginSpec.of(user, t.opt_str(keys[1]), t.where, keys)


def _management(t: Table, auth: AuthSpec) -> ManagementSpec:
    # RabbitMQ's keys verbatim: `management.http.max_body_size = N` is valid TOML at the top of
    # the file, as is `[management.http]` with `max_body_size = N`; the console's OAuth login
    # keys (`management.oauth_*`) sit in [management] itself
    max_body_size = None
    raw = t.value("http", (dict,), "a table")
    if raw is not None:
        http = Table(dict(raw), f"{t.where}.http")
        max_body_size = http.opt_int("max_body_size", minimum=1)
        http.done()
    enabled = bool(t.opt_bool("oauth_enabled", False))
    client_id = t.opt_str("oauth_client_id")
    provider = t.opt_str("oauth_provider_url")
    scopes = t.opt_str("oauth_scopes", "openid profile")
    assert scopes is not None
    if enabled:
        # the console's token is checked by the oauth2 backend, as every other token
        if auth.oauth2 is None or "oauth2" not in auth.backends:
            raise ConfigError(f"{t.where}.oauth_enabled: needs the oauth2 backend ([auth.oauth2])")
        if not client_id:
            raise ConfigError(f"{t.where}.oauth_enabled: needs oauth_client_id")
        provider = provider or auth.oauth2.issuer
        if not provider:
            raise ConfigError(
                f"{t.where}.oauth_enabled: needs oauth_provider_url (or auth.oauth2.issuer)"
            )
    return ManagementSpec(
        max_body_size=max_body_size,
        oauth_enabled=enabled,
        oauth_client_id=client_id,
        oauth_provider_url=provider.rstrip("/") if provider else None,
        oauth_scopes=scopes,
    )


def _req(v: int | None) -> int:
    assert v is not None  # every caller passes a default
    return v
