"""Artemis' undelivered-message settings set live by a policy through the management API
(issue 28, item 1): max-delivery-attempts and dead-letter-address with pika, a redelivery
delay with python-qpid-proton, and the policy removed again."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import pika
import pytest
from proton import Delivery, Message
from proton.utils import BlockingConnection

from ringmq.node import BrokerThread
from tests.integration.conftest import BrokerFactory, wait_until

pytestmark = [pytest.mark.integration, pytest.mark.filterwarnings("ignore::ResourceWarning")]


@pytest.fixture
def broker(broker_factory: BrokerFactory) -> BrokerThread:
    return broker_factory(http_port=0)


@pytest.fixture
def http(broker: BrokerThread) -> Iterator[httpx.Client]:
    with httpx.Client(
        base_url=f"http://127.0.0.1:{broker.server.http_port}", auth=("guest", "guest"), timeout=30
    ) as c:
        yield c


def _policy(http: httpx.Client, pattern: str, definition: dict[str, object]) -> None:
    body = {"pattern": pattern, "definition": definition, "apply-to": "queues"}
    r = http.put("/api/policies/%2F/artemis", json=body)
    assert r.status_code in (201, 204), r.text


def test_a_policy_sends_a_poison_message_to_the_dead_letter_address(
    broker: BrokerThread, http: httpx.Client
) -> None:
    with pika.BlockingConnection(pika.ConnectionParameters(broker.host, broker.port)) as conn:
        ch = conn.channel()
        ch.queue_declare("orders")
        ch.queue_declare("DLQ")
        _policy(http, "^orders$", {"dead-letter-address": "DLQ", "max-delivery-attempts": 2})
        q = http.get("/api/queues/%2F/orders").json()
        assert q["policy"] == "artemis"
        ch.basic_publish("", "orders", b"poison")
        for _ in range(2):
            method, _, body = ch.basic_get("orders")
            assert body == b"poison"
            ch.basic_nack(method.delivery_tag, requeue=True)
        wait_until(lambda: ch.queue_declare("DLQ", passive=True).method.message_count == 1)
        assert ch.queue_declare("orders", passive=True).method.message_count == 0
        # without the policy a failed delivery just comes back
        assert http.delete("/api/policies/%2F/artemis").status_code == 204
        ch.basic_publish("", "orders", b"again")
        for _ in range(3):
            method, _, body = ch.basic_get("orders")
            assert body == b"again"
            ch.basic_nack(method.delivery_tag, requeue=True)
        assert ch.queue_declare("DLQ", passive=True).method.message_count == 1


def test_a_policy_delays_redelivery(broker: BrokerThread, http: httpx.Client) -> None:
    _policy(http, "^slow$", {"redelivery-delay": 600000})
    conn = BlockingConnection(f"amqp://guest:guest@127.0.0.1:{broker.port}", timeout=10)
    try:
        conn.create_sender("slow").send(Message(body="s"))
        rcv: Any = conn.create_receiver("slow", credit=1)
        rcv.receive(timeout=5)
        rcv.fetcher.unsettled[0].local.failed = True
        rcv.settle(Delivery.MODIFIED)  # a failed delivery: ten minutes off the queue
        conn.wait(lambda: _scheduled(broker, "slow") == 1, timeout=5)
    finally:
        conn.close()
    # the queue's page shows the effective redelivery settings (it answered 500 before)
    r = http.get("/api/queues/%2F/slow")
    assert r.status_code == 200, r.text
    want = {"delay_ms": 600000, "multiplier": 1.0, "max_delay_ms": None}
    assert r.json()["effective_settings"]["redelivery"] == want


def test_bad_artemis_values_in_a_policy_are_refused(http: httpx.Client) -> None:
    body = {"pattern": "x", "definition": {"redelivery-delay-multiplier": 0.5}}
    r = http.put("/api/policies/%2F/bad", json=body)
    assert r.status_code == 400
    assert "'redelivery-delay-multiplier' must be a number >= 1.0" in r.json()["reason"]


def _scheduled(b: BrokerThread, name: str) -> int:
    return int(b.call(lambda: b.broker.vhosts["/"].queues[name].queue.counters.scheduled))
