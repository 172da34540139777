"""Consuming a stream queue over every protocol as RabbitMQ does: aio-pika with
`x-stream-offset`, AMQP 1.0 (python-qpid-proton) with the `rabbitmq:stream-offset-spec` source
filter, STOMP (stomp.py) with the `x-stream-offset` subscribe header; and a stream declared
through the management API."""

from __future__ import annotations

import queue
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import aio_pika
import httpx
import pika
import pytest
import stomp
from proton import Described, symbol, timestamp, ulong
from proton.reactor import Filter
from proton.utils import BlockingConnection

from ringmq.node import BrokerThread
from tests.integration.conftest import BrokerFactory

pytestmark = pytest.mark.integration

STREAM: dict[str, Any] = {"x-queue-type": "stream"}
BODIES = [f"m{i}".encode() for i in range(10)]


@pytest.fixture
def broker(broker_factory: BrokerFactory) -> BrokerThread:
    b = broker_factory(stomp_port=0)
    c = pika.BlockingConnection(pika.ConnectionParameters(b.host, b.port))
    ch = c.channel()
    ch.queue_declare("s", durable=True, arguments=STREAM)
    ch.confirm_delivery()
    for body in BODIES:
        ch.basic_publish("", "s", body)
    c.close()
    return b


async def test_aio_pika_reads_from_an_offset_with_acks_as_credit(broker: BrokerThread) -> None:
    async with await aio_pika.connect(f"amqp://guest:guest@{broker.host}:{broker.port}/") as conn:
        ch = await conn.channel()
        await ch.set_qos(prefetch_count=3)
        q = await ch.declare_queue("s", durable=True, arguments=STREAM)
        got: list[tuple[Any, bytes]] = []
        async with q.iterator(arguments={"x-stream-offset": 4}) as it:
            async for message in it:
                got.append((message.headers["x-stream-offset"], message.body))
                await message.ack()
                if len(got) == 6:
                    break
    assert got == [(i, BODIES[i]) for i in range(4, 10)]


def _proton_read(b: BrokerThread, spec: Any, n: int) -> tuple[list[bytes], set[str]]:
    conn = BlockingConnection(f"amqp://guest:guest@127.0.0.1:{b.port}", timeout=10)
    try:
        name = symbol("rabbitmq:stream-offset-spec")
        rcv = conn.create_receiver("s", credit=2, options=Filter({name: Described(name, spec)}))
        data = rcv.link.remote_source.filter
        data.rewind()
        echoed = {str(k) for k in data.get_object()} if data.next() is not None else set()
        got: list[bytes] = []
        for _ in range(n):
            m = rcv.receive(timeout=5)
            body = m.body
            assert isinstance(body, (bytes, memoryview))
            got.append(bytes(body))
            rcv.accept()
        return got, echoed
    finally:
        conn.close()


@pytest.mark.parametrize(
    ("spec", "start"),
    [
        ("first", 0),
        (symbol("last"), 9),
        (ulong(6), 6),
        (timestamp(0), 0),
        ("1h", 0),
    ],
)
def test_proton_reads_from_the_stream_offset_spec_filter(
    broker: BrokerThread, spec: Any, start: int
) -> None:
    got, echoed = _proton_read(broker, spec, 10 - start)
    assert got == BODIES[start:]
    assert echoed == {"rabbitmq:stream-offset-spec"}  # applied, so echoed (3.5.3)


class Inbox(stomp.ConnectionListener):  # type: ignore[misc]
    def __init__(self) -> None:
        self.messages: queue.Queue[Any] = queue.Queue()

    def on_message(self, frame: Any) -> None:
        self.messages.put(frame)


@pytest.fixture
def stomp_conn(broker: BrokerThread) -> Iterator[tuple[Any, Inbox]]:
    conn = stomp.Connection12([("127.0.0.1", broker.port_of("stomp"))], auto_decode=False)
    inbox = Inbox()
    conn.set_listener("inbox", inbox)
    conn.connect("guest", "guest", wait=True)
    yield conn, inbox
    if conn.is_connected():
        conn.disconnect()


@pytest.mark.parametrize(
    ("header", "start"),
    [
        ("first", 0),
        ("last", 9),
        ("offset=3", 3),
        (f"timestamp={int(datetime(2000, 1, 1, tzinfo=UTC).timestamp())}", 0),
    ],
)
def test_stomp_subscribes_at_the_x_stream_offset_header(
    stomp_conn: tuple[Any, Inbox], header: str, start: int
) -> None:
    conn, inbox = stomp_conn
    conn.subscribe(
        "/amq/queue/s", id="1", ack="client-individual",
        headers={"x-stream-offset": header, "prefetch-count": "2"},
    )  # fmt: skip
    got: list[tuple[str, bytes]] = []
    for _ in range(10 - start):
        frame = inbox.messages.get(timeout=5)
        got.append((frame.headers["x-stream-offset"], frame.body))
        conn.ack(frame.headers["ack"])
    assert got == [(str(i), BODIES[i]) for i in range(start, 10)]


def test_a_stream_declared_over_stomp_and_amqp10_is_a_stream(broker: BrokerThread) -> None:
    # STOMP: a /queue/ destination declared with x-queue-type (and RabbitMQ's durable flag)
    conn = stomp.Connection12([("127.0.0.1", broker.port_of("stomp"))], auto_decode=False)
    inbox = Inbox()
    conn.set_listener("inbox", inbox)
    conn.connect("guest", "guest", wait=True)
    try:
        headers = {"x-queue-type": "stream", "durable": "true", "auto-delete": "false"}
        conn.send("/queue/st", b"one", headers=headers)
        conn.send("/queue/st", b"two", headers=headers)
        conn.subscribe(
            "/queue/st", id="1", ack="client",
            headers={**headers, "x-stream-offset": "first", "prefetch-count": "5"},
        )  # fmt: skip
        bodies = [inbox.messages.get(timeout=5).body for _ in range(2)]
    finally:
        conn.disconnect()
    assert bodies == [b"one", b"two"]
    c = pika.BlockingConnection(pika.ConnectionParameters(broker.host, broker.port))
    try:
        ch = c.channel()
        with pytest.raises(pika.exceptions.ConnectionClosedByBroker) as err:
            ch.basic_get("st")
        assert "basic.get not supported by stream queues" in err.value.reply_text
    finally:
        if c.is_open:
            c.close()


def test_management_declares_a_stream_and_shows_its_offsets(
    broker_factory: BrokerFactory,
) -> None:
    b = broker_factory(http_port=0)
    base = f"http://127.0.0.1:{b.server.http_port}/api/queues/%2F/ms"
    with httpx.Client(auth=("guest", "guest")) as http:
        r = http.put(base, json={"durable": True, "arguments": STREAM})
        assert r.status_code in (201, 204), r.text
        bad = http.put(
            f"http://127.0.0.1:{b.server.http_port}/api/queues/%2F/bad",
            json={"durable": False, "arguments": STREAM},
        )
        assert bad.status_code == 400
        assert "invalid property 'non-durable'" in bad.text
        c = pika.BlockingConnection(pika.ConnectionParameters(b.host, b.port))
        try:
            ch = c.channel()
            ch.confirm_delivery()
            for body in BODIES[:3]:
                ch.basic_publish("", "ms", body)
        finally:
            c.close()
        q = http.get(base).json()
    assert q["type"] == "stream"
    assert q["messages_ready"] == 3
    assert q["stream"]["first_offset"] == 0
    assert q["stream"]["last_offset"] == 2
    assert q["stream"]["size_bytes"] > 0
