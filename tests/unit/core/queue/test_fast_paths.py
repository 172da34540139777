"""Whether a queue is plain: one property, and every queue setting classified against it.

Every publish path with a fast one reads `Queue.plain` (computed by limits.py's
`FastPaths.of` whenever the settings change): the engine's plain publish, the publisher's
per-queue step and the bulk ingest of runs and columns. A setting that changes what a publish
does must turn it off, or those paths would ignore it. The tables below classify every queue
argument (and alias), every policy key and address-setting that sets the same things, and
every `QueueSettings` field; each queue is declared through the broker and its property read.
A setting these tables do not know fails: classify it here (and, if it changes publishing,
teach `FastPaths.of`). The arguments are enumerated from the one table, `core/arguments.py`
(`BY_ARGUMENT`: every row's name and aliases), so a new row is a failing test until it is
classified; an argument of `CHANGES_PUBLISH` that `FastPaths.of` forgets fails its case.
"""

from __future__ import annotations

from dataclasses import fields
from typing import Any, Final

import pytest

from ringmq.core.arguments import BY_ARGUMENT, QUEUE_ARGUMENTS
from ringmq.core.broker import Broker
from ringmq.core.config import BrokerConfig, PolicyConfig
from ringmq.core.policies import ARTEMIS_POLICY_KEYS, AddressSettings
from ringmq.core.settings import QueueSettings
from tests.unit.core.corekit import Core

CHANGES_PUBLISH: Final[dict[str, str]] = {
    "x-ring-size": "a full ring evicts its head at publish",
    "x-max-length": "a limit drops, refuses or dead-letters at publish",
    "x-max-length-bytes": "a limit drops, refuses or dead-letters at publish",
    "qpid.max_count": "a Qpid limit (reject by default) refuses at publish",
    "qpid.max_size": "a Qpid limit (reject by default) refuses at publish",
    "x-last-value-key": "a newer value replaces the older one at publish",
    "qpid.last_value_queue_key": "a newer value replaces the older one at publish",
    "x-last-value": "a newer value replaces the older one at publish (Artemis' key)",
    "qpid.last_value_queue": "a newer value replaces the older one at publish (Qpid's key)",
    "x-non-destructive": "consumers browse: a publish must dispatch before the next one",
    "x-message-ttl": "a publish stamps the message's expiry time",
    "x-max-priority": "a publish picks the message's priority lane",
}
"""Arguments that change what a publish does: `Queue.plain` must be off."""

LEAVES_PUBLISH: Final[dict[str, str]] = {
    "x-overflow": "what a bound does when reached: alone it sets no bound",
    "qpid.policy_type": "what a bound does when reached: alone it sets no bound",
    "x-dead-letter-exchange": "dead letters come from limits, expiry and rejects, not publish",
    "x-dead-letter-routing-key": "dead letters come from limits, expiry and rejects, not publish",
    "x-delivery-limit": "counts failed deliveries: settlement",
    "x-expires": "the queue's own idle expiry: the broker's tick",
    "x-single-active-consumer": "which consumer gets deliveries: dispatch",
    "x-queue-type": "validated only ('classic'); a stream's publishes append to its log, a "
    "step every publish path takes before any fast one (`QueueEntity.stream`)",
    "x-consumer-timeout": "how long a delivery may stay unacknowledged: settlement",
    "x-quorum-initial-group-size": "a quorum queue's group size: reported only",
    "x-dead-letter-strategy": "how dead letters are handed on: not publish",
    "x-max-age": "a stream's retention by age: ignored by the other queue types",
    "x-stream-max-segment-size-bytes": "a stream's segment size: ignored by the other types",
    "x-group-buckets": "how message groups are keyed: dispatch (the first grouped message "
    "turns plain off: `test_the_first_message_with_a_group_id_turns_plain_off_for_good`)",
    "x-group-rebalance": "whether a joining consumer unbinds the groups: dispatch",
    "x-group-first-key": "a header on a group's first delivery to its owner: dispatch",
    "x-queue-leader-locator": "which shard the queue is placed on: decided once, at declare",
}
"""Arguments a publish ignores: `Queue.plain` stays on."""

NEEDS: Final[dict[str, dict[str, Any]]] = {
    "x-dead-letter-routing-key": {"x-dead-letter-exchange": "dlx"},
}
"""Arguments valid only with another one (which leaves `Queue.plain` alone)."""

BOUNDS_OF: Final[dict[str, tuple[dict[str, Any], tuple[str, ...]]]] = {
    "x-overflow": ({"x-max-length": 5}, ("drop-head", "reject-publish", "reject-publish-dlx")),
    "qpid.policy_type": ({"qpid.max_count": 5}, ("reject", "ring", "ring_strict", "flow_to_disk")),
}
"""The modifiers of a bound, with that bound and each value they take."""

ADDRESS_SETTINGS: Final[dict[str, tuple[dict[str, Any], bool]]] = {
    "default_ring_size": ({"default-ring-size": 3}, False),
    "default_last_value_key": ({"default-last-value-key": "k"}, False),
    "default_non_destructive": ({"default-non-destructive": True}, False),
    "address_full_policy": ({"address-full-policy": "FAIL"}, True),  # no size: no limit
    "max_size_bytes": ({"max-size-bytes": 1000}, False),  # PAGE at 1000 bytes
    "max_size_messages": ({"max-size-messages": 10}, False),
    # where dead letters and expired messages go, redelivery and auto-creation: settlement,
    # expiry and naming, never what a publish does
    "default_exclusive_queue": ({"default-exclusive-queue": True}, True),
    # message groups: dispatch, never what a publish does (a grouped message turns it off)
    "default_group_buckets": ({"default-group-buckets": 8}, True),
    "default_group_rebalance": ({"default-group-rebalance": True}, True),
    "default_group_first_key": ({"default-group-first-key": "first"}, True),
    "dead_letter_address": ({"dead-letter-address": "DLA"}, True),
    "auto_create_dead_letter_resources": ({"auto-create-dead-letter-resources": True}, True),
    "dead_letter_queue_prefix": ({"dead-letter-queue-prefix": "DLQ."}, True),
    "dead_letter_queue_suffix": ({"dead-letter-queue-suffix": ".dlq"}, True),
    "expiry_address": ({"expiry-address": "ExpiryQueue"}, True),
    "auto_create_expiry_resources": ({"auto-create-expiry-resources": True}, True),
    "expiry_queue_prefix": ({"expiry-queue-prefix": "EXP."}, True),
    "expiry_queue_suffix": ({"expiry-queue-suffix": ".exp"}, True),
    "max_delivery_attempts": ({"max-delivery-attempts": 3}, True),
    "redelivery_delay": ({"redelivery-delay": 1000}, True),
    "redelivery_delay_multiplier": ({"redelivery-delay-multiplier": 2.0}, True),
    "max_redelivery_delay": ({"max-redelivery-delay": 5000}, True),
    "auto_create_queues": ({"auto-create-queues": False}, True),
    "auto_create_addresses": ({"auto-create-addresses": False}, True),
    "auto_delete_queues": ({"auto-delete-queues": False}, True),
    "auto_delete_addresses": ({"auto-delete-addresses": False}, True),
    "default_address_routing_type": ({"default-address-routing-type": "ANYCAST"}, True),
    "default_queue_routing_type": ({"default-queue-routing-type": "ANYCAST"}, True),
}
"""Every Artemis address-setting field: (the setting, whether the queue stays plain)."""

DERIVED_FIELDS: Final = frozenset(
    {
        "limit",  # from the size fields (settings.py `_limit`)
        "address_full_policy",  # the address-settings' limit (ADDRESS_SETTINGS)
        "address_max_size_bytes",
        "address_max_size_messages",
        "policy_name",  # display
        "sources",  # display
        "dead_letter_address",  # the Artemis address-settings' (ADDRESS_SETTINGS)
        "dead_letter_queue",
        "expiry_address",
        "expiry_queue",
        "redelivery",
    }
)
"""`QueueSettings` fields no queue argument sets."""


def _plain(arguments: dict[str, Any], config: BrokerConfig | None = None) -> bool:
    # Declare queue "q" through the core's by-name declarations (a client's rules: its
    # arguments, then the policies and address settings of `config`) and read the property.
    broker = Broker(config or BrokerConfig(name_seed=7))
    broker.admin.declare_queue("/", "q", durable=False, arguments=arguments)
    return broker.vhosts["/"].queues["q"].queue.plain


def _purge(core: Core, name: str) -> None:
    core.run(core.broker.topology.purge_for, core.open(), name)


def _classified(name: str) -> bool:
    # Whether `name` leaves the queue plain; fails for an argument the tables do not know.
    if name in CHANGES_PUBLISH:
        return False
    if name in LEAVES_PUBLISH:
        return True
    pytest.fail(
        f"queue argument {name!r} is not classified: add it to CHANGES_PUBLISH (and make "
        "limits.py `FastPaths.of` turn `plain` off for it) or to LEAVES_PUBLISH, with the reason"
    )


def test_a_queue_without_arguments_is_plain() -> None:
    assert _plain({})


def test_the_tables_classify_each_argument_once() -> None:
    assert not CHANGES_PUBLISH.keys() & LEAVES_PUBLISH.keys()
    assert set(CHANGES_PUBLISH) | set(LEAVES_PUBLISH) == set(BY_ARGUMENT)


@pytest.mark.parametrize("name", sorted(BY_ARGUMENT))
def test_each_argument_that_changes_publishing_turns_plain_off(name: str) -> None:
    expected = _classified(name)
    row = BY_ARGUMENT[name]
    assert _plain({name: row.example, **NEEDS.get(name, {})}) is expected
    if row.off is not None:  # the value that means "not set" sets nothing
        assert _plain({name: row.off})


@pytest.mark.parametrize("name", sorted(BOUNDS_OF))
def test_a_bound_turns_plain_off_whatever_its_modifier_says(name: str) -> None:
    bound, values = BOUNDS_OF[name]
    assert not _plain(bound)
    for value in values:
        assert not _plain({**bound, name: value})


@pytest.mark.parametrize(
    "row", [r for r in QUEUE_ARGUMENTS if r.policy_key is not None], ids=lambda r: r.policy_key
)
def test_a_policy_key_turns_plain_off_as_its_argument_does(row: Any) -> None:
    expected = _classified(row.argument)
    definition = {row.policy_key: row.example}
    for arg, value in NEEDS.get(row.argument, {}).items():
        needed = BY_ARGUMENT[arg].policy_key
        assert needed is not None
        definition[needed] = value
    policy = PolicyConfig("p", "^q$", definition, apply_to="queues")
    assert _plain({}, BrokerConfig(name_seed=7, policies=[policy])) is expected
    if row.argument in BOUNDS_OF:
        bound, _ = BOUNDS_OF[row.argument]
        for arg, value in bound.items():
            key = BY_ARGUMENT[arg].policy_key
            if key is not None:
                policy = PolicyConfig("p", "^q$", {**definition, key: value}, apply_to="queues")
                assert not _plain({}, BrokerConfig(name_seed=7, policies=[policy]))


@pytest.mark.parametrize("field", [f.name for f in fields(AddressSettings)])
def test_an_address_setting_turns_plain_off_when_it_changes_publishing(field: str) -> None:
    if field not in ADDRESS_SETTINGS:
        pytest.fail(f"address-setting {field!r} is not classified: add it to ADDRESS_SETTINGS")
    setting, expected = ADDRESS_SETTINGS[field]
    config = BrokerConfig(name_seed=7, address_settings={"q": setting})
    assert _plain({}, config) is expected


@pytest.mark.parametrize("policy", ["PAGE", "DROP", "BLOCK", "FAIL"])
def test_every_address_full_policy_with_a_size_turns_plain_off(policy: str) -> None:
    setting = {"address-full-policy": policy, "max-size-messages": 10}
    assert not _plain({}, BrokerConfig(name_seed=7, address_settings={"q": setting}))


def test_every_queue_setting_is_an_argument_or_derived() -> None:
    # A new `QueueSettings` field must come with an argument row (classified above) or be
    # listed here as derived from the others.
    from_arguments = {row.field for row in QUEUE_ARGUMENTS if row.field is not None}
    assert {f.name for f in fields(QueueSettings)} == from_arguments | DERIVED_FIELDS


def test_the_property_follows_live_settings_changes() -> None:
    # Computed when the settings change (a policy), not only at declare.
    core = Core()
    core.declare(core.open(), "q")
    vh = core.broker.vhosts["/"]
    assert core.queue("q").plain
    core.broker.policies.set("p", "^q$", {"max-length": 5}, apply_to="queues")
    core.broker.topology.reapply_settings(vh, core.now)
    assert not core.queue("q").plain
    core.broker.policies.clear("p")
    core.broker.topology.reapply_settings(vh, core.now)
    assert core.queue("q").plain


def test_the_first_message_with_an_expiry_time_turns_plain_off_for_good() -> None:
    core = Core()
    s = core.open()
    core.declare(s, "q")
    core.publish(s, "q")
    assert core.queue("q").plain
    core.publish(s, "q", expiration_ms=60_000)
    assert not core.queue("q").plain
    _purge(core, "q")
    assert not core.queue("q").plain


@pytest.mark.parametrize("header", ["JMSXGroupID", "_AMQ_GROUP_ID"])
def test_the_first_message_with_a_group_id_turns_plain_off_for_good(header: str) -> None:
    # The group guard (core/groups.py): from the first grouped message on, dispatch asks
    # the group owners message by message, so no path may treat the queue as plain.
    core = Core()
    s = core.open()
    core.declare(s, "q")
    core.publish(s, "q", headers={"other": 1})
    assert core.queue("q").plain
    assert core.queue("q").groups is None
    core.publish(s, "q", headers={header: "g1"})
    assert not core.queue("q").plain
    assert core.queue("q").groups is not None
    _purge(core, "q")
    assert not core.queue("q").plain


def test_group_buckets_0_turns_grouping_off() -> None:
    core = Core()
    s = core.open()
    core.declare(s, "q", {"x-group-buckets": 0})
    core.publish(s, "q", headers={"JMSXGroupID": "g1"})
    assert core.queue("q").plain
    assert core.queue("q").groups is None


@pytest.mark.parametrize("key", sorted(ARTEMIS_POLICY_KEYS))
def test_an_artemis_policy_key_leaves_plain_on(key: str) -> None:
    # Dead-letter and expiry addresses, delivery attempts and redelivery delays act at
    # settlement and expiry, never at publish (as their address-settings: ADDRESS_SETTINGS).
    field = key.replace("-", "_")
    setting, stays_plain = ADDRESS_SETTINGS[field]
    assert stays_plain
    policy = PolicyConfig("p", "^q$", setting, apply_to="queues")
    assert _plain({}, BrokerConfig(name_seed=7, policies=[policy]))
