"""The Artemis `broker.xml` reader: `<addresses>` and `<address-settings>` into a `FileConfig`.

Theory of operation: the file is parsed with defusedxml (no entities, no external references),
under the namespaces `urn:activemq` and `urn:activemq:core` or none. Each `<address>` with
`<anycast>` queues becomes queues reached through the default exchange; a `<multicast>` address
becomes a fanout exchange named after the address with its queues bound to it. Queue attributes
(`ring-size`, `last-value-key`, `last-value`, `non-destructive`, `exclusive`, `durable`...) become
queue arguments; `<address-settings>` become `AddressSetting` entries whose `match` keeps Artemis
wildcards (`#` any words, `*` one word). The first `<acceptor>` that serves AMQP gives the AMQP
1.0 anonymous login: Artemis' `saslMechanisms` parameter without ANONYMOUS switches it off, and
ringmq's own `anonymousUser` / `anonymousPassword` parameters name its user
(`AnonymousLoginSpec`, as the TOML `[auth]` table; it serves every protocol's anonymous
clients). Pure parsing: no broker, no I/O.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any, Final
from xml.etree.ElementTree import Element

import defusedxml.ElementTree as SafeET  # type: ignore[import-untyped]
from defusedxml import DefusedXmlException

from ringmq.server.configspec import (
    ARG_LAST_VALUE,
    ARG_LAST_VALUE_KEY,
    ARG_NON_DESTRUCTIVE,
    ARG_RING_SIZE,
    ARG_SINGLE_ACTIVE,
    DEFAULT_REFRESH_PERIOD_MS,
    FULL_POLICIES,
    OFF_WORDS,
    AddressSetting,
    AnonymousLoginSpec,
    BindingSpec,
    ConfigError,
    ExchangeSpec,
    FileConfig,
    QueueSpec,
)

log = logging.getLogger(__name__)


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
    id_cache_size = 20_000
    if (t := _text(_child(core, "id-cache-size"))) is not None:
        id_cache_size = _xml_int(t, f"{where}: id-cache-size")
        if id_cache_size <= 0:
            raise ConfigError(f"{where}: id-cache-size must be > 0, got {id_cache_size}")
    persist_ids = True
    if (t := _text(_child(core, "persist-id-cache"))) is not None:
        persist_ids = _xml_bool(t, f"{where}: persist-id-cache")

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
        anonymous_login=_artemis_anonymous(core, where),
        address_settings=tuple(settings),
        exchanges=tuple(exchanges),
        queues=tuple(queues),
        bindings=tuple(bindings),
        refresh_period_ms=refresh if refresh > 0 else None,
        id_cache_size=id_cache_size,
        persist_id_cache=persist_ids,
    )


def _acceptor_params(url: str) -> dict[str, str]:
    # "tcp://0.0.0.0:5672?protocols=AMQP;saslMechanisms=PLAIN" -> {"protocols": "AMQP", ...}
    _, _, query = url.partition("?")
    params: dict[str, str] = {}
    for part in query.replace("&", ";").split(";"):
        key, sep, value = part.partition("=")
        if sep and key.strip():
            params[key.strip()] = value.strip()
    return params


def _artemis_anonymous(core: Element, where: str) -> AnonymousLoginSpec:
    # The AMQP 1.0 anonymous login from the first acceptor that serves AMQP (one without
    # `protocols` serves them all, as in Artemis).
    acceptors = _child(core, "acceptors")
    for acceptor in _children(acceptors, "acceptor") if acceptors is not None else []:
        params = _acceptor_params(_text(acceptor) or "")
        protocols = {p.strip().upper() for p in params.get("protocols", "AMQP").split(",")}
        if "AMQP" not in protocols:
            continue
        w = f"{where}: acceptor {acceptor.get('name') or ''!r}"
        user: str | None = params.get("anonymousUser")
        mechanisms = params.get("saslMechanisms")
        if mechanisms is not None and "ANONYMOUS" not in {
            m.strip().upper() for m in mechanisms.split(",")
        }:
            if user is not None and user.lower() not in OFF_WORDS:
                raise ConfigError(f"{w}: anonymousUser without ANONYMOUS in saslMechanisms")
            user = OFF_WORDS[0]
        return AnonymousLoginSpec.of(user, params.get("anonymousPassword"), w)
    return AnonymousLoginSpec()


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
    # Artemis' message-group queue attributes (core/groups.py)
    if (buckets := q.get("group-buckets")) is not None:
        n = _xml_int(buckets, f"{w} group-buckets")
        if n >= 0:
            args["x-group-buckets"] = n
    if (rebalance := q.get("group-rebalance")) is not None:
        args["x-group-rebalance"] = _xml_bool(rebalance, f"{w} group-rebalance")
    if first := q.get("group-first-key"):
        args["x-group-first-key"] = first
    return QueueSpec(
        name=name, durable=durable, exclusive=exclusive, arguments=args, address=address
    )


_SETTING_FIELDS: Final[dict[str, tuple[str, str]]] = {
    # element name -> (AddressSetting field, value kind); what each does: docs/configuration.md
    "default-ring-size": ("default_ring_size", "int"),
    "default-last-value-key": ("default_last_value_key", "str"),
    "default-last-value-queue": ("default_last_value_queue", "bool"),
    "default-non-destructive": ("default_non_destructive", "bool"),
    "default-exclusive-queue": ("default_exclusive_queue", "bool"),
    "default-group-buckets": ("default_group_buckets", "int"),
    "default-group-rebalance": ("default_group_rebalance", "bool"),
    "default-group-first-key": ("default_group_first_key", "str"),
    "address-full-policy": ("address_full_policy", "policy"),
    "max-size-bytes": ("max_size_bytes", "size"),
    "max-size-messages": ("max_size_messages", "int"),
    "dead-letter-address": ("dead_letter_address", "str"),
    "auto-create-dead-letter-resources": ("auto_create_dead_letter_resources", "bool"),
    "dead-letter-queue-prefix": ("dead_letter_queue_prefix", "str"),
    "dead-letter-queue-suffix": ("dead_letter_queue_suffix", "str"),
    "expiry-address": ("expiry_address", "str"),
    "auto-create-expiry-resources": ("auto_create_expiry_resources", "bool"),
    "expiry-queue-prefix": ("expiry_queue_prefix", "str"),
    "expiry-queue-suffix": ("expiry_queue_suffix", "str"),
    "expiry-delay": ("expiry_delay_ms", "int"),
    "max-delivery-attempts": ("max_delivery_attempts", "int"),
    "redelivery-delay": ("redelivery_delay_ms", "int"),
    "redelivery-delay-multiplier": ("redelivery_delay_multiplier", "float"),
    "max-redelivery-delay": ("max_redelivery_delay_ms", "int"),
    "auto-create-queues": ("auto_create_queues", "bool"),
    "auto-create-addresses": ("auto_create_addresses", "bool"),
    "auto-delete-queues": ("auto_delete_queues", "bool"),
    "auto-delete-addresses": ("auto_delete_addresses", "bool"),
    "auto-delete-queues-delay": ("auto_delete_queues_delay_ms", "int"),
    "auto-delete-queues-message-count": ("auto_delete_queues_message_count", "int"),
    "default-address-routing-type": ("default_address_routing_type", "str"),
    "default-queue-routing-type": ("default_queue_routing_type", "str"),
}

NO_EFFECT_SETTINGS: Final[dict[str, str]] = {
    # Settings of Artemis' default broker.xml that tune Artemis' own paging and statistics
    # machinery; ringmq pages by its own bounds (docs/storage.md) and keeps no message-counter
    # history. They change nothing a client sees, so they are accepted and logged once at
    # start-up as having no effect (docs/configuration.md lists them).
    "page-size-bytes": "ringmq's paged segments are sized by ringmq (docs/storage.md)",
    "max-read-page-messages": "ringmq bounds its in-memory head itself (docs/storage.md)",
    "max-read-page-bytes": "ringmq bounds its in-memory head itself (docs/storage.md)",
    "page-max-cache-size": "ringmq caches no page files",
    "message-counter-history-day-limit": "ringmq keeps no message-counter history",
    "redistribution-delay": "no Artemis cluster connection to redistribute messages over",
}

_ONLY_VALUES: Final[dict[str, tuple[str, ...]]] = {
    # Settings whose only accepted values are what ringmq does anyway (they work as written);
    # any other value is refused at start-up.
    "page-limit-bytes": ("-1",),
    "page-limit-messages": ("-1",),
    "send-to-dla-on-no-route": ("false",),
    "redelivery-collision-avoidance-factor": ("0", "0.0"),
}


class UnsupportedSettingError(ConfigError):
    """An Artemis address-setting ringmq does not implement (refused at start-up)."""


def _float(text: str, where: str) -> float:
    try:
        return float(text.strip())
    except ValueError:
        raise ConfigError(f"{where}: expected a number, got {text!r}") from None


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
            if tag is None:
                continue  # a comment
            text = (el.text or "").strip()
            w = f"{where}: address-setting {match!r} <{tag}>"
            if tag in NO_EFFECT_SETTINGS:
                log.info("%s: no effect in ringmq (%s)", w, NO_EFFECT_SETTINGS[tag])
                continue
            if tag in _ONLY_VALUES:
                if text.lower() not in _ONLY_VALUES[tag]:
                    allowed = " or ".join(_ONLY_VALUES[tag])
                    raise UnsupportedSettingError(
                        f"{w}: only {allowed} is supported by ringmq, got {text!r} "
                        "(see docs/configuration.md)"
                    )
                continue
            if tag not in _SETTING_FIELDS:
                raise UnsupportedSettingError(
                    f"{w}: not supported by ringmq; remove it (docs/configuration.md lists "
                    "the address-settings ringmq reads)"
                )
            fname, kind = _SETTING_FIELDS[tag]
            if kind == "int":
                values[fname] = _xml_int(text, w)
            elif kind == "size":
                values[fname] = _xml_size(text, w)
            elif kind == "bool":
                values[fname] = _xml_bool(text, w)
            elif kind == "float":
                values[fname] = _float(text, w)
            elif kind == "policy":
                if text.upper() not in FULL_POLICIES:
                    raise ConfigError(f"{w}: unknown policy {text!r}")
                values[fname] = text.upper()
            else:
                values[fname] = text
        out.append(AddressSetting(match=match, **values))
    return out
