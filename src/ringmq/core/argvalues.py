"""Queue argument values: the rules of one value, which the rows of `arguments.QUEUE_ARGUMENTS`
name.

Theory of operation: a row of the table (`core.arguments`) says which parser validates its
declared value, which validator checks its policy value and how a policy or broker.xml value
becomes the field value; those functions, and the value types they produce (`Overflow`,
`QpidPolicy`, `UNSET` for a valid value that sets nothing) with the error they raise
(`SettingsError`, 406 PRECONDITION_FAILED on the wire, with RabbitMQ's exact text), are here.
A parser takes (queue name, argument name, value); a validator takes the value and answers a
bool. Each rule is written once: the table names these functions, and no other layer parses an
argument itself. Stateless.

This module is pure data and validation; it imports nothing from ringmq.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from enum import Enum, StrEnum
from typing import Any, Final

__all__ = [
    "IMPLEMENTED_QUEUE_TYPES",
    "MAX_PRIORITY",
    "UNSET",
    "LeaderLocator",
    "Overflow",
    "QpidPolicy",
    "SettingsError",
    "any_int",
    "boolean",
    "non_negative_int",
    "parse_max_age",
    "positive_int",
    "ring_size",
    "string",
]

MAX_PRIORITY: Final = 255
IMPLEMENTED_QUEUE_TYPES: Final = frozenset({"classic", "quorum", "stream"})
"""`x-queue-type` values ringmq serves; others are refused, not downgraded. A quorum
queue is a durable queue with RabbitMQ's quorum rules (`ringmq.core.settings`); a stream
is an append-only log (`ringmq.core.streamlog`)."""
DEAD_LETTER_STRATEGIES: Final = ("at-most-once", "at-least-once")


class SettingsError(ValueError):
    """An invalid queue argument or combination (AMQP: 406 PRECONDITION_FAILED)."""


class Overflow(StrEnum):
    """RabbitMQ `x-overflow`."""

    DROP_HEAD = "drop-head"
    REJECT_PUBLISH = "reject-publish"
    REJECT_PUBLISH_DLX = "reject-publish-dlx"


class LeaderLocator(StrEnum):
    """RabbitMQ `x-queue-leader-locator` / policy `queue-leader-locator` (3.12+): where a
    new queue is placed (`ringmq.core.placement`)."""

    CLIENT_LOCAL = "client-local"
    BALANCED = "balanced"


LEGACY_LEADER_LOCATORS: Final = ("random", "least-leaders", "min-masters")
"""Older locator values RabbitMQ still accepts in the argument and reads as `balanced`
(`rabbit_queue_location:leader_locator0`)."""
POLICY_LEADER_LOCATORS: Final = ("client-local", "balanced", "random", "least-leaders")
"""What RabbitMQ's policy validator accepts for `queue-leader-locator` (`rabbit_policies`:
`min-masters` is an argument value only)."""


class QpidPolicy(StrEnum):
    """Qpid C++ (0.10-0.18) `qpid.policy_type`."""

    REJECT = "reject"
    RING = "ring"
    RING_STRICT = "ring_strict"
    FLOW_TO_DISK = "flow_to_disk"


class _Unset(Enum):
    UNSET = "unset"


UNSET: Final = _Unset.UNSET
"""Returned by a parser for a valid value that sets nothing (`x-last-value: false`)."""


# --- argument parsers: (queue name, argument name, value) -> field value or UNSET -----------


def err(queue: str, arg: str, expected: str, value: Any) -> SettingsError:
    return SettingsError(
        f"invalid arg '{arg}' for queue '{queue}': expected {expected}, got {value!r}"
    )


def int_arg(queue: str, arg: str, value: Any, *, minimum: int) -> int:
    # RabbitMQ checks the AMQP field type: a bool, float or string is not an integer.
    if type(value) is not int:
        raise err(queue, arg, "an integer", value)
    if value < minimum:
        what = "a non-negative integer" if minimum == 0 else f"an integer >= {minimum}"
        if minimum == 1:
            what = "a positive integer"
        raise err(queue, arg, what, value)
    return value


def qpid_int(queue: str, arg: str, value: Any) -> int:
    # Qpid converts Variants: numeric strings are accepted (qpid-config sends them).
    if isinstance(value, str) and value.strip().isdigit():
        return int(value.strip())
    return int_arg(queue, arg, value, minimum=0)


def bool_arg(queue: str, arg: str, value: Any) -> bool:
    if type(value) is not bool:
        raise err(queue, arg, "a boolean", value)
    return value


def str_arg(queue: str, arg: str, value: Any) -> str:
    if isinstance(value, bytes):
        try:
            return value.decode()
        except UnicodeDecodeError:
            raise err(queue, arg, "a UTF-8 string", value) from None
    if not isinstance(value, str):
        raise err(queue, arg, "a string", value)
    return value


Parser = Callable[[str, str, Any], Any]


def int_from(minimum: int) -> Parser:
    def parse(queue: str, arg: str, value: Any) -> int:
        return int_arg(queue, arg, value, minimum=minimum)

    return parse


def overflow_arg(queue: str, arg: str, value: Any) -> Overflow:
    text = str_arg(queue, arg, value)
    try:
        return Overflow(text)
    except ValueError:
        allowed = "one of " + ", ".join(o.value for o in Overflow)
        raise err(queue, arg, allowed, value) from None


def qpid_policy_arg(queue: str, arg: str, value: Any) -> QpidPolicy:
    text = str_arg(queue, arg, value).lower()
    try:
        return QpidPolicy(text)
    except ValueError:
        allowed = "one of " + ", ".join(p.value for p in QpidPolicy)
        raise err(queue, arg, allowed, value) from None


def leader_locator(value: str) -> LeaderLocator:
    """A validated locator value as RabbitMQ reads it: the legacy ones mean `balanced`."""
    return LeaderLocator.BALANCED if value in LEGACY_LEADER_LOCATORS else LeaderLocator(value)


def leader_locator_arg(queue: str, arg: str, value: Any) -> LeaderLocator:
    text = str_arg(queue, arg, value)
    try:
        return leader_locator(text)
    except ValueError:
        allowed = ", ".join((*(loc.value for loc in LeaderLocator), *LEGACY_LEADER_LOCATORS))
        raise err(queue, arg, f"one of {allowed}", value) from None


def lvq_key_arg(queue: str, arg: str, value: Any) -> str:
    key = str_arg(queue, arg, value)
    if not key:
        raise err(queue, arg, "a non-empty string", value)
    return key


def delivery_limit_arg(queue: str, arg: str, value: Any) -> int | None:
    limit = int_arg(queue, arg, value, minimum=-(2**63))
    return limit if limit >= 0 else None


def priority_arg(queue: str, arg: str, value: Any) -> int:
    prio = int_arg(queue, arg, value, minimum=0)
    if prio > MAX_PRIORITY:
        raise err(queue, arg, f"an integer from 0 to {MAX_PRIORITY}", value)
    return prio


def queue_type_arg(queue: str, arg: str, value: Any) -> Any:
    kind = str_arg(queue, arg, value)
    if kind not in IMPLEMENTED_QUEUE_TYPES:
        raise SettingsError(
            f"invalid arg 'x-queue-type' for queue '{queue}': queue type "
            f"{kind!r} is not implemented by ringmq (only "
            + " and ".join(f"'{k}'" for k in sorted(IMPLEMENTED_QUEUE_TYPES))
            + " queues are)"
        )
    return kind


def dead_letter_strategy_arg(queue: str, arg: str, value: Any) -> str:
    strategy = str_arg(queue, arg, value)
    if strategy not in DEAD_LETTER_STRATEGIES:
        raise err(queue, arg, "at-most-once or at-least-once", value)
    return strategy


_AGE: Final = re.compile(r"^([0-9]+)([YMDhms])$")
_AGE_MS: Final = {
    "Y": 365 * 86_400_000,
    "M": 30 * 86_400_000,
    "D": 86_400_000,
    "h": 3_600_000,
    "m": 60_000,
    "s": 1000,
}


def parse_max_age(value: Any) -> int:
    """An `x-max-age` or interval string (`7D`, `1h`, `30s`: RabbitMQ's units Y M D h m s) in
    milliseconds; ValueError for anything else."""
    text = value.decode() if isinstance(value, bytes) else value
    m = _AGE.match(text) if isinstance(text, str) else None
    if m is None:
        raise ValueError(value)
    return int(m.group(1)) * _AGE_MS[m.group(2)]


def max_age_arg(queue: str, arg: str, value: Any) -> Any:
    # A stream's retention by age (ringmq.core.streamlog reads it): validated here.
    try:
        parse_max_age(value)
    except ValueError:
        raise err(
            queue, arg, "a duration such as '7D' or '1h' (units Y M D h m s)", value
        ) from None
    return UNSET


# --- policy validators: value -> bool (policies refuse a definition that fails one) ---------


def non_negative_int(value: Any) -> bool:
    return type(value) is int and value >= 0


def positive_int(value: Any) -> bool:
    return type(value) is int and value > 0


def any_int(value: Any) -> bool:
    return type(value) is int


def ring_size(value: Any) -> bool:
    return type(value) is int and value >= -1


def string(value: Any) -> bool:
    return isinstance(value, str)


def boolean(value: Any) -> bool:
    return type(value) is bool


def overflow_value(value: Any) -> bool:
    return value in ("drop-head", "reject-publish", "reject-publish-dlx")


def leader_locator_value(value: Any) -> bool:
    return value in POLICY_LEADER_LOCATORS


def same(value: Any) -> Any:
    return value


def policy_ring_size(value: Any) -> int:
    # ValueError: the settings resolver reports "policy for queue ...: bad ring-size ..."
    if type(value) is not int or value < -1:
        raise ValueError(value)
    return value


def policy_delivery_limit(value: Any) -> int | None:
    return value if type(value) is int and value >= 0 else None


def default_if_set(value: Any) -> Any:
    # broker.xml: a default declares the argument only when set to something (not "", false)
    return value or None


def default_ring_size(value: Any) -> int | None:
    return value if value is not None and value >= 0 else None
