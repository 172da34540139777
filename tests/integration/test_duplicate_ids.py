"""Artemis duplicate detection by `_AMQ_DUPL_ID` over the wire (issue 28, item 3): the header
in 0-9-1 (pika) and STOMP (stomp.py), the application property in AMQP 1.0 (proton), the user
property in MQTT 5 (paho); per address, `id-cache-size`, and the cache kept across a SIGKILL
(`persist-id-cache`): no duplicate whose first copy was confirmed gets through after the
crash, and no confirmed message is lost."""

from __future__ import annotations

import gc
import queue
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pika
import pytest
import stomp
from paho.mqtt.packettypes import PacketTypes
from proton import Message
from proton.utils import BlockingConnection

from ringmq.node import BrokerThread
from ringmq.server.configfile import load_config
from tests.integration.conftest import BrokerFactory, wait_until
from tests.integration.mqtt.clients import Paho, properties
from tests.serve import Serve

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


DUPL = "_AMQ_DUPL_ID"


@pytest.fixture
def broker(broker_factory: BrokerFactory) -> BrokerThread:
    return broker_factory(stomp_port=0, mqtt_port=0)


def _ready(b: BrokerThread, name: str) -> int:
    return int(b.call(lambda: b.broker.vhosts["/"].queues[name].queue.ready_count))


def _pika(b: BrokerThread) -> Any:
    conn = pika.BlockingConnection(pika.ConnectionParameters(host=b.host, port=b.port))
    ch = conn.channel()
    ch.confirm_delivery()
    return conn, ch


def test_pika_header_drops_the_second_copy_per_address(broker: BrokerThread) -> None:
    conn, ch = _pika(broker)
    ch.queue_declare("orders")
    ch.queue_declare("invoices")
    for rk in ("orders", "orders", "invoices"):
        props = pika.BasicProperties(headers={DUPL: "id-1"})
        ch.basic_publish("", rk, b"x", props)  # confirmed each time (a duplicate too)
    ch.basic_publish("", "orders", b"y", pika.BasicProperties(headers={DUPL: b"id-2"}))
    ch.basic_publish("", "orders", b"y", pika.BasicProperties(headers={DUPL: "id-2"}))
    assert _ready(broker, "orders") == 2  # id-1 once, id-2 once (bytes and string alike)
    assert _ready(broker, "invoices") == 1  # another address: its own cache
    conn.close()


def test_stomp_header(broker: BrokerThread) -> None:
    c = stomp.Connection12([("127.0.0.1", broker.port_of("stomp"))], auto_decode=False)
    c.connect("guest", "guest", wait=True)
    for receipt in ("r1", "r2", "r3"):
        c.send("/queue/stomp-dup", b"x", headers={DUPL: "s-1", "receipt": receipt})
    c.send("/queue/stomp-dup", b"x", headers={DUPL: "s-2", "receipt": "r4"})
    wait_until(lambda: broker.call(lambda: broker.broker.stats["published"]) >= 4)
    c.disconnect()
    assert _ready(broker, "stomp-dup") == 2


def test_proton_application_property(broker: BrokerThread) -> None:
    conn = BlockingConnection(f"amqp://guest:guest@127.0.0.1:{broker.port}", timeout=10)
    snd = conn.create_sender("amqp-dup")
    for _ in range(3):
        snd.send(Message(body="x", properties={DUPL: "a-1"}))  # settled accepted each time
    snd.send(Message(body="x", properties={DUPL: "a-2"}))
    conn.close()
    assert _ready(broker, "amqp-dup") == 2


def test_mqtt5_user_property(broker: BrokerThread) -> None:
    with pika.BlockingConnection(
        pika.ConnectionParameters(host=broker.host, port=broker.port)
    ) as conn:
        ch = conn.channel()
        ch.queue_declare("mqtt-dup")
        ch.queue_bind("mqtt-dup", "amq.topic", "dup.t")
    pub = Paho(broker, "dup-pub", v5=True)
    try:
        for mid in ("m-1", "m-1", "m-2"):
            props = properties(PacketTypes.PUBLISH, UserProperty=[(DUPL, mid)])
            pub.publish("dup/t", b"x", qos=1, properties=props)
    finally:
        pub.disconnect()
    assert _ready(broker, "mqtt-dup") == 2


def test_id_cache_size_bounds_the_cache(broker_factory: BrokerFactory, tmp_path: Path) -> None:
    xml = tmp_path / "broker.xml"
    xml.write_text(
        "<configuration><core><id-cache-size>2</id-cache-size>"
        "<addresses><address name='small'><anycast><queue name='small'/></anycast>"
        "</address></addresses></core></configuration>"
    )
    b = broker_factory(load_config(xml))
    conn, ch = _pika(b)
    for mid in ("1", "2", "3", "1"):  # "1" has left a cache of two ids: accepted again
        ch.basic_publish("", "small", b"x", pika.BasicProperties(headers={DUPL: mid}))
    ch.basic_publish("", "small", b"x", pika.BasicProperties(headers={DUPL: "3"}))
    assert _ready(b, "small") == 4
    conn.close()


class _Drain(stomp.ConnectionListener):  # type: ignore[misc]
    def __init__(self) -> None:
        self.bodies: queue.Queue[bytes] = queue.Queue()

    def on_message(self, frame: Any) -> None:
        self.bodies.put(frame.body)


def test_sigkill_keeps_the_id_cache(tmp_path: Path) -> None:
    data = tmp_path / "data"
    first = Serve(data, tmp_path / "first.log")
    try:
        conn = pika.BlockingConnection(pika.URLParameters(first.amqp_url))
        ch = conn.channel()
        ch.confirm_delivery()
        ch.queue_declare("durable-dup", durable=True)
        for i in range(50):
            props = pika.BasicProperties(delivery_mode=2, headers={DUPL: f"k-{i}"})
            ch.basic_publish("", "durable-dup", b"%d" % i, props)  # each confirmed
        conn.close()  # every message was confirmed: the kill below loses nothing more
    finally:
        first.kill()
    second = Serve(data, tmp_path / "second.log")
    try:
        conn = pika.BlockingConnection(pika.URLParameters(second.amqp_url))
        ch = conn.channel()
        ch.confirm_delivery()
        for i in range(50):  # every retry after the crash is a duplicate
            props = pika.BasicProperties(delivery_mode=2, headers={DUPL: f"k-{i}"})
            ch.basic_publish("", "durable-dup", b"again-%d" % i, props)
        ch.basic_publish(
            "",
            "durable-dup",
            b"new",
            pika.BasicProperties(delivery_mode=2, headers={DUPL: "k-new"}),
        )
        bodies = []
        while True:
            method, _props, body = ch.basic_get("durable-dup", auto_ack=True)
            if method is None:
                break
            bodies.append(body)
        conn.close()
    finally:
        second.kill()
    assert bodies == [b"%d" % i for i in range(50)] + [b"new"]
