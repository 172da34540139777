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
  expects (for `PolicyError` text), how a validated policy value becomes the field value and
  whether the policy beats the argument (`policy_wins`, RabbitMQ's rule for its locator);
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

The rules of one value (parsers, policy validators, the value types) are
`ringmq.core.argvalues`'; the rows name them.

This module is pure data; it imports nothing from ringmq but `argvalues`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from enum import Enum
from typing import Any, Final

from ringmq.core.argvalues import (
    DEAD_LETTER_STRATEGIES,
    UNSET,
    Overflow,
    Parser,
    any_int,
    bool_arg,
    boolean,
    dead_letter_strategy_arg,
    default_if_set,
    default_ring_size,
    delivery_limit_arg,
    int_arg,
    int_from,
    leader_locator,
    leader_locator_arg,
    leader_locator_value,
    lvq_key_arg,
    max_age_arg,
    non_negative_int,
    overflow_arg,
    overflow_value,
    policy_delivery_limit,
    policy_ring_size,
    positive_int,
    priority_arg,
    qpid_int,
    qpid_policy_arg,
    queue_type_arg,
    ring_size,
    same,
    str_arg,
    string,
)

__all__ = [
    "ADDRESS_DEFAULTS",
    "ARTEMIS_LEGACY_LVQ_KEY",
    "BY_ARGUMENT",
    "EQUIVALENCE_ARGUMENTS",
    "LAST_VALUE",
    "LAST_VALUE_KEY",
    "NON_DESTRUCTIVE",
    "QPID_LEGACY_LVQ_KEY",
    "QUEUE_ARGUMENTS",
    "RING_SIZE",
    "SETTING_ARGUMENTS",
    "SINGLE_ACTIVE_CONSUMER",
    "Merge",
    "QueueArgument",
]

ARTEMIS_LEGACY_LVQ_KEY: Final = "_AMQ_LVQ_NAME"
"""Key used by Artemis' legacy `last-value=true` queues (`x-last-value: true` here)."""
QPID_LEGACY_LVQ_KEY: Final = "qpid.LVQ_key"
"""Key used by Qpid's legacy `qpid.last_value_queue` flag."""


class Merge(Enum):
    """How a row's value combines with an earlier row that set the same field."""

    SET = "set"
    """The later argument wins."""
    SAME = "same"
    """Both must agree (two different last-value keys are refused)."""
    KEEP = "keep"
    """An earlier value is kept (the legacy last-value flags only supply a default key)."""


def _last_value_arg(queue: str, arg: str, value: Any) -> Any:
    return ARTEMIS_LEGACY_LVQ_KEY if bool_arg(queue, arg, value) else UNSET


def _qpid_last_value_arg(queue: str, arg: str, value: Any) -> Any:
    return QPID_LEGACY_LVQ_KEY if value not in (0, False) else UNSET


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
    policy_value: Callable[[Any], Any] = same
    """Validated policy value -> field value; a ValueError is reported as a bad value."""
    policy_wins: bool = False
    """The policy's value beats the argument's (RabbitMQ reads `queue-leader-locator` policy
    first); otherwise the argument wins, as for every other key."""
    setting_key: str | None = None
    """Key in the management API's queue settings (`PUT .../settings`)."""
    address_default: str | None = None
    """The Artemis address-setting giving this argument's default (`default-ring-size`)."""
    default_argument: Callable[[Any], Any] = default_if_set
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
    int_from(-1),
    example=3,
    family="ring",
    off=-1,
    policy_key="ring-size",
    policy_check=ring_size,
    policy_expected="an integer >= -1 (-1: no ring)",
    policy_value=policy_ring_size,
    setting_key="ring-size",
    address_default="default-ring-size",
    default_argument=default_ring_size,
)
LAST_VALUE_KEY: Final = QueueArgument(
    "x-last-value-key",
    "lvq_key",
    lvq_key_arg,
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
    bool_arg,
    example=True,
    address_default="default-non-destructive",
)
SINGLE_ACTIVE_CONSUMER: Final = QueueArgument(
    "x-single-active-consumer",
    "single_active_consumer",
    bool_arg,
    example=True,
    address_default="default-exclusive-queue",
)

QUEUE_ARGUMENTS: Final[tuple[QueueArgument, ...]] = (
    RING_SIZE,
    QueueArgument(
        "x-max-length",
        "max_length",
        int_from(0),
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
        int_from(0),
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
        overflow_arg,
        example="reject-publish",
        family="rabbit",
        policy_key="overflow",
        policy_check=overflow_value,
        policy_expected="one of drop-head, reject-publish, reject-publish-dlx",
        policy_value=Overflow,
        setting_key="overflow",
    ),
    QueueArgument("qpid.max_count", "qpid_max_count", qpid_int, example=10, family="qpid", off=0),
    QueueArgument("qpid.max_size", "qpid_max_size", qpid_int, example=1000, family="qpid", off=0),
    QueueArgument(
        "qpid.policy_type", "qpid_policy", qpid_policy_arg, example="ring", family="qpid"
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
        int_from(0),
        example=60000,
        policy_key="message-ttl",
        policy_check=non_negative_int,
        policy_expected="a non-negative integer",
        setting_key="message-ttl",
    ),
    QueueArgument(
        "x-expires",
        "expires_ms",
        int_from(1),
        example=60000,
        policy_key="expires",
        policy_check=positive_int,
        policy_expected="a positive integer",
        setting_key="expires",
    ),
    QueueArgument(
        "x-dead-letter-exchange",
        "dead_letter_exchange",
        str_arg,
        example="dlx",
        policy_key="dead-letter-exchange",
        policy_check=string,
        policy_expected="a string",
        setting_key="dead-letter-exchange",
    ),
    QueueArgument(
        "x-dead-letter-routing-key",
        "dead_letter_routing_key",
        str_arg,
        example="dead",
        policy_key="dead-letter-routing-key",
        policy_check=string,
        policy_expected="a string",
        setting_key="dead-letter-routing-key",
    ),
    QueueArgument(
        "x-delivery-limit",
        "delivery_limit",
        delivery_limit_arg,
        example=3,
        policy_key="delivery-limit",
        policy_check=any_int,
        policy_expected="an integer (negative: unlimited)",
        policy_value=policy_delivery_limit,
        setting_key="delivery-limit",
    ),
    QueueArgument("x-max-priority", "max_priority", priority_arg, example=10, off=0),
    QueueArgument(
        "x-consumer-timeout",
        "consumer_timeout_ms",
        int_from(1),
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
        int_from(-1),
        example=16,
        off=-1,
        policy_key="group-buckets",
        policy_check=ring_size,
        policy_expected="an integer >= -1 (-1: by group id, 0: no grouping)",
        setting_key="group-buckets",
        address_default="default-group-buckets",
        default_argument=default_ring_size,
    ),
    QueueArgument(
        "x-group-rebalance",
        "group_rebalance",
        bool_arg,
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
        lvq_key_arg,
        example="JMSXGroupFirstForConsumer",
        policy_key="group-first-key",
        policy_check=lambda v: isinstance(v, str) and bool(v),
        policy_expected="a non-empty string",
        setting_key="group-first-key",
        address_default="default-group-first-key",
    ),
    QueueArgument("x-queue-type", "queue_type", queue_type_arg, example="classic"),
    # where the queue is placed (ringmq.core.placement); any queue type, streams included.
    # RabbitMQ reads the policy first (rabbit_queue_location:leader_locator).
    QueueArgument(
        "x-queue-leader-locator",
        "queue_leader_locator",
        leader_locator_arg,
        example="balanced",
        policy_key="queue-leader-locator",
        policy_check=leader_locator_value,
        policy_expected="one of client-local, balanced, random, least-leaders",
        policy_value=leader_locator,
        policy_wins=True,
    ),
    # quorum queues' own (RabbitMQ 4): accepted and reported; ringmq replicates per shard
    QueueArgument(
        "x-quorum-initial-group-size",
        "quorum_initial_group_size",
        lambda queue, arg, value: int_arg(queue, arg, value, minimum=1),
        example=3,
    ),
    QueueArgument(
        "x-dead-letter-strategy",
        "dead_letter_strategy",
        dead_letter_strategy_arg,
        example="at-least-once",
        policy_key="dead-letter-strategy",
        policy_check=lambda v: v in DEAD_LETTER_STRATEGIES,
        policy_expected="at-most-once or at-least-once",
    ),
    # stream queues' (ringmq.core.streamlog reads them from the declared arguments)
    QueueArgument("x-max-age", None, max_age_arg, example="7D"),
    QueueArgument("x-stream-max-segment-size-bytes", None, int_from(1), example=1_000_000),
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
