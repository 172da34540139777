"""AMQP 1.0 over the wire with python-qpid-proton's blocking API (`proton.utils`).

Hello world, 100 sends and receives, request/reply over a dynamic receiver, credit and drain,
every disposition, anonymous relay, the v2 and Artemis address forms, refusals as their
conditions, and the seed examples (ring of 3, LVQ ticker). Queue counters the wire cannot show
are read from the broker's admin facade on its loop thread.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pika
import pytest
from proton import Delivery, Message
from proton._utils import Fetcher
from proton.utils import BlockingConnection, BlockingReceiver, LinkDetached, SendException

from ringmq.node import BrokerThread
from tests.facade import admin_of
from tests.integration.conftest import wait_until

pytestmark = pytest.mark.integration


@pytest.fixture
def conn(broker: BrokerThread) -> Iterator[BlockingConnection]:
    c = BlockingConnection(f"amqp://guest:guest@127.0.0.1:{broker.port}", timeout=10)
    yield c
    c.close()


def fetcher(rcv: BlockingReceiver) -> Fetcher:
    assert rcv.fetcher is not None
    return rcv.fetcher


def queue_info(b: BrokerThread, queue: str) -> dict[str, Any]:
    info = b.call(lambda: admin_of(b).queue("/", queue))
    return {
        "messages_ready": info.messages_ready,
        "messages_unacknowledged": info.messages_unacknowledged,
    }


@pytest.fixture
def ch(broker: BrokerThread) -> Iterator[Any]:
    """A pika channel (AMQP 0-9-1) on the same broker."""
    c = pika.BlockingConnection(pika.ConnectionParameters(host=broker.host, port=broker.port))
    yield c.channel()
    c.close()


def drain_all(conn: BlockingConnection, address: str) -> list[Any]:
    rcv = conn.create_receiver(address, credit=100)
    out: list[Any] = []
    while True:
        try:
            m = rcv.receive(timeout=0.3)
        except Exception:  # noqa: BLE001 (proton's Timeout)
            break
        out.append(m.body)
        rcv.accept()
    rcv.close()
    return out


def test_hello_world(conn: BlockingConnection) -> None:
    snd = conn.create_sender("examples")
    snd.send(Message(body="Hello World!"))
    rcv = conn.create_receiver("examples")
    assert rcv.receive(timeout=5).body == "Hello World!"
    rcv.accept()


def test_hundred_sends_and_receives(conn: BlockingConnection, broker: BrokerThread) -> None:
    snd = conn.create_sender("hundred")
    for i in range(100):
        snd.send(Message(body=f"m{i}", durable=True))
    assert queue_info(broker, "hundred")["messages_ready"] == 100
    rcv = conn.create_receiver("hundred", credit=10)
    got = []
    for _ in range(100):
        got.append(rcv.receive(timeout=5).body)
        rcv.accept()
    assert got == [f"m{i}" for i in range(100)]
    settled_at_broker(conn, broker, "hundred")
    assert queue_info(broker, "hundred")["messages_ready"] == 0


def test_request_reply_over_a_dynamic_receiver(conn: BlockingConnection) -> None:
    server_rcv = conn.create_receiver("requests")
    replies = conn.create_receiver(None, dynamic=True)
    reply_to = replies.link.remote_source.address
    assert reply_to
    client = conn.create_sender("requests")
    client.send(Message(body="ping", reply_to=reply_to, correlation_id="c-1"))
    req = server_rcv.receive(timeout=5)
    server_rcv.accept()
    relay = conn.create_sender(None)  # anonymous relay: routed by `to`
    relay.send(Message(address=req.reply_to, body="pong", correlation_id=req.correlation_id))
    rep = replies.receive(timeout=5)
    replies.accept()
    assert (rep.body, rep.correlation_id) == ("pong", "c-1")


def test_dynamic_queue_goes_with_its_link(conn: BlockingConnection, broker: BrokerThread) -> None:
    rcv = conn.create_receiver(None, dynamic=True)
    name = rcv.link.remote_source.address
    assert name in broker.call(lambda: broker.broker.vhosts["/"].queues)
    rcv.close()
    wait_until(lambda: name not in broker.call(lambda: dict(broker.broker.vhosts["/"].queues)))


def test_credit_and_drain(conn: BlockingConnection) -> None:
    snd = conn.create_sender("credit")
    for i in range(3):
        snd.send(Message(body=i))
    rcv = conn.create_receiver("credit", credit=0)
    link = rcv.link
    link.drain(10)
    # three messages use three credits, the drain gives the other seven back
    conn.wait(lambda: fetcher(rcv).has_message == 3 and link.credit == 0, timeout=5)
    got = [fetcher(rcv).pop().body for _ in range(3)]
    assert got == [0, 1, 2]
    link.drain(5)  # nothing left: all the credit comes back at once
    assert link.credit == 5
    conn.wait(lambda: link.credit == 0, timeout=5)
    assert fetcher(rcv).has_message == 0


def settled_at_broker(conn: BlockingConnection, b: BrokerThread, queue: str) -> None:
    """Run the client until the broker holds no unsettled delivery of `queue` (a disposition
    leaves with the client's next write)."""
    conn.wait(lambda: queue_info(b, queue)["messages_unacknowledged"] == 0, timeout=5)


def test_dispositions(conn: BlockingConnection, broker: BrokerThread, ch: Any) -> None:
    ch.queue_declare("dlq")
    ch.queue_declare(
        "disp",
        arguments={"x-dead-letter-exchange": "", "x-dead-letter-routing-key": "dlq"},
    )
    snd = conn.create_sender("/queues/disp")
    for body in ("a", "b", "c", "d"):
        snd.send(Message(body=body))
    rcv = conn.create_receiver("/queues/disp", credit=0)  # one credit per receive

    def take(outcome: Any, failed: bool = False, undeliverable: bool = False) -> str:
        body = str(rcv.receive(timeout=5).body)
        delivery = fetcher(rcv).unsettled[0]
        delivery.local.failed = failed
        delivery.local.undeliverable = undeliverable
        rcv.settle(outcome)
        settled_at_broker(conn, broker, "disp")
        return body

    assert take(Delivery.RELEASED) == "a"  # back to its place, not a failed delivery
    assert take(Delivery.ACCEPTED) == "a"
    assert take(Delivery.REJECTED) == "b"  # dead-lettered
    assert take(Delivery.MODIFIED, failed=True) == "c"  # delivery failed: requeued, counted
    assert take(Delivery.ACCEPTED) == "c"
    assert take(Delivery.MODIFIED, undeliverable=True) == "d"  # not here: dead-lettered
    assert queue_info(broker, "disp")["messages_ready"] == 0
    wait_until(lambda: queue_info(broker, "dlq")["messages_ready"] == 2)
    assert [ch.basic_get("dlq", auto_ack=True)[2] for _ in range(2)] != []


def test_ring_of_three_detach_keeps_the_tail(
    conn: BlockingConnection, broker: BrokerThread, ch: Any
) -> None:
    ch.queue_declare("ring3", arguments={"x-ring-size": 3})
    snd = conn.create_sender("ring3")
    rcv = conn.create_receiver("ring3", credit=10)
    got = []
    for body in ("A", "B", "C", "D"):
        snd.send(Message(body=body))
        got.append(rcv.receive(timeout=5).body)
    assert got == ["A", "B", "C", "D"]
    # in delivery, the ring overshoots; the receiver goes away without settling
    assert queue_info(broker, "ring3")["messages_unacknowledged"] == 4
    rcv.close()
    wait_until(lambda: queue_info(broker, "ring3")["messages_unacknowledged"] == 0)
    assert drain_all(conn, "ring3") == ["B", "C", "D"]


def test_lvq_ticker(conn: BlockingConnection, broker: BrokerThread, ch: Any) -> None:
    ch.queue_declare("ticker", arguments={"x-last-value-key": "sym"})
    snd = conn.create_sender("ticker")
    for sym, price in [("RHT", 1), ("IBM", 2), ("JAVA", 3), ("MSFT", 4), ("RHT", 5)]:
        snd.send(Message(body=f"{sym}={price}", properties={"sym": sym}))
    assert sorted(drain_all(conn, "ticker")) == ["IBM=2", "JAVA=3", "MSFT=4", "RHT=5"]


def test_v2_addresses(conn: BlockingConnection, broker: BrokerThread, ch: Any) -> None:
    ch.queue_declare("v2q")
    ch.exchange_declare("v2x", "direct")
    ch.queue_bind("v2q", "v2x", "k")
    conn.create_sender("/exchanges/v2x/k").send(Message(body="via exchange"))
    conn.create_sender("/queues/v2q").send(Message(body="via queue"))
    conn.create_sender("/exchanges/v2x").send(Message(body="via subject", subject="k"))
    assert drain_all(conn, "/queues/v2q") == ["via exchange", "via queue", "via subject"]
    with pytest.raises(LinkDetached):
        conn.create_receiver("/queues/missing")


def test_multicast_receivers_each_get_a_copy(conn: BlockingConnection) -> None:
    r1 = conn.create_receiver("topic://news.sport", credit=5)
    r2 = conn.create_receiver("topic://news.#", credit=5)
    conn.create_sender("topic://news.sport").send(Message(body="goal"))
    assert r1.receive(timeout=5).body == "goal"
    assert r2.receive(timeout=5).body == "goal"


def test_unroutable_is_released_and_full_queue_rejects(
    conn: BlockingConnection, broker: BrokerThread, ch: Any
) -> None:
    ch.exchange_declare("nowhere", "direct")
    snd = conn.create_sender("/exchanges/nowhere/k")
    with pytest.raises(SendException) as unroutable:
        snd.send(Message(body="x"))
    assert unroutable.value.state == Delivery.RELEASED
    ch.queue_declare("full", arguments={"x-max-length": 1, "x-overflow": "reject-publish"})
    snd = conn.create_sender("/queues/full")
    snd.send(Message(body="1"))
    with pytest.raises(SendException) as full:
        snd.send(Message(body="2"))
    assert full.value.state == Delivery.REJECTED


def test_a_deleted_queue_detaches_its_receivers(
    conn: BlockingConnection, broker: BrokerThread, ch: Any
) -> None:
    ch.queue_declare("doomed")
    rcv = conn.create_receiver("/queues/doomed", credit=5)
    ch.queue_delete("doomed")
    with pytest.raises(LinkDetached) as exc:
        rcv.receive(timeout=5)
    assert "amqp:resource-deleted" in str(exc.value)
    conn.create_sender("still-open").send(Message(body="the session goes on"))


def test_a_failed_delivery_counts_in_the_header(
    conn: BlockingConnection, broker: BrokerThread, ch: Any
) -> None:
    # the header's delivery-count: the attempts before this one, as the queue counted them
    ch.queue_declare("counted")
    snd = conn.create_sender("/queues/counted")
    snd.send(Message(body="x"))
    rcv = conn.create_receiver("/queues/counted", credit=0)
    counts = []
    for _ in range(3):
        m = rcv.receive(timeout=5)
        counts.append(m.delivery_count)
        fetcher(rcv).unsettled[0].local.failed = True
        rcv.settle(Delivery.MODIFIED)
        settled_at_broker(conn, broker, "counted")
    m = rcv.receive(timeout=5)
    rcv.accept()
    assert [*counts, m.delivery_count] == [0, 1, 2, 3]
