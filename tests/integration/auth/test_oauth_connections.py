"""OAuth 2 grants belong to the connection that presented the token (issue 29): one user with
two connections and two tokens of different scopes keeps two sets of permissions, an
update-secret refreshes its own connection alone, and a management request's bearer token
changes nothing for the user's open connections; over AMQP 0-9-1 (pika), MQTT (paho) and the
management API (httpx)."""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pika
import pika.exceptions
import pytest

from ringmq.node import BrokerThread
from tests.idp import JwksServer, SigningKey
from tests.integration.conftest import BrokerFactory
from tests.integration.mqtt.clients import Paho

pytestmark = pytest.mark.integration
WRITER = "rabbitmq.configure:*/* rabbitmq.write:*/*/* rabbitmq.read:*/*/*"
"""Everything; three-part scopes so that topic exchanges (MQTT's amq.topic) are covered too."""
READER = "rabbitmq.read:*/*/*"


@pytest.fixture(scope="module")
def idp_key() -> SigningKey:
    return SigningKey("idp-1")


@pytest.fixture
def jwks(idp_key: SigningKey) -> Iterator[JwksServer]:
    server = JwksServer([idp_key])
    yield server
    server.close()


@pytest.fixture
def broker(broker_factory: BrokerFactory, jwks: JwksServer) -> BrokerThread:
    config = (
        '[auth]\nbackends = ["internal", "oauth2"]\n'
        f'[auth.oauth2]\nresource_server_id = "rabbitmq"\njwks_url = "{jwks.url}"\n'
    )
    b = broker_factory(config, http_port=0)
    with pika.BlockingConnection(pika.ConnectionParameters("127.0.0.1", b.port)) as guest:
        guest.channel().queue_declare("shared")
    return b


def _pika(b: BrokerThread, token: str) -> pika.BlockingConnection:
    params = pika.ConnectionParameters(
        "127.0.0.1",
        b.port,
        credentials=pika.PlainCredentials("", token),
        heartbeat=0,
        connection_attempts=1,
    )
    return pika.BlockingConnection(params)


def _confirming(conn: pika.BlockingConnection) -> pika.adapters.blocking_connection.BlockingChannel:
    ch = conn.channel()
    ch.confirm_delivery()  # a refused publish closes the channel before basic_publish returns
    return ch


def _refused(ch: pika.adapters.blocking_connection.BlockingChannel) -> str:
    with pytest.raises(pika.exceptions.ChannelClosedByBroker) as refused:
        ch.basic_publish("", "shared", b"refused")
    assert refused.value.reply_code == 403
    return str(refused.value.reply_text)


def test_two_connections_of_one_user_keep_their_own_token(
    broker: BrokerThread, idp_key: SigningKey
) -> None:
    # the same user logs in twice, the second time with a read-only token: the first connection
    # keeps its own token's scopes
    with (
        _pika(broker, idp_key.token(sub="svc", scope=WRITER)) as writer,
        _pika(broker, idp_key.token(sub="svc", scope=READER)) as reader,
    ):
        w = _confirming(writer)
        w.basic_publish("", "shared", b"by the writer")
        assert "write access to exchange 'amq.default'" in _refused(_confirming(reader))
        w.basic_publish("", "shared", b"by the writer, after the reader's refusal")
        assert reader.channel().basic_get("shared", auto_ack=True)[2] == b"by the writer"


def test_update_secret_refreshes_its_own_connection_alone(
    broker: BrokerThread, idp_key: SigningKey
) -> None:
    token = idp_key.token(sub="svc", scope=WRITER)
    with _pika(broker, token) as one, _pika(broker, token) as two:
        ch1, ch2 = _confirming(one), _confirming(two)
        ch1.basic_publish("", "shared", b"1")
        ch2.basic_publish("", "shared", b"2")
        # two swaps its token for a read-only one: its open channel checks again
        two.update_secret(idp_key.token(sub="svc", scope=READER), "narrower")
        _refused(ch2)
        ch1.basic_publish("", "shared", b"one keeps its token")
        assert one.channel().queue_declare("shared", passive=True).method.message_count == 3


def test_mqtt_connections_of_one_user_keep_their_own_token(
    broker: BrokerThread, idp_key: SigningKey
) -> None:
    # SUBSCRIBE needs read on amq.topic: the writer's token has it, the newer one has not
    full = Paho(broker, "full", user="svc", password=idp_key.token(sub="svc", scope=WRITER))
    narrow_scope = "rabbitmq.configure:*/* rabbitmq.write:*/*/*"
    narrow = Paho(
        broker, "narrow", user="svc", password=idp_key.token(sub="svc", scope=narrow_scope)
    )
    try:
        assert not full.refused
        assert not narrow.refused
        assert narrow.subscribe("a/#", qos=1)[0].is_failure
        assert full.subscribe("a/#", qos=1)[0].value == 1
        narrow.publish("a/b", b"from narrow", qos=1)
        got = full.get()
        assert (got.topic, got.payload) == ("a/b", b"from narrow")
    finally:
        narrow.disconnect()
        full.disconnect()


def test_a_management_bearer_token_leaves_open_connections_alone(
    broker: BrokerThread, idp_key: SigningKey
) -> None:
    base = f"http://127.0.0.1:{broker.server.http_port}"
    with _pika(broker, idp_key.token(sub="ops", scope=WRITER)) as conn:
        ch = _confirming(conn)
        ch.basic_publish("", "shared", b"before")
        console = idp_key.token(sub="ops", scope="rabbitmq.tag:administrator rabbitmq.read:*/*")
        with httpx.Client(base_url=base, timeout=30) as http:
            headers = {"Authorization": f"Bearer {console}"}
            r = http.get("/api/whoami", headers=headers)
            assert r.json() == {"name": "ops", "tags": ["administrator"]}
            # the request's own grant: no write scope, so its publish is refused
            body = {
                "properties": {},
                "routing_key": "shared",
                "payload": "x",
                "payload_encoding": "string",
            }
            r = http.post("/api/exchanges/%2F/amq.default/publish", headers=headers, json=body)
            assert r.status_code == 401
        ch.basic_publish("", "shared", b"after: the connection's token still decides")
