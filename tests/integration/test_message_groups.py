"""Message groups over the wire (issue 28, item 2; core/groups.py): `JMSXGroupID` as a pika
header, a STOMP header and an MQTT 5 user property, the AMQP 1.0 `group-id` with
python-qpid-proton; the owner leaving; a negative `JMSXGroupSeq`; the management API's
listing and reset; broker.xml's group settings."""

from __future__ import annotations

import gc
import queue
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pika
import pytest
import stomp
from paho.mqtt.packettypes import PacketTypes
from proton import Message, Timeout
from proton.utils import BlockingConnection

from ringmq.node import BrokerThread
from ringmq.server.configfile import load_config
from tests.integration.conftest import BrokerFactory, wait_until
from tests.integration.mqtt.clients import Paho, properties

pytestmark = [
    pytest.mark.integration,
    pytest.mark.filterwarnings("ignore::ResourceWarning"),
    pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning"),
]

GID = "JMSXGroupID"


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
    ) as c:
        yield c


def _groups(b: BrokerThread, name: str) -> dict[str, str]:
    # group -> owner's consumer tag, as the engine holds them
    def read() -> dict[str, str]:
        g = b.broker.vhosts["/"].queues[name].queue.groups
        return {} if g is None else {x.group: x.owner.tag for _, x in g.bindings()}

    return b.call(read)


class _PikaConsumer:
    """A pika consumer on its own connection, collecting (body, delivery tag)."""

    def __init__(self, b: BrokerThread, name: str, tag: str, prefetch: int = 100) -> None:
        self.conn = pika.BlockingConnection(pika.ConnectionParameters(host=b.host, port=b.port))
        self.ch = self.conn.channel()
        self.ch.basic_qos(prefetch_count=prefetch)
        self.got: list[tuple[bytes, int]] = []
        self.ch.basic_consume(name, self._on, consumer_tag=tag)

    def _on(self, _ch: Any, method: Any, _props: Any, body: bytes) -> None:
        self.got.append((body, method.delivery_tag))

    def pump(self) -> None:
        self.conn.process_data_events(time_limit=0.05)


def _pump_until(consumers: list[_PikaConsumer], total: int, timeout: float = 10) -> None:
    deadline = time.monotonic() + timeout
    while sum(len(c.got) for c in consumers) < total and time.monotonic() < deadline:
        for c in consumers:
            c.pump()


def _owners(consumers: list[_PikaConsumer]) -> dict[bytes, set[int]]:
    # group (the body's prefix) -> the consumers that got its messages
    out: dict[bytes, set[int]] = {}
    for i, c in enumerate(consumers):
        for body, _ in c.got:
            out.setdefault(body.split(b":")[0], set()).add(i)
    return out


def test_pika_groups_stay_with_one_consumer_and_move_when_it_leaves(broker: BrokerThread) -> None:
    with pika.BlockingConnection(pika.ConnectionParameters(broker.host, broker.port)) as conn:
        ch = conn.channel()
        ch.confirm_delivery()
        ch.queue_declare("grp")
        consumers = [_PikaConsumer(broker, "grp", f"c{i}") for i in range(2)]
        for c in consumers:
            c.pump()
        for i in range(30):
            g = f"g{i % 3}"
            ch.basic_publish("", "grp", f"{g}:{i}".encode(), pika.BasicProperties(headers={GID: g}))
        _pump_until(consumers, 30)
        owners = _owners(consumers)
        assert sorted(owners) == [b"g0", b"g1", b"g2"]
        assert all(len(who) == 1 for who in owners.values()), owners
        assert len(set().union(*owners.values())) == 2  # both consumers own groups
        # the owner of g0 leaves without acking: its messages and the group go to the other
        leaver = next(iter(owners[b"g0"]))
        stayer = consumers[1 - leaver]
        before = len(stayer.got)
        held = len(consumers[leaver].got)
        consumers[leaver].conn.close()
        ch.basic_publish("", "grp", b"g0:late", pika.BasicProperties(headers={GID: "g0"}))
        _pump_until([stayer], before + held + 1)
        assert len(stayer.got) == before + held + 1
        assert stayer.got[-1][0] == b"g0:late"
        assert set(_groups(broker, "grp").values()) == {f"c{1 - leaver}"}
        stayer.conn.close()


def test_proton_group_id_and_a_closing_sequence(broker: BrokerThread) -> None:
    conn = BlockingConnection(f"amqp://guest:guest@127.0.0.1:{broker.port}", timeout=10)
    try:
        snd = conn.create_sender("grp10")
        receivers = [conn.create_receiver("grp10", credit=20, name=f"r{i}") for i in range(2)]
        for i in range(12):
            snd.send(Message(body=f"g{i % 3}:{i}", group_id=f"g{i % 3}", group_sequence=i + 1))
        got: dict[str, set[int]] = {}
        n = 0
        deadline = time.monotonic() + 10
        while n < 12 and time.monotonic() < deadline:
            for i, r in enumerate(receivers):
                try:
                    m = r.receive(timeout=0.05)
                except Timeout:  # nothing for this one now
                    continue
                r.accept()
                got.setdefault(str(m.body).split(":")[0], set()).add(i)
                n += 1
        assert n == 12
        assert all(len(who) == 1 for who in got.values()), got
        assert len(_groups(broker, "grp10")) == 3
        # a group-sequence of 2^32 - 1 reads as -1 (Artemis): it closes the group
        owner = next(iter(got["g0"]))
        snd.send(Message(body="g0:last", group_id="g0", group_sequence=0xFFFFFFFF))
        last = receivers[owner].receive(timeout=5)
        receivers[owner].accept()
        assert last.body == "g0:last"
        wait_until(lambda: "g0" not in _groups(broker, "grp10"))
    finally:
        conn.close()


class _Inbox(stomp.ConnectionListener):  # type: ignore[misc]
    def __init__(self) -> None:
        self.messages: queue.Queue[Any] = queue.Queue()

    def on_message(self, frame: Any) -> None:
        self.messages.put(frame)


def test_stomp_header_groups(broker: BrokerThread) -> None:
    c = stomp.Connection12([("127.0.0.1", broker.port_of("stomp"))], auto_decode=False)
    inbox = _Inbox()
    c.set_listener("inbox", inbox)
    c.connect("guest", "guest", wait=True)
    try:
        c.subscribe("/queue/grp-stomp", id="s0", ack="client-individual")
        c.subscribe("/queue/grp-stomp", id="s1", ack="client-individual")
        for i in range(12):
            c.send("/queue/grp-stomp", f"g{i % 3}:{i}".encode(), headers={GID: f"g{i % 3}"})
        got: dict[bytes, set[str]] = {}
        for _ in range(12):
            m = inbox.messages.get(timeout=5)
            got.setdefault(m.body.split(b":")[0], set()).add(m.headers["subscription"])
            c.ack(m.headers["ack"])
        assert all(len(who) == 1 for who in got.values()), got
        c.send("/queue/grp-stomp", b"g1:end", headers={GID: "g1", "JMSXGroupSeq": "-1"})
        end = inbox.messages.get(timeout=5)
        assert end.headers["subscription"] in got[b"g1"]
        c.ack(end.headers["ack"])
        wait_until(lambda: "g1" not in _groups(broker, "grp-stomp"))
    finally:
        c.disconnect()


def test_mqtt5_user_property_groups(broker: BrokerThread) -> None:
    with pika.BlockingConnection(pika.ConnectionParameters(broker.host, broker.port)) as conn:
        ch = conn.channel()
        ch.queue_declare("grp-mqtt")
        ch.queue_bind("grp-mqtt", "amq.topic", "grp.t")
        consumers = [_PikaConsumer(broker, "grp-mqtt", f"m{i}") for i in range(2)]
        for c in consumers:
            c.pump()
        pub = Paho(broker, "grp-pub", v5=True)
        try:
            for i in range(12):  # three groups over two consumers: round robin would split
                g = f"g{i % 3}"
                props = properties(PacketTypes.PUBLISH, UserProperty=[(GID, g)])
                pub.publish("grp/t", f"{g}:{i}".encode(), qos=1, properties=props)
        finally:
            pub.disconnect()
        _pump_until(consumers, 12)
        owners = _owners(consumers)
        assert sorted(owners) == [b"g0", b"g1", b"g2"]
        assert all(len(who) == 1 for who in owners.values()), owners
        for c in consumers:
            c.conn.close()


def test_management_lists_and_resets_groups(broker: BrokerThread, http: httpx.Client) -> None:
    with pika.BlockingConnection(pika.ConnectionParameters(broker.host, broker.port)) as conn:
        ch = conn.channel()
        ch.confirm_delivery()
        ch.queue_declare("grp-api")
        consumer = _PikaConsumer(broker, "grp-api", "only")
        consumer.pump()
        for g in ("a", "b"):
            ch.basic_publish("", "grp-api", g.encode(), pika.BasicProperties(headers={GID: g}))
        _pump_until([consumer], 2)
        listed = http.get("/api/queues/%2F/grp-api/groups").json()
        assert [(x["group"], x["consumer_tag"], x["delivered"]) for x in listed] == [
            ("a", "only", 1),
            ("b", "only", 1),
        ]
        assert http.delete("/api/queues/%2F/grp-api/groups/a").json() == {"reset": 1}
        assert [x["group"] for x in http.get("/api/queues/%2F/grp-api/groups").json()] == ["b"]
        assert http.delete("/api/queues/%2F/grp-api/groups").json() == {"reset": 1}
        assert http.get("/api/queues/%2F/grp-api/groups").json() == []
        assert http.get("/api/queues/%2F/nope/groups").status_code == 404
        consumer.conn.close()


def test_broker_xml_group_settings(broker_factory: BrokerFactory, tmp_path: Path) -> None:
    xml = tmp_path / "broker.xml"
    xml.write_text(
        "<configuration><core><address-settings>"
        "<address-setting match='orders.#'>"
        "<default-group-first-key>first</default-group-first-key>"
        "<default-group-rebalance>true</default-group-rebalance>"
        "</address-setting></address-settings>"
        "<addresses><address name='orders.eu'><anycast>"
        "<queue name='orders.eu' group-buckets='8'/></anycast></address></addresses>"
        "</core></configuration>"
    )
    b = broker_factory(load_config(xml))
    st = b.call(lambda: b.broker.vhosts["/"].queues["orders.eu"].settings)
    assert (st.group_buckets, st.group_rebalance, st.group_first_key) == (8, True, "first")
    conn = BlockingConnection(f"amqp://guest:guest@127.0.0.1:{b.port}", timeout=10)
    try:
        conn.create_sender("orders.eu").send(Message(body="x", group_id="g"))
        m = conn.create_receiver("orders.eu", credit=1).receive(timeout=5)
        assert m.body == "x"
        props: Any = m.properties  # the first of its group for this consumer
        assert props["first"] is True
    finally:
        conn.close()
