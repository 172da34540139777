"""Configuration files: TOML (ringmq's own schema) and Artemis `broker.xml`.

Theory of operation: `load_config(path)` reads one file into a `FileConfig`, a tree of plain
frozen dataclasses that knows nothing about the core. Both formats land in the same shape:

* TOML: the schema documented in docs/configuration.md; unknown keys are errors naming their path.
* Artemis `broker.xml` (namespaces `urn:activemq` and `urn:activemq:core`, or none): each
  `<address>` with `<anycast>` queues becomes queues reached through the default exchange; a
  `<multicast>` address becomes a fanout exchange named after the address with its queues bound
  to it. Queue attributes (`ring-size`, `last-value-key`, `last-value`, `non-destructive`,
  `exclusive`, `durable`...) become queue arguments; `<address-settings>` become
  `AddressSetting` entries whose `match` keeps Artemis wildcards (`#` any words, `*` one word).

Turning a `FileConfig` into the core's `BrokerConfig` and into declarations is `runtime.py`'s
job; this module only parses and validates, so it is testable without a broker.
"""

from __future__ import annotations

import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final
from xml.etree.ElementTree import Element

import defusedxml.ElementTree as SafeET  # type: ignore[import-untyped]
from defusedxml import DefusedXmlException

from ringmq.core import arguments, wildcard

DEFAULT_MAX_MESSAGE_SIZE: Final = 16 * 1024 * 1024  # RabbitMQ's default max_message_size (4.0)
DEFAULT_HEARTBEAT_S: Final = 60
DEFAULT_FRAME_MAX: Final = 131072
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
    address_full_policy: str | None = None
    max_size_bytes: int | None = None
    max_size_messages: int | None = None
    dead_letter_address: str | None = None
    expiry_address: str | None = None
    expiry_delay_ms: int | None = None
    max_delivery_attempts: int | None = None
    redelivery_delay_ms: int | None = None


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
    channel_max: int = DEFAULT_CHANNEL_MAX
    max_connections: int | None = None
    handshake_timeout_ms: int = 10_000


@dataclass(frozen=True, slots=True)
class TLSSpec:
    cert_file: Path
    key_file: Path
    ca_file: Path | None = None
    port: int = DEFAULT_AMQPS_PORT
    verify_peer: bool = False
    https: bool = False
    """Serve the management API over HTTPS (on the HTTP port) with this certificate too."""


@dataclass(frozen=True, slots=True)
class ListenSpec:
    """Listener settings a file may give; command-line options override them."""

    host: str | None = None
    amqp_port: int | None = None
    """-1: no plain AMQP listener (RabbitMQ's `listeners.tcp = none`); needs [tls]."""
    http_port: int | None = None
    data_dir: Path | None = None
    amqp_bind: str | None = None
    amqps_bind: str | None = None
    http_bind: str | None = None
    """Per-protocol listen addresses (default: `host`)."""


@dataclass(frozen=True, slots=True)
class FileConfig:
    """Everything one configuration file says."""

    source: Path | None = None
    kind: str = "empty"  # "toml", "artemis" or "empty"
    listen: ListenSpec = ListenSpec()
    limits: LimitsSpec = LimitsSpec()
    tls: TLSSpec | None = None
    users: tuple[UserSpec, ...] = ()
    vhosts: tuple[str, ...] = ()
    permissions: tuple[PermissionSpec, ...] = ()
    policies: tuple[PolicySpec, ...] = ()
    address_settings: tuple[AddressSetting, ...] = ()
    exchanges: tuple[ExchangeSpec, ...] = ()
    queues: tuple[QueueSpec, ...] = ()
    bindings: tuple[BindingSpec, ...] = ()
    refresh_period_ms: int | None = None
    """Reload address-settings when the file changes, polled at this period (None: never)."""


OFF_WORDS: Final = ("off", "none")


def parse_port(text: str) -> int:
    """A port from the command line or a file: a number, or "off"/"none" (-1: no listener)."""
    if text.strip().lower() in OFF_WORDS:
        return -1
    port = int(text)
    if not -1 <= port <= MAX_PORT:
        raise ValueError(f"port {port} out of range")
    return port


def _port_or_off(t: _Table, key: str) -> int | None:
    value = t._get(key, (int, str), 'a port number or "off"')
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


# ---------------------------------------------------------------------------------------------
# TOML


class _Table:
    """Typed access to one TOML table that remembers which keys were used."""

    def __init__(self, data: dict[str, Any], where: str) -> None:
        self._data = data
        self.where = where
        self._used: set[str] = set()

    def _get(self, key: str, types: tuple[type, ...], what: str) -> Any:
        self._used.add(key)
        if key not in self._data:
            return None
        value = self._data[key]
        # bool is an int subclass; a boolean where a number is expected is a mistake
        if isinstance(value, bool) and bool not in types:
            raise ConfigError(f"{self.where}.{key}: expected {what}, got a boolean")
        if not isinstance(value, types):
            raise ConfigError(f"{self.where}.{key}: expected {what}, got {type(value).__name__}")
        return value

    def opt_str(self, key: str, default: str | None = None) -> str | None:
        v = self._get(key, (str,), "a string")
        return default if v is None else str(v)

    def req_str(self, key: str) -> str:
        v = self.opt_str(key)
        if v is None:
            raise ConfigError(f"{self.where}: missing required key {key!r}")
        return v

    def opt_int(
        self,
        key: str,
        default: int | None = None,
        *,
        minimum: int = 0,
        maximum: int | None = None,
    ) -> int | None:
        v = self._get(key, (int,), "an integer")
        if v is None:
            return default
        if v < minimum:
            raise ConfigError(f"{self.where}.{key}: must be >= {minimum}, got {v}")
        if maximum is not None and v > maximum:
            raise ConfigError(f"{self.where}.{key}: must be <= {maximum}, got {v}")
        return int(v)

    def opt_bool(self, key: str, default: bool | None = None) -> bool | None:
        v = self._get(key, (bool,), "a boolean")
        return default if v is None else bool(v)

    def table(self, key: str) -> dict[str, Any]:
        v = self._get(key, (dict,), "a table")
        return {} if v is None else dict(v)

    def str_list(self, key: str) -> tuple[str, ...]:
        v = self._get(key, (list,), "a list of strings")
        if v is None:
            return ()
        if not all(isinstance(x, str) for x in v):
            raise ConfigError(f"{self.where}.{key}: expected a list of strings")
        return tuple(v)

    def done(self) -> None:
        unknown = sorted(set(self._data) - self._used)
        if unknown:
            raise ConfigError(f"{self.where}: unknown key(s) {', '.join(map(repr, unknown))}")


def _tables(doc: dict[str, Any], key: str, where: str) -> list[_Table]:
    raw = doc.get(key, [])
    if not isinstance(raw, list) or not all(isinstance(x, dict) for x in raw):
        raise ConfigError(f"{where}: {key!r} must be an array of tables ([[{key}]])")
    return [_Table(x, f"{where}: {key}[{i}]") for i, x in enumerate(raw)]


def _table(doc: dict[str, Any], key: str, where: str) -> _Table | None:
    raw = doc.get(key)
    if raw is None:
        return None
    if not isinstance(raw, dict):
        raise ConfigError(f"{where}: {key!r} must be a table ([{key}])")
    return _Table(raw, f"{where}: {key}")


_TOP_KEYS: Final = frozenset(
    {
        "server",
        "limits",
        "tls",
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
    if (t := _table(doc, "server", where)) is not None:
        data_dir = t.opt_str("data_dir")
        listen = ListenSpec(
            host=t.opt_str("host"),
            amqp_port=_port_or_off(t, "amqp_port"),
            http_port=_port_or_off(t, "http_port"),
            data_dir=Path(data_dir) if data_dir else None,
            amqp_bind=t.opt_str("amqp_bind"),
            amqps_bind=t.opt_str("amqps_bind"),
            http_bind=t.opt_str("http_bind"),
        )
        refresh = t.opt_int("config_refresh_period_ms", minimum=1)
        t.done()

    limits = LimitsSpec()
    if (t := _table(doc, "limits", where)) is not None:
        limits = LimitsSpec(
            max_message_size=_req(
                t.opt_int("max_message_size", DEFAULT_MAX_MESSAGE_SIZE, minimum=1)
            ),
            heartbeat_s=_req(t.opt_int("heartbeat_s", DEFAULT_HEARTBEAT_S)),
            frame_max=_req(t.opt_int("frame_max", DEFAULT_FRAME_MAX, minimum=4096)),
            channel_max=_req(t.opt_int("channel_max", DEFAULT_CHANNEL_MAX)),
            max_connections=t.opt_int("max_connections", minimum=1),
            handshake_timeout_ms=_req(t.opt_int("handshake_timeout_ms", 10_000, minimum=1)),
        )
        t.done()

    tls: TLSSpec | None = None
    if (t := _table(doc, "tls", where)) is not None:
        ca = t.opt_str("ca_file")
        tls = TLSSpec(
            cert_file=Path(t.req_str("cert_file")),
            key_file=Path(t.req_str("key_file")),
            ca_file=Path(ca) if ca else None,
            port=_req(t.opt_int("port", DEFAULT_AMQPS_PORT, maximum=MAX_PORT)),
            verify_peer=bool(t.opt_bool("verify_peer", False)),
            https=bool(t.opt_bool("https", False)),
        )
        t.done()

    users = []
    for t in _tables(doc, "users", where):
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
    for t in _tables(doc, "vhosts", where):
        vhosts.append(t.req_str("name"))
        t.done()

    perms = []
    for t in _tables(doc, "permissions", where):
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
    for t in _tables(doc, "policies", where):
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
    for t in _tables(doc, "address_settings", where):
        full = t.opt_str("address_full_policy")
        if full is not None and full.upper() not in _FULL_POLICIES:
            raise ConfigError(f"{t.where}.address_full_policy: unknown value {full!r}")
        settings.append(
            AddressSetting(
                match=t.req_str("match"),
                default_ring_size=t.opt_int("default_ring_size", minimum=-1),
                default_last_value_key=t.opt_str("default_last_value_key"),
                default_last_value_queue=t.opt_bool("default_last_value_queue"),
                default_non_destructive=t.opt_bool("default_non_destructive"),
                default_exclusive_queue=t.opt_bool("default_exclusive_queue"),
                address_full_policy=full.upper() if full else None,
                max_size_bytes=t.opt_int("max_size_bytes", minimum=-1),
                max_size_messages=t.opt_int("max_size_messages", minimum=-1),
                dead_letter_address=t.opt_str("dead_letter_address"),
                expiry_address=t.opt_str("expiry_address"),
                expiry_delay_ms=t.opt_int("expiry_delay_ms", minimum=-1),
                max_delivery_attempts=t.opt_int("max_delivery_attempts", minimum=-1),
                redelivery_delay_ms=t.opt_int("redelivery_delay_ms"),
            )
        )
        t.done()

    exchanges = []
    for t in _tables(doc, "exchanges", where):
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
    for t in _tables(doc, "queues", where):
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
    for t in _tables(doc, "bindings", where):
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
        users=tuple(users),
        vhosts=tuple(vhosts),
        permissions=tuple(perms),
        policies=tuple(policies),
        address_settings=tuple(settings),
        exchanges=tuple(exchanges),
        queues=tuple(queues),
        bindings=tuple(bindings),
        refresh_period_ms=refresh,
    )


def _req(v: int | None) -> int:
    assert v is not None  # every caller passes a default
    return v


# ---------------------------------------------------------------------------------------------
# Artemis broker.xml

_FULL_POLICIES: Final = frozenset({"PAGE", "BLOCK", "FAIL", "DROP"})


def _local(tag: str) -> str:
    # "{urn:activemq:core}queue" -> "queue"; namespaces differ between broker.xml versions
    return tag.rsplit("}", 1)[-1]


def _name(el: Element) -> str | None:
    # comments and processing instructions carry a function, not a string, as their tag
    tag: object = el.tag
    return _local(tag) if isinstance(tag, str) else None


def _child(el: Element, name: str) -> Element | None:
    for c in el:
        if _name(c) == name:
            return c
    return None


def _children(el: Element, name: str) -> list[Element]:
    return [c for c in el if _name(c) == name]


def _xml_bool(text: str, where: str) -> bool:
    t = text.strip().lower()
    if t in {"true", "1", "yes"}:
        return True
    if t in {"false", "0", "no"}:
        return False
    raise ConfigError(f"{where}: expected true or false, got {text!r}")


def _xml_int(text: str, where: str) -> int:
    try:
        return int(text.strip())
    except ValueError:
        raise ConfigError(f"{where}: expected an integer, got {text!r}") from None


_SIZE_UNITS: Final = {
    "": 1,
    "B": 1,
    "K": 1024,
    "KB": 1024,
    "KIB": 1024,
    "M": 1024**2,
    "MB": 1024**2,
    "MIB": 1024**2,
    "G": 1024**3,
    "GB": 1024**3,
    "GIB": 1024**3,
}


def _xml_size(text: str, where: str) -> int:
    # Artemis accepts byte notation such as "10M", "10MB" or "10MiB" for size settings
    t = text.strip().upper()
    num = t.rstrip("KMGIB")
    unit = t[len(num) :]
    if unit not in _SIZE_UNITS or not num.strip().lstrip("-").isdigit():
        raise ConfigError(f"{where}: bad size {text!r}")
    return int(num) * _SIZE_UNITS[unit]


def _text(el: Element | None) -> str | None:
    if el is None or el.text is None:
        return None
    return el.text.strip()


def parse_artemis_xml(data: bytes | str, *, source: Path | None = None) -> FileConfig:
    """Parse the `<addresses>` and `<address-settings>` sections of an Artemis broker.xml."""
    where = str(source) if source else "<broker.xml>"
    try:
        root = SafeET.fromstring(data)
    except SafeET.ParseError as exc:
        raise ConfigError(f"{where}: malformed XML: {exc}") from exc
    except DefusedXmlException as exc:
        # entity declarations and external references are refused (billion laughs, XXE)
        raise ConfigError(f"{where}: forbidden XML construct: {exc}") from exc
    # <configuration><core>...</core></configuration>, or a bare <core> element
    core = root if _local(root.tag) == "core" else _child(root, "core")
    if core is None:
        raise ConfigError(f"{where}: no <core> element")

    refresh = DEFAULT_REFRESH_PERIOD_MS
    if (r := _text(_child(core, "configuration-file-refresh-period"))) is not None:
        refresh = _xml_int(r, f"{where}: configuration-file-refresh-period")

    settings = _artemis_address_settings(core, where)
    exchanges: list[ExchangeSpec] = []
    queues: list[QueueSpec] = []
    bindings: list[BindingSpec] = []
    addresses = _child(core, "addresses")
    for addr in _children(addresses, "address") if addresses is not None else []:
        name = addr.get("name")
        if not name:
            raise ConfigError(f"{where}: <address> without a name")
        anycast = _child(addr, "anycast")
        multicast = _child(addr, "multicast")
        if anycast is not None:
            queues.extend(_artemis_queue(q, name, where) for q in _children(anycast, "queue"))
        if multicast is not None:
            exchanges.append(ExchangeSpec(name=name, type="fanout", durable=True))
            for q in _children(multicast, "queue"):
                spec = _artemis_queue(q, name, where)
                queues.append(spec)
                bindings.append(BindingSpec(source=name, destination=spec.name))
    return FileConfig(
        source=source,
        kind="artemis",
        address_settings=tuple(settings),
        exchanges=tuple(exchanges),
        queues=tuple(queues),
        bindings=tuple(bindings),
        refresh_period_ms=refresh if refresh > 0 else None,
    )


def _artemis_queue(q: Element, address: str, where: str) -> QueueSpec:
    name = q.get("name")
    if not name:
        raise ConfigError(f"{where}: <queue> without a name on address {address!r}")
    w = f"{where}: queue {name!r}"
    args: dict[str, Any] = {}
    durable = True
    exclusive = False
    if (d := _text(_child(q, "durable"))) is not None:
        durable = _xml_bool(d, f"{w} <durable>")
    if (ring := q.get("ring-size")) is not None:
        size = _xml_int(ring, f"{w} ring-size")
        if size >= 0:
            args[ARG_RING_SIZE] = size
    if (key := q.get("last-value-key")) is not None:
        args[ARG_LAST_VALUE_KEY] = key
    elif (lv := q.get("last-value")) is not None and _xml_bool(lv, f"{w} last-value"):
        args[ARG_LAST_VALUE] = True
    if (nd := q.get("non-destructive")) is not None and _xml_bool(nd, f"{w} non-destructive"):
        args[ARG_NON_DESTRUCTIVE] = True
    if (ex := q.get("exclusive")) is not None and _xml_bool(ex, f"{w} exclusive"):
        # Artemis' exclusive queue = one active consumer at a time (RabbitMQ's SAC), not a
        # connection-exclusive AMQP queue
        args[ARG_SINGLE_ACTIVE] = True
    return QueueSpec(
        name=name, durable=durable, exclusive=exclusive, arguments=args, address=address
    )


_SETTING_FIELDS: Final[dict[str, tuple[str, str]]] = {
    # element name -> (AddressSetting field, value kind)
    "default-ring-size": ("default_ring_size", "int"),
    "default-last-value-key": ("default_last_value_key", "str"),
    "default-last-value-queue": ("default_last_value_queue", "bool"),
    "default-non-destructive": ("default_non_destructive", "bool"),
    "default-exclusive-queue": ("default_exclusive_queue", "bool"),
    "address-full-policy": ("address_full_policy", "policy"),
    "max-size-bytes": ("max_size_bytes", "size"),
    "max-size-messages": ("max_size_messages", "int"),
    "dead-letter-address": ("dead_letter_address", "str"),
    "expiry-address": ("expiry_address", "str"),
    "expiry-delay": ("expiry_delay_ms", "int"),
    "max-delivery-attempts": ("max_delivery_attempts", "int"),
    "redelivery-delay": ("redelivery_delay_ms", "int"),
}


def _artemis_address_settings(core: Element, where: str) -> list[AddressSetting]:
    out: list[AddressSetting] = []
    section = _child(core, "address-settings")
    for s in _children(section, "address-setting") if section is not None else []:
        match = s.get("match")
        if match is None:
            raise ConfigError(f"{where}: <address-setting> without match")
        values: dict[str, Any] = {}
        for el in s:
            tag = _name(el)
            if tag is None or tag not in _SETTING_FIELDS:
                continue  # the many Artemis settings this broker has no use for
            fname, kind = _SETTING_FIELDS[tag]
            text = el.text.strip() if el.text else ""
            w = f"{where}: address-setting {match!r} <{tag}>"
            if kind == "int":
                values[fname] = _xml_int(text, w)
            elif kind == "size":
                values[fname] = _xml_size(text, w)
            elif kind == "bool":
                values[fname] = _xml_bool(text, w)
            elif kind == "policy":
                if text.upper() not in _FULL_POLICIES:
                    raise ConfigError(f"{w}: unknown policy {text!r}")
                values[fname] = text.upper()
            else:
                values[fname] = text
        out.append(AddressSetting(match=match, **values))
    return out


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
