"""Cross-protocol: STOMP (stomp.py) and AMQP 1.0 (python-qpid-proton) on the same queues.

A STOMP SEND is stored in the AMQP 0-9-1 form (docs/dev/messages.md §7) and reaches an AMQP 1.0
receiver through the 0-9-1 to 1.0 conversion (§4); an AMQP 1.0 transfer reaches a STOMP
subscriber through the 1.0 to 0-9-1 conversion (§3) and the STOMP headers of §7. Each test
checks every row it crosses.
"""

from __future__ import annotations

import queue
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
import stomp
from proton import Message, symbol
from proton.utils import BlockingConnection

from ringmq.node import BrokerThread
from tests.integration.conftest import BrokerFactory

pytestmark = pytest.mark.integration

BINARY = b"\x00\x01binary\x00body\xff\x00"


class Inbox(stomp.ConnectionListener):  # type: ignore[misc]
    def __init__(self) -> None:
        self.messages: queue.Queue[Any] = queue.Queue()
        self.receipts: queue.Queue[str] = queue.Queue()

    def on_message(self, frame: Any) -> None:
        self.messages.put(frame)

    def on_receipt(self, frame: Any) -> None:
        self.receipts.put(frame.headers["receipt-id"])


@pytest.fixture
def broker(broker_factory: BrokerFactory) -> BrokerThread:
    return broker_factory(stomp_port=0)


@pytest.fixture
def stomp_conn(broker: BrokerThread) -> Iterator[tuple[Any, Inbox]]:
    conn = stomp.Connection12([("127.0.0.1", broker.port_of("stomp"))], auto_decode=False)
    inbox = Inbox()
    conn.set_listener("inbox", inbox)
    conn.connect("guest", "guest", wait=True)
    yield conn, inbox
    if conn.is_connected():
        conn.disconnect()


@pytest.fixture
def amqp10(broker: BrokerThread) -> Iterator[BlockingConnection]:
    c = BlockingConnection(f"amqp://guest:guest@127.0.0.1:{broker.port}", timeout=10)
    yield c
    c.close()


def test_stomp_send_reaches_an_amqp10_receiver(
    stomp_conn: tuple[Any, Inbox], amqp10: BlockingConnection
) -> None:
    conn, inbox = stomp_conn
    conn.send(
        "/queue/s2a",
        BINARY,
        headers={
            "persistent": "true",
            "priority": "7",
            "content-type": "application/octet-stream",
            "correlation-id": "corr-7",
            "reply-to": "/queue/replies",
            "trace-id": "abc:123",
            "x-tenant": "blue",
            "receipt": "sent",
        },
    )
    assert inbox.receipts.get(timeout=5) == "sent"
    rcv = amqp10.create_receiver("/queues/s2a")
    m: Any = rcv.receive(timeout=5)  # proton types its sections loosely
    rcv.accept()
    # header: persistent -> durable, priority
    assert m.durable is True
    assert m.priority == 7
    # properties
    assert m.content_type == symbol("application/octet-stream")
    assert m.correlation_id == "corr-7"
    assert m.reply_to == "/queue/replies"
    # a custom header is an application-property; an x- header a message-annotation (§4)
    props = dict(m.properties)
    assert props == {"trace-id": "abc:123"}
    assert m.annotations is not None
    assert m.annotations.get(symbol("x-tenant")) == "blue"
    # frame-level headers are not carried
    for frame_header in ("destination", "receipt", "content-length", "persistent", "priority"):
        assert frame_header not in props
    # the body, NUL bytes included, as one data section
    # (proton: inferred means data sections; it hands their bytes as a memoryview)
    assert m.inferred is True
    assert bytes(m.body) == BINARY


def test_amqp10_send_reaches_a_stomp_subscriber(
    stomp_conn: tuple[Any, Inbox], amqp10: BlockingConnection
) -> None:
    conn, inbox = stomp_conn
    conn.subscribe("/queue/a2s", id="1", ack="client-individual", headers={"receipt": "sub"})
    assert inbox.receipts.get(timeout=5) == "sub"
    mid = uuid.uuid4()
    msg = Message(
        body=BINARY,
        durable=True,
        priority=6,
        ttl=60.0,
        id=mid,
        correlation_id="corr-6",
        reply_to="/queue/replies",
        content_type="application/octet-stream",
        properties={"trace-id": "abc:123", "n": 5, "flag": True},
        annotations={symbol("x-tenant"): "blue"},
        inferred=True,  # bytes as a data section (not an amqp-value)
    )
    amqp10.create_sender("/queues/a2s").send(msg)
    frame = inbox.messages.get(timeout=5)
    h = frame.headers
    conn.ack(h["message-id"], h["subscription"])
    assert frame.body == BINARY
    assert h["content-length"] == str(len(BINARY))
    assert h["persistent"] == "true"
    assert h["priority"] == "6"
    assert h["expiration"] == "60000"
    assert h["amqp-message-id"] == f"urn:uuid:{mid}"
    assert h["correlation-id"] == "corr-6"
    assert h["reply-to"] == "/queue/replies"
    assert h["content-type"] == "application/octet-stream"
    # application-properties and x- annotations become headers, as text
    assert h["trace-id"] == "abc:123"
    assert h["n"] == "5"
    assert h["flag"] == "true"
    assert h["x-tenant"] == "blue"
    assert h["destination"] == "/queue/a2s"
    assert "type" not in h  # one data section: the bytes as they are, no amqp-1.0 type (§3)


def test_an_amqp_value_body_reaches_stomp_encoded(
    stomp_conn: tuple[Any, Inbox], amqp10: BlockingConnection
) -> None:
    conn, inbox = stomp_conn
    conn.subscribe("/queue/a2s-value", id="1", ack="auto", headers={"receipt": "sub"})
    assert inbox.receipts.get(timeout=5) == "sub"
    amqp10.create_sender("/queues/a2s-value").send(Message(body="text"))
    frame = inbox.messages.get(timeout=5)
    # §3: a body other than one data section is the encoded sections, type amqp-1.0
    assert frame.headers["type"] == "amqp-1.0"
    assert frame.body == b"\x00\x53\x77\xa1\x04text"
