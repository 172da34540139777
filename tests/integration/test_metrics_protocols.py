"""`/metrics` counts messages per protocol, as rabbitmq_prometheus labels its global counters.

Real clients over the wire: pika (AMQP 0-9-1), python-qpid-proton (AMQP 1.0) and stomp.py each
publish and consume their own number of messages on one broker; the scrape shows each number
under its own `protocol` label and nothing under the others.
"""

from __future__ import annotations

import re

import httpx
import pika
import pytest
import stomp
from proton import Message
from proton.utils import BlockingConnection

from ringmq.node import BrokerThread
from tests.integration.conftest import BrokerFactory, wait_until

pytestmark = pytest.mark.integration


def _scrape(b: BrokerThread) -> dict[tuple[str, str], int]:
    text = httpx.get(
        f"http://127.0.0.1:{b.server.http_port}/metrics", auth=("guest", "guest"), timeout=10
    ).text
    found: dict[tuple[str, str], int] = {}
    for m in re.finditer(
        r'^rabbitmq_global_messages_(\w+)_total\{protocol="([^"]+)"\} (\d+)$', text, re.M
    ):
        found[(m.group(1), m.group(2))] = int(m.group(3))
    return found


def test_global_message_counters_are_split_by_protocol(broker_factory: BrokerFactory) -> None:
    b = broker_factory(http_port=0, stomp_port=0)
    # AMQP 0-9-1: 3 published with confirms, 3 consumed with manual acks, 1 unroutable.
    conn = pika.BlockingConnection(pika.ConnectionParameters("127.0.0.1", b.port))
    ch = conn.channel()
    ch.queue_declare("m091")
    ch.confirm_delivery()
    for i in range(3):
        ch.basic_publish("", "m091", f"a{i}".encode())
    ch.basic_publish("", "nowhere", b"lost")
    for _ in range(3):
        method, _props, _body = ch.basic_get("m091")
        assert method is not None
        ch.basic_ack(method.delivery_tag)
    assert ch.basic_get("m091") == (None, None, None)
    conn.close()
    # AMQP 1.0: 5 sent (settled by the broker), 5 received and accepted.
    c10 = BlockingConnection(f"amqp://guest:guest@127.0.0.1:{b.port}", timeout=10)
    sender = c10.create_sender("m10")
    for i in range(5):
        sender.send(Message(body=f"b{i}"))
    receiver = c10.create_receiver("m10", credit=5)
    for _ in range(5):
        receiver.receive(timeout=10)
        receiver.accept()
    c10.close()
    # STOMP: 2 sent with receipts, 2 received with client acks.
    got: list[stomp.utils.Frame] = []

    class Listener(stomp.ConnectionListener):  # type: ignore[misc]
        def on_message(self, frame: stomp.utils.Frame) -> None:
            got.append(frame)

    s = stomp.Connection12([("127.0.0.1", b.port_of("stomp"))])
    s.set_listener("l", Listener())
    s.connect("guest", "guest", wait=True)
    for i in range(2):
        s.send("/queue/mstomp", f"c{i}", receipt=f"r{i}")
    s.subscribe("/queue/mstomp", id="1", ack="client-individual")
    wait_until(lambda: len(got) == 2, timeout=10)
    for f in got:
        s.ack(f.headers["ack"])
    s.disconnect()

    def settled() -> bool:
        m = _scrape(b)
        return (
            m.get(("acknowledged", "amqp091")) == 3
            and m.get(("acknowledged", "amqp10")) == 5
            and m.get(("acknowledged", "stomp")) == 2
        )

    wait_until(settled, timeout=10)
    m = _scrape(b)
    assert m[("received", "amqp091")] == 4
    assert m[("routed", "amqp091")] == 3
    assert m[("unroutable_dropped", "amqp091")] == 1
    assert m[("confirmed", "amqp091")] == 4  # the unroutable one is confirmed too
    assert m[("delivered_get_manual_ack", "amqp091")] == 3
    assert m[("get_empty", "amqp091")] == 1
    assert m[("received", "amqp10")] == 5
    assert m[("confirmed", "amqp10")] == 5
    assert m[("delivered", "amqp10")] == 5
    assert m[("delivered_consume_manual_ack", "amqp10")] == 5
    assert m[("received", "stomp")] == 2
    assert m[("delivered", "stomp")] == 2
    assert m[("unroutable_dropped", "amqp10")] == 0
