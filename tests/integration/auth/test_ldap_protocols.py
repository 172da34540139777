"""LDAP logins (issue 29) for AMQP 1.0 (proton), STOMP (stomp.py) and MQTT (paho) against a real
OpenLDAP (Debian's slapd on a loopback port), the same `auth_backends` chain as AMQP 0-9-1:
internal first, then LDAP, asked off the loop while the connection's handshake waits."""

from __future__ import annotations

import gc
import queue
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pika
import pytest
import stomp
import stomp.exception
from proton import Message
from proton.utils import BlockingConnection

from ringmq.core.ldapquery import LdapGrant
from ringmq.node import BrokerThread
from tests.integration.auth.test_ldap import GROUPS, _config, conn_grants
from tests.integration.conftest import BrokerFactory
from tests.integration.mqtt.clients import Paho
from tests.ldapserver import Slapd, slapd_binary

pytestmark = [
    pytest.mark.integration,
    pytest.mark.filterwarnings("ignore::ResourceWarning"),
    pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning"),
]


@pytest.fixture(autouse=True)
def _collect_leaked_sockets() -> Iterator[None]:
    yield
    gc.collect()


@pytest.fixture(scope="module")
def ldap(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Slapd]:
    slapd_binary()  # skips, with the reason, where slapd is not installed
    server = Slapd(Path(tmp_path_factory.mktemp("slapd")))
    try:
        server.seed(
            {"alice": "alice-pw", "bob": "bob-pw", "carol": "carol-pw"},
            {"admins": ["alice"], "mq-users": ["alice", "bob"]},
        )
        yield server
    finally:
        server.stop()


@pytest.fixture
def broker(broker_factory: BrokerFactory, ldap: Slapd) -> BrokerThread:
    return broker_factory(_config(ldap.port), stomp_port=0, mqtt_port=0)


def _grant(b: BrokerThread, user: str) -> Any:
    # the grant of the user's one open connection
    [grant] = conn_grants(b, user)
    return grant


def test_amqp10(broker: BrokerThread) -> None:
    with pika.BlockingConnection(pika.ConnectionParameters(broker.host, broker.port)) as guest:
        guest.channel().queue_declare("alice-10")
    url = f"amqp://alice:alice-pw@127.0.0.1:{broker.port}"
    conn = BlockingConnection(url, timeout=20)
    try:
        sender = conn.create_sender("/queues/alice-10")
        receiver = conn.create_receiver("/queues/alice-10")
        sender.send(Message(body="via ldap"))
        assert receiver.receive(timeout=10).body == "via ldap"
        receiver.accept()
        assert isinstance(_grant(broker, "alice"), LdapGrant)
    finally:
        conn.close()
    with pytest.raises(Exception, match="unauthorized-access"):  # SASL's outcome: auth
        BlockingConnection(f"amqp://alice:wrong@127.0.0.1:{broker.port}", timeout=20)
    with pytest.raises(Exception, match="vhost '/' refused"):
        BlockingConnection(f"amqp://carol:carol-pw@127.0.0.1:{broker.port}", timeout=20)
    BlockingConnection(f"amqp://guest:guest@127.0.0.1:{broker.port}", timeout=20).close()


def test_stomp(broker: BrokerThread) -> None:
    got: queue.Queue[Any] = queue.Queue()
    errors: queue.Queue[Any] = queue.Queue()

    class _Listener(stomp.ConnectionListener):  # type: ignore[misc]
        def on_message(self, frame: Any) -> None:
            got.put(frame)

        def on_error(self, frame: Any) -> None:
            errors.put(frame)

    def connect(user: str, password: str) -> Any:
        c = stomp.Connection12([("127.0.0.1", broker.port_of("stomp"))], auto_decode=False)
        c.set_listener("l", _Listener())
        c.connect(user, password, wait=True)
        return c

    c = connect("alice", "alice-pw")
    c.subscribe("/queue/alice-stomp", id="1", ack="auto")
    c.send("/queue/alice-stomp", b"via ldap")
    assert got.get(timeout=10).body == b"via ldap"
    assert isinstance(_grant(broker, "alice"), LdapGrant)
    c.disconnect()
    with pytest.raises(stomp.exception.ConnectFailedException):
        connect("alice", "wrong")
    assert "LDAP login refused: invalid credentials" in errors.get(timeout=10).body.decode()
    connect("guest", "guest").disconnect()


def test_mqtt(broker: BrokerThread) -> None:
    c = Paho(broker, "alice-dev", user="alice", password="alice-pw")
    try:
        assert not c.refused
        assert c.subscribe("ldap/#", qos=1)[0].value == 1
        c.publish("ldap/x", b"via ldap", qos=1)
        got = c.get()
        assert (got.topic, got.payload) == ("ldap/x", b"via ldap")
        assert isinstance(_grant(broker, "alice"), LdapGrant)
    finally:
        c.disconnect()
    bad = Paho(broker, "alice-bad", user="alice", password="wrong")
    assert bad.refused
    bad.disconnect()
    ok = Paho(broker, "guest-dev")  # the internal backend first
    assert not ok.refused
    ok.disconnect()


def test_management_api(broker_factory: BrokerFactory, ldap: Slapd) -> None:
    b = broker_factory(_config(ldap.port), http_port=0)
    base = f"http://127.0.0.1:{b.server.http_port}"
    with httpx.Client(base_url=base, timeout=30) as http:
        r = http.get("/api/whoami", auth=("alice", "alice-pw"))  # administrator by LDAP group
        assert r.status_code == 200
        assert r.json() == {"name": "alice", "tags": ["administrator"]}
        assert http.get("/api/queues", auth=("alice", "alice-pw")).status_code == 200
        r = http.get("/api/whoami", auth=("bob", "bob-pw"))  # no management tag
        assert r.status_code == 401
        assert r.json()["reason"] == "Not management user"
        assert http.get("/api/whoami", auth=("alice", "wrong")).status_code == 401
        assert http.get("/api/whoami", auth=("guest", "guest")).status_code == 200


def _topic_config(port: int) -> str:
    # RabbitMQ's topic_access_query: everyone publishes under their own name (MQTT: and their
    # client id) or "public."; administrators bind anything, the others under their name
    write = '{ match = ["${routing_key}", "^(${username}\\\\.(${client_id}\\\\.)?|public\\\\.)"] }'
    admins = f'{{ in_group = "cn=admins,{GROUPS}" }}'
    own = '{ match = ["${routing_key}", "^${username}\\\\."] }'
    query = (
        f'{{ for = [{{ permission = "write", query = {write} }}, '
        f'{{ permission = "read", query = {{ or = [{admins}, {own}] }} }}] }}'
    )
    return _config(port).replace(
        "[auth.ldap.tag_queries]", f"topic_access_query = {query}\n[auth.ldap.tag_queries]"
    )


def test_topic_access_query(broker_factory: BrokerFactory, ldap: Slapd) -> None:
    b = broker_factory(_topic_config(ldap.port), mqtt_port=0)
    creds = pika.PlainCredentials("bob", "bob-pw")
    with pika.BlockingConnection(pika.ConnectionParameters(b.host, b.port, credentials=creds)) as c:
        ch = c.channel()
        ch.confirm_delivery()
        ch.queue_declare("bob-topics")
        ch.queue_bind("bob-topics", "amq.topic", "bob.#")
        ch.basic_publish("amq.topic", "bob.x", b"his own")
        ch.basic_publish("amq.direct", "alice.x", b"not a topic exchange: not asked")
        with pytest.raises(pika.exceptions.ChannelClosedByBroker) as refused:
            ch.basic_publish("amq.topic", "alice.x", b"refused")
        assert refused.value.reply_code == 403
        assert refused.value.reply_text == (
            "ACCESS_REFUSED - write access to topic 'alice.x' in exchange 'amq.topic' in "
            "vhost '/' refused for user 'bob'"
        )
        ch = c.channel()
        with pytest.raises(pika.exceptions.ChannelClosedByBroker) as refused:
            ch.queue_bind("bob-topics", "amq.topic", "alice.#")
        assert "read access to topic 'alice.#'" in refused.value.reply_text
    creds = pika.PlainCredentials("alice", "alice-pw")
    with pika.BlockingConnection(pika.ConnectionParameters(b.host, b.port, credentials=creds)) as c:
        ch = c.channel()
        ch.confirm_delivery()
        ch.queue_bind("bob-topics", "amq.topic", "public.#")  # in admins: the in_group holds
        ch.basic_publish("amq.topic", "public.news", b"for everyone")
        assert ch.basic_get("bob-topics", auto_ack=True)[2] == b"his own"
        assert ch.basic_get("bob-topics", auto_ack=True)[2] == b"for everyone"
    # MQTT: the topic is the routing key (alice/dev1/t is alice.dev1.t), ${client_id} is known
    dev = Paho(b, "dev1", user="alice", password="alice-pw")
    try:
        assert not dev.refused
        assert dev.subscribe("#", qos=1)[0].value == 1
        dev.publish("alice/dev1/t", b"21", qos=1)
        got = dev.get()
        assert (got.topic, got.payload) == ("alice/dev1/t", b"21")
        info = dev.client.publish("bob/dev1/t", b"spoofed", qos=1)  # refused: disconnected
        assert dev.disconnected.wait(10)
        assert not info.is_published()
    finally:
        dev.disconnect()
