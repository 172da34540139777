"""RabbitMQ-style policies and Artemis-style address-settings: the two configuration tables.

Theory of operation:

* `PolicyTable` holds RabbitMQ policies: a name, a vhost, a regular expression matched against
  queue or exchange names with `re.search` (as RabbitMQ's `re:run`), what they apply to, a
  priority and a definition (policy keys such as `max-length` or `ring-size`). For one name the
  matching policy with the highest priority wins; ties go to the policy whose name sorts last,
  so the choice is deterministic. Definitions are validated when set (`validate_definition`), so
  a bad policy is refused before it reaches any queue.
* `AddressSettingsTable` holds Artemis address-settings keyed by a match string with `#` (zero
  or more words), `*` (exactly one word) and `.` (word delimiter). For an address every matching
  entry is merged from the most specific to the least specific: a field left unset by a more
  specific match is inherited from a less specific one (Artemis `AddressSettings.merge`).
* Both tables are plain data; queues do not watch them. The broker re-resolves a queue's
  settings (`ringmq.core.settings.resolve_queue_settings`) whenever a policy or address-setting
  changes and calls `Queue.update_settings`.

This module imports nothing from the queue engine (settings import it, not the reverse).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, fields, replace
from enum import StrEnum
from typing import Any, Final

from ringmq.core.arguments import QUEUE_ARGUMENTS
from ringmq.core.argvalues import any_int, non_negative_int, ring_size, string
from ringmq.core.wildcard import matches, most_specific_first

__all__ = [
    "ARTEMIS_POLICY_KEYS",
    "POLICY_KEYS",
    "AddressFullPolicy",
    "AddressSettings",
    "AddressSettingsTable",
    "ApplyTo",
    "Policy",
    "PolicyError",
    "PolicyTable",
    "RoutingType",
    "artemis_part",
    "validate_definition",
]


class PolicyError(ValueError):
    """A policy or address-setting is invalid (the management API answers 400)."""


class ApplyTo(StrEnum):
    """What a policy applies to (RabbitMQ `apply-to`)."""

    QUEUES = "queues"
    CLASSIC_QUEUES = "classic_queues"
    QUORUM_QUEUES = "quorum_queues"
    EXCHANGES = "exchanges"
    ALL = "all"


class RoutingType(StrEnum):
    """Artemis routing types: queue semantics (ANYCAST) or topic semantics (MULTICAST)."""

    ANYCAST = "ANYCAST"
    MULTICAST = "MULTICAST"


class AddressFullPolicy(StrEnum):
    """Artemis `address-full-policy`: what happens when an address reaches its max size."""

    PAGE = "PAGE"
    DROP = "DROP"
    BLOCK = "BLOCK"
    FAIL = "FAIL"


_Check = Callable[[Any], bool]

POLICY_KEYS: Final[dict[str, tuple[_Check, str]]] = {
    # key: (validator, what it expects) -- RabbitMQ's policy validators, plus ring-size; the
    # queue keys come from the queue-argument table, alternate-exchange is an exchange key.
    **{
        row.policy_key: (row.policy_check, row.policy_expected)
        for row in QUEUE_ARGUMENTS
        if row.policy_key is not None and row.policy_check is not None
    },
    "alternate-exchange": (string, "a string"),
}
"""Policy keys ringmq understands, with their validators (RabbitMQ refuses unknown keys)."""

_RABBIT_LIMIT_KEYS: Final = frozenset(
    row.policy_key for row in QUEUE_ARGUMENTS if row.family == "rabbit" and row.policy_key
)
_QUEUE_ONLY: Final = frozenset(POLICY_KEYS) - {"alternate-exchange"}


def validate_definition(definition: Mapping[str, Any]) -> dict[str, Any]:
    """Check a policy definition; return a plain copy.

    Raises:
        PolicyError: unknown key, wrong type, or keys of two limit families (`ring-size` with
            `max-length`/`max-length-bytes`/`overflow`), or a dead-letter routing key without
            a dead-letter exchange.
    """
    if not definition:
        raise PolicyError("policy definition must not be empty")
    out: dict[str, Any] = {}
    artemis_part(definition)  # the Artemis keys, checked as address-settings are
    for key, value in definition.items():
        if key in ARTEMIS_POLICY_KEYS:
            out[key] = value
            continue
        spec = POLICY_KEYS.get(key)
        if spec is None:
            raise PolicyError(f"unrecognised policy key {key!r}")
        check, expected = spec
        if not check(value):
            raise PolicyError(f"policy key {key!r} must be {expected}, got {value!r}")
        out[key] = value
    rabbit = _RABBIT_LIMIT_KEYS & out.keys()
    if "ring-size" in out and out["ring-size"] != -1 and rabbit:
        raise PolicyError(
            f"policy mixes limit families: ring-size with {', '.join(sorted(rabbit))}"
        )
    if "dead-letter-routing-key" in out and "dead-letter-exchange" not in out:
        raise PolicyError("dead-letter-routing-key defined, but dead-letter-exchange not defined")
    return out


@dataclass(frozen=True, slots=True)
class Policy:
    """One RabbitMQ policy."""

    name: str
    pattern: str
    definition: Mapping[str, Any]
    vhost: str = "/"
    apply_to: ApplyTo = ApplyTo.ALL
    priority: int = 0

    def applies_to(self, kind: str) -> bool:
        """Whether this policy targets `kind` ("queue" or "exchange")."""
        if self.apply_to is ApplyTo.ALL:
            return True
        if kind == "exchange":
            return self.apply_to is ApplyTo.EXCHANGES
        return self.apply_to is not ApplyTo.EXCHANGES

    def as_dict(self) -> dict[str, Any]:
        """The RabbitMQ HTTP API shape (`/api/policies`)."""
        return {
            "name": self.name,
            "vhost": self.vhost,
            "pattern": self.pattern,
            "apply-to": str(self.apply_to),
            "priority": self.priority,
            "definition": dict(self.definition),
        }


class PolicyTable:
    """RabbitMQ policies of every vhost; `match` picks the effective one for a name."""

    def __init__(self) -> None:
        self._policies: dict[tuple[str, str], tuple[Policy, re.Pattern[str]]] = {}

    def set(
        self,
        name: str,
        pattern: str,
        definition: Mapping[str, Any],
        *,
        vhost: str = "/",
        apply_to: str | ApplyTo = ApplyTo.ALL,
        priority: int = 0,
    ) -> Policy:
        """Create or replace a policy.

        Raises:
            PolicyError: bad regex, apply-to, priority or definition.
        """
        try:
            compiled = re.compile(pattern)
        except re.error as exc:
            raise PolicyError(f"invalid policy pattern {pattern!r}: {exc}") from None
        try:
            target = ApplyTo(apply_to)
        except ValueError:
            allowed = ", ".join(a.value for a in ApplyTo)
            raise PolicyError(f"apply-to must be one of {allowed}, got {apply_to!r}") from None
        if type(priority) is not int:
            raise PolicyError(f"priority must be an integer, got {priority!r}")
        checked = validate_definition(definition)
        queue_only = _QUEUE_ONLY | ARTEMIS_POLICY_KEYS
        if target is ApplyTo.EXCHANGES and queue_only & checked.keys():
            keys = ", ".join(sorted(queue_only & checked.keys()))
            raise PolicyError(f"queue keys in an exchange policy: {keys}")
        policy = Policy(name, pattern, checked, vhost, target, priority)
        self._policies[(vhost, name)] = (policy, compiled)
        return policy

    def clear(self, name: str, *, vhost: str = "/") -> bool:
        """Delete a policy; returns whether it existed."""
        return self._policies.pop((vhost, name), None) is not None

    def get(self, name: str, *, vhost: str = "/") -> Policy | None:
        """The policy called `name` in `vhost`, if any."""
        entry = self._policies.get((vhost, name))
        return entry[0] if entry else None

    def list(self, vhost: str | None = None) -> list[Policy]:
        """Policies (of one vhost, or all), sorted by vhost then name."""
        found = [p for p, _ in self._policies.values() if vhost is None or p.vhost == vhost]
        return sorted(found, key=lambda p: (p.vhost, p.name))

    def match(self, name: str, kind: str = "queue", *, vhost: str = "/") -> Policy | None:
        """The effective policy for the queue or exchange `name`: highest priority wins."""
        best: Policy | None = None
        for policy, compiled in self._policies.values():
            if policy.vhost != vhost or not policy.applies_to(kind):
                continue
            if compiled.search(name) is None:
                continue
            if best is None or (policy.priority, policy.name) > (best.priority, best.name):
                best = policy
        return best


@dataclass(frozen=True, slots=True)
class AddressSettings:
    """Artemis address-settings ringmq honours; None means "not set here" (inherit).

    Attributes:
        default_ring_size: ring size for queues without an explicit one (-1: no ring).
        default_last_value_key: LVQ key for queues without an explicit one.
        default_non_destructive: non-destructive consumption by default.
        default_exclusive_queue: one active consumer at a time by default (Artemis' exclusive
            queue, `x-single-active-consumer`).
        default_group_buckets, default_group_rebalance, default_group_first_key: Artemis'
            message-group settings for queues that do not declare their own
            (`x-group-buckets`...; core/groups.py).
        address_full_policy: PAGE (bodies go to storage), DROP (new messages silently
            dropped), BLOCK (producers blocked), FAIL (new messages refused).
        max_size_bytes: body bytes at which the address is full (-1: unlimited).
        max_size_messages: messages at which the address is full (-1: unlimited).
        dead_letter_address: where messages rejected by a client or over the delivery limit
            go (Artemis DLA); an existing exchange of that name routes them, else a queue.
        auto_create_dead_letter_resources: also create the queue `dead_letter_queue_prefix`
            + queue name + `dead_letter_queue_suffix` and send the queue's dead letters to it.
        expiry_address, auto_create_expiry_resources, expiry_queue_prefix, expiry_queue_suffix:
            the same for expired messages.
        max_delivery_attempts: deliveries before a message goes to the dead-letter address
            (-1 or 0: unlimited). Artemis' default 10 is added for broker.xml configurations.
        redelivery_delay: ms before a message that failed a delivery is ready again (it
            returns to the head when due, as a scheduled message does).
        redelivery_delay_multiplier: the delay grows by this factor with each failure.
        max_redelivery_delay: the bound of the growing delay (unset: 10 x redelivery_delay).
        auto_create_queues, auto_create_addresses: whether a client may create an anycast
            queue by naming it (both must allow it).
        auto_delete_queues, auto_delete_addresses: ringmq accepts only false for the first
            (see docs/configuration.md); addresses have no life apart from their queues.
        default_address_routing_type, default_queue_routing_type: the routing type of a
            plain address that names nothing yet (ANYCAST or MULTICAST).
    """

    default_ring_size: int | None = None
    default_last_value_key: str | None = None
    default_non_destructive: bool | None = None
    default_exclusive_queue: bool | None = None
    default_group_buckets: int | None = None
    default_group_rebalance: bool | None = None
    default_group_first_key: str | None = None
    address_full_policy: AddressFullPolicy | None = None
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
    max_delivery_attempts: int | None = None
    redelivery_delay: int | None = None
    redelivery_delay_multiplier: float | None = None
    max_redelivery_delay: int | None = None
    auto_create_queues: bool | None = None
    auto_create_addresses: bool | None = None
    auto_delete_queues: bool | None = None
    auto_delete_addresses: bool | None = None
    default_address_routing_type: RoutingType | None = None
    default_queue_routing_type: RoutingType | None = None

    @property
    def may_auto_create(self) -> bool:
        """Whether a client may create a queue by naming its address (Artemis' defaults:
        yes)."""
        return self.auto_create_queues is not False and self.auto_create_addresses is not False

    @property
    def routing_type(self) -> RoutingType | None:
        """The routing type of a plain address that names nothing yet, if set."""
        return self.default_address_routing_type or self.default_queue_routing_type

    def merged_with(self, fallback: AddressSettings) -> AddressSettings:
        """Fields unset here are taken from `fallback` (a less specific match)."""
        changes = {
            f.name: getattr(fallback, f.name)
            for f in fields(self)
            if getattr(self, f.name) is None and getattr(fallback, f.name) is not None
        }
        return replace(self, **changes) if changes else self

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> AddressSettings:
        """Build from Artemis names (`default-ring-size`, ...) or Python names.

        Raises:
            PolicyError: unknown field or wrong type.
        """
        kwargs: dict[str, Any] = {}
        for raw_key, value in data.items():
            key = raw_key.replace("-", "_")
            if key not in _ADDRESS_CHECKS:
                raise PolicyError(f"unknown address-setting {raw_key!r}")
            check, expected = _ADDRESS_CHECKS[key]
            if key in _UPPER and isinstance(value, str):
                value = value.upper()
            if key == "redelivery_delay_multiplier" and type(value) is int:
                value = float(value)
            if not check(value):
                raise PolicyError(f"address-setting {raw_key!r} must be {expected}, got {value!r}")
            if key == "address_full_policy":
                value = AddressFullPolicy(value)
            elif key in _UPPER:
                value = RoutingType(value)
            kwargs[key] = value
        out = cls(**kwargs)
        _check_combination(out)
        return out

    def as_dict(self) -> dict[str, Any]:
        """Set fields only, with Artemis names."""
        out: dict[str, Any] = {}
        for f in fields(self):
            value = getattr(self, f.name)
            if value is not None:
                out[f.name.replace("_", "-")] = str(value) if f.name in _ENUMS else value
        return out


def _boolean(value: Any) -> bool:
    return type(value) is bool


_ADDRESS_CHECKS: Final[dict[str, tuple[_Check, str]]] = {
    "default_ring_size": (ring_size, "an integer >= -1"),
    "default_last_value_key": (string, "a string"),
    "default_non_destructive": (lambda v: type(v) is bool, "a boolean"),
    "default_exclusive_queue": (lambda v: type(v) is bool, "a boolean"),
    "default_group_buckets": (ring_size, "an integer >= -1 (-1: by group id, 0: no grouping)"),
    "default_group_rebalance": (lambda v: type(v) is bool, "a boolean"),
    "default_group_first_key": (lambda v: isinstance(v, str) and bool(v), "a non-empty string"),
    "address_full_policy": (
        lambda v: v in AddressFullPolicy.__members__,
        "one of PAGE, DROP, BLOCK, FAIL",
    ),
    "max_size_bytes": (ring_size, "an integer >= -1"),
    "max_size_messages": (ring_size, "an integer >= -1"),
    "dead_letter_address": (string, "a string"),
    "auto_create_dead_letter_resources": (_boolean, "a boolean"),
    "dead_letter_queue_prefix": (string, "a string"),
    "dead_letter_queue_suffix": (string, "a string"),
    "expiry_address": (string, "a string"),
    "auto_create_expiry_resources": (_boolean, "a boolean"),
    "expiry_queue_prefix": (string, "a string"),
    "expiry_queue_suffix": (string, "a string"),
    "max_delivery_attempts": (any_int, "an integer (-1 or 0: unlimited)"),
    "redelivery_delay": (non_negative_int, "a non-negative integer (ms)"),
    "redelivery_delay_multiplier": (
        lambda v: type(v) is float and v >= 1.0,
        "a number >= 1.0",
    ),
    "max_redelivery_delay": (non_negative_int, "a non-negative integer (ms)"),
    "auto_create_queues": (_boolean, "a boolean"),
    "auto_create_addresses": (_boolean, "a boolean"),
    "auto_delete_queues": (
        lambda v: v is False,
        "false (ringmq does not delete auto-created queues; see docs/configuration.md)",
    ),
    "auto_delete_addresses": (_boolean, "a boolean"),
    "default_address_routing_type": (
        lambda v: v in RoutingType.__members__,
        "ANYCAST or MULTICAST",
    ),
    "default_queue_routing_type": (
        lambda v: v in RoutingType.__members__,
        "ANYCAST or MULTICAST",
    ),
}
_UPPER: Final = frozenset(
    {"address_full_policy", "default_address_routing_type", "default_queue_routing_type"}
)

ARTEMIS_POLICY_KEYS: Final = frozenset(
    {
        "dead-letter-address",
        "auto-create-dead-letter-resources",
        "dead-letter-queue-prefix",
        "dead-letter-queue-suffix",
        "expiry-address",
        "auto-create-expiry-resources",
        "expiry-queue-prefix",
        "expiry-queue-suffix",
        "max-delivery-attempts",
        "redelivery-delay",
        "redelivery-delay-multiplier",
        "max-redelivery-delay",
    }
)
"""Artemis address-settings a policy may set as well (live, through the management API): the
undelivered-message ones. Their values are checked, and applied, by the address-settings'
rules (`artemis_part`; `settings._artemis_delivery`)."""


def artemis_part(definition: Mapping[str, Any]) -> AddressSettings | None:
    """The Artemis keys of a policy definition as address-settings (None: it has none).

    Raises:
        PolicyError: a value the address-setting would refuse.
    """
    part = {k: v for k, v in definition.items() if k in ARTEMIS_POLICY_KEYS}
    return AddressSettings.from_dict(part) if part else None


_ENUMS: Final = _UPPER


def _check_combination(s: AddressSettings) -> None:
    # Both routing-type defaults decide one thing here (a plain name is a queue or a topic):
    # two different values cannot both hold.
    a, q = s.default_address_routing_type, s.default_queue_routing_type
    if a is not None and q is not None and a is not q:
        raise PolicyError(
            f"default-address-routing-type {a} and default-queue-routing-type {q} differ: "
            "ringmq gives a plain address one routing type (set them equal)"
        )


class AddressSettingsTable:
    """Artemis address-settings keyed by wildcard match strings."""

    def __init__(self) -> None:
        self._entries: dict[str, AddressSettings] = {}

    def set(self, match: str, settings: AddressSettings | Mapping[str, Any]) -> AddressSettings:
        """Create or replace the entry for `match` (e.g. `ring.#`)."""
        if not match:
            raise PolicyError("address-setting match must not be empty")
        value = (
            settings
            if isinstance(settings, AddressSettings)
            else AddressSettings.from_dict(settings)
        )
        self._entries[match] = value
        return value

    def clear(self, match: str) -> bool:
        """Delete the entry for `match`; returns whether it existed."""
        return self._entries.pop(match, None) is not None

    def list(self) -> dict[str, AddressSettings]:
        """Every entry, by match string."""
        return dict(sorted(self._entries.items()))

    def resolve(self, address: str) -> AddressSettings:
        """Merge every matching entry, most specific first; unset fields inherit."""
        ordered = most_specific_first(m for m in self._entries if matches(m, address))
        result = AddressSettings()
        for match in ordered:
            result = result.merged_with(self._entries[match])
        return result
