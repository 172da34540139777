"""OAuth 2 routing-key scopes (issue 29): RabbitMQ's `rabbitmq.write:<vhost>/<exchange>/<key>`
and `rabbitmq.read:<vhost>/<exchange>/<key>` decide the routing keys a token's connection may
publish with and bind with on topic exchanges, through the one topic check
(`core/topicauth.py`), with RabbitMQ's refusals; over AMQP 0-9-1 (pika) and MQTT (paho)."""

from __future__ import annotations

from collections.abc import Iterator

import pika
import pika.exceptions
import pytest

from ringmq.node import BrokerThread
from tests.idp import JwksServer, SigningKey
from tests.integration.conftest import BrokerFactory
from tests.integration.mqtt.clients import Paho

pytestmark = pytest.mark.integration
RESOURCES = "rabbitmq.configure:*/* rabbitmq.write:*/* rabbitmq.read:*/*"
"""Every queue and exchange, and no routing key: two-part scopes grant no topic access."""


@pytest.fixture(scope="module")
def idp_key() -> SigningKey:
    return SigningKey("idp-1")


@pytest.fixture
def broker(broker_factory: BrokerFactory, idp_key: SigningKey) -> Iterator[BrokerThread]:
    jwks = JwksServer([idp_key])
    try:
        yield broker_factory(
            '[auth]\nbackends = ["internal", "oauth2"]\n'
            f'[auth.oauth2]\nresource_server_id = "rabbitmq"\njwks_url = "{jwks.url}"\n'
        )
    finally:
        jwks.close()


def _pika(b: BrokerThread, token: str) -> pika.BlockingConnection:
    params = pika.ConnectionParameters(
        "127.0.0.1", b.port, credentials=pika.PlainCredentials("", token), heartbeat=0
    )
    return pika.BlockingConnection(params)


def _closed(conn: pika.BlockingConnection, act: str, *args: str) -> str:
    # run `act` on a fresh confirming channel; the text of the channel's 403 close
    ch = conn.channel()
    ch.confirm_delivery()
    with pytest.raises(pika.exceptions.ChannelClosedByBroker) as refused:
        getattr(ch, act)(*args)
    assert refused.value.reply_code == 403
    return str(refused.value.reply_text)


def test_amqp091_publish_and_bind_follow_the_routing_key_scopes(
    broker: BrokerThread, idp_key: SigningKey
) -> None:
    scope = (
        f"{RESOURCES} rabbitmq.write:%2F/amq.topic/{{sub}}.* rabbitmq.read:*/amq.topic/{{sub}}.*"
    )
    with _pika(broker, idp_key.token(sub="dev1", scope=scope)) as conn:
        ch = conn.channel()
        ch.confirm_delivery()
        ch.queue_declare("mine")
        ch.queue_bind("mine", "amq.topic", "dev1.#")
        ch.basic_publish("amq.topic", "dev1.temp", b"mine")
        ch.exchange_declare("plain", "direct")
        ch.basic_publish("plain", "anything", b"a direct exchange: no routing-key check")
        assert ch.basic_get("mine", auto_ack=True)[2] == b"mine"
        assert _closed(conn, "basic_publish", "amq.topic", "dev2.temp", "x") == (
            "ACCESS_REFUSED - write access to topic 'dev2.temp' in exchange 'amq.topic' in "
            "vhost '/' refused for user 'dev1'"
        )
        assert "read access to topic 'dev2.#' in exchange 'amq.topic'" in _closed(
            conn, "queue_bind", "mine", "amq.topic", "dev2.#"
        )
        ch = conn.channel()
        ch.exchange_declare("events", "topic")  # no scope names it
        assert "in exchange 'events'" in _closed(conn, "basic_publish", "events", "dev1.x", "x")


def test_two_part_scopes_grant_no_routing_key(broker: BrokerThread, idp_key: SigningKey) -> None:
    # RabbitMQ: publishing to a topic exchange needs write:<vhost>/<exchange>/<routingkey>
    with _pika(broker, idp_key.token(sub="app", scope=RESOURCES)) as conn:
        ch = conn.channel()
        ch.confirm_delivery()
        ch.basic_publish("", "nowhere", b"the default exchange is a direct one")
        refusal = _closed(conn, "basic_publish", "amq.topic", "a.b", "x")
        assert "write access to topic 'a.b' in exchange 'amq.topic'" in refusal


def test_mqtt_topics_follow_the_routing_key_scopes(
    broker: BrokerThread, idp_key: SigningKey
) -> None:
    # MQTT topics are checked as the routing keys they become: sensors/dev1/t is sensors.dev1.t
    scope = (
        f"{RESOURCES} rabbitmq.write:*/amq.topic/sensors.{{sub}}.* "
        "rabbitmq.read:*/amq.topic/sensors.*"
    )
    token = idp_key.token(sub="dev1", scope=scope)
    dev1 = Paho(broker, "dev1", user="ignored", password=token)
    try:
        assert not dev1.refused
        assert dev1.subscribe("sensors/#", qos=1)[0].value == 1
        assert dev1.subscribe("admin/#", qos=1)[0].is_failure
        dev1.publish("sensors/dev1/temp", b"21", qos=1)
        got = dev1.get()
        assert (got.topic, got.payload) == ("sensors/dev1/temp", b"21")
        # another device's prefix: the broker disconnects the publisher (MQTT 3.1.1)
        info = dev1.client.publish("sensors/dev2/temp", b"spoofed", qos=1)
        assert dev1.disconnected.wait(10)
        assert not info.is_published()
    finally:
        dev1.disconnect()
