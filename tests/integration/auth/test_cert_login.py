"""Logins by client certificate (issue 29): SASL EXTERNAL in AMQP 0-9-1 and 1.0, the STOMP and
MQTT certificate logins, RabbitMQ's `ssl_cert_login_from` choices; a certificate of another CA
never gets past TLS, and a certificate naming no user is refused, the connection alone."""

from __future__ import annotations

import queue
import ssl
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import paho.mqtt.client as mqtt
import pika
import pika.credentials
import pytest
import stomp
from paho.mqtt.enums import CallbackAPIVersion
from proton import SSLDomain
from proton.utils import BlockingConnection

from ringmq.node import BrokerThread
from tests.integration.conftest import BrokerFactory
from tests.pki import CA, Issued, person

pytestmark = pytest.mark.integration
TIMEOUT_S = 10.0


@dataclass
class Pki:
    ca: CA
    server: Issued
    alice: Issued
    """CN=alice, SAN dns alice.example (index 0) and bob.example (index 1)."""
    stranger: Issued
    """CN=mallory, which is no user."""
    rogue: Issued
    """CN=alice, from another CA."""


@pytest.fixture
def pki(tmp_path: Path) -> Pki:
    ca = CA(tmp_path, "main")
    other = CA(tmp_path, "rogue")
    return Pki(
        ca=ca,
        server=ca.issue("server", [(person("localhost")[2])], server=True),
        alice=ca.issue("alice", person("alice"), dns=("alice.example", "bob.example")),
        stranger=ca.issue("mallory", person("mallory")),
        rogue=other.issue("rogue-alice", person("alice")),
    )


def _config(pki: Pki, login_from: str = "common_name", extra: str = "") -> str:
    users = [
        "alice",
        "bob",
        "alice.example",
        "bob.example",
        "CN=alice,O=ringmq tests,C=US",
        "guest",
    ]
    text = (
        f'[tls]\ncert_file = "{pki.server.cert}"\nkey_file = "{pki.server.key}"\n'
        f'ca_file = "{pki.ca.cert_file}"\nverify_peer = true\nport = 0\n'
        "stomp_port = 0\nmqtt_port = 0\n"
        '[[queues]]\nname = "certs10"\n'
        '[auth]\nmechanisms = ["PLAIN", "AMQPLAIN", "EXTERNAL"]\n'
        f'ssl_cert_login_from = "{login_from}"\n'
        "stomp_ssl_cert_login = true\nmqtt_ssl_cert_login = true\n" + extra
    )
    for u in users:
        # cert users have a password nobody knows: EXTERNAL never checks it
        text += f'[[users]]\nname = "{u}"\npassword = "{u}-secret"\n'
        text += f'[[permissions]]\nuser = "{u}"\nvhost = "/"\n'
    return text


def _client_ctx(pki: Pki, who: Issued | None) -> ssl.SSLContext:
    ctx = ssl.create_default_context(cafile=str(pki.ca.cert_file))
    if who is not None:
        ctx.load_cert_chain(str(who.cert), str(who.key))
    return ctx


def _pika(b: BrokerThread, pki: Pki, who: Issued | None, creds: Any = None) -> Any:
    params = pika.ConnectionParameters(
        host="127.0.0.1",
        port=b.server.amqps_port,
        ssl_options=pika.SSLOptions(_client_ctx(pki, who), "127.0.0.1"),
        credentials=creds or pika.credentials.ExternalCredentials(),
        heartbeat=0,
        connection_attempts=1,
    )
    return pika.BlockingConnection(params)


def _whoami(b: BrokerThread) -> set[tuple[str, str, str]]:
    """(protocol, user, auth_mechanism) of the broker's open connections."""
    return {(c.protocol, c.user, c.auth_mechanism) for c in b.call(b.server.connections)}


def test_amqp091_external_takes_the_common_name(broker_factory: BrokerFactory, pki: Pki) -> None:
    b = broker_factory(_config(pki))
    with _pika(b, pki, pki.alice) as conn:
        ch = conn.channel()
        ch.queue_declare("certs")
        ch.basic_publish("", "certs", b"by certificate")
        assert ch.basic_get("certs", auto_ack=True)[2] == b"by certificate"
        assert ("AMQP 0-9-1", "alice", "EXTERNAL") in _whoami(b)
    # a password login on the same listener still works beside it
    with _pika(b, pki, pki.alice, pika.PlainCredentials("bob", "bob-secret")) as conn:
        assert conn.channel().is_open


@pytest.mark.parametrize(
    ("login_from", "extra", "user"),
    [
        ("distinguished_name", "", "CN=alice,O=ringmq tests,C=US"),
        ("subject_alternative_name", "", "alice.example"),
        ("subject_alternative_name", "ssl_cert_login_san_index = 1\n", "bob.example"),
    ],
)
def test_ssl_cert_login_from_choices(
    broker_factory: BrokerFactory, pki: Pki, login_from: str, extra: str, user: str
) -> None:
    b = broker_factory(_config(pki, login_from, extra))
    with _pika(b, pki, pki.alice) as conn:
        assert conn.channel().is_open
        assert ("AMQP 0-9-1", user, "EXTERNAL") in _whoami(b)


def test_a_certificate_naming_no_user_is_refused_the_broker_serves_on(
    broker_factory: BrokerFactory, pki: Pki
) -> None:
    b = broker_factory(_config(pki))
    with pytest.raises(pika.exceptions.ProbableAuthenticationError, match="EXTERNAL"):
        _pika(b, pki, pki.stranger)
    with _pika(b, pki, pki.alice) as conn:
        assert conn.channel().is_open


def test_a_certificate_from_another_ca_never_gets_past_tls(
    broker_factory: BrokerFactory, pki: Pki
) -> None:
    b = broker_factory(_config(pki))
    with pytest.raises(pika.exceptions.AMQPConnectionError):
        _pika(b, pki, pki.rogue)
    assert _whoami(b) == set()  # refused in the TLS handshake: no connection was served
    with _pika(b, pki, pki.alice) as conn:  # the broker is unaffected
        assert conn.channel().is_open


def test_external_is_not_offered_when_certificate_logins_are_off(
    broker_factory: BrokerFactory, pki: Pki
) -> None:
    config = _config(pki).replace(', "EXTERNAL"', "")
    config = config.replace("stomp_ssl_cert_login = true\nmqtt_ssl_cert_login = true\n", "")
    b = broker_factory(config)
    with pytest.raises(pika.exceptions.AMQPConnectionError):
        _pika(b, pki, pki.alice)  # pika finds no EXTERNAL among the mechanisms
    with _pika(b, pki, pki.alice, pika.PlainCredentials("alice", "alice-secret")) as conn:
        assert conn.channel().is_open


def _proton_domain(pki: Pki, who: Issued) -> SSLDomain:
    domain = SSLDomain(SSLDomain.MODE_CLIENT)
    domain.set_trusted_ca_db(str(pki.ca.cert_file))
    domain.set_credentials(str(who.cert), str(who.key), None)
    domain.set_peer_authentication(SSLDomain.VERIFY_PEER)
    return domain


def test_amqp10_sasl_external(broker_factory: BrokerFactory, pki: Pki) -> None:
    b = broker_factory(_config(pki))
    conn = BlockingConnection(
        f"amqps://127.0.0.1:{b.server.amqps_port}",
        ssl_domain=_proton_domain(pki, pki.alice),
        allowed_mechs="EXTERNAL",
        timeout=TIMEOUT_S,
    )
    try:
        sender = conn.create_sender("/queues/certs10")
        assert sender is not None
        assert ("AMQP 1.0", "alice", "EXTERNAL") in _whoami(b)
    finally:
        conn.close()
    with pytest.raises(Exception, match=r"(?i)auth|sasl"):
        BlockingConnection(
            f"amqps://127.0.0.1:{b.server.amqps_port}",
            ssl_domain=_proton_domain(pki, pki.stranger),
            allowed_mechs="EXTERNAL",
            timeout=TIMEOUT_S,
        )


class _Listener(stomp.ConnectionListener):  # type: ignore[misc]
    def __init__(self) -> None:
        self.errors: queue.Queue[Any] = queue.Queue()

    def on_error(self, frame: Any) -> None:
        self.errors.put(frame)


def _stomp(b: BrokerThread, pki: Pki, who: Issued) -> tuple[stomp.Connection12, _Listener]:
    port = b.port_of("stomp/ssl")
    conn = stomp.Connection12([("127.0.0.1", port)], vhost="/", auto_decode=False)
    conn.set_ssl(
        for_hosts=[("127.0.0.1", port)],
        ca_certs=str(pki.ca.cert_file),
        cert_file=str(who.cert),
        key_file=str(who.key),
    )
    listener = _Listener()
    conn.set_listener("errors", listener)
    return conn, listener


def test_stomp_certificate_login(broker_factory: BrokerFactory, pki: Pki) -> None:
    b = broker_factory(_config(pki))
    conn, _ = _stomp(b, pki, pki.alice)
    conn.connect(wait=True)  # no login header: the certificate names the user
    try:
        assert ("STOMP 1.2", "alice", "EXTERNAL") in _whoami(b)
    finally:
        conn.disconnect()
    bad, errors = _stomp(b, pki, pki.stranger)
    with pytest.raises(stomp.exception.ConnectFailedException):
        bad.connect(wait=True)
    try:
        error = errors.errors.get(timeout=TIMEOUT_S)
        assert "EXTERNAL" in error.body.decode()
    finally:
        bad.transport.disconnect_socket()  # its TLS close, which the broker's close waits for


def _paho(b: BrokerThread, pki: Pki, who: Issued) -> tuple[mqtt.Client, Callable[[], Any]]:
    client = mqtt.Client(CallbackAPIVersion.VERSION2, client_id=f"cert-{who.cert.stem}")
    client.tls_set_context(_client_ctx(pki, who))
    client.tls_insecure_set(True)  # the server certificate names 127.0.0.1, checked by the CA
    reasons: queue.Queue[Any] = queue.Queue()
    client.on_connect = lambda _c, _u, _f, reason, _p: reasons.put(reason)
    client.connect("127.0.0.1", b.port_of("mqtt/ssl"), keepalive=30)
    client.loop_start()
    return client, lambda: reasons.get(timeout=TIMEOUT_S)


def test_mqtt_certificate_login(broker_factory: BrokerFactory, pki: Pki) -> None:
    b = broker_factory(_config(pki))
    client, reason = _paho(b, pki, pki.alice)  # no user name: the certificate names the user
    try:
        assert not reason().is_failure
        got = threading.Event()
        client.on_message = lambda _c, _u, _m: got.set()
        client.subscribe("certs/t", 1)
        client.publish("certs/t", b"hi", 1)
        assert got.wait(TIMEOUT_S)
        assert ("MQTT 3.1.1", "alice") in {(p, u) for p, u, _ in _whoami(b)}
    finally:
        client.loop_stop()
        client.disconnect()
    bad, bad_reason = _paho(b, pki, pki.stranger)
    try:
        assert bad_reason().is_failure
    finally:
        bad.loop_stop()
        bad.disconnect()
