"""STOMP 1.0, 1.1 and 1.2 over the wire with stomp.py: receipts, transactions, each ack mode,
NACK, header escaping, binary bodies, both destination dialects, scheduled delivery, the ring of
3 seed, AMQP 0-9-1 (pika) on the other side, and bad input over a raw socket."""

from __future__ import annotations

import queue
import socket
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pika
import pytest
import stomp

from ringmq.node import BrokerThread
from tests.integration.conftest import BrokerFactory, wait_until

pytestmark = pytest.mark.integration

CONNECTIONS = {"1.0": stomp.Connection10, "1.1": stomp.Connection11, "1.2": stomp.Connection12}


class Inbox(stomp.ConnectionListener):  # type: ignore[misc]
    """Collects what the broker sends to one connection."""

    def __init__(self) -> None:
        self.messages: queue.Queue[Any] = queue.Queue()
        self.receipts: queue.Queue[str] = queue.Queue()
        self.errors: queue.Queue[Any] = queue.Queue()

    def on_message(self, frame: Any) -> None:
        self.messages.put(frame)

    def on_receipt(self, frame: Any) -> None:
        self.receipts.put(frame.headers["receipt-id"])

    def on_error(self, frame: Any) -> None:
        self.errors.put(frame)

    def next(self, timeout: float = 5.0) -> Any:
        return self.messages.get(timeout=timeout)

    def none_within(self, seconds: float) -> bool:
        try:
            self.messages.get(timeout=seconds)
        except queue.Empty:
            return True
        return False

    def receipt(self, rid: str) -> None:
        assert self.receipts.get(timeout=5) == rid


@pytest.fixture
def broker(broker_factory: BrokerFactory) -> BrokerThread:
    return broker_factory(stomp_port=0)


def client(broker: BrokerThread, version: str = "1.2", **connect: Any) -> tuple[Any, Inbox]:
    extra = {} if version == "1.0" else {"vhost": "/"}
    conn = CONNECTIONS[version](
        [("127.0.0.1", broker.port_of("stomp"))], auto_decode=False, **extra
    )
    inbox = Inbox()
    conn.set_listener("inbox", inbox)
    conn.connect("guest", "guest", wait=True, **connect)
    return conn, inbox


@pytest.fixture
def clients(broker: BrokerThread) -> Iterator[list[Any]]:
    opened: list[Any] = []
    yield opened
    for c in opened:
        if c.is_connected():
            c.disconnect()


@pytest.mark.parametrize("version", ["1.0", "1.1", "1.2"])
def test_each_version_send_subscribe_ack_receipts(
    broker: BrokerThread, clients: list[Any], version: str
) -> None:
    c, inbox = client(broker, version)
    clients.append(c)
    c.subscribe("/queue/v", id="s", ack="client")
    c.send("/queue/v", b"bin\x00ary\x00", headers={"receipt": "r1", "k": "a:b"})
    inbox.receipt("r1")
    m = inbox.next()
    assert m.body == b"bin\x00ary\x00"
    assert m.headers["destination"] == "/queue/v"
    assert m.headers["k"] == "a:b"
    if version == "1.2":
        c.ack(m.headers["ack"], receipt="a1")
    elif version == "1.1":
        c.ack(m.headers["message-id"], "s", receipt="a1")
    else:
        c.ack(m.headers["message-id"], receipt="a1")
    inbox.receipt("a1")
    c.disconnect(receipt="bye")
    assert broker.call(lambda: broker.broker.vhosts["/"].queues["v"].queue.ready_count) == 0


def test_header_escaping_both_ways(broker: BrokerThread, clients: list[Any]) -> None:
    c, inbox = client(broker, "1.2")
    clients.append(c)
    c.subscribe("/queue/esc", id="s")
    value = "colon:newline\nback\\slash\rcr"
    c.send("/queue/esc", b"x", headers={"odd": value})
    assert inbox.next().headers["odd"] == value


def test_transactions_commit_and_abort(broker: BrokerThread, clients: list[Any]) -> None:
    c, inbox = client(broker)
    clients.append(c)
    c.subscribe("/queue/tx", id="s", ack="client-individual")
    tx = c.begin()
    c.send("/queue/tx", b"kept", transaction=tx)
    tx2 = c.begin()
    c.send("/queue/tx", b"dropped", transaction=tx2)
    c.abort(tx2)
    assert inbox.none_within(0.3)  # nothing until the commit
    c.commit(tx, receipt="c")
    inbox.receipt("c")
    m = inbox.next()
    assert m.body == b"kept"
    # an ACK in an aborted transaction hands the message back, redelivered
    tx3 = c.begin()
    c.ack(m.headers["ack"], transaction=tx3)
    c.abort(tx3)
    again = inbox.next()
    assert (again.body, again.headers["redelivered"]) == (b"kept", "true")
    c.ack(again.headers["ack"])
    assert inbox.none_within(0.3)


def test_ack_modes_and_nack(broker: BrokerThread, clients: list[Any]) -> None:
    c, inbox = client(broker)
    clients.append(c)
    for i in range(3):
        c.send("/queue/modes", str(i).encode())
    c.subscribe("/queue/modes", id="s", ack="client", headers={"prefetch-count": "3"})
    got = [inbox.next() for _ in range(3)]
    c.ack(got[1].headers["ack"])  # cumulative: 0 and 1
    c.nack(got[2].headers["ack"])  # RabbitMQ: requeued by default
    again = inbox.next()
    assert (again.body, again.headers["redelivered"]) == (b"2", "true")
    c.nack(again.headers["ack"], requeue="false")  # dropped (no dead-letter exchange)
    c.unsubscribe("s")
    c.disconnect(receipt="x")
    assert broker.call(lambda: broker.broker.vhosts["/"].queues["modes"].queue.ready_count) == 0


def test_ring_of_three_client_ack_then_disconnect(broker: BrokerThread, clients: list[Any]) -> None:
    c, inbox = client(broker)
    c.subscribe("/queue/ring", id="s", ack="client", headers={"x-ring-size": "3"})
    for body in (b"A", b"B", b"C", b"D"):
        c.send("/queue/ring", body)
    assert [inbox.next().body for _ in range(4)] == [b"A", b"B", b"C", b"D"]
    c.disconnect()  # without acking: the four come back, the ring keeps its tail
    c2, inbox2 = client(broker)
    clients.append(c2)
    c2.subscribe("/queue/ring", id="s2", ack="auto")
    assert [inbox2.next().body for _ in range(3)] == [b"B", b"C", b"D"]
    assert inbox2.none_within(0.3)


def test_scheduled_delivery_with_amq_scheduled_time(
    broker: BrokerThread, clients: list[Any]
) -> None:
    c, inbox = client(broker)
    clients.append(c)
    c.subscribe("/queue/later", id="s")
    due = int(time.time() * 1000) + 1500
    c.send("/queue/later", b"later", headers={"AMQ_SCHEDULED_TIME": str(due), "receipt": "r"})
    c.send("/queue/later", b"now")
    inbox.receipt("r")
    assert inbox.next().body == b"now"  # the scheduled one waits
    m = inbox.next(timeout=10)
    assert m.body == b"later"
    assert int(time.time() * 1000) >= due
    assert m.headers["AMQ_SCHEDULED_TIME"] == str(due)


def test_rabbitmq_dialect_topics_exchanges_temp_queues(
    broker: BrokerThread, clients: list[Any]
) -> None:
    sub, inbox = client(broker)
    pub, replies = client(broker)
    clients += [sub, pub]
    sub.subscribe("/topic/prices.*", id="t", headers={"receipt": "t"})
    inbox.receipt("t")
    sub.subscribe("/exchange/amq.fanout", id="f", headers={"receipt": "f"})
    inbox.receipt("f")
    pub.send("/topic/prices.eur", b"1.1")
    pub.send("/exchange/amq.fanout/any", b"all")
    got = {inbox.next().body: None for _ in range(2)}
    assert set(got) == {b"1.1", b"all"}
    sub.subscribe("/queue/rpc", id="rpc")
    pub.send("/queue/rpc", b"ping", headers={"reply-to": "/temp-queue/r1"})
    req = inbox.next()
    assert req.headers["reply-to"].startswith("/reply-queue/")
    sub.send(req.headers["reply-to"], b"pong")
    rep = replies.next()
    assert (rep.body, rep.headers["subscription"]) == (b"pong", "/temp-queue/r1")


def test_artemis_dialect_and_durable_subscription(broker: BrokerThread, clients: list[Any]) -> None:
    c, inbox = client(broker, headers={"client-id": "app1"})
    c.subscribe("orders", id="a", headers={"subscription-type": "ANYCAST"})
    c.subscribe(
        "news",
        id="d",
        headers={"subscription-type": "MULTICAST", "durable-subscription-name": "keep"},
    )
    c.send("orders", b"o1", headers={"destination-type": "ANYCAST"})
    c.send("topic://news", b"n1")
    got = sorted((m.headers["subscription"], m.body) for m in (inbox.next(), inbox.next()))
    assert got == [("a", b"o1"), ("d", b"n1")]
    c.disconnect()
    p, _ = client(broker)
    clients.append(p)
    p.send("news", b"while away", headers={"receipt": "r"})
    c2, inbox2 = client(broker, headers={"client-id": "app1"})
    clients.append(c2)
    c2.subscribe(
        "news",
        id="d",
        headers={"subscription-type": "MULTICAST", "durable-subscription-name": "keep"},
    )
    assert inbox2.next().body == b"while away"


def test_stomp_to_pika_and_pika_to_stomp(broker: BrokerThread, clients: list[Any]) -> None:
    c, inbox = client(broker)
    clients.append(c)
    c.subscribe("/queue/from-amqp", id="s")
    c.send(
        "/queue/to-amqp",
        b"hello amqp",
        headers={
            "persistent": "true",
            "content-type": "text/plain",
            "correlation-id": "c-1",
            "priority": "4",
            "app-key": "v",
            "receipt": "r",
        },
    )
    inbox.receipt("r")
    params = pika.ConnectionParameters("127.0.0.1", broker.port)
    with pika.BlockingConnection(params) as amqp:
        ch = amqp.channel()
        method, props, body = ch.basic_get("to-amqp", auto_ack=True)
        assert method is not None
        assert body == b"hello amqp"
        assert (props.delivery_mode, props.content_type, props.correlation_id) == (
            2,
            "text/plain",
            "c-1",
        )
        assert props.priority == 4
        assert props.headers == {"app-key": "v"}
        ch.basic_publish(
            "",
            "from-amqp",
            b"hello stomp",
            pika.BasicProperties(
                content_type="application/json",
                reply_to="back",
                message_id="m-9",
                headers={"n": 5, "flag": True},
            ),
        )
    m = inbox.next()
    assert m.body == b"hello stomp"
    h = m.headers
    assert (h["content-type"], h["reply-to"], h["amqp-message-id"]) == (
        "application/json",
        "back",
        "m-9",
    )
    assert (h["n"], h["flag"], h["destination"]) == ("5", "true", "/queue/from-amqp")


def raw(broker: BrokerThread, data: bytes) -> bytes:
    with socket.create_connection(("127.0.0.1", broker.port_of("stomp")), timeout=5) as s:
        s.sendall(b"CONNECT\naccept-version:1.2\nhost:/\nlogin:guest\npasscode:guest\n\n\x00")
        s.sendall(data)
        s.shutdown(socket.SHUT_WR)
        out = b""
        while chunk := s.recv(65536):  # the broker closes after its ERROR
            out += chunk
        return out


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (b"SEND\ndestination\n\nx\x00", b"message:malformed header"),
        (b"SHOUT\n\n\x00", b"message:unknown command"),
        (
            b"SEND\ndestination:/queue/q\ncontent-length:999999999999\n\n",
            b"message:frame too large",
        ),
        (b"SEND\nk:" + b"v" * 110_000, b"message:header too long"),
    ],
)
def test_bad_input_gets_an_error_and_the_broker_keeps_serving(
    broker: BrokerThread, clients: list[Any], data: bytes, message: bytes
) -> None:
    out = raw(broker, data)
    assert out.startswith(b"CONNECTED")
    assert b"\nERROR\n" in out or b"\x00ERROR\n" in out
    assert message in out
    c, inbox = client(broker)
    clients.append(c)
    c.subscribe("/queue/alive", id="s")
    c.send("/queue/alive", b"still here")
    assert inbox.next().body == b"still here"


def test_wrong_password_is_refused(broker: BrokerThread) -> None:
    conn = stomp.Connection12([("127.0.0.1", broker.port_of("stomp"))], vhost="/")
    inbox = Inbox()
    conn.set_listener("inbox", inbox)
    with pytest.raises(stomp.exception.ConnectFailedException):
        conn.connect("guest", "wrong", wait=True)
    wait_until(lambda: not inbox.errors.empty())


def test_persistent_sends_survive_a_restart(
    broker_factory: BrokerFactory, tmp_path: Path, clients: list[Any]
) -> None:
    data = tmp_path / "d"
    b = broker_factory(data_dir=data, stomp_port=0)
    c, inbox = client(b)
    for i in range(20):
        headers = {"persistent": "true", "priority": "1"} if i % 2 == 0 else {}
        c.send("/queue/kept", b"m%d" % i, headers={**headers, "receipt": f"r{i}"})
    for i in range(20):
        inbox.receipt(f"r{i}")  # each after its confirm
    c.disconnect()
    b.stop()
    b2 = broker_factory(data_dir=data, stomp_port=0)
    c2, inbox2 = client(b2)
    clients.append(c2)
    c2.subscribe("/queue/kept", id="s")
    got = [inbox2.next() for _ in range(10)]
    assert [m.body for m in got] == [b"m%d" % i for i in range(0, 20, 2)]
    assert {m.headers["persistent"] for m in got} == {"true"}
    assert inbox2.none_within(0.3)  # the transient ones are gone


def test_server_heartbeats_reach_the_client(broker: BrokerThread) -> None:
    conn = stomp.Connection12(
        [("127.0.0.1", broker.port_of("stomp"))], vhost="/", heartbeats=(0, 2000)
    )
    beats: queue.Queue[bool] = queue.Queue()

    class Beats(stomp.ConnectionListener):  # type: ignore[misc]
        def on_heartbeat(self) -> None:
            beats.put(True)

    conn.set_listener("beats", Beats())
    conn.connect("guest", "guest", wait=True)
    try:
        assert beats.get(timeout=5)  # an EOL within a period and a half (2 s) of silence
        assert conn.is_connected()
    finally:
        conn.disconnect()


def test_stomp_over_tls(broker_factory: BrokerFactory, tmp_path: Path) -> None:
    from tests.integration.test_config import _self_signed

    cert, key = _self_signed(tmp_path)
    b = broker_factory(
        f'[tls]\ncert_file = "{cert}"\nkey_file = "{key}"\nport = 0\nstomp_port = 0\n',
        stomp_port=0,
    )
    port = b.port_of("stomp/ssl")
    conn = stomp.Connection12([("127.0.0.1", port)], vhost="/", auto_decode=False)
    conn.set_ssl(for_hosts=[("127.0.0.1", port)], ca_certs=str(cert))
    inbox = Inbox()
    conn.set_listener("inbox", inbox)
    conn.connect("guest", "guest", wait=True)
    try:
        conn.subscribe("/queue/secure", id="s")
        conn.send("/queue/secure", b"over tls")
        assert inbox.next().body == b"over tls"
    finally:
        conn.disconnect()
