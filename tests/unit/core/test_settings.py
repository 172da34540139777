"""Queue settings: argument validation (RabbitMQ's rules), families, resolution order."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ringmq.core.policies import AddressFullPolicy, AddressSettings
from ringmq.core.settings import (
    ARTEMIS_LEGACY_LVQ_KEY,
    QPID_LEGACY_LVQ_KEY,
    Counted,
    Limit,
    LimitAction,
    Overflow,
    QpidPolicy,
    SettingsError,
    resolve_queue_settings,
)


def resolve(args: dict[str, Any], **kw: Any) -> Any:
    return resolve_queue_settings("q", args, **kw)


def test_defaults_have_no_limit() -> None:
    s = resolve({})
    assert s.limit is None
    assert s.ring_size == -1
    assert s.overflow is Overflow.DROP_HEAD
    assert s.message_ttl_ms is None
    assert s.dead_letter_exchange is None
    assert s.delivery_limit is None
    assert s.max_priority is None
    assert not s.non_destructive
    assert not s.single_active_consumer


def test_enum_wire_values() -> None:
    assert [o.value for o in Overflow] == ["drop-head", "reject-publish", "reject-publish-dlx"]
    assert [p.value for p in QpidPolicy] == ["reject", "ring", "ring_strict", "flow_to_disk"]


@pytest.mark.parametrize(
    ("args", "limit"),
    [
        ({"x-ring-size": 3}, Limit(Counted.READY, 3, None, LimitAction.RING, "ring")),
        ({"x-max-length": 5}, Limit(Counted.READY, 5, None, LimitAction.DROP_HEAD, "rabbit")),
        (
            {"x-max-length-bytes": 100, "x-overflow": "reject-publish-dlx"},
            Limit(Counted.READY, None, 100, LimitAction.REJECT_PUBLISH_DLX, "rabbit"),
        ),
        (
            {"qpid.max_count": 10},
            Limit(Counted.READY_AND_ACQUIRED, 10, None, LimitAction.REJECT_PUBLISH, "qpid"),
        ),
        (
            {"qpid.max_size": "2048", "qpid.policy_type": "Ring_Strict"},
            Limit(Counted.READY_AND_ACQUIRED, None, 2048, LimitAction.QPID_RING_STRICT, "qpid"),
        ),
        (
            {"qpid.max_count": 1, "qpid.policy_type": "flow_to_disk"},
            Limit(Counted.READY_AND_ACQUIRED, 1, None, LimitAction.FLOW_TO_DISK, "qpid"),
        ),
        ({"qpid.max_count": 0, "qpid.policy_type": "ring"}, None),  # Qpid: 0 = no limit
        ({"x-overflow": "reject-publish"}, None),  # overflow without a bound
        ({"x-ring-size": -1}, None),
    ],
)
def test_limit_model(args: dict[str, Any], limit: Limit | None) -> None:
    assert resolve(args).limit == limit


@pytest.mark.parametrize(
    ("args", "fragment"),
    [
        ({"x-max-length": -1}, "non-negative integer"),
        ({"x-max-length": "10"}, "an integer"),
        ({"x-max-length": True}, "an integer"),
        ({"x-max-length": 1.5}, "an integer"),
        ({"x-max-length-bytes": -5}, "non-negative"),
        ({"x-overflow": "drop-tail"}, "one of drop-head"),
        ({"x-overflow": 1}, "a string"),
        ({"x-ring-size": -2}, ">= -1"),
        ({"x-message-ttl": -1}, "non-negative"),
        ({"x-expires": 0}, "positive integer"),
        ({"x-max-priority": 256}, "0 to 255"),
        ({"x-max-priority": -1}, "non-negative"),
        ({"x-single-active-consumer": 1}, "a boolean"),
        ({"x-non-destructive": "yes"}, "a boolean"),
        ({"x-dead-letter-exchange": 5}, "a string"),
        ({"x-dead-letter-routing-key": "rk"}, "x-dead-letter-exchange not defined"),
        ({"qpid.policy_type": "self-destruct"}, "one of reject"),
        ({"qpid.max_count": -3}, "non-negative"),
        ({"qpid.max_size": "lots"}, "an integer"),
        ({"x-last-value-key": ""}, "non-empty"),
        ({"x-ring-size": 3, "qpid.policy_type": "ring"}, "conflicting limit families"),
        ({"x-ring-size": 3, "x-max-length": 3}, "conflicting limit families"),
        ({"x-max-length": 3, "qpid.max_count": 3}, "conflicting limit families"),
        ({"x-last-value-key": "k", "x-max-priority": 5}, "last-value queue cannot"),
        ({"x-last-value-key": "a", "qpid.last_value_queue_key": "b"}, "two different"),
    ],
)
def test_invalid_arguments_are_refused_with_a_clear_message(
    args: dict[str, Any], fragment: str
) -> None:
    with pytest.raises(SettingsError) as info:
        resolve(args)
    assert fragment in str(info.value)
    assert "'q'" in str(info.value)


def test_settings_error_is_a_value_error() -> None:
    assert issubclass(SettingsError, ValueError)


def test_unknown_arguments_are_ignored_like_rabbitmq() -> None:
    s = resolve({"x-queue-type": "classic", "x-queue-mode": "lazy", "x-custom": 1})
    assert s.limit is None


def test_all_carried_settings() -> None:
    s = resolve(
        {
            "x-message-ttl": 1000,
            "x-expires": 60000,
            "x-dead-letter-exchange": "dlx",
            "x-dead-letter-routing-key": "dead",
            "x-delivery-limit": 3,
            "x-max-priority": 10,
            "x-single-active-consumer": True,
        }
    )
    assert (s.message_ttl_ms, s.expires_ms) == (1000, 60000)
    assert (s.dead_letter_exchange, s.dead_letter_routing_key) == ("dlx", "dead")
    assert (s.delivery_limit, s.max_priority, s.single_active_consumer) == (3, 10, True)
    assert s.sources["message_ttl_ms"] == "argument"


def test_negative_delivery_limit_means_unlimited() -> None:
    assert resolve({"x-delivery-limit": -1}).delivery_limit is None


def test_lvq_keys_and_legacy_flags() -> None:
    assert resolve({"x-last-value-key": "sym"}).lvq_key == "sym"
    assert resolve({"qpid.last_value_queue_key": "sym"}).lvq_key == "sym"
    assert resolve({"x-last-value": True}).lvq_key == ARTEMIS_LEGACY_LVQ_KEY
    assert resolve({"qpid.last_value_queue": 1}).lvq_key == QPID_LEGACY_LVQ_KEY
    assert resolve({"x-last-value-key": b"sym"}).lvq_key == "sym"


def test_arguments_win_over_policy_and_policy_over_address_settings() -> None:
    address = AddressSettings(default_ring_size=9)
    policy = {"max-length": 5, "message-ttl": 100, "dead-letter-exchange": "p-dlx"}
    s = resolve({"x-message-ttl": 50}, policy=policy, address_settings=address)
    assert s.message_ttl_ms == 50
    assert s.dead_letter_exchange == "p-dlx"
    # The policy claims the limit (rabbit family); the address ring default is ignored.
    assert s.limit == Limit(Counted.READY, 5, None, LimitAction.DROP_HEAD, "rabbit")
    assert s.sources == {
        "message_ttl_ms": "argument",
        "max_length": "policy",
        "dead_letter_exchange": "policy",
    }
    s2 = resolve({}, address_settings=address)
    assert s2.limit == Limit(Counted.READY, 9, None, LimitAction.RING, "ring")


def test_family_keys_merge_across_sources() -> None:
    # x-overflow from the arguments with a max-length from a policy (RabbitMQ allows this).
    s = resolve({"x-overflow": "reject-publish"}, policy={"max-length": 2})
    assert s.limit == Limit(Counted.READY, 2, None, LimitAction.REJECT_PUBLISH, "rabbit")


def test_argument_family_beats_policy_family() -> None:
    s = resolve({"x-ring-size": 4}, policy={"max-length": 2})
    assert s.limit == Limit(Counted.READY, 4, None, LimitAction.RING, "ring")
    assert s.max_length is None


def test_removing_overflow_from_a_policy_restores_drop_head() -> None:
    # RabbitMQ bug #1980: settings are recomputed from scratch on every change.
    before = resolve({}, policy={"max-length": 2, "overflow": "reject-publish"})
    after = resolve({}, policy={"max-length": 2})
    assert before.limit is not None
    assert before.limit.action is LimitAction.REJECT_PUBLISH
    assert after.limit is not None
    assert after.limit.action is LimitAction.DROP_HEAD


def test_policy_ring_size() -> None:
    s = resolve({}, policy={"ring-size": 3}, policy_name="rings")
    assert s.limit == Limit(Counted.READY, 3, None, LimitAction.RING, "ring")
    assert s.policy_name == "rings"


def test_policy_dead_letter_routing_key_without_exchange_is_dropped() -> None:
    s = resolve({}, policy={"dead-letter-exchange": "x", "dead-letter-routing-key": "k"})
    assert s.dead_letter_routing_key == "k"


@pytest.mark.parametrize(
    ("policy", "action"),
    [
        (AddressFullPolicy.PAGE, LimitAction.FLOW_TO_DISK),
        (AddressFullPolicy.DROP, LimitAction.DROP_NEW),
        (AddressFullPolicy.BLOCK, LimitAction.BLOCK),
        (AddressFullPolicy.FAIL, LimitAction.REJECT_PUBLISH),
    ],
)
def test_address_full_policies(policy: AddressFullPolicy, action: LimitAction) -> None:
    address = AddressSettings(address_full_policy=policy, max_size_messages=10)
    s = resolve({}, address_settings=address)
    assert s.limit == Limit(Counted.READY_AND_ACQUIRED, 10, None, action, "address")


def test_address_max_size_defaults_to_page_and_minus_one_is_unlimited() -> None:
    s = resolve({}, address_settings=AddressSettings(max_size_bytes=1024))
    assert s.limit is not None
    assert s.limit.action is LimitAction.FLOW_TO_DISK
    assert resolve({}, address_settings=AddressSettings(max_size_bytes=-1)).limit is None


def test_address_ring_default_beats_address_full_limit() -> None:
    address = AddressSettings(default_ring_size=2, max_size_messages=10)
    limit = resolve({}, address_settings=address).limit
    assert limit is not None
    assert limit.family == "ring"


def test_address_lvq_and_non_destructive_defaults() -> None:
    address = AddressSettings(default_last_value_key="k", default_non_destructive=True)
    s = resolve({}, address_settings=address)
    assert (s.lvq_key, s.non_destructive) == ("k", True)
    assert resolve({"x-non-destructive": False}, address_settings=address).non_destructive is False


@given(
    value=st.one_of(
        st.integers(-5, 5),
        st.booleans(),
        st.text(max_size=3),
        st.floats(allow_nan=False),
        st.none(),
    ),
    arg=st.sampled_from(["x-max-length", "x-max-length-bytes", "x-ring-size", "x-message-ttl"]),
)
def test_integer_arguments_accept_exactly_ints_in_range(value: Any, arg: str) -> None:
    minimum = -1 if arg == "x-ring-size" else 0
    ok = type(value) is int and value >= minimum
    try:
        resolve({arg: value})
    except SettingsError:
        assert not ok
    else:
        assert ok


def test_default_exchange_is_a_valid_dead_letter_exchange() -> None:
    s = resolve_queue_settings(
        "q", {"x-dead-letter-exchange": "", "x-dead-letter-routing-key": "dlq"}
    )
    assert s.dead_letter_exchange == ""
    assert s.dead_letter_routing_key == "dlq"
