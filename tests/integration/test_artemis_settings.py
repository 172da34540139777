"""Artemis address-settings over the wire (issue 28, item 1): a broker.xml with Artemis'
default `#` settings (DLQ, ExpiryQueue, max-delivery-attempts 10), delivery attempts and
delayed redelivery with python-qpid-proton, dead-letter resources, auto-create-queues and the
default routing type with stomp.py."""

from __future__ import annotations

import gc
import queue
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import stomp
from proton import Delivery, Message
from proton.utils import BlockingConnection, LinkDetached

from ringmq.node import BrokerThread
from ringmq.server.configfile import load_config
from tests.integration.conftest import BrokerFactory

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


# The `#` setting of the broker.xml `artemis create` writes, element for element, then the
# settings these tests exercise.
BROKER_XML = """<?xml version="1.0" encoding="UTF-8"?>
<configuration xmlns="urn:activemq">
  <core xmlns="urn:activemq:core">
    <configuration-file-refresh-period>0</configuration-file-refresh-period>
    <address-settings>
      <address-setting match="activemq.management.#">
        <dead-letter-address>DLQ</dead-letter-address>
        <expiry-address>ExpiryQueue</expiry-address>
        <redelivery-delay>0</redelivery-delay>
        <max-size-bytes>-1</max-size-bytes>
        <message-counter-history-day-limit>10</message-counter-history-day-limit>
        <address-full-policy>PAGE</address-full-policy>
        <auto-create-queues>true</auto-create-queues>
        <auto-create-addresses>true</auto-create-addresses>
      </address-setting>
      <address-setting match="#">
        <dead-letter-address>DLQ</dead-letter-address>
        <expiry-address>ExpiryQueue</expiry-address>
        <redelivery-delay>0</redelivery-delay>
        <max-size-bytes>-1</max-size-bytes>
        <max-size-messages>-1</max-size-messages>
        <page-size-bytes>10M</page-size-bytes>
        <max-read-page-messages>-1</max-read-page-messages>
        <max-read-page-bytes>20M</max-read-page-bytes>
        <page-limit-bytes>-1</page-limit-bytes>
        <page-limit-messages>-1</page-limit-messages>
        <message-counter-history-day-limit>10</message-counter-history-day-limit>
        <address-full-policy>PAGE</address-full-policy>
        <auto-create-queues>true</auto-create-queues>
        <auto-create-addresses>true</auto-create-addresses>
        <auto-delete-queues>false</auto-delete-queues>
        <auto-delete-addresses>false</auto-delete-addresses>
      </address-setting>
      <address-setting match="retry.#">
        <max-delivery-attempts>2</max-delivery-attempts>
      </address-setting>
      <address-setting match="slow.#">
        <redelivery-delay>600000</redelivery-delay>
      </address-setting>
      <address-setting match="fast.#">
        <redelivery-delay>20</redelivery-delay>
        <redelivery-delay-multiplier>2.0</redelivery-delay-multiplier>
        <max-redelivery-delay>40</max-redelivery-delay>
      </address-setting>
      <address-setting match="own.#">
        <dead-letter-address>DLA</dead-letter-address>
        <auto-create-dead-letter-resources>true</auto-create-dead-letter-resources>
      </address-setting>
      <address-setting match="closed.#">
        <auto-create-queues>false</auto-create-queues>
      </address-setting>
      <address-setting match="news.#">
        <default-address-routing-type>MULTICAST</default-address-routing-type>
      </address-setting>
    </address-settings>
    <addresses>
      <address name="DLQ"><anycast><queue name="DLQ"/></anycast></address>
      <address name="ExpiryQueue"><anycast><queue name="ExpiryQueue"/></anycast></address>
    </addresses>
  </core>
</configuration>
"""


@pytest.fixture
def broker(broker_factory: BrokerFactory, tmp_path: Path) -> BrokerThread:
    xml = tmp_path / "broker.xml"
    xml.write_text(BROKER_XML)
    return broker_factory(load_config(xml), stomp_port=0)


@pytest.fixture
def conn(broker: BrokerThread) -> Iterator[BlockingConnection]:
    c = BlockingConnection(f"amqp://guest:guest@127.0.0.1:{broker.port}", timeout=10)
    yield c
    c.close()


def _queue(b: BrokerThread, name: str) -> Any:
    return b.call(lambda: b.broker.vhosts["/"].queues.get(name))


def _counts(b: BrokerThread, name: str) -> tuple[int, int]:
    def read() -> tuple[int, int]:
        q = b.broker.vhosts["/"].queues[name].queue
        return q.ready_count, q.counters.scheduled

    return b.call(read)


def _fail(rcv: Any, timeout: float = 5) -> Message:
    # One delivery, settled as a failed delivery (modified, delivery-failed): Artemis counts it.
    msg: Message = rcv.receive(timeout=timeout)
    rcv.fetcher.unsettled[0].local.failed = True
    rcv.settle(Delivery.MODIFIED)
    return msg


def test_default_broker_xml_gives_every_queue_ten_attempts_and_the_dlq(
    broker: BrokerThread, conn: BlockingConnection
) -> None:
    conn.create_sender("orders").send(Message(body="o"))
    q = _queue(broker, "orders")
    assert q.settings.delivery_limit == 9  # max-delivery-attempts 10: Artemis' default
    assert q.settings.dead_letter_address == "DLQ"
    assert q.settings.expiry_address == "ExpiryQueue"


def test_max_delivery_attempts_then_the_dead_letter_address(
    broker: BrokerThread, conn: BlockingConnection
) -> None:
    conn.create_sender("retry.q").send(Message(body="poison", properties={"k": "v"}))
    rcv = conn.create_receiver("retry.q", credit=1)
    first = _fail(rcv)
    second = _fail(rcv)
    assert first.body == second.body == "poison"
    assert second.delivery_count == 1  # the second attempt
    dead = conn.create_receiver("DLQ", credit=1).receive(timeout=5)
    assert dead.body == "poison"
    props: Any = dead.properties  # proton types it as None
    assert props["k"] == "v"
    assert props["_AMQ_ORIG_QUEUE"] == "retry.q"
    assert _counts(broker, "retry.q") == (0, 0)


def test_expired_message_goes_to_expiry_queue(
    broker: BrokerThread, conn: BlockingConnection
) -> None:
    conn.create_sender("ttl.q").send(Message(body="late", ttl=0.05))
    got = conn.create_receiver("ExpiryQueue", credit=1).receive(timeout=5)
    assert got.body == "late"
    assert _counts(broker, "DLQ") == (0, 0)


def test_redelivery_delay_holds_the_message_off_the_queue(
    broker: BrokerThread, conn: BlockingConnection
) -> None:
    conn.create_sender("slow.q").send(Message(body="s"))
    rcv = conn.create_receiver("slow.q", credit=1)
    _fail(rcv)
    # ten minutes away: scheduled, not ready, nothing delivered (waiting pumps the
    # connection, which sends the disposition)
    conn.wait(lambda: _counts(broker, "slow.q") == (0, 1), timeout=5)


def test_redelivery_delay_returns_the_message(
    broker: BrokerThread, conn: BlockingConnection
) -> None:
    conn.create_sender("fast.q").send(Message(body="f"))
    rcv = conn.create_receiver("fast.q", credit=1)
    _fail(rcv)
    _fail(rcv)  # 20 ms, then 40 ms (the maximum)
    back = rcv.receive(timeout=5)
    assert back.body == "f"
    assert back.delivery_count > 0  # redelivered (ringmq's header says 1, not the count)
    rcv.accept()
    conn.wait(lambda: _counts(broker, "fast.q") == (0, 0), timeout=5)


def test_auto_created_dead_letter_queue(broker: BrokerThread, conn: BlockingConnection) -> None:
    conn.create_sender("own.q").send(Message(body="x"))
    rcv = conn.create_receiver("own.q", credit=1)
    rcv.receive(timeout=5)
    rcv.reject()
    dead = conn.create_receiver("DLQ.own.q", credit=1).receive(timeout=5)
    assert dead.body == "x"
    assert _queue(broker, "DLA") is None
    assert _counts(broker, "DLQ") == (0, 0)


def test_auto_create_queues_off_refuses_the_attach(
    broker: BrokerThread, conn: BlockingConnection
) -> None:
    with pytest.raises(LinkDetached, match="auto-create-queues"):
        conn.create_receiver("closed.q", credit=1)
    assert _queue(broker, "closed.q") is None


class _Inbox(stomp.ConnectionListener):  # type: ignore[misc]
    def __init__(self) -> None:
        self.messages: queue.Queue[Any] = queue.Queue()
        self.errors: queue.Queue[Any] = queue.Queue()

    def on_message(self, frame: Any) -> None:
        self.messages.put(frame)

    def on_error(self, frame: Any) -> None:
        self.errors.put(frame)


@pytest.fixture
def stomp_client(broker: BrokerThread) -> Iterator[tuple[Any, _Inbox]]:
    c = stomp.Connection12([("127.0.0.1", broker.port_of("stomp"))], auto_decode=False)
    inbox = _Inbox()
    c.set_listener("inbox", inbox)
    c.connect("guest", "guest", wait=True)
    yield c, inbox
    if c.is_connected():
        c.disconnect()


def test_stomp_nack_after_the_last_attempt_goes_to_the_dlq(
    broker: BrokerThread, stomp_client: tuple[Any, _Inbox]
) -> None:
    c, inbox = stomp_client
    c.subscribe("retry.stomp", id="s", ack="client-individual")
    c.send("retry.stomp", b"bad")
    for _ in range(2):
        m = inbox.messages.get(timeout=5)
        assert m.body == b"bad"
        c.nack(m.headers["ack"])
    c.subscribe("DLQ", id="d", ack="auto")
    dead = inbox.messages.get(timeout=5)
    assert dead.body == b"bad"
    assert dead.headers["_AMQ_ORIG_QUEUE"] == "retry.stomp"


def test_stomp_auto_create_queues_off_is_an_error(
    broker: BrokerThread, stomp_client: tuple[Any, _Inbox]
) -> None:
    c, inbox = stomp_client
    c.send("closed.stomp", b"x")
    err = inbox.errors.get(timeout=5)
    assert "auto-create-queues" in err.headers["message"]
    assert _queue(broker, "closed.stomp") is None


def test_stomp_default_address_routing_type(
    broker: BrokerThread, stomp_client: tuple[Any, _Inbox]
) -> None:
    c, inbox = stomp_client
    c.subscribe("news.sport", id="s", ack="auto")
    c.send("news.sport", b"goal")
    assert inbox.messages.get(timeout=5).body == b"goal"
    # multicast: a fanout exchange and a subscription queue, no queue named after the address
    assert broker.call(lambda: "news.sport" in broker.broker.vhosts["/"].exchanges)
    assert _queue(broker, "news.sport") is None
