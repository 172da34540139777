"""OAuth 2 access tokens as credentials (issue 29), with RabbitMQ's oauth2 backend semantics:
the token where the password goes in AMQP 0-9-1 and 1.0, STOMP and MQTT, checked against a
JWKS document served on loopback or a configured key, scopes as permissions, expiry enforced
on open connections and refreshed with update-secret; expired, forged and misaddressed tokens
refused, the connection alone."""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import paho.mqtt.client as mqtt
import pika
import pytest
import stomp
from paho.mqtt.enums import CallbackAPIVersion
from proton.utils import BlockingConnection

from ringmq.node import BrokerThread
from tests.idp import JwksServer, SigningKey
from tests.integration.conftest import BrokerFactory, wait_until

pytestmark = pytest.mark.integration
TIMEOUT_S = 10.0
FULL = "rabbitmq.configure:*/* rabbitmq.write:*/* rabbitmq.read:*/*"


@pytest.fixture(scope="module")
def idp_key() -> SigningKey:
    return SigningKey("idp-1")


@pytest.fixture
def jwks(idp_key: SigningKey) -> Iterator[JwksServer]:
    server = JwksServer([idp_key])
    yield server
    server.close()


def _config(jwks: JwksServer, extra: str = "") -> str:
    return (
        '[auth]\nbackends = ["internal", "oauth2"]\n'
        '[auth.oauth2]\nresource_server_id = "rabbitmq"\n'
        f'jwks_url = "{jwks.url}"\n' + extra
    )


def _pika(b: BrokerThread, token: str, user: str = "") -> pika.BlockingConnection:
    params = pika.ConnectionParameters(
        "127.0.0.1",
        b.port,
        credentials=pika.PlainCredentials(user, token),
        heartbeat=0,
        connection_attempts=1,
    )
    return pika.BlockingConnection(params)


def _users(b: BrokerThread) -> set[tuple[str, str]]:
    return {(c.protocol, c.user) for c in b.call(b.server.connections)}


def test_a_token_logs_in_its_subject_with_the_scopes_as_permissions(
    broker_factory: BrokerFactory, jwks: JwksServer, idp_key: SigningKey
) -> None:
    b = broker_factory(_config(jwks))
    scope = (
        "rabbitmq.configure:%2F/tok-* rabbitmq.write:%2F/amq.default "
        "rabbitmq.read:%2F/tok-* other.read:*/*"
    )
    with _pika(b, idp_key.token(sub="svc", scope=scope)) as conn:
        assert ("AMQP 0-9-1", "svc") in _users(b)
        ch = conn.channel()
        ch.queue_declare("tok-a")
        ch.basic_publish("", "tok-a", b"by token")
        assert ch.basic_get("tok-a", auto_ack=True)[2] == b"by token"
        with pytest.raises(pika.exceptions.ChannelClosedByBroker) as refused:
            conn.channel().queue_declare("other")  # no configure scope for it
        assert refused.value.reply_code == 403
    # the internal backend first: guest still logs in with its password
    with pika.BlockingConnection(pika.ConnectionParameters("127.0.0.1", b.port)) as conn:
        assert conn.channel().is_open


def test_no_scope_for_the_vhost_is_no_access(
    broker_factory: BrokerFactory, jwks: JwksServer, idp_key: SigningKey
) -> None:
    b = broker_factory(_config(jwks))
    token = idp_key.token(scope="rabbitmq.read:other-vhost/*")
    with pytest.raises(pika.exceptions.ProbableAccessDeniedError, match=r"vhost ./. refused"):
        _pika(b, token)


@pytest.mark.parametrize(
    ("why", "token_of"),
    [
        ("expired", lambda k, f: k.token(scope=FULL, exp_in_s=-5)),
        ("signature", lambda k, f: f.token(scope=FULL, kid=k.kid)),  # another key, same kid
        ("audience", lambda k, f: k.token(scope=FULL, aud="another-service")),
        ("not a JWT", lambda k, f: "not-a-token"),
        ("no signing key", lambda k, f: f.token(scope=FULL)),  # a kid nobody published
    ],
)
def test_bad_tokens_are_refused_the_broker_serves_on(
    broker_factory: BrokerFactory,
    jwks: JwksServer,
    idp_key: SigningKey,
    why: str,
    token_of: Any,
) -> None:
    b = broker_factory(_config(jwks))
    forger = SigningKey("forger")
    with pytest.raises(pika.exceptions.ProbableAuthenticationError) as refused:
        _pika(b, token_of(idp_key, forger))
    assert why in str(refused.value)
    with _pika(b, idp_key.token(scope=FULL)) as conn:
        assert conn.channel().is_open


def test_an_expired_token_closes_its_open_connection(
    broker_factory: BrokerFactory, jwks: JwksServer, idp_key: SigningKey
) -> None:
    b = broker_factory(_config(jwks))
    conn = _pika(b, idp_key.token(sub="short", scope=FULL, exp_in_s=2))
    closed: list[BaseException] = []
    deadline = time.monotonic() + TIMEOUT_S
    try:
        while time.monotonic() < deadline:
            try:
                conn.process_data_events(0.2)
            except pika.exceptions.ConnectionClosedByBroker as exc:
                closed.append(exc)
                break
    finally:
        if conn.is_open:
            conn.close()
    assert closed, "the connection outlived its token"
    assert "credential expired" in str(closed[0])


def test_update_secret_refreshes_the_token(
    broker_factory: BrokerFactory, jwks: JwksServer, idp_key: SigningKey
) -> None:
    b = broker_factory(_config(jwks))
    conn = _pika(b, idp_key.token(sub="long", scope=FULL, exp_in_s=2))
    try:
        conn.update_secret(idp_key.token(sub="long", scope=FULL, exp_in_s=300), "refresh")
        # past the first token's expiry the connection still works
        until = time.monotonic() + 3.5
        while time.monotonic() < until:
            conn.process_data_events(0.2)
        ch = conn.channel()
        ch.queue_declare("refreshed")
        assert ch.is_open
        # a token of another subject is refused: that closes the connection
        with pytest.raises(pika.exceptions.ConnectionClosedByBroker, match="names user"):
            _update_and_wait(conn, idp_key.token(sub="someone-else", scope=FULL))
    finally:
        if conn.is_open:
            conn.close()


def _update_and_wait(conn: pika.BlockingConnection, token: str) -> None:
    conn.update_secret(token, "swap")
    conn.process_data_events(1)


def test_a_rotated_key_is_fetched_when_a_token_names_it(
    broker_factory: BrokerFactory, jwks: JwksServer, idp_key: SigningKey
) -> None:
    b = broker_factory(_config(jwks))
    rotated = SigningKey("idp-2")
    jwks.keys.append(rotated)  # published after the broker fetched the document

    def logs_in() -> bool:
        try:
            _pika(b, rotated.token(scope=FULL)).close()
        except pika.exceptions.AMQPConnectionError:
            return False
        return True

    wait_until(logs_in, timeout=TIMEOUT_S, interval=0.5)
    assert jwks.requests >= 2


def test_a_configured_signing_key_without_jwks(
    broker_factory: BrokerFactory, tmp_path: Path, idp_key: SigningKey
) -> None:
    pem = tmp_path / "idp.pem"
    pem.write_bytes(idp_key.public_pem())
    b = broker_factory(
        '[auth]\nbackends = ["rabbit_auth_backend_oauth2"]\n'
        '[auth.oauth2]\nresource_server_id = "rabbitmq"\n'
        f'signing_keys = {{ idp-1 = "{pem}" }}\n'
        'preferred_username_claims = ["user_name", "sub"]\n'
    )
    with _pika(b, idp_key.token(scope=FULL, user_name="alice")) as conn:
        assert conn.channel().is_open
        assert ("AMQP 0-9-1", "alice") in _users(b)
    # oauth2 alone: the user table's guest no longer logs in
    with pytest.raises(pika.exceptions.ProbableAuthenticationError):
        pika.BlockingConnection(pika.ConnectionParameters("127.0.0.1", b.port))


def test_amqp10_stomp_and_mqtt_take_the_token_as_password(
    broker_factory: BrokerFactory, jwks: JwksServer, idp_key: SigningKey
) -> None:
    b = broker_factory(_config(jwks))
    token = idp_key.token(sub="multi", scope=FULL)
    # AMQP 1.0: SASL PLAIN, the token as the password
    c10 = BlockingConnection(
        f"amqp://127.0.0.1:{b.port}",
        user="ignored",
        password=token,
        allowed_mechs="PLAIN",
        timeout=TIMEOUT_S,
    )
    try:
        assert ("AMQP 1.0", "multi") in _users(b)
    finally:
        c10.close()
    # STOMP: the passcode
    conn = stomp.Connection12([("127.0.0.1", b.port_of("stomp"))], vhost="/")
    conn.connect("ignored", token, wait=True)
    try:
        assert ("STOMP 1.2", "multi") in _users(b)
    finally:
        conn.disconnect()
    # MQTT: the password
    client = mqtt.Client(CallbackAPIVersion.VERSION2, client_id="tok")
    client.username_pw_set("ignored", token)
    reasons: queue.Queue[Any] = queue.Queue()
    client.on_connect = lambda _c, _u, _f, reason, _p: reasons.put(reason)
    client.connect("127.0.0.1", b.port_of("mqtt"), keepalive=30)
    client.loop_start()
    try:
        assert not reasons.get(timeout=TIMEOUT_S).is_failure
        assert ("MQTT 3.1.1", "multi") in _users(b)
    finally:
        client.loop_stop()
        client.disconnect()
    # and a forged one is refused on each
    forged = SigningKey("forger").token(sub="multi", scope=FULL, kid=idp_key.kid)
    bad = mqtt.Client(CallbackAPIVersion.VERSION2, client_id="forged")
    bad.username_pw_set("ignored", forged)
    got: queue.Queue[Any] = queue.Queue()
    bad.on_connect = lambda _c, _u, _f, reason, _p: got.put(reason)
    bad.connect("127.0.0.1", b.port_of("mqtt"), keepalive=30)
    bad.loop_start()
    try:
        assert got.get(timeout=TIMEOUT_S).is_failure
    finally:
        bad.loop_stop()
        bad.disconnect()
    assert threading.active_count() > 0
