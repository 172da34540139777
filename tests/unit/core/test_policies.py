"""RabbitMQ policies (regex, priority, apply-to) and Artemis address-settings (wildcards)."""

from __future__ import annotations

import pytest

from ringmq.core.policies import (
    AddressFullPolicy,
    AddressSettings,
    AddressSettingsTable,
    ApplyTo,
    PolicyError,
    PolicyTable,
    validate_definition,
)


def test_policy_match_highest_priority_wins() -> None:
    t = PolicyTable()
    t.set("all", ".*", {"max-length": 10})
    t.set("orders", "^orders\\.", {"max-length": 5}, priority=5)
    t.set("low", "^orders", {"message-ttl": 1}, priority=1)
    best = t.match("orders.eu")
    assert best is not None
    assert best.name == "orders"
    other = t.match("payments")
    assert other is not None
    assert other.name == "all"


def test_policy_regex_is_a_search_not_a_full_match() -> None:
    t = PolicyTable()
    t.set("mid", "ring", {"ring-size": 3})
    assert t.match("my-ring-queue") is not None
    assert t.match("plain") is None


def test_policy_apply_to_and_vhosts() -> None:
    t = PolicyTable()
    t.set("ex", ".*", {"alternate-exchange": "ae"}, apply_to="exchanges")
    t.set("q", ".*", {"max-length": 1}, apply_to=ApplyTo.QUEUES, vhost="v1")
    ex_policy = t.match("x", "exchange")
    assert ex_policy is not None
    assert ex_policy.name == "ex"
    assert t.match("x", "queue") is None
    v1_policy = t.match("x", "queue", vhost="v1")
    assert v1_policy is not None
    assert v1_policy.name == "q"
    assert [p.name for p in t.list()] == ["ex", "q"]
    assert [p.name for p in t.list("v1")] == ["q"]


def test_policy_clear_get_and_replace() -> None:
    t = PolicyTable()
    t.set("p", ".*", {"max-length": 1})
    t.set("p", ".*", {"max-length": 2})
    got = t.get("p")
    assert got is not None
    assert got.definition == {"max-length": 2}
    assert t.clear("p")
    assert not t.clear("p")
    assert t.match("q") is None


def test_policy_as_dict_is_rabbitmq_shaped() -> None:
    p = PolicyTable().set("p", "^a", {"max-length": 1}, priority=2, apply_to="queues")
    assert p.as_dict() == {
        "name": "p",
        "vhost": "/",
        "pattern": "^a",
        "apply-to": "queues",
        "priority": 2,
        "definition": {"max-length": 1},
    }


@pytest.mark.parametrize(
    ("definition", "fragment"),
    [
        ({}, "must not be empty"),
        ({"max-lenght": 1}, "unrecognised"),
        ({"max-length": -1}, "non-negative"),
        ({"max-length": "1"}, "non-negative"),
        ({"overflow": "nope"}, "one of"),
        ({"expires": 0}, "positive"),
        ({"ring-size": 3, "max-length": 3}, "mixes limit families"),
        ({"dead-letter-routing-key": "k"}, "dead-letter-exchange not defined"),
    ],
)
def test_invalid_definitions(definition: dict[str, object], fragment: str) -> None:
    with pytest.raises(PolicyError) as info:
        validate_definition(definition)
    assert fragment in str(info.value)


def test_invalid_pattern_apply_to_priority_and_exchange_keys() -> None:
    t = PolicyTable()
    with pytest.raises(PolicyError, match="pattern"):
        t.set("p", "(", {"max-length": 1})
    with pytest.raises(PolicyError, match="apply-to"):
        t.set("p", ".*", {"max-length": 1}, apply_to="streams-of-joy")
    with pytest.raises(PolicyError, match="priority"):
        t.set("p", ".*", {"max-length": 1}, priority="1")  # type: ignore[arg-type]
    with pytest.raises(PolicyError, match="queue keys"):
        t.set("p", ".*", {"max-length": 1}, apply_to="exchanges")


def test_address_settings_wildcards() -> None:
    t = AddressSettingsTable()
    t.set("#", {"default-ring-size": 100, "address-full-policy": "page"})
    t.set("ring.#", {"default-ring-size": 3})
    t.set("ring.*", {"default-non-destructive": True})
    t.set("ring.prices", {"default-last-value-key": "sym"})
    exact = t.resolve("ring.prices")
    assert exact == AddressSettings(
        default_ring_size=3,
        default_last_value_key="sym",
        default_non_destructive=True,
        address_full_policy=AddressFullPolicy.PAGE,
    )
    deep = t.resolve("ring.a.b")
    assert (deep.default_ring_size, deep.default_non_destructive) == (3, None)
    assert t.resolve("ring").default_ring_size == 3  # '#' matches zero words
    assert t.resolve("orders").default_ring_size == 100


def test_more_specific_match_wins_and_literal_beats_wildcards() -> None:
    t = AddressSettingsTable()
    t.set("a.*", {"default-ring-size": 1})
    t.set("a.#", {"default-ring-size": 2})
    t.set("a.b", {"default-ring-size": 3})
    assert t.resolve("a.b").default_ring_size == 3
    assert t.resolve("a.c").default_ring_size == 1
    assert t.resolve("a.c.d").default_ring_size == 2
    assert t.resolve("b").default_ring_size is None


def test_address_settings_validation_and_listing() -> None:
    t = AddressSettingsTable()
    with pytest.raises(PolicyError, match="unknown"):
        t.set("#", {"ring-size": 3})
    with pytest.raises(PolicyError, match="PAGE"):
        t.set("#", {"address-full-policy": "SPILL"})
    with pytest.raises(PolicyError, match=">= -1"):
        t.set("#", {"max-size-bytes": -7})
    with pytest.raises(PolicyError, match="empty"):
        t.set("", {})
    t.set("x.#", AddressSettings(max_size_messages=5))
    assert t.list()["x.#"].as_dict() == {"max-size-messages": 5}
    assert t.clear("x.#")
    assert not t.clear("x.#")
    assert t.list() == {}
