"""`x-queue-leader-locator` and the `queue-leader-locator` policy key, as RabbitMQ reads them,
and the shard a declare records (`core/placement.py`)."""

from __future__ import annotations

from typing import Any

import pytest

from ringmq.core.argvalues import LeaderLocator
from ringmq.core.errors import Condition
from ringmq.core.policies import PolicyError, validate_definition
from ringmq.core.settings import SettingsError, resolve_queue_settings
from tests.unit.core.corekit import Core

ARG = "x-queue-leader-locator"
BAD_TEXT = (
    f"invalid arg '{ARG}' for queue 'q': expected one of client-local, balanced, random, "
    "least-leaders, min-masters, got 'nearest'"
)


@pytest.mark.parametrize(
    ("value", "want"),
    [
        ("client-local", LeaderLocator.CLIENT_LOCAL),
        ("balanced", LeaderLocator.BALANCED),
        (b"balanced", LeaderLocator.BALANCED),
        # RabbitMQ's older values, read as balanced (rabbit_queue_location:leader_locator0)
        ("random", LeaderLocator.BALANCED),
        ("least-leaders", LeaderLocator.BALANCED),
        ("min-masters", LeaderLocator.BALANCED),
    ],
)
def test_argument_values_and_their_meaning(value: Any, want: LeaderLocator) -> None:
    s = resolve_queue_settings("q", {ARG: value})
    assert s.queue_leader_locator is want
    assert s.sources["queue_leader_locator"] == "argument"


def test_default_is_client_local_from_no_source() -> None:
    s = resolve_queue_settings("q", {})
    assert s.queue_leader_locator is LeaderLocator.CLIENT_LOCAL
    assert "queue_leader_locator" not in s.sources


@pytest.mark.parametrize(
    ("value", "text"),
    [
        ("nearest", BAD_TEXT),
        ("", BAD_TEXT.replace("'nearest'", "''")),
        (1, f"invalid arg '{ARG}' for queue 'q': expected a string, got 1"),
    ],
)
def test_bad_argument_values_are_refused(value: Any, text: str) -> None:
    with pytest.raises(SettingsError) as info:
        resolve_queue_settings("q", {ARG: value})
    assert str(info.value) == text


@pytest.mark.parametrize("value", ["client-local", "balanced", "random", "least-leaders"])
def test_policy_values_rabbitmq_accepts(value: str) -> None:
    assert validate_definition({"queue-leader-locator": value}) == {"queue-leader-locator": value}


@pytest.mark.parametrize("value", ["min-masters", "nearest", 1])
def test_policy_values_rabbitmq_refuses(value: Any) -> None:
    # rabbit_policies accepts the argument's legacy values but min-masters
    with pytest.raises(PolicyError) as info:
        validate_definition({"queue-leader-locator": value})
    assert str(info.value) == (
        "policy key 'queue-leader-locator' must be one of client-local, balanced, random, "
        f"least-leaders, got {value!r}"
    )


def test_policy_beats_the_argument_as_in_rabbitmq() -> None:
    # rabbit_queue_location:leader_locator resolves with fun(PolVal, _ArgVal) -> PolVal
    s = resolve_queue_settings(
        "q", {ARG: "client-local"}, policy={"queue-leader-locator": "random"}
    )
    assert s.queue_leader_locator is LeaderLocator.BALANCED
    assert s.sources["queue_leader_locator"] == "policy"
    s = resolve_queue_settings("q", {ARG: "balanced"}, policy={"message-ttl": 5})
    assert (s.queue_leader_locator, s.sources["queue_leader_locator"]) == ("balanced", "argument")


def test_other_keys_still_prefer_the_argument() -> None:
    s = resolve_queue_settings(
        "q", {"x-message-ttl": 1, ARG: "balanced"}, policy={"message-ttl": 2}
    )
    assert (s.message_ttl_ms, s.sources["message_ttl_ms"]) == (1, "argument")


@pytest.mark.parametrize(
    ("arguments", "flags"),
    [
        ({}, {}),
        ({ARG: "balanced"}, {}),
        ({ARG: "min-masters"}, {"exclusive": True}),
        ({ARG: "balanced"}, {"auto_delete": True}),
        ({ARG: "client-local", "x-queue-type": "quorum"}, {"durable": True}),
    ],
)
def test_a_declare_places_the_queue_on_the_one_shard(
    arguments: dict[str, Any], flags: dict[str, bool]
) -> None:
    kit = Core()
    s = kit.open()
    kit.declare(s, "q", arguments, **flags)
    q = s.vhost.queues["q"]
    assert q.shard == 0
    assert q.arguments == arguments  # kept as declared (the legacy value too)


def test_a_bad_declare_is_406_and_creates_nothing() -> None:
    kit = Core()
    s = kit.open()
    err = kit.refused(kit.declare, s, "q", {ARG: "nearest"})
    assert err.condition is Condition.PRECONDITION_FAILED
    assert err.explanation == BAD_TEXT
    assert "q" not in s.vhost.queues


def test_streams_take_it_through_the_same_validator() -> None:
    kit = Core()
    s = kit.open()
    stream = {"x-queue-type": "stream", ARG: "balanced"}
    kit.declare(s, "q", stream, durable=True)
    assert s.vhost.queues["q"].settings.queue_leader_locator is LeaderLocator.BALANCED
    err = kit.refused(kit.declare, s, "q2", {**stream, ARG: "nearest"}, durable=True)
    assert err.explanation == BAD_TEXT.replace("'q'", "'q2'")
