"""Queue arguments: one table, one row per argument, read by every layer that knows them.

Theory of operation:

`QUEUE_ARGUMENTS` is the only place a queue argument is declared. A row says, for one
`x-*` (or `qpid.*`) declare argument:

* its name and its aliases (other argument names with the same meaning, e.g.
  `qpid.last_value_queue_key` for `x-last-value-key`);
* the `QueueSettings` field it sets, its limit family (`ring`, `rabbit`, `qpid`: see
  `ringmq.core.settings`) and how it combines with other rows setting the same field
  (`Merge`);
* its parser, which validates a declared value with RabbitMQ's rules and its exact error text
  (`SettingsError`, 406 PRECONDITION_FAILED on the wire), and the value that means "not set"
  (`off`: -1 for `x-ring-size`, 0 for the Qpid counts and `x-max-priority`);
* its policy key, if policies may set it, with the policy validator, what that validator
  expects (for `PolicyError` text) and how a validated policy value becomes the field value;
* its key in the management API's queue settings (`PUT .../settings`), if any;
* the Artemis address-setting that gives its default (`default-ring-size`...), if any, how a
  broker.xml default becomes a declared argument, and which declared arguments suppress it;
* whether a redeclare with a different value is refused (RabbitMQ compares only arguments with
  semantics; all of ringmq's do);
* an example of a valid value (documentation, and what the consistency tests declare).

Readers: `ringmq.core.settings` (argument parsing, policy values, address-setting defaults),
`ringmq.core.policies` (`POLICY_KEYS`), `ringmq.core.broker` (redeclare equivalence),
`ringmq.management.admin` (`SETTING_ARGUMENTS`) and `ringmq.server.configfile` (broker.xml
argument names and address-setting defaults) all derive their views from this table.
`tests/unit/core/test_queue_arguments.py` checks that each reads every row the same way.

This module is pure data and validation; it imports nothing from ringmq.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from enum import Enum, StrEnum
from typing import Any, Final

__all__ = [
    "ADDRESS_DEFAULTS",
    "ARTEMIS_LEGACY_LVQ_KEY",
    "BY_ARGUMENT",
    "EQUIVALENCE_ARGUMENTS",
    "IMPLEMENTED_QUEUE_TYPES",
    "LAST_VALUE",
    "LAST_VALUE_KEY",
    "MAX_PRIORITY",
    "NON_DESTRUCTIVE",
    "QPID_LEGACY_LVQ_KEY",
    "QUEUE_ARGUMENTS",
    "RING_SIZE",
    "SETTING_ARGUMENTS",
    "SINGLE_ACTIVE_CONSUMER",
    "UNSET",
    "Merge",
    "Overflow",
    "QpidPolicy",
    "QueueArgument",
    "SettingsError",
    "any_int",
    "boolean",
    "non_negative_int",
    "parse_max_age",
    "positive_int",
    "ring_size",
    "string",
]

ARTEMIS_LEGACY_LVQ_KEY: Final = "_AMQ_LVQ_NAME"
"""Key used by Artemis' legacy `last-value=true` queues (`x-last-value: true` here)."""
QPID_LEGACY_LVQ_KEY: Final = "qpid.LVQ_key"
"""Key used by Qpid's legacy `qpid.last_value_queue` flag."""
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


class Merge(Enum):
    """How a row's value combines with an earlier row that set the same field."""

    SET = "set"
    """The later argument wins."""
    SAME = "same"
    """Both must agree (two different last-value keys are refused)."""
    KEEP = "keep"
    """An earlier value is kept (the legacy last-value flags only supply a default key)."""


# --- argument parsers: (queue name, argument name, value) -> field value or UNSET -----------


def _err(queue: str, arg: str, expected: str, value: Any) -> SettingsError:
    return SettingsError(
        f"invalid arg '{arg}' for queue '{queue}': expected {expected}, got {value!r}"
    )


def _int_arg(queue: str, arg: str, value: Any, *, minimum: int) -> int:
    # RabbitMQ checks the AMQP field type: a bool, float or string is not an integer.
    if type(value) is not int:
        raise _err(queue, arg, "an integer", value)
    if value < minimum:
        what = "a non-negative integer" if minimum == 0 else f"an integer >= {minimum}"
        if minimum == 1:
            what = "a positive integer"
        raise _err(queue, arg, what, value)
    return value


def _qpid_int(queue: str, arg: str, value: Any) -> int:
    # Qpid converts Variants: numeric strings are accepted (qpid-config sends them).
    if isinstance(value, str) and value.strip().isdigit():
        return int(value.strip())
    return _int_arg(queue, arg, value, minimum=0)


def _bool_arg(queue: str, arg: str, value: Any) -> bool:
    if type(value) is not bool:
        raise _err(queue, arg, "a boolean", value)
    return value


def _str_arg(queue: str, arg: str, value: Any) -> str:
    if isinstance(value, bytes):
        try:
            return value.decode()
        except UnicodeDecodeError:
            raise _err(queue, arg, "a UTF-8 string", value) from None
    if not isinstance(value, str):
        raise _err(queue, arg, "a string", value)
    return value


Parser = Callable[[str, str, Any], Any]


def _int_from(minimum: int) -> Parser:
    def parse(queue: str, arg: str, value: Any) -> int:
        return _int_arg(queue, arg, value, minimum=minimum)

    return parse


def _overflow_arg(queue: str, arg: str, value: Any) -> Overflow:
    text = _str_arg(queue, arg, value)
    try:
        return Overflow(text)
    except ValueError:
        allowed = "one of " + ", ".join(o.value for o in Overflow)
        raise _err(queue, arg, allowed, value) from None


def _qpid_policy_arg(queue: str, arg: str, value: Any) -> QpidPolicy:
    text = _str_arg(queue, arg, value).lower()
    try:
        return QpidPolicy(text)
    except ValueError:
        allowed = "one of " + ", ".join(p.value for p in QpidPolicy)
        raise _err(queue, arg, allowed, value) from None


def _lvq_key_arg(queue: str, arg: str, value: Any) -> str:
    key = _str_arg(queue, arg, value)
    if not key:
        raise _err(queue, arg, "a non-empty string", value)
    return key


def _last_value_arg(queue: str, arg: str, value: Any) -> Any:
    return ARTEMIS_LEGACY_LVQ_KEY if _bool_arg(queue, arg, value) else UNSET


def _qpid_last_value_arg(queue: str, arg: str, value: Any) -> Any:
    return QPID_LEGACY_LVQ_KEY if value not in (0, False) else UNSET


def _delivery_limit_arg(queue: str, arg: str, value: Any) -> int | None:
    limit = _int_arg(queue, arg, value, minimum=-(2**63))
    return limit if limit >= 0 else None


def _priority_arg(queue: str, arg: str, value: Any) -> int:
    prio = _int_arg(queue, arg, value, minimum=0)
    if prio > MAX_PRIORITY:
        raise _err(queue, arg, f"an integer from 0 to {MAX_PRIORITY}", value)
    return prio


def _queue_type_arg(queue: str, arg: str, value: Any) -> Any:
    kind = _str_arg(queue, arg, value)
    if kind not in IMPLEMENTED_QUEUE_TYPES:
        raise SettingsError(
            f"invalid arg 'x-queue-type' for queue '{queue}': queue type "
            f"{kind!r} is not implemented by ringmq (only "
            + " and ".join(f"'{k}'" for k in sorted(IMPLEMENTED_QUEUE_TYPES))
            + " queues are)"
        )
    return kind


def _dead_letter_strategy_arg(queue: str, arg: str, value: Any) -> str:
    strategy = _str_arg(queue, arg, value)
    if strategy not in DEAD_LETTER_STRATEGIES:
        raise _err(queue, arg, "at-most-once or at-least-once", value)
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


def _max_age_arg(queue: str, arg: str, value: Any) -> Any:
    # A stream's retention by age (ringmq.core.streamlog reads it): validated here.
    try:
        parse_max_age(value)
    except ValueError:
        raise _err(
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


def _overflow_value(value: Any) -> bool:
    return value in ("drop-head", "reject-publish", "reject-publish-dlx")


def _same(value: Any) -> Any:
    return value


def _policy_ring_size(value: Any) -> int:
    # ValueError: the settings resolver reports "policy for queue ...: bad ring-size ..."
    if type(value) is not int or value < -1:
        raise ValueError(value)
    return value


def _policy_delivery_limit(value: Any) -> int | None:
    return value if type(value) is int and value >= 0 else None


def _default_if_set(value: Any) -> Any:
    # broker.xml: a default declares the argument only when set to something (not "", false)
    return value or None


def _default_ring_size(value: Any) -> int | None:
    return value if value is not None and value >= 0 else None


@dataclass(frozen=True, slots=True)
class QueueArgument:
    """One queue argument and every layer's view of it (see the module docstring)."""

    argument: str
    """The declare argument name (`x-*`, or `qpid.*` for Qpid's own)."""
    field: str | None
    """The `QueueSettings` field it sets; None: validated only."""
    parse: Parser
    """(queue, argument, value) -> field value, or UNSET; raises `SettingsError`."""
    example: Any
    """A valid value."""
    aliases: tuple[str, ...] = ()
    family: str | None = None
    """Limit family (`ring`, `rabbit`, `qpid`) for size-limit arguments."""
    merge: Merge = Merge.SET
    off: int | None = None
    """The parsed value that means "not set" (None: every valid value sets the field)."""
    policy_key: str | None = None
    policy_check: Callable[[Any], bool] | None = None
    policy_expected: str = ""
    """What `policy_check` accepts, for the policy error text."""
    policy_value: Callable[[Any], Any] = _same
    """Validated policy value -> field value; a ValueError is reported as a bad value."""
    setting_key: str | None = None
    """Key in the management API's queue settings (`PUT .../settings`)."""
    address_default: str | None = None
    """The Artemis address-setting giving this argument's default (`default-ring-size`)."""
    default_argument: Callable[[Any], Any] = _default_if_set
    """broker.xml address-setting default -> argument value to declare (None: declare none)."""
    default_unless: tuple[str, ...] = ()
    """Declared arguments (besides this one) that suppress the broker.xml default."""
    redeclare: bool = True
    """A redeclare with a different value is refused (406 inequivalent arg)."""

    @property
    def names(self) -> tuple[str, ...]:
        """The argument and its aliases."""
        return (self.argument, *self.aliases)


RING_SIZE: Final = QueueArgument(
    "x-ring-size",
    "ring_size",
    _int_from(-1),
    example=3,
    family="ring",
    off=-1,
    policy_key="ring-size",
    policy_check=ring_size,
    policy_expected="an integer >= -1 (-1: no ring)",
    policy_value=_policy_ring_size,
    setting_key="ring-size",
    address_default="default-ring-size",
    default_argument=_default_ring_size,
)
LAST_VALUE_KEY: Final = QueueArgument(
    "x-last-value-key",
    "lvq_key",
    _lvq_key_arg,
    example="sym",
    aliases=("qpid.last_value_queue_key",),
    merge=Merge.SAME,
    setting_key="last-value-key",
    address_default="default-last-value-key",
)
LAST_VALUE: Final = QueueArgument(
    "x-last-value",
    "lvq_key",
    _last_value_arg,
    example=True,
    merge=Merge.KEEP,
    address_default="default-last-value-queue",
    default_unless=("x-last-value-key",),
)
NON_DESTRUCTIVE: Final = QueueArgument(
    "x-non-destructive",
    "non_destructive",
    _bool_arg,
    example=True,
    address_default="default-non-destructive",
)
SINGLE_ACTIVE_CONSUMER: Final = QueueArgument(
    "x-single-active-consumer",
    "single_active_consumer",
    _bool_arg,
    example=True,
    address_default="default-exclusive-queue",
)

QUEUE_ARGUMENTS: Final[tuple[QueueArgument, ...]] = (
    RING_SIZE,
    QueueArgument(
        "x-max-length",
        "max_length",
        _int_from(0),
        example=5,
        family="rabbit",
        policy_key="max-length",
        policy_check=non_negative_int,
        policy_expected="a non-negative integer",
        setting_key="max-length",
    ),
    QueueArgument(
        "x-max-length-bytes",
        "max_length_bytes",
        _int_from(0),
        example=1000,
        family="rabbit",
        policy_key="max-length-bytes",
        policy_check=non_negative_int,
        policy_expected="a non-negative integer",
        setting_key="max-length-bytes",
    ),
    QueueArgument(
        "x-overflow",
        "overflow",
        _overflow_arg,
        example="reject-publish",
        family="rabbit",
        policy_key="overflow",
        policy_check=_overflow_value,
        policy_expected="one of drop-head, reject-publish, reject-publish-dlx",
        policy_value=Overflow,
        setting_key="overflow",
    ),
    QueueArgument("qpid.max_count", "qpid_max_count", _qpid_int, example=10, family="qpid", off=0),
    QueueArgument("qpid.max_size", "qpid_max_size", _qpid_int, example=1000, family="qpid", off=0),
    QueueArgument(
        "qpid.policy_type", "qpid_policy", _qpid_policy_arg, example="ring", family="qpid"
    ),
    LAST_VALUE_KEY,
    LAST_VALUE,
    QueueArgument(
        "qpid.last_value_queue", "lvq_key", _qpid_last_value_arg, example=1, merge=Merge.KEEP
    ),
    NON_DESTRUCTIVE,
    QueueArgument(
        "x-message-ttl",
        "message_ttl_ms",
        _int_from(0),
        example=60000,
        policy_key="message-ttl",
        policy_check=non_negative_int,
        policy_expected="a non-negative integer",
        setting_key="message-ttl",
    ),
    QueueArgument(
        "x-expires",
        "expires_ms",
        _int_from(1),
        example=60000,
        policy_key="expires",
        policy_check=positive_int,
        policy_expected="a positive integer",
        setting_key="expires",
    ),
    QueueArgument(
        "x-dead-letter-exchange",
        "dead_letter_exchange",
        _str_arg,
        example="dlx",
        policy_key="dead-letter-exchange",
        policy_check=string,
        policy_expected="a string",
        setting_key="dead-letter-exchange",
    ),
    QueueArgument(
        "x-dead-letter-routing-key",
        "dead_letter_routing_key",
        _str_arg,
        example="dead",
        policy_key="dead-letter-routing-key",
        policy_check=string,
        policy_expected="a string",
        setting_key="dead-letter-routing-key",
    ),
    QueueArgument(
        "x-delivery-limit",
        "delivery_limit",
        _delivery_limit_arg,
        example=3,
        policy_key="delivery-limit",
        policy_check=any_int,
        policy_expected="an integer (negative: unlimited)",
        policy_value=_policy_delivery_limit,
        setting_key="delivery-limit",
    ),
    QueueArgument("x-max-priority", "max_priority", _priority_arg, example=10, off=0),
    QueueArgument(
        "x-consumer-timeout",
        "consumer_timeout_ms",
        _int_from(1),
        example=60000,
        policy_key="consumer-timeout",
        policy_check=positive_int,
        policy_expected="a positive integer",
        setting_key="consumer-timeout",
    ),
    SINGLE_ACTIVE_CONSUMER,
    # Artemis' message groups (ringmq.core.groups); queue attributes there, x- arguments here
    QueueArgument(
        "x-group-buckets",
        "group_buckets",
        _int_from(-1),
        example=16,
        off=-1,
        policy_key="group-buckets",
        policy_check=ring_size,
        policy_expected="an integer >= -1 (-1: by group id, 0: no grouping)",
        setting_key="group-buckets",
        address_default="default-group-buckets",
        default_argument=_default_ring_size,
    ),
    QueueArgument(
        "x-group-rebalance",
        "group_rebalance",
        _bool_arg,
        example=True,
        policy_key="group-rebalance",
        policy_check=boolean,
        policy_expected="a boolean",
        setting_key="group-rebalance",
        address_default="default-group-rebalance",
    ),
    QueueArgument(
        "x-group-first-key",
        "group_first_key",
        _lvq_key_arg,
        example="JMSXGroupFirstForConsumer",
        policy_key="group-first-key",
        policy_check=lambda v: isinstance(v, str) and bool(v),
        policy_expected="a non-empty string",
        setting_key="group-first-key",
        address_default="default-group-first-key",
    ),
    QueueArgument("x-queue-type", "queue_type", _queue_type_arg, example="classic"),
    # quorum queues' own (RabbitMQ 4): accepted and reported; ringmq replicates per shard
    QueueArgument(
        "x-quorum-initial-group-size",
        "quorum_initial_group_size",
        lambda queue, arg, value: _int_arg(queue, arg, value, minimum=1),
        example=3,
    ),
    QueueArgument(
        "x-dead-letter-strategy",
        "dead_letter_strategy",
        _dead_letter_strategy_arg,
        example="at-least-once",
        policy_key="dead-letter-strategy",
        policy_check=lambda v: v in DEAD_LETTER_STRATEGIES,
        policy_expected="at-most-once or at-least-once",
    ),
    # stream queues' (ringmq.core.streamlog reads them from the declared arguments)
    QueueArgument("x-max-age", None, _max_age_arg, example="7D"),
    QueueArgument("x-stream-max-segment-size-bytes", None, _int_from(1), example=1_000_000),
)
"""Every queue argument ringmq understands; other arguments are ignored, as RabbitMQ does."""

BY_ARGUMENT: Final[Mapping[str, QueueArgument]] = {
    name: row for row in QUEUE_ARGUMENTS for name in row.names
}
"""Argument name or alias -> its row."""

EQUIVALENCE_ARGUMENTS: Final = frozenset(
    name for row in QUEUE_ARGUMENTS if row.redeclare for name in row.names
)
"""Queue arguments compared on redeclare (RabbitMQ compares only those with semantics)."""

SETTING_ARGUMENTS: Final[dict[str, str]] = {
    row.setting_key: row.argument for row in QUEUE_ARGUMENTS if row.setting_key is not None
}
"""Management queue-settings key -> the queue argument it sets."""

ADDRESS_DEFAULTS: Final[tuple[QueueArgument, ...]] = tuple(
    row for row in QUEUE_ARGUMENTS if row.address_default is not None
)
"""Rows whose default an Artemis address-setting gives, in table order (the order matters:
`x-last-value-key` is applied before `x-last-value`, which it suppresses)."""
