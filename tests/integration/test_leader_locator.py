"""`x-queue-leader-locator` and the `queue-leader-locator` policy over the wire.

pika declares with the argument (RabbitMQ's values, the legacy ones read as `balanced`; a bad
value closes the channel with 406 and the text), a policy set through the management API
gives the locator to queues it matches (beating the argument, as RabbitMQ resolves it), and
`/api/queues` reports the declared arguments, the effective locator and the shard the queue
was placed on (0: one shard).
"""

from __future__ import annotations

from typing import Any

import httpx
import pika
import pytest
from pika.exceptions import ChannelClosedByBroker

from ringmq.node import BrokerThread
from tests.integration.conftest import BrokerFactory

pytestmark = pytest.mark.integration

ARG = "x-queue-leader-locator"
AUTH = ("guest", "guest")


def connect(b: BrokerThread) -> pika.BlockingConnection:
    return pika.BlockingConnection(
        pika.ConnectionParameters(b.host, b.port, credentials=pika.PlainCredentials(*AUTH))
    )


@pytest.fixture
def broker(broker_factory: BrokerFactory) -> BrokerThread:
    return broker_factory(http_port=0)


def api(b: BrokerThread) -> str:
    return f"http://127.0.0.1:{b.port_of('http')}/api"


def queue(b: BrokerThread, name: str) -> dict[str, Any]:
    r = httpx.get(f"{api(b)}/queues/%2F/{name}", auth=AUTH)
    assert r.status_code == 200, r.text
    found: dict[str, Any] = r.json()
    return found


def test_declared_locators_are_accepted_and_reported(broker: BrokerThread) -> None:
    declared = {
        "local": ({ARG: "client-local"}, {}),
        "spread": ({ARG: "balanced"}, {}),
        "legacy": ({ARG: "min-masters"}, {}),
        "stream": ({ARG: "balanced", "x-queue-type": "stream"}, {"durable": True}),
        "plain": ({}, {}),
    }
    with connect(broker) as conn:
        ch = conn.channel()
        for name, (arguments, flags) in declared.items():
            ch.queue_declare(name, arguments=arguments, **flags)
        ch.queue_declare("legacy", arguments={ARG: "min-masters"})  # an equivalent redeclare
    want = {
        "local": "client-local",
        "spread": "balanced",
        "legacy": "balanced",
        "stream": "balanced",
        "plain": "client-local",
    }
    for name, (arguments, _flags) in declared.items():
        q = queue(broker, name)
        assert q["arguments"] == arguments
        assert q["effective_settings"]["queue_leader_locator"] == want[name]
        assert q["shard"] == 0
    listed = httpx.get(f"{api(broker)}/queues", auth=AUTH).json()
    assert {q["name"]: q["shard"] for q in listed} == dict.fromkeys(declared, 0)


@pytest.mark.parametrize(
    ("value", "got"), [("nearest", "'nearest'"), (b"", "''"), (3, "expected a string, got 3")]
)
def test_a_bad_locator_closes_the_channel_with_406(
    broker: BrokerThread, value: Any, got: str
) -> None:
    with connect(broker) as conn:
        ch = conn.channel()
        with pytest.raises(ChannelClosedByBroker) as exc:
            ch.queue_declare("q", arguments={ARG: value})
        assert exc.value.reply_code == 406
        text = exc.value.reply_text
        assert text.startswith(f"PRECONDITION_FAILED - invalid arg '{ARG}' for queue 'q': ")
        assert text.endswith(got)
        if isinstance(value, str):
            assert "one of client-local, balanced, random, least-leaders, min-masters" in text
        ch = conn.channel()
        with pytest.raises(ChannelClosedByBroker) as exc:
            ch.queue_declare("q", passive=True)
        assert exc.value.reply_code == 404  # nothing was made


def test_a_policy_sets_the_locator_and_beats_the_argument(broker: BrokerThread) -> None:
    with connect(broker) as conn:
        ch = conn.channel()
        ch.queue_declare("placed.plain")
        ch.queue_declare("placed.local", arguments={ARG: "client-local"})
        ch.queue_declare("other")
    body = {
        "pattern": r"^placed\.",
        "definition": {"queue-leader-locator": "least-leaders"},
        "apply-to": "queues",
    }
    r = httpx.put(f"{api(broker)}/policies/%2F/spread", json=body, auth=AUTH)
    assert r.status_code == 201, r.text
    for name in ("placed.plain", "placed.local"):
        q = queue(broker, name)
        assert q["policy"] == "spread"
        assert q["effective_settings"]["queue_leader_locator"] == "balanced"
        assert q["effective_settings"]["sources"]["queue_leader_locator"] == "policy"
        assert q["effective_policy_definition"]["queue_leader_locator"] == "balanced"
        assert q["shard"] == 0  # placed at declare: a policy does not move a queue
    assert queue(broker, "placed.local")["arguments"] == {ARG: "client-local"}
    other = queue(broker, "other")
    assert other["effective_settings"]["queue_leader_locator"] == "client-local"
    assert "queue_leader_locator" not in other["effective_settings"]["sources"]
    # a queue declared under the policy takes it at once
    with connect(broker) as conn:
        conn.channel().queue_declare("placed.new", arguments={ARG: "client-local"})
    assert queue(broker, "placed.new")["effective_settings"]["queue_leader_locator"] == "balanced"


@pytest.mark.parametrize("value", ["nearest", "min-masters", 1])
def test_a_bad_policy_value_is_refused(broker: BrokerThread, value: Any) -> None:
    body = {"pattern": ".*", "definition": {"queue-leader-locator": value}}
    r = httpx.put(f"{api(broker)}/policies/%2F/bad", json=body, auth=AUTH)
    assert r.status_code == 400
    assert "queue-leader-locator" in r.text
    assert httpx.get(f"{api(broker)}/policies/%2F/bad", auth=AUTH).status_code == 404
