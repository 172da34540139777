"""Vhost and user limits over the wire (issue 28, item 5): set through `/api/vhost-limits` and
`/api/user-limits` as RabbitMQ has them, enforced on every protocol with its refusal and
RabbitMQ's texts (pika, proton, stomp.py, paho)."""

from __future__ import annotations

import contextlib
import gc
import queue
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pika
import pika.exceptions
import pytest
import stomp
import stomp.exception
from proton import ConnectionException
from proton.utils import BlockingConnection

from ringmq.node import BrokerThread
from tests.integration.conftest import BrokerFactory
from tests.integration.mqtt.clients import Paho

pytestmark = [
    pytest.mark.integration,
    pytest.mark.filterwarnings("ignore::ResourceWarning"),
    pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning"),
]


@pytest.fixture(autouse=True)
def _collect_leaked_sockets() -> Iterator[None]:
    # pika leaves the sockets of connections the broker refused or a kill broke for the
    # garbage collector: collect them here, under this module's filters, not in a later test.
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


def _pika(b: BrokerThread) -> Any:
    return pika.BlockingConnection(pika.ConnectionParameters(host=b.host, port=b.port))


def test_api_shapes(http: httpx.Client) -> None:
    assert http.put("/api/vhost-limits/%2F/max-connections", json={"value": 3}).status_code == 204
    assert http.put("/api/vhost-limits/%2F/max-queues", json={"value": 7}).status_code == 204
    assert http.put("/api/user-limits/guest/max-channels", json={"value": 5}).status_code == 204
    assert http.get("/api/vhost-limits").json() == [
        {"vhost": "/", "value": {"max-connections": 3, "max-queues": 7}}
    ]
    assert http.get("/api/vhost-limits/%2F").json()[0]["value"]["max-queues"] == 7
    assert http.get("/api/user-limits/guest").json() == [
        {"user": "guest", "value": {"max-channels": 5}}
    ]
    assert http.put("/api/vhost-limits/%2F/max-bananas", json={"value": 1}).status_code == 400
    assert http.put("/api/user-limits/guest/max-channels", json={"value": "x"}).status_code == 400
    assert http.put("/api/user-limits/nobody/max-channels", json={"value": 1}).status_code == 404
    assert http.delete("/api/vhost-limits/%2F/max-queues").status_code == 204
    assert http.delete("/api/vhost-limits/%2F/max-queues").status_code == 404
    assert http.get("/api/vhost-limits").json() == [{"vhost": "/", "value": {"max-connections": 3}}]


def test_vhost_max_connections_on_every_protocol(broker: BrokerThread, http: httpx.Client) -> None:
    http.put("/api/vhost-limits/%2F/max-connections", json={"value": 1})
    first = _pika(broker)
    try:
        # pika reports a close during the handshake as a probable access denial
        with pytest.raises(pika.exceptions.ProbableAccessDeniedError) as exc:
            _pika(broker)
        assert (
            "(530) \"NOT_ALLOWED - access to vhost '/' refused for user 'guest': "
            'connection limit (1) is reached"'
        ) in str(exc.value)
        with pytest.raises(ConnectionException, match="connection limit"):
            BlockingConnection(f"amqp://guest:guest@127.0.0.1:{broker.port}", timeout=10)
        c = stomp.Connection12([("127.0.0.1", broker.port_of("stomp"))], auto_decode=False)
        with pytest.raises(stomp.exception.ConnectFailedException):
            c.connect("guest", "guest", wait=True)
        paho = Paho(broker, "limited", connect=False)
        paho.connect()  # a CONNACK that refuses
        assert paho.reason.is_failure
        paho.disconnect()
    finally:
        first.close()
    http.delete("/api/vhost-limits/%2F/max-connections")
    _pika(broker).close()  # no limit: accepted again


def test_user_max_connections(broker: BrokerThread, http: httpx.Client) -> None:
    http.put("/api/user-limits/guest/max-connections", json={"value": 1})
    first = _pika(broker)
    try:
        with pytest.raises(pika.exceptions.ProbableAccessDeniedError) as exc:
            _pika(broker)
        assert (
            "(530) \"NOT_ALLOWED - connection refused for user 'guest': user connection "
            'limit (1) is reached"'
        ) in str(exc.value)
    finally:
        first.close()


def test_user_max_channels(broker: BrokerThread, http: httpx.Client) -> None:
    http.put("/api/user-limits/guest/max-channels", json={"value": 2})
    conn = _pika(broker)
    conn.channel()
    conn.channel()
    with pytest.raises(pika.exceptions.ConnectionClosedByBroker) as exc:
        conn.channel()  # answered by the connection's close
    assert exc.value.reply_code == 530
    assert exc.value.reply_text == (
        "NOT_ALLOWED - number of channels opened for user 'guest' has reached the maximum "
        "allowed user limit of (2)"
    )
    # STOMP: each subscription is a channel (and the connection has one to publish on)
    c = stomp.Connection12([("127.0.0.1", broker.port_of("stomp"))], auto_decode=False)
    errors: queue.Queue[Any] = queue.Queue()

    class _Errors(stomp.ConnectionListener):  # type: ignore[misc]
        def on_error(self, frame: Any) -> None:
            errors.put(frame)

    c.set_listener("e", _Errors())
    c.connect("guest", "guest", wait=True)
    c.subscribe("/queue/a", id="1")
    c.subscribe("/queue/b", id="2")  # the third channel: refused
    err = errors.get(timeout=10)
    assert "maximum allowed user limit of (2)" in err.headers["message"] + err.body.decode()
    # the broker closes the connection after its ERROR frame: it may do so between the check
    # and the DISCONNECT
    with contextlib.suppress(stomp.exception.NotConnectedException):
        if c.is_connected():
            c.disconnect()


def test_vhost_max_queues(broker: BrokerThread, http: httpx.Client) -> None:
    http.put("/api/vhost-limits/%2F/max-queues", json={"value": 1})
    conn = _pika(broker)
    ch = conn.channel()
    ch.queue_declare("one")
    ch.queue_declare("one")  # a redeclare is no new queue
    with pytest.raises(pika.exceptions.ChannelClosedByBroker) as exc:
        ch.queue_declare("two")
    assert exc.value.reply_code == 406
    assert exc.value.reply_text == (
        "PRECONDITION_FAILED - cannot declare queue 'two': queue limit in vhost '/' (1) is reached"
    )
    conn.close()
    amqp = BlockingConnection(f"amqp://guest:guest@127.0.0.1:{broker.port}", timeout=10)
    with pytest.raises(Exception, match="queue limit"):
        amqp.create_receiver("three")  # an anycast address would create its queue
    amqp.close()


def test_limits_survive_a_restart_and_go_with_their_user(
    broker_factory: BrokerFactory, tmp_path: Path
) -> None:
    data = tmp_path / "kept"
    first = broker_factory(http_port=0, data_dir=data)
    base = f"http://127.0.0.1:{first.server.http_port}"
    with httpx.Client(base_url=base, auth=("guest", "guest"), timeout=30) as http:
        http.put("/api/vhost-limits/%2F/max-queues", json={"value": 4})
        http.put("/api/users/carol", json={"password": "pw", "tags": ""})
        http.put("/api/user-limits/carol/max-channels", json={"value": 2})
        http.put("/api/user-limits/guest/max-connections", json={"value": 9})
        http.delete("/api/users/carol")
    first.stop()
    second = broker_factory(http_port=0, data_dir=data)
    base = f"http://127.0.0.1:{second.server.http_port}"
    with httpx.Client(base_url=base, auth=("guest", "guest"), timeout=30) as http:
        assert http.get("/api/vhost-limits").json() == [{"vhost": "/", "value": {"max-queues": 4}}]
        assert http.get("/api/user-limits").json() == [
            {"user": "guest", "value": {"max-connections": 9}}
        ]
