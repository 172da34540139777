"""AMQP 0-9-1 and AMQP 1.0 clients on the same queues: pika publishes and proton receives, and
the reverse, with properties, headers and body intact (docs/dev/messages.md); scheduled
delivery from `x-opt-delivery-time`."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from typing import Any

import pika
import pytest
from proton import Message, symbol
from proton.utils import BlockingConnection

from ringmq.node import BrokerThread
from tests.facade import admin_of

pytestmark = pytest.mark.integration


@pytest.fixture
def conn(broker: BrokerThread) -> Iterator[BlockingConnection]:
    c = BlockingConnection(f"amqp://guest:guest@127.0.0.1:{broker.port}", timeout=10)
    yield c
    c.close()


@pytest.fixture
def ch(broker: BrokerThread) -> Iterator[Any]:
    c = pika.BlockingConnection(pika.ConnectionParameters(host=broker.host, port=broker.port))
    yield c.channel()
    c.close()


def test_pika_publishes_proton_receives(ch: Any, conn: BlockingConnection) -> None:
    ch.queue_declare("to10", durable=True)
    props = pika.BasicProperties(
        content_type="application/json",
        content_encoding="utf-8",
        headers={"app": "x", "n": 5, "flag": True, "x-trace": "t1"},
        delivery_mode=2,
        priority=3,
        correlation_id="corr-1",
        reply_to="replies",
        expiration="60000",
        message_id="msg-1",
        timestamp=1_700_000_000,
        type="order",
        user_id="guest",
        app_id="shop",
    )
    ch.basic_publish("", "to10", b'{"a": 1}', props)
    rcv = conn.create_receiver("to10")
    m = rcv.receive(timeout=5)
    rcv.accept()
    assert m.body == b'{"a": 1}'
    assert m.content_type == "application/json"
    assert m.content_encoding == "utf-8"
    assert m.durable is True
    assert m.priority == 3
    assert m.correlation_id == "corr-1"
    assert m.reply_to == "replies"
    assert m.ttl == 60.0
    assert m.id == "msg-1"
    assert m.creation_time == 1_700_000_000
    assert m.user_id == b"guest"
    assert m.group_id == "shop"
    received: Any = m  # proton's annotations narrow some fields too far for mypy
    assert received.properties == {"app": "x", "n": 5, "flag": True}
    annotations = received.annotations
    assert annotations[symbol("x-trace")] == "t1"
    assert annotations[symbol("x-basic-type")] == "order"


def test_proton_publishes_pika_receives(ch: Any, conn: BlockingConnection) -> None:
    ch.queue_declare("to091")
    mid = uuid.uuid4()
    conn.create_sender("to091").send(
        Message(
            body=b"\x00binary",
            inferred=True,  # a data section (not an amqp-value holding binary)
            id=mid,
            correlation_id="corr-2",
            reply_to="replies",
            content_type="application/octet-stream",
            durable=True,
            priority=7,
            ttl=30,
            user_id=b"guest",
            group_id="grp",
            properties={"k": "v", "i": 42, "b": False},
            annotations={symbol("x-opt-custom"): "c"},
        )
    )
    method, p, body = ch.basic_get("to091", auto_ack=True)
    assert method is not None
    assert body == b"\x00binary"
    assert p.message_id == f"urn:uuid:{mid}"
    assert p.correlation_id == "corr-2"
    assert p.reply_to == "replies"
    assert p.content_type == "application/octet-stream"
    assert p.delivery_mode == 2
    assert p.priority == 7
    assert p.expiration == "30000"
    assert p.user_id == "guest"
    assert p.app_id == "grp"
    assert p.headers["k"] == "v"
    assert p.headers["i"] == 42
    assert p.headers["b"] is False
    assert p.headers["x-opt-custom"] == "c"


def test_amqp_value_body_reaches_pika_as_the_encoded_sections(
    ch: Any, conn: BlockingConnection
) -> None:
    ch.queue_declare("value")
    conn.create_sender("value").send(Message(body={"a": 1}))
    _method, p, body = ch.basic_get("value", auto_ack=True)
    assert p.type == "amqp-1.0"
    assert body  # the encoded amqp-value section, for a 1.0 consumer to read back


def test_scheduled_delivery_time(conn: BlockingConnection, broker: BrokerThread) -> None:
    due_ms = int(time.time() * 1000) + 400
    snd = conn.create_sender("sched")
    snd.send(Message(body="later", annotations={symbol("x-opt-delivery-time"): due_ms}))
    snd.send(Message(body="now"))
    rcv = conn.create_receiver("sched", credit=10)
    assert rcv.receive(timeout=5).body == "now"
    info = broker.call(lambda: admin_of(broker).queue("/", "sched"))
    assert info.messages_scheduled == 1
    m = rcv.receive(timeout=5)
    assert m.body == "later"
    assert time.time() * 1000 >= due_ms
    rcv.accept()


def test_artemis_lvq_name_from_application_properties(
    ch: Any, conn: BlockingConnection, broker: BrokerThread
) -> None:
    ch.queue_declare("lvq", arguments={"x-last-value-key": "_AMQ_LVQ_NAME"})
    snd = conn.create_sender("lvq")
    for key, v in [("A", 1), ("B", 1), ("A", 2)]:
        body = f"{key}{v}".encode()
        snd.send(Message(body=body, inferred=True, properties={"_AMQ_LVQ_NAME": key}))
    got = sorted(ch.basic_get("lvq", auto_ack=True)[2] for _ in range(2))
    assert got == [b"A2", b"B1"]
