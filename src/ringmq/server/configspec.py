"""The configuration file's shape: plain frozen dataclasses that know nothing about the core.

Theory of operation: `FileConfig` is everything one configuration file says, whichever format it
came in (the TOML reader in `configfile.py`, the Artemis `broker.xml` reader in `brokerxml.py`).
The records are immutable; readers validate before building them, so a `FileConfig` is always
usable. `resolve_address_settings` and `queue_arguments` apply Artemis' address-settings merge
rule to them (the one wildcard matcher, `ringmq.core.wildcard`). Turning a `FileConfig` into the
core's `BrokerConfig` and into declarations is `setup.py`'s job.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

from ringmq.cluster.settings import ClusterSettings
from ringmq.core import arguments, wildcard
from ringmq.core.config import DEFAULT_CONSUMER_TIMEOUT_MS
from ringmq.core.streamspec import ConfirmRule

DEFAULT_MAX_MESSAGE_SIZE: Final = 16 * 1024 * 1024  # RabbitMQ's default max_message_size (4.0)
DEFAULT_HEARTBEAT_S: Final = 60
DEFAULT_FRAME_MAX: Final = 131072
DEFAULT_STREAM_FRAME_MAX: Final = 1_048_576
"""The stream protocol's frame max: RabbitMQ's `stream.frame_max`, its own setting (not AMQP's
`frame_max`); stream clients size their publish frames, so their largest message, by it."""
DEFAULT_CHANNEL_MAX: Final = 2047
DEFAULT_AMQPS_PORT: Final = 5671
DEFAULT_REFRESH_PERIOD_MS: Final = 5000  # Artemis configuration-file-refresh-period
MAX_PORT: Final = 65535
"""Ports above this do not exist (a larger number would wrap silently in bind())."""

# Queue argument names for broker.xml queue attributes (rows of the queue-argument table).
ARG_RING_SIZE: Final = arguments.RING_SIZE.argument
ARG_LAST_VALUE_KEY: Final = arguments.LAST_VALUE_KEY.argument
ARG_NON_DESTRUCTIVE: Final = arguments.NON_DESTRUCTIVE.argument
ARG_LAST_VALUE: Final = arguments.LAST_VALUE.argument  # Artemis' legacy last-value="true"
ARG_SINGLE_ACTIVE: Final = arguments.SINGLE_ACTIVE_CONSUMER.argument


class ConfigError(ValueError):
    """A configuration file that cannot be used, with the offending path and key."""


@dataclass(frozen=True, slots=True)
class UserSpec:
    """A user; exactly one of `password` (plain) and `password_hash` is set."""

    name: str
    password: str | None = None
    password_hash: str | None = None
    tags: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class PermissionSpec:
    """configure/write/read regexes of a user in a vhost (RabbitMQ semantics)."""

    user: str
    vhost: str = "/"
    configure: str = ".*"
    write: str = ".*"
    read: str = ".*"


@dataclass(frozen=True, slots=True)
class PolicySpec:
    """A RabbitMQ-style policy: regex on names, definition keys such as `max-length`."""

    name: str
    pattern: str
    definition: dict[str, Any]
    vhost: str = "/"
    apply_to: str = "all"
    priority: int = 0


@dataclass(frozen=True, slots=True)
class AddressSetting:
    """An Artemis address-setting: defaults for queues whose address matches `match`.

    `None` means "not set here", so a less specific match may supply it (Artemis merge rule).
    """

    match: str
    default_ring_size: int | None = None
    default_last_value_key: str | None = None
    default_last_value_queue: bool | None = None
    default_non_destructive: bool | None = None
    default_exclusive_queue: bool | None = None
    default_group_buckets: int | None = None
    default_group_rebalance: bool | None = None
    default_group_first_key: str | None = None
    address_full_policy: str | None = None
    max_size_bytes: int | None = None
    max_size_messages: int | None = None
    dead_letter_address: str | None = None
    auto_create_dead_letter_resources: bool | None = None
    dead_letter_queue_prefix: str | None = None
    dead_letter_queue_suffix: str | None = None
    expiry_address: str | None = None
    auto_create_expiry_resources: bool | None = None
    expiry_queue_prefix: str | None = None
    expiry_queue_suffix: str | None = None
    expiry_delay_ms: int | None = None
    max_delivery_attempts: int | None = None
    redelivery_delay_ms: int | None = None
    redelivery_delay_multiplier: float | None = None
    max_redelivery_delay_ms: int | None = None
    auto_create_queues: bool | None = None
    auto_create_addresses: bool | None = None
    auto_delete_queues: bool | None = None
    auto_delete_addresses: bool | None = None
    auto_delete_queues_delay_ms: int | None = None
    auto_delete_queues_message_count: int | None = None
    default_address_routing_type: str | None = None
    default_queue_routing_type: str | None = None


@dataclass(frozen=True, slots=True)
class ExchangeSpec:
    name: str
    type: str = "direct"
    vhost: str = "/"
    durable: bool = True
    auto_delete: bool = False
    internal: bool = False
    arguments: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class QueueSpec:
    name: str
    vhost: str = "/"
    durable: bool = True
    exclusive: bool = False
    auto_delete: bool = False
    arguments: dict[str, Any] = field(default_factory=dict)
    address: str | None = None
    """Artemis address the queue lives on (used to match address-settings); None for TOML."""


@dataclass(frozen=True, slots=True)
class BindingSpec:
    source: str
    destination: str
    vhost: str = "/"
    destination_type: str = "queue"
    routing_key: str = ""
    arguments: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class LimitsSpec:
    """Connection limits negotiated or enforced by the server."""

    max_message_size: int = DEFAULT_MAX_MESSAGE_SIZE
    heartbeat_s: int = DEFAULT_HEARTBEAT_S
    frame_max: int = DEFAULT_FRAME_MAX
    stream_frame_max: int = DEFAULT_STREAM_FRAME_MAX
    """The frame max the stream protocol's Tune offers and its reader accepts."""
    channel_max: int = DEFAULT_CHANNEL_MAX
    max_connections: int | None = None
    handshake_timeout_ms: int = 10_000
    consumer_timeout_ms: int | None = DEFAULT_CONSUMER_TIMEOUT_MS
    """RabbitMQ's `consumer_timeout` (30 minutes; TOML 0: none)."""


@dataclass(frozen=True, slots=True)
class TLSSpec:
    cert_file: Path
    key_file: Path
    ca_file: Path | None = None
    port: int = DEFAULT_AMQPS_PORT
    verify_peer: bool = False
    https: bool = False
    """Serve the management API over HTTPS (on the HTTP port) with this certificate too."""
    stomp_port: int | None = None
    """STOMP over TLS on this port (RabbitMQ's `stomp.listeners.ssl`, usually 61614); None: off."""
    mqtt_port: int | None = None
    """MQTT over TLS on this port (RabbitMQ's `mqtt.listeners.ssl`, usually 8883); None: off."""
    stream_port: int | None = None
    """The stream protocol over TLS (RabbitMQ's `stream.listeners.ssl`, usually 5551)."""
    web_stomp_port: int | None = None
    web_mqtt_port: int | None = None
    """STOMP and MQTT over secure WebSockets (wss://, path /ws; RabbitMQ's `web_stomp.ssl.port`
    15673 and `web_mqtt.ssl.port` 15676); None: off."""
    web_amqp_port: int | None = None
    """AMQP 1.0 over secure WebSockets (wss://, path /ws, subprotocol `amqp`); None: off."""


@dataclass(frozen=True, slots=True)
class ListenSpec:
    """Listener settings a file may give; command-line options override them."""

    host: str | None = None
    amqp_port: int | None = None
    """-1: no plain AMQP listener (RabbitMQ's `listeners.tcp = none`); needs [tls]."""
    http_port: int | None = None
    stomp_port: int | None = None
    """-1: no STOMP listener."""
    mqtt_port: int | None = None
    """-1: no MQTT listener."""
    stream_port: int | None = None
    """-1: no stream protocol listener."""
    web_stomp_port: int | None = None
    web_mqtt_port: int | None = None
    """STOMP and MQTT over WebSockets (RabbitMQ's Web STOMP and Web MQTT, path /ws; usually
    15674 and 15675); None or -1: no listener."""
    web_amqp_port: int | None = None
    """AMQP 1.0 over WebSockets (path /ws, subprotocol `amqp`; usually 15678); None or -1: none."""
    shard_link_port: int | None = None
    """The shard link (internal, experimental: what the shards of one broker use; not for
    clients), on loopback only; None or -1: none."""
    shard_link_secret: str | None = None
    """The shard link's HMAC secret (needed with `shard_link_port`)."""
    shard_index: int | None = None
    """This shard's index among the shards of one broker (internal: what the shard link's
    `Welcome` names); None: 0."""
    data_dir: Path | None = None
    amqp_bind: str | None = None
    amqps_bind: str | None = None
    http_bind: str | None = None
    """Per-protocol listen addresses (default: `host`)."""


@dataclass(frozen=True, slots=True)
class ManagementSpec:
    """Management HTTP API settings (RabbitMQ's `management.*` keys)."""

    max_body_size: int | None = None
    """Largest request body in bytes (`management.http.max_body_size`); larger ones are
    answered 413. None: the management default (20 MiB)."""
    oauth_enabled: bool = False
    """The console offers "Login with OAuth 2" (`management.oauth_enabled`): the authorization
    code flow with PKCE in the browser, the token then sent as the API's bearer credential."""
    oauth_client_id: str | None = None
    """The console's client id at the identity provider (`management.oauth_client_id`)."""
    oauth_provider_url: str | None = None
    """The identity provider whose discovery document names the authorization and token
    endpoints (`management.oauth_provider_url`); None: `auth.oauth2.issuer`."""
    oauth_scopes: str = "openid profile"
    """Scopes the console asks for (`management.oauth_scopes`, space separated)."""


DEFAULT_ANONYMOUS_USER: Final = "guest"
DEFAULT_ANONYMOUS_PASSWORD: Final = "guest"  # noqa: S105 - RabbitMQ 4's anonymous_login_pass


@dataclass(frozen=True, slots=True)
class AnonymousLoginSpec:
    """Who an anonymous client logs in as, in every protocol that has anonymous logins.

    AMQP 1.0's SASL ANONYMOUS (and a client that skips SASL), an MQTT CONNECT without a user
    name and a STOMP CONNECT without `login` log in as `anonymous_user` with
    `anonymous_password`, checked as any login is: RabbitMQ 4's `anonymous_login_user` and
    `anonymous_login_pass` (`[auth]` in the TOML file; `[amqp10] anonymous_user` is the older
    spelling of the same setting). The default, guest, may only log in from loopback.
    `anonymous_user` None refuses anonymous logins.
    """

    anonymous_user: str | None = DEFAULT_ANONYMOUS_USER
    anonymous_password: str = DEFAULT_ANONYMOUS_PASSWORD

    @property
    def login(self) -> tuple[str, str] | None:
        """(user, password) of an anonymous login, None when they are refused."""
        if self.anonymous_user is None:
            return None
        return self.anonymous_user, self.anonymous_password

    @classmethod
    def of(
        cls,
        user: str | bool | None,
        password: str | None,
        where: str,
        keys: tuple[str, str] = ("anonymous_user", "anonymous_password"),
    ) -> AnonymousLoginSpec:
        """The settings a configuration file gives (TOML `[auth]` or `[amqp10]`, broker.xml's
        acceptor): `user` a user name, "off"/"none"/False (no anonymous logins) or None/True
        (guest); a user other than guest needs its `password`. `keys` name the two settings
        in error messages.

        Raises:
            ConfigError: an empty user, a password for "off", a user without its password.
        """
        user_key, password_key = keys
        if user is None or user is True:
            user = DEFAULT_ANONYMOUS_USER
        elif user is False or str(user).strip().lower() in OFF_WORDS:
            if password is not None:
                raise ConfigError(f"{where}.{password_key}: anonymous logins are off")
            return cls(anonymous_user=None)
        elif not user:
            raise ConfigError(f'{where}.{user_key}: empty (say "off" to refuse anonymous)')
        if password is None:
            if user != DEFAULT_ANONYMOUS_USER:
                raise ConfigError(f"{where}: {user_key} {user!r} needs {password_key}")
            password = DEFAULT_ANONYMOUS_PASSWORD
        return cls(anonymous_user=str(user), anonymous_password=password)


PASSWORD_MECHANISMS: Final = ("PLAIN", "AMQPLAIN")
"""The SASL mechanisms ringmq always offers AMQP 0-9-1 clients."""


@dataclass(frozen=True, slots=True)
class CertLoginSpec:
    """Logins by client certificate (RabbitMQ's `ssl_cert_login_*` keys; `core.certlogin`).

    Attributes:
        login_from: "distinguished_name", "common_name" or "subject_alternative_name".
        san_type / san_index: which subjectAltName entry names the user.
        external: SASL EXTERNAL offered to AMQP 0-9-1 and 1.0 clients with a verified
            certificate (`auth_mechanisms` lists EXTERNAL).
        stomp / mqtt: a CONNECT without credentials logs in by certificate
            (`stomp.ssl_cert_login`, `mqtt.ssl_cert_login`).
    """

    login_from: str = "distinguished_name"
    san_type: str = "dns"
    san_index: int = 0
    external: bool = True
    stomp: bool = False
    mqtt: bool = False


@dataclass(frozen=True, slots=True)
class OAuth2Spec:
    """RabbitMQ's `auth_oauth2.*` keys (the `[auth.oauth2]` table; `core.oauth`)."""

    resource_server_id: str
    scope_prefix: str | None = None
    verify_aud: bool = True
    preferred_username_claims: tuple[str, ...] = ("sub", "client_id")
    additional_scopes_key: str | None = None
    default_key: str | None = None
    signing_keys: tuple[tuple[str, Path], ...] = ()
    """(key id, PEM file of the public key)."""
    jwks_url: str | None = None
    issuer: str | None = None
    """The identity provider (`auth_oauth2.issuer`): without `jwks_url`, its OpenID Connect
    discovery document (`{issuer}/.well-known/openid-configuration`) names the JWKS URL."""
    jwks_refresh_s: int = 300
    https_cacertfile: Path | None = None
    """CA bundle that verifies the JWKS server (`auth_oauth2.https.cacertfile`)."""
    algorithms: tuple[str, ...] = ()
    """Accepted signature algorithms; empty: the RSA and EC ones (`core.oauth`)."""


@dataclass(frozen=True, slots=True)
class LdapSpec:
    """RabbitMQ's `auth_ldap.*` keys (the `[auth.ldap]` table; server/ldapauth.py).

    `queries` holds the vhost, resource and tag queries (`core.ldapquery`), parsed.
    """

    servers: tuple[str, ...]
    user_dn_pattern: str
    port: int = 389
    use_ssl: bool = False
    timeout_s: float = 5.0
    other_bind: str = "as_user"
    """"as_user", "anon", or "dn" (bind as `other_bind_dn` with `other_bind_password`)."""
    other_bind_dn: str | None = None
    other_bind_password: str | None = None
    queries: Any = None


AUTH_BACKENDS: Final = ("internal", "oauth2", "ldap")


@dataclass(frozen=True, slots=True)
class AuthSpec:
    """How clients log in (the `[auth]` table; `server/authconfig.py` reads it; the same
    table's `anonymous_login_user`/`anonymous_login_pass` are `FileConfig.anonymous_login`).

    Attributes:
        cert_login: logins by client certificate; None: off.
        backends: the password backends in order (RabbitMQ's `auth_backends`).
        oauth2: the OAuth 2 backend's settings (needed when `backends` has "oauth2").
        ldap: the LDAP backend's settings (needed when `backends` has "ldap").
    """

    cert_login: CertLoginSpec | None = None
    backends: tuple[str, ...] = ("internal",)
    oauth2: OAuth2Spec | None = None
    ldap: LdapSpec | None = None


@dataclass(frozen=True, slots=True)
class NodeSpec:
    """A cluster node's client-facing addresses, as a configuration file names them."""

    name: str
    host: str
    amqp_port: int | None = None
    stomp_port: int | None = None
    mqtt_port: int | None = None
    http_port: int | None = None


@dataclass(frozen=True, slots=True)
class ProxySpec:
    """How clients of a follower reach the leader (`[cluster]`, server/proxy.py).

    Attributes:
        proxy: relay a follower's client connections to the leader (False: refuse them with
            each protocol's error naming the leader).
        proxy_protocol_from: addresses or networks whose PROXY protocol headers this node
            believes (the cluster's members); empty: none.
        leader: a fixed leader (`[cluster.leader]`), for two nodes without etcd (tests).
        nodes: the cluster's nodes (`[[cluster.nodes]]`), for AMQP 1.0's failover list.
    """

    proxy: bool = True
    proxy_protocol_from: tuple[str, ...] = ()
    leader: NodeSpec | None = None
    nodes: tuple[NodeSpec, ...] = ()


@dataclass(frozen=True, slots=True)
class FileConfig:
    """Everything one configuration file says."""

    source: Path | None = None
    kind: str = "empty"  # "toml", "artemis" or "empty"
    listen: ListenSpec = ListenSpec()
    limits: LimitsSpec = LimitsSpec()
    tls: TLSSpec | None = None
    anonymous_login: AnonymousLoginSpec = AnonymousLoginSpec()
    management: ManagementSpec = ManagementSpec()
    cluster: ClusterSettings | None = None
    """The `[cluster]` table (None: a single node, as without one)."""
    auth: AuthSpec = AuthSpec()
    users: tuple[UserSpec, ...] = ()
    vhosts: tuple[str, ...] = ()
    permissions: tuple[PermissionSpec, ...] = ()
    policies: tuple[PolicySpec, ...] = ()
    address_settings: tuple[AddressSetting, ...] = ()
    exchanges: tuple[ExchangeSpec, ...] = ()
    queues: tuple[QueueSpec, ...] = ()
    bindings: tuple[BindingSpec, ...] = ()
    proxy: ProxySpec = ProxySpec()
    refresh_period_ms: int | None = None
    """Reload address-settings when the file changes, polled at this period (None: never)."""
    id_cache_size: int = 20_000
    """Artemis `id-cache-size` (broker.xml `<id-cache-size>`)."""
    persist_id_cache: bool = True
    """Artemis `persist-id-cache` (broker.xml `<persist-id-cache>`)."""
    stream_confirm: ConfirmRule = ConfirmRule.FSYNCED
    """When a stream publish is confirmed (`[server] stream_confirm`, `--stream-confirm`):
    after its fsync, or once written to the OS (docs/streams.md)."""


OFF_WORDS: Final = ("off", "none")


def parse_port(text: str) -> int:
    """A port from the command line or a file: a number, or "off"/"none" (-1: no listener)."""
    if text.strip().lower() in OFF_WORDS:
        return -1
    port = int(text)
    if not -1 <= port <= MAX_PORT:
        raise ValueError(f"port {port} out of range")
    return port


FULL_POLICIES: Final = frozenset({"PAGE", "BLOCK", "FAIL", "DROP"})
"""Artemis' address-full-policy values."""


def artemis_match(pattern: str, address: str) -> bool:
    """Artemis wildcard match (`ringmq.core.wildcard.matches`)."""
    return wildcard.matches(pattern, address)


def resolve_address_settings(settings: tuple[AddressSetting, ...], address: str) -> AddressSetting:
    """Merge every setting whose `match` covers `address`, the most specific first.

    A field set by a more specific match wins; unset fields fall through to less specific ones
    (Artemis `AddressSettings.merge`).
    """
    by_match = {s.match: s for s in settings if wildcard.matches(s.match, address)}
    matching = [by_match[m] for m in wildcard.most_specific_first(by_match)]
    merged: dict[str, Any] = {}
    for s in matching:
        for fname in AddressSetting.__slots__:
            if fname == "match":
                continue
            value = getattr(s, fname)
            if value is not None and fname not in merged:
                merged[fname] = value
    return AddressSetting(match=address, **merged)


def queue_arguments(spec: QueueSpec, settings: tuple[AddressSetting, ...]) -> dict[str, Any]:
    """Arguments to declare `spec` with: its own, then address-setting defaults (Artemis order)."""
    args = dict(spec.arguments)
    if not settings:
        return args
    s = resolve_address_settings(settings, spec.address or spec.name)
    for row in arguments.ADDRESS_DEFAULTS:  # table order: x-last-value-key before x-last-value
        if row.argument in args or any(a in args for a in row.default_unless):
            continue
        assert row.address_default is not None
        value = row.default_argument(getattr(s, row.address_default.replace("-", "_")))
        if value is not None:
            args[row.argument] = value
    return args
