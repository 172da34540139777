"""MQTT and AMQP 0-9-1 on one broker: amq.topic carries messages both ways, mapped as
docs/dev/messages.md §7 says."""

from __future__ import annotations

from typing import Any

import pika
import pytest

from ringmq.node import BrokerThread
from tests.integration.conftest import BrokerFactory
from tests.integration.mqtt.conftest import MakePaho
from tests.integration.mqtt.test_paho import publish_props

pytestmark = pytest.mark.integration


def test_mqtt_publish_reaches_an_amqp_queue_bound_to_amq_topic(
    broker: BrokerThread, paho: MakePaho
) -> None:
    conn = pika.BlockingConnection(pika.ConnectionParameters("127.0.0.1", broker.port))
    try:
        ch = conn.channel()
        ch.queue_declare("from-mqtt")
        ch.queue_bind("from-mqtt", "amq.topic", "plant.*.pressure")
        pub = paho(broker, "pub", v5=True)
        pub.publish(
            "plant/p1/pressure",
            b"1.2bar",
            1,
            properties=publish_props(
                ContentType="text/plain",
                ResponseTopic="replies/p1",
                CorrelationData=b"req-1",
                UserProperty=[("site", "north")],
                MessageExpiryInterval=60,
            ),
        )
        method, props, body = next(ch.consume("from-mqtt", inactivity_timeout=5))
        assert method is not None
        assert body == b"1.2bar"
        assert method.routing_key == "plant.p1.pressure"
        assert props.delivery_mode == 2
        assert props.content_type == "text/plain"
        assert props.reply_to == "replies/p1"
        assert props.correlation_id == "req-1"
        assert props.expiration == "60000"
        assert props.headers["site"] == "north"
        assert props.headers["x-mqtt-publish-qos"] == 1
        ch.basic_ack(method.delivery_tag)
        ch.cancel()
    finally:
        conn.close()


def test_amqp_publish_reaches_an_mqtt_subscriber(broker: BrokerThread, paho: MakePaho) -> None:
    sub = paho(broker, "sub", v5=True)
    sub.subscribe("orders/+/created", 1)
    conn = pika.BlockingConnection(pika.ConnectionParameters("127.0.0.1", broker.port))
    try:
        ch = conn.channel()
        ch.basic_publish(
            "amq.topic",
            "orders.42.created",
            b"{}",
            pika.BasicProperties(
                delivery_mode=2,
                content_type="application/json",
                correlation_id="c-9",
                reply_to="orders/replies",
                headers={"tenant": "acme", "attempt": 3},
            ),
        )
    finally:
        conn.close()
    m = sub.get()
    assert (m.topic, m.payload, m.qos) == ("orders/42/created", b"{}", 1)
    p: Any = m.properties
    assert p is not None
    assert p.ContentType == "application/json"
    assert p.CorrelationData == b"c-9"
    assert p.ResponseTopic == "orders/replies"
    assert ("tenant", "acme") in p.UserProperty
    assert ("attempt", "3") in p.UserProperty


RINGS_TOML = """
[[policies]]
name = "mqtt-rings"
pattern = "^mqtt-subscription-"
apply_to = "queues"
definition = { "ring-size" = 3 }
"""


def test_a_policy_makes_subscriber_queues_rings(
    broker_factory: BrokerFactory, paho: MakePaho
) -> None:
    # ringmq's answer to unbounded offline queues: a policy on the subscriber queues' names
    # (the TOML of docs/mqtt.md).
    broker = broker_factory(RINGS_TOML)
    dev = paho(broker, "slow", clean=False)
    dev.subscribe("feed", 1)
    dev.disconnect()
    pub = paho(broker, "pub")
    for i in range(10):
        pub.publish("feed", b"%d" % i, 1)
    again = paho(broker, "slow", clean=False)
    assert [again.get().payload for _ in range(3)] == [b"7", b"8", b"9"]
    assert again.nothing()


def test_management_lists_mqtt_connections_with_their_client_id(
    broker_factory: BrokerFactory, paho: MakePaho
) -> None:
    httpx = pytest.importorskip("httpx")
    b = broker_factory(http_port=0)
    paho(b, "meter-17", v5=True)
    paho(b, "meter-18")
    conns = httpx.get(
        f"http://127.0.0.1:{b.server.http_port}/api/connections",
        auth=("guest", "guest"),
        timeout=10,
    ).json()
    seen = {(c["client_properties"].get("client_id"), c["protocol"]) for c in conns}
    assert seen == {("meter-17", "MQTT 5.0"), ("meter-18", "MQTT 3.1.1")}
