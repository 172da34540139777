"""Effective queue settings: queue arguments, then policy, then address-settings, then defaults.

Theory of operation:

`resolve_queue_settings` turns three configuration sources into one frozen `QueueSettings`:

1. the queue's `x-*` / `qpid.*` declare arguments (validated exactly: wrong type, negative size,
   unknown overflow or policy value -> `SettingsError`, which the AMQP layer maps to 406
   PRECONDITION_FAILED);
2. the effective RabbitMQ policy definition (`PolicyTable.match`), already validated when set;
3. the Artemis address-settings resolved for the queue name (`AddressSettingsTable.resolve`).

Ordinary keys (TTL, dead-lettering, delivery limit...) are merged key by key: the first source
that sets a key wins, except where RabbitMQ resolves otherwise: a row marked `policy_wins`
(`queue-leader-locator`) takes the policy's value over the argument's, and of two consumer
timeouts the lower wins. The *size limit* is different, because the three brokers have three
incompatible limit families:

* `ring`   (Artemis): `x-ring-size` / policy `ring-size` / address `default-ring-size`;
* `rabbit` (RabbitMQ): `x-max-length`, `x-max-length-bytes`, `x-overflow`;
* `qpid`   (Qpid C++ legacy): `qpid.max_count`, `qpid.max_size`, `qpid.policy_type`;
* `address` (Artemis address-full): `max-size-bytes`, `max-size-messages`, `address-full-policy`.

The highest-precedence source that sets any key of a family *claims* the limit; keys of that
family are then merged across sources (so `x-overflow=reject-publish` with a `max-length`
policy works, as in RabbitMQ), and the other families are ignored. Two families in the same
source are refused. The result is one explicit `Limit`: what is counted (`Counted`), the count
and byte bounds, and the overflow action (`LimitAction`). The queue engine reads only `Limit`.

What each argument, policy key and address-setting default means (name, aliases, field,
parser and error text, family) is declared once, in `ringmq.core.arguments.QUEUE_ARGUMENTS`;
this module reads that table and owns only the resolution order and the limit families.

This module is pure data; it imports nothing from the queue engine.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, Final

from ringmq.core.arguments import (
    ADDRESS_DEFAULTS,
    ARTEMIS_LEGACY_LVQ_KEY,
    BY_ARGUMENT,
    QPID_LEGACY_LVQ_KEY,
    QUEUE_ARGUMENTS,
    Merge,
    QueueArgument,
)
from ringmq.core.argvalues import (
    IMPLEMENTED_QUEUE_TYPES,
    MAX_PRIORITY,
    UNSET,
    LeaderLocator,
    Overflow,
    QpidPolicy,
    SettingsError,
)
from ringmq.core.policies import AddressFullPolicy, AddressSettings, PolicyError, artemis_part

__all__ = [
    "ARTEMIS_LEGACY_LVQ_KEY",
    "IMPLEMENTED_QUEUE_TYPES",
    "MAX_PRIORITY",
    "QPID_LEGACY_LVQ_KEY",
    "Counted",
    "Limit",
    "LimitAction",
    "Overflow",
    "QpidPolicy",
    "QueueSettings",
    "Redelivery",
    "SettingsError",
    "resolve_queue_settings",
]


class Counted(StrEnum):
    """Which messages a limit counts."""

    READY = "ready"
    """Messages waiting on the queue (RabbitMQ, Artemis ring): not in delivery, not scheduled."""
    READY_AND_ACQUIRED = "ready+acquired"
    """Also messages delivered and not yet acknowledged (Qpid depth, Artemis address size)."""


class LimitAction(StrEnum):
    """What a full queue does (one `match` in the engine)."""

    RING = "ring"
    """Artemis ring: a tail add evicts the head; a message returning to a full head is deleted."""
    DROP_HEAD = "drop-head"
    """RabbitMQ: enqueue, then drop (or dead-letter `maxlen`) head messages while over."""
    REJECT_PUBLISH = "reject-publish"
    """Refuse the new message (RabbitMQ reject-publish, Qpid reject, Artemis FAIL)."""
    REJECT_PUBLISH_DLX = "reject-publish-dlx"
    """Refuse the new message and dead-letter it with reason `maxlen`."""
    QPID_RING = "qpid-ring"
    """Qpid ring: evict the oldest (lowest priority first), even if acquired."""
    QPID_RING_STRICT = "qpid-ring-strict"
    """Qpid ring_strict: as ring, but refuse the new message when the oldest is acquired."""
    FLOW_TO_DISK = "flow-to-disk"
    """Never refuse; bodies of messages over the limit go to the body store (paged)."""
    DROP_NEW = "drop-new"
    """Artemis DROP: the new message is silently discarded (the publisher is still acked)."""
    BLOCK = "block"
    """Artemis BLOCK: accept, but report `over_limit` so the broker blocks publishers."""


@dataclass(frozen=True, slots=True)
class Limit:
    """The resolved size limit of a queue (None bounds are unbounded)."""

    counts: Counted
    max_count: int | None
    max_bytes: int | None
    action: LimitAction
    family: str
    """`ring`, `rabbit`, `qpid` or `address`: which configuration family defined it."""


@dataclass(frozen=True, slots=True)
class Redelivery:
    """Artemis delayed redelivery: a message that failed a delivery waits before it is ready.

    The wait after the n-th failed delivery is `delay_ms * multiplier ** (n - 1)`, at most
    `max_delay_ms` (Artemis `QueueImpl.calculateRedeliveryDelay`)."""

    delay_ms: int
    multiplier: float = 1.0
    max_delay_ms: int | None = None
    """None: ten times `delay_ms` (Artemis' default for `max-redelivery-delay`)."""

    def delay_after(self, failures: int) -> int:
        """The wait in ms after `failures` failed deliveries (>= 1)."""
        cap = self.max_delay_ms if self.max_delay_ms is not None else self.delay_ms * 10
        exponent = max(failures - 1, 0)
        if self.multiplier == 1.0:
            return min(self.delay_ms, cap)
        # Bounded before the power grows huge: once over the cap, the cap.
        delay = float(self.delay_ms)
        for _ in range(exponent):
            delay *= self.multiplier
            if delay >= cap:
                return cap
        return min(int(delay), cap)


DEFAULT_DEAD_LETTER_QUEUE_PREFIX: Final = "DLQ."
DEFAULT_EXPIRY_QUEUE_PREFIX: Final = "EXP."


@dataclass(frozen=True, slots=True)
class QueueSettings:
    """Every effective setting of one queue. Build it with `resolve_queue_settings`.

    Size-limit fields are kept as declared (for display); the engine uses `limit`.
    """

    ring_size: int = -1
    max_length: int | None = None
    max_length_bytes: int | None = None
    overflow: Overflow = Overflow.DROP_HEAD
    qpid_max_count: int | None = None
    qpid_max_size: int | None = None
    qpid_policy: QpidPolicy | None = None
    address_full_policy: AddressFullPolicy | None = None
    address_max_size_bytes: int | None = None
    address_max_size_messages: int | None = None
    lvq_key: str | None = None
    non_destructive: bool = False
    message_ttl_ms: int | None = None
    expires_ms: int | None = None
    dead_letter_exchange: str | None = None
    dead_letter_routing_key: str | None = None
    delivery_limit: int | None = None
    """Failed deliveries allowed before the message is dead-lettered (None: unlimited)."""
    max_priority: int | None = None
    single_active_consumer: bool = False
    queue_type: str = "classic"
    """`x-queue-type`: "classic" or "quorum" (durable only, delivery limit 20 by default)."""
    quorum_initial_group_size: int | None = None
    dead_letter_strategy: str | None = None
    """`x-dead-letter-strategy` as declared (RabbitMQ's quorum queues; reported)."""
    dead_letter_address: str | None = None
    """Artemis DLA for rejected and over-limit messages (a RabbitMQ DLX takes precedence)."""
    dead_letter_queue: str | None = None
    """The auto-created dead-letter queue (`auto-create-dead-letter-resources`), if any."""
    expiry_address: str | None = None
    """Artemis expiry address for expired messages (a RabbitMQ DLX takes precedence)."""
    expiry_queue: str | None = None
    """The auto-created expiry queue (`auto-create-expiry-resources`), if any."""
    redelivery: Redelivery | None = None
    """Artemis delayed redelivery, if a delay is set."""
    consumer_timeout_ms: int | None = None
    """RabbitMQ `x-consumer-timeout` / policy `consumer-timeout` (None: the broker's)."""
    group_buckets: int = -1
    """Artemis `group-buckets` (`x-group-buckets`): -1 groups by id, N > 0 hashes ids into N
    buckets, 0 turns message grouping off (core/groups.py)."""
    group_rebalance: bool = False
    """Artemis `group-rebalance`: a consumer joining unbinds every group."""
    group_first_key: str | None = None
    """Artemis `group-first-key`: the header marking a group's first message for its owner."""
    queue_leader_locator: LeaderLocator = LeaderLocator.CLIENT_LOCAL
    """RabbitMQ `x-queue-leader-locator`: where the queue is placed when declared
    (`ringmq.core.placement`); client-local by default, as RabbitMQ's classic queues."""
    limit: Limit | None = None
    policy_name: str | None = None
    sources: Mapping[str, str] = field(default_factory=dict)
    """For each set field: "argument", "policy", "address-settings"."""

    @property
    def dead_lettering(self) -> bool:
        """Whether some dead letters of this queue go somewhere (DLX, DLA or expiry
        address)."""
        return (
            self.dead_letter_exchange is not None
            or self.dead_letter_address is not None
            or self.expiry_address is not None
        )


# --- the three sources ----------------------------------------------------------------------
# Queue arguments, policy keys and address-setting defaults are read from one table,
# `ringmq.core.arguments.QUEUE_ARGUMENTS`.


_FAMILY_OF: Final[dict[str, str]] = {
    **{row.field: row.family for row in QUEUE_ARGUMENTS if row.field and row.family},
    "address_full_policy": "address",
    "address_max_size_bytes": "address",
    "address_max_size_messages": "address",
}


def _set(name: str, row: QueueArgument, value: Any, out: dict[str, Any]) -> None:
    """Record a parsed value for `row.field` in `out`, by the row's merge rule."""
    if value is UNSET or row.field is None or (row.off is not None and value == row.off):
        return
    match row.merge:
        case Merge.SET:
            out[row.field] = value
        case Merge.SAME:
            if out.get(row.field, value) != value:
                raise SettingsError(f"queue '{name}' declares two different last-value keys")
            out[row.field] = value
        case Merge.KEEP:
            out.setdefault(row.field, value)


def _from_arguments(name: str, args: Mapping[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for arg, value in args.items():
        row = BY_ARGUMENT.get(arg)
        if row is not None:  # RabbitMQ ignores unknown arguments (x-queue-mode, ...)
            _set(name, row, row.parse(name, arg, value), out)
    if "dead_letter_routing_key" in out and "dead_letter_exchange" not in out:
        raise SettingsError(
            f"invalid arg 'x-dead-letter-routing-key' for queue '{name}': "
            "x-dead-letter-routing-key defined, but x-dead-letter-exchange not defined"
        )
    return out


_POLICY_ROWS: Final[dict[str, QueueArgument]] = {
    row.policy_key: row for row in QUEUE_ARGUMENTS if row.policy_key is not None
}
_POLICY_WINS: Final = tuple(row.field for row in QUEUE_ARGUMENTS if row.policy_wins and row.field)


def _from_policy(name: str, definition: Mapping[str, Any]) -> dict[str, Any]:
    # Artemis' undelivered-message keys (dead-letter-address, redelivery-delay...) by the
    # address-settings' rule, first: a RabbitMQ key setting the same field (delivery-limit)
    # wins over them.
    try:
        part = artemis_part(definition)
    except PolicyError as exc:
        raise SettingsError(f"policy for queue '{name}': {exc}") from None
    out: dict[str, Any] = _artemis_delivery(name, part) if part is not None else {}
    for key, value in definition.items():
        row = _POLICY_ROWS.get(key)
        if row is None:
            continue  # exchange keys (alternate-exchange) are not queue settings
        try:
            converted = row.policy_value(value)
        except ValueError:
            raise SettingsError(f"policy for queue '{name}': bad {key} {value!r}") from None
        _set(name, row, converted, out)
    return out


def _from_address(name: str, settings: AddressSettings) -> dict[str, Any]:
    out: dict[str, Any] = _artemis_delivery(name, settings)
    for row in ADDRESS_DEFAULTS:
        # the address-setting, if AddressSettings has it (default-last-value-queue is
        # broker.xml's only: it becomes a declared argument there)
        assert row.address_default is not None
        value = getattr(settings, row.address_default.replace("-", "_"), None)
        if value is not None and row.field is not None and value != row.off:
            out[row.field] = value
    size_bytes = settings.max_size_bytes
    size_msgs = settings.max_size_messages
    if (size_bytes is not None and size_bytes >= 0) or (size_msgs is not None and size_msgs >= 0):
        if size_bytes is not None and size_bytes >= 0:
            out["address_max_size_bytes"] = size_bytes
        if size_msgs is not None and size_msgs >= 0:
            out["address_max_size_messages"] = size_msgs
        out["address_full_policy"] = settings.address_full_policy or AddressFullPolicy.PAGE
    return out


def _artemis_delivery(name: str, s: AddressSettings) -> dict[str, Any]:
    # Artemis' undelivered-message settings of queue `name` (its address, in ringmq's
    # anycast model): the dead-letter and expiry addresses with their auto-created queues,
    # max-delivery-attempts as a delivery limit, and delayed redelivery.
    out: dict[str, Any] = {}
    if s.dead_letter_address:
        out["dead_letter_address"] = s.dead_letter_address
        if s.auto_create_dead_letter_resources:
            prefix = s.dead_letter_queue_prefix
            prefix = DEFAULT_DEAD_LETTER_QUEUE_PREFIX if prefix is None else prefix
            out["dead_letter_queue"] = f"{prefix}{name}{s.dead_letter_queue_suffix or ''}"
    if s.expiry_address:
        out["expiry_address"] = s.expiry_address
        if s.auto_create_expiry_resources:
            prefix = s.expiry_queue_prefix
            prefix = DEFAULT_EXPIRY_QUEUE_PREFIX if prefix is None else prefix
            out["expiry_queue"] = f"{prefix}{name}{s.expiry_queue_suffix or ''}"
    attempts = s.max_delivery_attempts
    if attempts is not None and attempts > 0:
        # Artemis counts deliveries (the n-th failed one goes to the DLA); the delivery
        # limit counts failures allowed before that (RabbitMQ's x-delivery-limit).
        out["delivery_limit"] = attempts - 1
    if s.redelivery_delay:
        out["redelivery"] = Redelivery(
            s.redelivery_delay, s.redelivery_delay_multiplier or 1.0, s.max_redelivery_delay
        )
    return out


def _families(values: Mapping[str, Any]) -> set[str]:
    return {_FAMILY_OF[k] for k in values if k in _FAMILY_OF}


_QPID_ACTIONS: Final[dict[QpidPolicy, LimitAction]] = {
    QpidPolicy.REJECT: LimitAction.REJECT_PUBLISH,
    QpidPolicy.RING: LimitAction.QPID_RING,
    QpidPolicy.RING_STRICT: LimitAction.QPID_RING_STRICT,
    QpidPolicy.FLOW_TO_DISK: LimitAction.FLOW_TO_DISK,
}
_ADDRESS_ACTIONS: Final[dict[AddressFullPolicy, LimitAction]] = {
    AddressFullPolicy.PAGE: LimitAction.FLOW_TO_DISK,
    AddressFullPolicy.DROP: LimitAction.DROP_NEW,
    AddressFullPolicy.BLOCK: LimitAction.BLOCK,
    AddressFullPolicy.FAIL: LimitAction.REJECT_PUBLISH,
}


def _limit(family: str | None, v: Mapping[str, Any]) -> Limit | None:
    match family:
        case None:
            return None
        case "ring":
            return Limit(Counted.READY, v["ring_size"], None, LimitAction.RING, "ring")
        case "rabbit":
            if v.get("max_length") is None and v.get("max_length_bytes") is None:
                return None
            overflow = v.get("overflow", Overflow.DROP_HEAD)
            return Limit(
                Counted.READY,
                v.get("max_length"),
                v.get("max_length_bytes"),
                LimitAction(overflow.value),
                "rabbit",
            )
        case "qpid":
            if v.get("qpid_max_count") is None and v.get("qpid_max_size") is None:
                return None  # Qpid creates no policy object without a bound
            policy = v.get("qpid_policy", QpidPolicy.REJECT)
            return Limit(
                Counted.READY_AND_ACQUIRED,
                v.get("qpid_max_count"),
                v.get("qpid_max_size"),
                _QPID_ACTIONS[policy],
                "qpid",
            )
        case "address":
            return Limit(
                Counted.READY_AND_ACQUIRED,
                v.get("address_max_size_messages"),
                v.get("address_max_size_bytes"),
                _ADDRESS_ACTIONS[v["address_full_policy"]],
                "address",
            )
        case _:
            raise AssertionError(family)


QUORUM_DELIVERY_LIMIT: Final = 20
"""A quorum queue's delivery limit when none is set (RabbitMQ 4.0; -1 disables it)."""


def _quorum_rules(name: str, merged: dict[str, Any], sources: dict[str, str]) -> None:
    # RabbitMQ 4's quorum queues: no reject-publish-dlx, a delivery limit of 20 by default
    # (an explicit negative x-delivery-limit, parsed to None, disables it)
    if merged.get("overflow") == Overflow.REJECT_PUBLISH_DLX:
        raise SettingsError(
            f"invalid arg 'x-overflow' for queue '{name}': reject-publish-dlx is not "
            "supported by quorum queues"
        )
    if "delivery_limit" not in merged:
        merged["delivery_limit"] = QUORUM_DELIVERY_LIMIT
        sources["delivery_limit"] = "default"


def resolve_queue_settings(
    name: str,
    arguments: Mapping[str, Any] | None,
    *,
    policy: Mapping[str, Any] | None = None,
    address_settings: AddressSettings | None = None,
    policy_name: str | None = None,
) -> QueueSettings:
    """Compute a queue's effective settings.

    Args:
        name: the queue name (for messages).
        arguments: the queue.declare arguments table.
        policy: the effective policy's definition (`Policy.definition`), if any.
        address_settings: the address-settings resolved for the queue name, if any.
        policy_name: recorded in the result for management.

    Raises:
        SettingsError: an invalid argument or combination; nothing is changed anywhere.
    """
    levels: list[tuple[str, dict[str, Any]]] = [
        ("argument", _from_arguments(name, arguments or {})),
        ("policy", _from_policy(name, policy or {})),
        ("address-settings", _from_address(name, address_settings or AddressSettings())),
    ]
    for source, values in levels[:2]:
        fams = _families(values)
        if len(fams) > 1:
            raise SettingsError(
                f"queue '{name}': conflicting limit families in {source}s: "
                + " and ".join(sorted(fams))
            )
    merged: dict[str, Any] = {}
    sources: dict[str, str] = {}
    family: str | None = None
    for _source, values in levels:
        fams = _families(values)
        if family is None and fams:
            # The ring beats address-full limits when both come from address-settings.
            family = "ring" if "ring" in fams else fams.pop()
    for source, values in levels:
        for key, value in values.items():
            fam = _FAMILY_OF.get(key)
            if fam is not None and fam != family:
                continue
            if key not in merged:
                merged[key] = value
                sources[key] = source
    # Keys RabbitMQ reads policy first (`queue-leader-locator`): the policy beats the argument.
    for key in _POLICY_WINS:
        if key in levels[1][1]:
            merged[key] = levels[1][1][key]
            sources[key] = "policy"
    # RabbitMQ (3.12+): an argument and a policy both setting the consumer timeout, the lower
    # wins (every other key: the argument, or the policy as just above).
    by_arg = levels[0][1].get("consumer_timeout_ms")
    by_policy = levels[1][1].get("consumer_timeout_ms")
    if by_arg is not None and by_policy is not None and by_policy < by_arg:
        merged["consumer_timeout_ms"] = by_policy
        sources["consumer_timeout_ms"] = "policy"
    # "" (the default exchange) is a valid dead-letter exchange, as in RabbitMQ.
    dlx = merged.get("dead_letter_exchange")
    if merged.get("dead_letter_routing_key") is not None and dlx is None:
        merged.pop("dead_letter_routing_key")
        sources.pop("dead_letter_routing_key", None)
    if merged.get("lvq_key") and merged.get("max_priority"):
        raise SettingsError(f"queue '{name}': a last-value queue cannot have x-max-priority")
    if merged.get("queue_type") == "quorum":
        _quorum_rules(name, merged, sources)
    limit = _limit(family, merged)
    return QueueSettings(**merged, limit=limit, policy_name=policy_name, sources=sources)
