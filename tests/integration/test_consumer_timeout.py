"""Consumer timeouts over the wire (issue 28, item 4): a delivery left unacknowledged past the
broker's `consumer_timeout` (or a queue's `x-consumer-timeout`) closes the 0-9-1 channel with
RabbitMQ's PRECONDITION_FAILED text (pika), detaches the AMQP 1.0 link with
`amqp:resource-limit-exceeded` (proton), ends a STOMP connection with an ERROR (stomp.py) and
disconnects an MQTT client (paho); the message goes back to its queue each time."""

from __future__ import annotations

import gc
import queue
import time
from collections.abc import Iterator
from typing import Any

import pika
import pika.exceptions
import pytest
import stomp
from proton import Endpoint, Message
from proton.utils import BlockingConnection, LinkDetached

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
    # pika leaves the sockets of connections the broker refused or a kill broke for the
    # garbage collector: collect them here, under this module's filters, not in a later test.
    yield
    gc.collect()


TIMEOUT_MS = 300
TEXT = (
    "PRECONDITION_FAILED - delivery acknowledgement on channel {ch} timed out. Timeout value "
    "used: {ms} ms. This timeout value can be configured, see consumers doc guide to learn more"
)


@pytest.fixture
def broker(broker_factory: BrokerFactory) -> BrokerThread:
    return broker_factory(f"[limits]\nconsumer_timeout_ms = {TIMEOUT_MS}\n", stomp_port=0)


@pytest.fixture
def ch(broker: BrokerThread) -> Iterator[Any]:
    conn = pika.BlockingConnection(pika.ConnectionParameters(host=broker.host, port=broker.port))
    yield conn.channel()
    if conn.is_open:
        conn.close()


def _ready(b: BrokerThread, name: str) -> int:
    return int(b.call(lambda: b.broker.vhosts["/"].queues[name].queue.ready_count))


def _closed_by_broker(conn: Any, channel: Any) -> pika.exceptions.ChannelClosedByBroker:
    # Pump pika until the broker closes the channel (bounded: the test fails rather than hang).
    deadline = time.monotonic() + 10
    while channel.is_open and time.monotonic() < deadline:
        conn.process_data_events(time_limit=0.05)
    reason = channel._closing_reason  # pika keeps the broker's Channel.Close here
    assert isinstance(reason, pika.exceptions.ChannelClosedByBroker), reason
    return reason


def test_pika_broker_default_closes_the_channel_with_rabbitmq_text(
    broker: BrokerThread, ch: Any
) -> None:
    ch.queue_declare("work")
    ch.basic_publish("", "work", b"slow")
    got: list[bytes] = []
    ch.basic_consume("work", lambda _c, _m, _p, body: got.append(body), auto_ack=False)
    reason = _closed_by_broker(ch.connection, ch)
    assert got == [b"slow"]
    assert reason.reply_code == 406
    assert reason.reply_text == TEXT.format(ch=ch.channel_number, ms=TIMEOUT_MS)
    again = ch.connection.channel()
    method, _props, body = again.basic_get("work", auto_ack=True)
    assert body == b"slow"
    assert method.redelivered


def test_pika_queue_argument_wins_and_acks_in_time_keep_the_channel(
    broker: BrokerThread, ch: Any
) -> None:
    ch.queue_declare("quick", arguments={"x-consumer-timeout": 100})
    ch.queue_declare("patient", arguments={"x-consumer-timeout": 600_000})
    ch.basic_publish("", "quick", b"q")
    ch.basic_publish("", "patient", b"p")
    method, _props, _body = ch.basic_get("patient")
    ch.basic_ack(method.delivery_tag)  # acknowledged: it never times out
    ch.basic_get("quick")
    reason = _closed_by_broker(ch.connection, ch)
    assert reason.reply_text == TEXT.format(ch=ch.channel_number, ms=100)


def test_proton_link_detached_with_resource_limit_exceeded(broker: BrokerThread) -> None:
    conn = BlockingConnection(f"amqp://guest:guest@127.0.0.1:{broker.port}", timeout=10)
    conn.create_sender("amqp-work").send(Message(body="late"))  # anycast: queue created
    rcv = conn.create_receiver("amqp-work", credit=1)
    assert rcv.receive(timeout=5).body == "late"  # received, never settled
    with pytest.raises(LinkDetached, match="amqp:resource-limit-exceeded") as exc:
        conn.wait(lambda: bool(rcv.link.state & Endpoint.REMOTE_CLOSED), timeout=10)
    assert "delivery acknowledgement on channel" in str(exc.value)
    conn.wait(lambda: _ready(broker, "amqp-work") == 1, timeout=5)
    conn.close()


class _Inbox(stomp.ConnectionListener):  # type: ignore[misc]
    def __init__(self) -> None:
        self.messages: queue.Queue[Any] = queue.Queue()
        self.errors: queue.Queue[Any] = queue.Queue()

    def on_message(self, frame: Any) -> None:
        self.messages.put(frame)

    def on_error(self, frame: Any) -> None:
        self.errors.put(frame)


def test_stomp_error_frame(broker: BrokerThread) -> None:
    c = stomp.Connection12([("127.0.0.1", broker.port_of("stomp"))], auto_decode=False)
    inbox = _Inbox()
    c.set_listener("inbox", inbox)
    c.connect("guest", "guest", wait=True)
    c.subscribe("/queue/stomp-work", id="s", ack="client-individual")
    c.send("/queue/stomp-work", b"late")
    assert inbox.messages.get(timeout=5).body == b"late"  # never acknowledged
    err = inbox.errors.get(timeout=10)
    assert "delivery acknowledgement" in err.headers["message"]
    wait_until(lambda: _ready(broker, "stomp-work") == 1)
    if c.is_connected():
        c.disconnect()


def test_mqtt_disconnect(broker: BrokerThread) -> None:
    sub = Paho(broker, "slow-sub", clean=False)
    sub.client.manual_ack_set(True)  # the QoS 1 message is never PUBACKed
    pub = Paho(broker, "pub")
    try:
        sub.subscribe("t/slow", qos=1)
        pub.publish("t/slow", b"late", qos=1)
        assert sub.get().payload == b"late"
        assert sub.disconnected.wait(10)
    finally:
        pub.disconnect()
        sub.disconnect()
