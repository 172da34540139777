"""Topic authorisation (issue 28 item 6): RabbitMQ's `topic_permissions` through
`/api/topic-permissions` and definitions, enforced on topic exchanges for publishes (write) and
bindings (read) over AMQP 0-9-1 (pika), MQTT (paho) and STOMP (stomp.py), with the `{username}`,
`{vhost}` and `{client_id}` variables and RabbitMQ's refusals."""

from __future__ import annotations

import gc
import queue
from collections.abc import Iterator
from typing import Any

import httpx
import paho.mqtt.client as mqtt
import pika
import pika.exceptions
import pytest
import stomp
from proton import Disposition, Message
from proton.utils import BlockingConnection, LinkDetached, SendException

from ringmq.node import BrokerThread
from tests.integration.conftest import BrokerFactory, wait_until
from tests.integration.mqtt.clients import Paho

pytestmark = [
    pytest.mark.integration,
    pytest.mark.filterwarnings("ignore::ResourceWarning"),
    pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning"),
]


@pytest.fixture(autouse=True)
def _collect_leaked_sockets() -> Iterator[None]:
    yield
    gc.collect()


@pytest.fixture
def broker(broker_factory: BrokerFactory) -> BrokerThread:
    return broker_factory(http_port=0, stomp_port=0, mqtt_port=0)


@pytest.fixture
def http(broker: BrokerThread) -> Iterator[httpx.Client]:
    with httpx.Client(
        base_url=f"http://127.0.0.1:{broker.server.http_port}", auth=("guest", "guest"), timeout=30
    ) as client:
        yield client


def _app_user(http: httpx.Client, name: str = "app") -> None:
    assert http.put(f"/api/users/{name}", json={"password": f"{name}-pw", "tags": ""}).is_success
    everything = {"configure": ".*", "write": ".*", "read": ".*"}
    assert http.put(f"/api/permissions/%2F/{name}", json=everything).is_success


def _pika(b: BrokerThread, user: str = "app") -> pika.BlockingConnection:
    creds = pika.PlainCredentials(user, f"{user}-pw")
    return pika.BlockingConnection(
        pika.ConnectionParameters(host=b.host, port=b.port, credentials=creds, heartbeat=0)
    )


def test_api_shapes_and_validation(http: httpx.Client) -> None:
    _app_user(http)
    rule = {"exchange": "amq.topic", "write": "^{username}\\.", "read": ".*"}
    assert http.put("/api/topic-permissions/%2F/app", json=rule).status_code == 201
    assert http.put("/api/topic-permissions/%2F/app", json=rule).status_code == 204
    other = {"exchange": "events", "write": "", "read": "^a"}
    assert http.put("/api/topic-permissions/%2F/app", json=other).status_code == 201
    listed = http.get("/api/topic-permissions").json()
    assert listed == [
        {"user": "app", "vhost": "/", "exchange": "amq.topic", "write": "^{username}\\.",
         "read": ".*"},
        {"user": "app", "vhost": "/", "exchange": "events", "write": "", "read": "^a"},
    ]  # fmt: skip
    assert http.get("/api/topic-permissions/%2F/app").json() == listed
    assert http.get("/api/users/app/topic-permissions").json() == listed
    assert http.get("/api/vhosts/%2F/topic-permissions").json() == listed
    # every key required, patterns must compile, the user and the vhost must exist
    assert http.put("/api/topic-permissions/%2F/app", json={"exchange": "x"}).status_code == 400
    bad = {"exchange": "x", "write": "(", "read": ".*"}
    assert http.put("/api/topic-permissions/%2F/app", json=bad).status_code == 400
    assert http.put("/api/topic-permissions/%2F/nobody", json=rule).status_code == 404
    assert http.put("/api/topic-permissions/nowhere/app", json=rule).status_code == 404
    # only administrators
    assert http.get("/api/topic-permissions", auth=("app", "app-pw")).status_code == 401
    assert http.delete("/api/topic-permissions/%2F/app").status_code == 204
    assert http.get("/api/topic-permissions").json() == []
    assert http.get("/api/topic-permissions/%2F/app").status_code == 404
    assert http.delete("/api/topic-permissions/%2F/app").status_code == 404


def test_definitions_export_and_import(http: httpx.Client) -> None:
    _app_user(http)
    rule = {"exchange": "amq.topic", "write": "^w", "read": "^r"}
    http.put("/api/topic-permissions/%2F/app", json=rule)
    doc = http.get("/api/definitions").json()
    assert doc["topic_permissions"] == [{"user": "app", "vhost": "/"} | rule]
    # all or nothing: a topic permission of an unknown user refuses the whole document
    refused = {
        "users": [{"name": "new", "password_hash": "", "tags": []}],
        "topic_permissions": [
            {"user": "new", "vhost": "/", "exchange": "t", "write": ".*", "read": ".*"},
            {"user": "ghost", "vhost": "/", "exchange": "t", "write": ".*", "read": ".*"},
            {"user": "new", "vhost": "/", "exchange": "t", "write": "(", "read": ".*"},
        ],
    }
    r = http.post("/api/definitions", json=refused)
    assert r.status_code == 400
    assert "2 refused, nothing applied" in r.json()["reason"]
    assert "topic permission of 'ghost' in '/': no such user" in r.json()["reason"]
    assert http.get("/api/users/new").status_code == 404
    # a RabbitMQ export's topic permissions import and take effect
    http.delete("/api/topic-permissions/%2F/app")
    doc["topic_permissions"].append(
        {"user": "guest", "vhost": "/", "exchange": "logs", "write": ".*", "read": "^x"}
    )
    assert http.post("/api/definitions", json=doc).status_code == 204
    assert len(http.get("/api/topic-permissions").json()) == 2


def test_amqp091_publish_and_bind(broker: BrokerThread, http: httpx.Client) -> None:
    _app_user(http)
    conn = _pika(broker)
    ch = conn.channel()
    ch.basic_publish("amq.topic", "other.x", b"allowed before the rule")  # no rule yet
    ch.queue_declare("mine")
    rule = {"exchange": "amq.topic", "write": "^{username}\\.", "read": "^{username}\\.|^{vhost}$"}
    assert http.put("/api/topic-permissions/%2F/app", json=rule).is_success
    ch.queue_bind("mine", "amq.topic", "app.#")
    ch.queue_bind("mine", "amq.topic", "/")  # {vhost}
    ch.basic_publish("amq.topic", "app.a", b"ok")
    wait_until(lambda: ch.queue_declare("mine", passive=True).method.message_count == 1)
    ch.exchange_declare("direct", "direct")
    ch.basic_publish("direct", "other.x", b"not a topic exchange: not checked")
    ch.exchange_declare("t2", "topic")
    ch.basic_publish("t2", "other.x", b"no rule on this exchange")
    # the same open channel: the new rule applies to the next publish
    ch.basic_publish("amq.topic", "other.x", b"refused")
    with pytest.raises(pika.exceptions.ChannelClosedByBroker) as exc:
        ch.queue_declare("mine", passive=True)  # a round trip to see the close
    assert exc.value.reply_code == 403
    assert exc.value.reply_text == (
        "ACCESS_REFUSED - write access to topic 'other.x' in exchange 'amq.topic' in vhost '/' "
        "refused for user 'app'"
    )
    ch = conn.channel()
    with pytest.raises(pika.exceptions.ChannelClosedByBroker) as exc:
        ch.queue_bind("mine", "amq.topic", "other.#")
    assert exc.value.reply_code == 403
    assert "read access to topic 'other.#' in exchange 'amq.topic'" in exc.value.reply_text
    ch = conn.channel()
    with pytest.raises(pika.exceptions.ChannelClosedByBroker) as exc:
        ch.exchange_bind("t2", "amq.topic", "other.#")  # exchange-to-exchange: read too
    assert exc.value.reply_code == 403
    # another user is not concerned by app's rule
    with _pika_guest(broker) as guest:
        guest.channel().basic_publish("amq.topic", "other.x", b"guest may")
    conn.close()


def _pika_guest(b: BrokerThread) -> pika.BlockingConnection:
    return pika.BlockingConnection(pika.ConnectionParameters(host=b.host, port=b.port))


def _pipelined(b: BrokerThread, keys: list[str]) -> tuple[int, str, int]:
    # Publish to amq.topic with `keys` as user app, all written in one callback on a confirm
    # channel (pika's SelectConnection: the broker reads them as a run, `publish_batch`);
    # returns (reply code, reply text) of the channel's close and the acks with multiple=true.
    params = pika.ConnectionParameters(
        b.host, b.port, credentials=pika.PlainCredentials("app", "app-pw")
    )
    result: dict[str, Any] = {"multiple": 0}

    def on_open(conn: Any) -> None:
        conn.channel(on_open_callback=on_channel)

    def on_channel(ch: Any) -> None:
        ch.add_on_close_callback(on_close)
        ch.confirm_delivery(on_confirm, callback=lambda _f: publish(ch))

    def on_confirm(frame: Any) -> None:
        result["multiple"] += bool(frame.method.multiple)

    def publish(ch: Any) -> None:
        for key in keys:
            ch.basic_publish("amq.topic", key, b"m")

    def on_close(ch: Any, reason: Any) -> None:
        result["close"] = (reason.reply_code, reason.reply_text)
        ch.connection.close()

    conn = pika.SelectConnection(
        params, on_open_callback=on_open, on_close_callback=lambda c, _r: c.ioloop.stop()
    )
    timer = conn.ioloop.call_later(20, conn.ioloop.stop)  # a bound against hanging
    conn.ioloop.start()
    conn.ioloop.remove_timeout(timer)
    code, text = result.get("close", (0, ""))
    return code, text, result["multiple"]


def test_amqp091_pipelined_confirmed_runs(broker: BrokerThread, http: httpx.Client) -> None:
    # Publishes pipelined in confirm mode go as batches (`publish_batch`): each key checked.
    _app_user(http)
    http.put(
        "/api/topic-permissions/%2F/app",
        json={"exchange": "amq.topic", "write": "^ok$", "read": ".*"},
    )
    with _pika_guest(broker) as guest:
        ch = guest.channel()
        ch.queue_declare("runs")
        ch.queue_bind("runs", "amq.topic", "#")
    code, text, multiple = _pipelined(broker, ["ok"] * 20 + ["bad"] * 20 + ["ok"] * 5)
    assert multiple  # coalesced acks: the broker took runs (a run of "bad" keys among them)
    assert code == 403
    assert "write access to topic 'bad' in exchange 'amq.topic'" in text
    with _pika_guest(broker) as guest:
        assert guest.channel().queue_declare("runs", passive=True).method.message_count == 20


def test_mqtt_topics_and_client_id(broker: BrokerThread, http: httpx.Client) -> None:
    _app_user(http)
    rule = {
        "exchange": "amq.topic",
        "write": "^{username}\\.{client_id}\\.",
        "read": "^{username}\\.",
    }
    http.put("/api/topic-permissions/%2F/app", json=rule)
    sub = Paho(broker, "dev1", user="app", password="app-pw")
    try:
        assert sub.subscribe("app/#", qos=1)[0].value == 1
        refused = sub.subscribe("other/#", qos=1)[0]
        assert refused.is_failure
        sub.publish("app/dev1/temp", b"21", qos=1)
        got = sub.get()
        assert (got.topic, got.payload) == ("app/dev1/temp", b"21")
        # another client id may not write under dev1's prefix: the broker disconnects it
        dev2 = Paho(broker, "dev2", user="app", password="app-pw")
        info = dev2.client.publish("app/dev1/temp", b"spoofed", qos=1)
        assert dev2.disconnected.wait(10)
        assert not info.is_published()
        dev2.disconnect()
        assert sub.nothing()
    finally:
        sub.disconnect()


def test_mqtt_will_topic_checked_at_connect(broker: BrokerThread, http: httpx.Client) -> None:
    _app_user(http)
    rule = {"exchange": "amq.topic", "write": "^app\\.", "read": ".*"}
    http.put("/api/topic-permissions/%2F/app", json=rule)
    c = Paho(broker, "w1", user="app", password="app-pw", will=("other/will", b"x", 0))
    try:
        assert c.refused
        assert c.connack.value in (0x05, 0x87)  # not authorised (3.1.1 code 5)
    finally:
        c.disconnect()
    ok = Paho(broker, "w2", user="app", password="app-pw", will=("app/will", b"x", 0))
    assert not ok.refused
    ok.disconnect()


def test_stomp_destinations(broker: BrokerThread, http: httpx.Client) -> None:
    _app_user(http)
    rule = {"exchange": "amq.topic", "write": "^{username}\\.", "read": "^{username}\\."}
    http.put("/api/topic-permissions/%2F/app", json=rule)
    errors: queue.Queue[Any] = queue.Queue()
    messages: queue.Queue[Any] = queue.Queue()

    class _Listener(stomp.ConnectionListener):  # type: ignore[misc]
        def on_error(self, frame: Any) -> None:
            errors.put(frame)

        def on_message(self, frame: Any) -> None:
            messages.put(frame)

    def connect() -> Any:
        c = stomp.Connection12([("127.0.0.1", broker.port_of("stomp"))], auto_decode=False)
        c.set_listener("l", _Listener())
        c.connect("app", "app-pw", wait=True)
        return c

    c = connect()
    c.subscribe("/topic/app.#", id="1", ack="auto")
    c.send("/topic/app.x", b"hello", receipt="r1")
    assert messages.get(timeout=10).body == b"hello"
    c.send("/topic/other.x", b"refused")
    frame = errors.get(timeout=10)
    assert frame.headers["message"].startswith(
        "ACCESS_REFUSED - write access to topic 'other.x' in exchange 'amq.topic'"
    )
    wait_until(lambda: not c.is_connected(), timeout=10)
    c.disconnect()
    c = connect()
    c.subscribe("/topic/other.#", id="2", ack="auto")
    frame = errors.get(timeout=10)
    assert "read access to topic 'other.#' in exchange 'amq.topic'" in frame.headers["message"]
    c.disconnect()


def test_topic_permissions_survive_a_restart(broker_factory: BrokerFactory, tmp_path: Any) -> None:
    data = tmp_path / "keep"
    b = broker_factory(http_port=0, data_dir=data)
    base = f"http://127.0.0.1:{b.server.http_port}"
    with httpx.Client(base_url=base, auth=("guest", "guest"), timeout=30) as http:
        _app_user(http)
        rule = {"exchange": "amq.topic", "write": "^a", "read": "^b"}
        http.put("/api/topic-permissions/%2F/app", json=rule)
    b.stop()
    b = broker_factory(http_port=0, data_dir=data)
    base = f"http://127.0.0.1:{b.server.http_port}"
    with httpx.Client(base_url=base, auth=("guest", "guest"), timeout=30) as http:
        assert http.get("/api/topic-permissions").json() == [
            {"user": "app", "vhost": "/", "exchange": "amq.topic", "write": "^a", "read": "^b"}
        ]
    with _pika(b) as conn:
        ch = conn.channel()
        ch.basic_publish("amq.topic", "zzz", b"")
        with pytest.raises(pika.exceptions.ChannelClosedByBroker):
            ch.queue_declare("", exclusive=True)


_ = mqtt  # paho's module, for its types in this file's clients


def test_amqp10_addresses(broker: BrokerThread, http: httpx.Client) -> None:
    # RabbitMQ 4's /exchanges/X/KEY and Artemis' topic:// addresses route on amq.topic: the
    # key is checked; a refused transfer is rejected with unauthorized-access
    _app_user(http)
    rule = {"exchange": "amq.topic", "write": "^app\\.", "read": "^app\\."}
    http.put("/api/topic-permissions/%2F/app", json=rule)
    conn = BlockingConnection(f"amqp://app:app-pw@127.0.0.1:{broker.port}", timeout=20)
    try:
        receiver = conn.create_receiver("topic://app.#")  # a binding with key app.#: read
        conn.create_sender("/exchanges/amq.topic/app.x").send(Message(body="ok"))
        assert receiver.receive(timeout=10).body == "ok"
        receiver.accept()
        refused = conn.create_sender("/exchanges/amq.topic/other.x")
        with pytest.raises(SendException) as exc:
            refused.send(Message(body="refused"))
        assert exc.value.state == Disposition.REJECTED
        with pytest.raises(LinkDetached, match=r"read access to topic 'other\.#'"):
            conn.create_receiver("topic://other.#")
    finally:
        conn.close()


def test_management_publish_and_bind(http: httpx.Client) -> None:
    # the API's publish and bindings are checked as the caller's AMQP channel would be
    assert http.put("/api/users/app", json={"password": "app-pw", "tags": "management"}).is_success
    everything = {"configure": ".*", "write": ".*", "read": ".*"}
    assert http.put("/api/permissions/%2F/app", json=everything).is_success
    rule = {"exchange": "amq.topic", "write": "^app\\.", "read": "^app\\."}
    http.put("/api/topic-permissions/%2F/app", json=rule)
    app = ("app", "app-pw")
    assert http.put("/api/queues/%2F/mine", json={}, auth=app).status_code == 201
    bind = "/api/bindings/%2F/e/amq.topic/q/mine"
    assert http.post(bind, json={"routing_key": "app.#"}, auth=app).status_code == 201
    r = http.post(bind, json={"routing_key": "other.#"}, auth=app)
    assert r.status_code == 401
    assert "read access to topic 'other.#'" in r.json()["reason"]
    publish = "/api/exchanges/%2F/amq.topic/publish"
    msg = {"routing_key": "app.x", "payload": "ok", "payload_encoding": "string", "properties": {}}
    assert http.post(publish, json=msg, auth=app).json() == {"routed": True}
    r = http.post(publish, json=msg | {"routing_key": "other.x"}, auth=app)
    assert r.status_code == 401
    assert "write access to topic 'other.x'" in r.json()["reason"]
    # guest has no topic permission: not concerned
    assert http.post(publish, json=msg | {"routing_key": "other.x"}).status_code == 200
