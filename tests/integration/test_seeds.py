"""Every example of the seed documents, over the wire with pika.

Artemis ring queue (ring of 3; in-delivery messages cancelled back; scheduled messages), Qpid
size policies (reject, ring, ring_strict) and the Qpid last-value-queue ticker. Counters the wire
cannot show (Artemis `messageCount` = ready + delivering + scheduled) are read from the broker's
management facade on its own loop thread.
"""

from __future__ import annotations

import pika
import pika.exceptions
import pytest
from pika.adapters.blocking_connection import BlockingChannel

from ringmq.node import BrokerThread
from tests.facade import admin_of
from tests.integration.conftest import wait_until

pytestmark = pytest.mark.integration


def connect(b: BrokerThread) -> pika.BlockingConnection:
    return pika.BlockingConnection(pika.ConnectionParameters(host=b.host, port=b.port))


def counts(b: BrokerThread, queue: str) -> dict[str, int]:
    """Artemis-style counters of `queue`: messageCount, deliveringCount, scheduledCount."""
    info = b.call(lambda: admin_of(b).queue("/", queue))
    ready = info.messages_ready
    unacked = info.messages_unacknowledged
    scheduled = info.messages_scheduled
    return {
        "messageCount": ready + unacked + scheduled + info.messages_paged,
        "deliveringCount": unacked,
        "scheduledCount": scheduled,
        "ready": ready,
    }


def get_all(ch: BlockingChannel, queue: str) -> list[tuple[bytes, bool]]:
    out: list[tuple[bytes, bool]] = []
    while True:
        m, _, body = ch.basic_get(queue, auto_ack=True)
        if m is None:
            return out
        out.append((body, m.redelivered))


def test_ring_of_three_keeps_the_tail(broker: BrokerThread) -> None:
    with connect(broker) as conn:
        ch = conn.channel()
        ch.queue_declare("myRing", arguments={"x-ring-size": 3})
        for body in (b"A", b"B", b"C"):
            ch.basic_publish("", "myRing", body)
        assert ch.queue_declare("myRing", passive=True).method.message_count == 3
        ch.basic_publish("", "myRing", b"D")
        assert counts(broker, "myRing")["messageCount"] == 3
        assert [b for b, _ in get_all(ch, "myRing")] == [b"B", b"C", b"D"]


def test_ring_in_delivery_overshoots_then_rollback_keeps_bcd(broker: BrokerThread) -> None:
    with connect(broker) as conn:
        ch = conn.channel()
        ch.queue_declare("foo", arguments={"x-ring-size": 3})
        consumer_ch = conn.channel()
        delivered: list[bytes] = []
        consumer_ch.basic_consume(
            "foo", lambda _c, _m, _p, body: delivered.append(body), auto_ack=False
        )
        for n, body in enumerate((b"A", b"B", b"C", b"D"), start=1):
            ch.basic_publish("", "foo", body)

            def arrived(n: int = n) -> bool:
                conn.process_data_events(0)
                return len(delivered) == n

            wait_until(arrived)
            # in-delivery messages cannot be removed: the ring overshoots
            assert counts(broker, "foo") | {"ready": 0} == {
                "messageCount": n,
                "deliveringCount": n,
                "scheduledCount": 0,
                "ready": 0,
            }
        assert delivered == [b"A", b"B", b"C", b"D"]
        # the consumer goes away without acking: the four come back to the head; the ring
        # prefers the tail, so A (the last one put back at the head) is dropped
        consumer_ch.close()
        wait_until(lambda: counts(broker, "foo")["deliveringCount"] == 0)
        assert counts(broker, "foo")["messageCount"] == 3
        got = get_all(ch, "foo")
        assert [b for b, _ in got] == [b"B", b"C", b"D"]
        assert all(redelivered for _, redelivered in got)


def test_ring_tx_rollback_is_treated_the_same_way(broker: BrokerThread) -> None:
    with connect(broker) as conn:
        ch = conn.channel()
        ch.queue_declare("txring", arguments={"x-ring-size": 3})
        tx = conn.channel()
        tx.tx_select()
        delivered = []
        tx.basic_consume("txring", lambda _c, m, _p, body: delivered.append((m, body)))
        for body in (b"A", b"B", b"C", b"D"):
            ch.basic_publish("", "txring", body)
        wait_until(lambda: conn.process_data_events(0) or len(delivered) == 4)
        for m, _ in delivered:
            tx.basic_ack(m.delivery_tag)
        tx.tx_rollback()  # acks are discarded; delivered-unacked go back to the head
        tx.basic_cancel(delivered[0][0].consumer_tag)
        tx.close()
        wait_until(lambda: counts(broker, "txring")["deliveringCount"] == 0)
        assert [b for b, _ in get_all(ch, "txring")] == [b"B", b"C", b"D"]


def test_scheduled_message_counts_then_drops_when_released_into_full_ring(
    broker: BrokerThread,
) -> None:
    with connect(broker) as conn:
        ch = conn.channel()
        ch.queue_declare("sched", arguments={"x-ring-size": 3})
        ch.basic_publish("", "sched", b"A", pika.BasicProperties(headers={"x-delay": 300}))
        assert counts(broker, "sched") | {"ready": 0} == {
            "messageCount": 1,
            "scheduledCount": 1,
            "deliveringCount": 0,
            "ready": 0,
        }
        for n, body in enumerate((b"B", b"C", b"D"), start=2):
            ch.basic_publish("", "sched", body)
            c = counts(broker, "sched")
            assert (c["messageCount"], c["scheduledCount"]) == (n, 1)
        # when A is due it goes to the head of a full ring and is removed at once
        wait_until(lambda: counts(broker, "sched")["scheduledCount"] == 0)
        assert counts(broker, "sched")["messageCount"] == 3
        assert [b for b, _ in get_all(ch, "sched")] == [b"B", b"C", b"D"]


def test_scheduled_message_is_delivered_when_due(broker: BrokerThread) -> None:
    with connect(broker) as conn:
        ch = conn.channel()
        ch.queue_declare("later")
        ch.basic_publish("", "later", b"soon", pika.BasicProperties(headers={"x-delay": 200}))
        assert ch.basic_get("later")[0] is None  # not yet
        got: list[bytes] = []
        ch.basic_consume("later", lambda _c, _m, _p, body: got.append(body), auto_ack=True)
        wait_until(lambda: conn.process_data_events(0) or got == [b"soon"])


def test_delayed_message_exchange(broker: BrokerThread) -> None:
    with connect(broker) as conn:
        ch = conn.channel()
        ch.exchange_declare("delayed", "x-delayed-message", arguments={"x-delayed-type": "direct"})
        q = ch.queue_declare("", exclusive=True).method.queue
        ch.queue_bind(q, "delayed", routing_key="k")
        ch.basic_publish("delayed", "k", b"x", pika.BasicProperties(headers={"x-delay": 150}))
        ch.basic_publish("delayed", "k", b"now")
        got: list[bytes] = []
        ch.basic_consume(q, lambda _c, _m, _p, body: got.append(body), auto_ack=True)
        wait_until(lambda: conn.process_data_events(0) or len(got) == 2)
        assert got == [b"now", b"x"]


@pytest.mark.parametrize(
    ("policy", "expect_bodies", "expect_nacks"),
    [
        ("reject", [b"1", b"2"], 1),  # the third publish is refused
        ("ring", [b"2", b"3"], 0),  # the head is overwritten
    ],
)
def test_qpid_size_policies(
    broker: BrokerThread, policy: str, expect_bodies: list[bytes], expect_nacks: int
) -> None:
    with connect(broker) as conn:
        ch = conn.channel()
        ch.queue_declare(
            f"qpid-{policy}",
            arguments={"qpid.policy_type": policy, "qpid.max_count": 2},
        )
        ch.confirm_delivery()
        nacks = 0
        for body in (b"1", b"2", b"3"):
            try:
                ch.basic_publish("", f"qpid-{policy}", body)
            except pika.exceptions.NackError:
                nacks += 1
        assert nacks == expect_nacks
        assert [b for b, _ in get_all(ch, f"qpid-{policy}")] == expect_bodies


def test_qpid_ring_strict_refuses_when_the_head_is_acquired(broker: BrokerThread) -> None:
    with connect(broker) as conn:
        ch = conn.channel()
        ch.queue_declare(
            "strict", arguments={"qpid.policy_type": "ring_strict", "qpid.max_count": 2}
        )
        ch.confirm_delivery()
        ch.basic_publish("", "strict", b"1")
        ch.basic_publish("", "strict", b"2")
        # the consumer acquires the head ("1") without accepting it
        worker = conn.channel()
        m, _, body = worker.basic_get("strict")
        assert body == b"1"
        with pytest.raises(pika.exceptions.NackError):
            ch.basic_publish("", "strict", b"3")
        worker.basic_ack(m.delivery_tag)
        # once accepted, the ring can advance again
        ch.basic_publish("", "strict", b"4")
        ch.basic_publish("", "strict", b"5")
        assert [b for b, _ in get_all(ch, "strict")] == [b"4", b"5"]


def test_qpid_lvq_ticker(broker: BrokerThread) -> None:
    with connect(broker) as conn:
        ch = conn.channel()
        ch.queue_declare("ticker", arguments={"qpid.last_value_queue_key": "qpid.LVQ_key"})
        for sym, price in [("RHT", 1), ("IBM", 2), ("JAVA", 3), ("MSFT", 4), ("RHT", 5)]:
            ch.basic_publish(
                "",
                "ticker",
                f"{sym}={price}".encode(),
                pika.BasicProperties(headers={"qpid.LVQ_key": sym}),
            )
        bodies = [b for b, _ in get_all(ch, "ticker")]
        # RHT was overwritten before the consumer could take it: it gets the last value
        assert sorted(bodies) == [b"IBM=2", b"JAVA=3", b"MSFT=4", b"RHT=5"]


def test_artemis_lvq_with_last_value_key(broker: BrokerThread) -> None:
    with connect(broker) as conn:
        ch = conn.channel()
        ch.queue_declare("prices", arguments={"x-last-value-key": "reuters_code"})
        for code, v in [("A", 1), ("B", 1), ("A", 2), ("A", 3)]:
            ch.basic_publish(
                "",
                "prices",
                f"{code}{v}".encode(),
                pika.BasicProperties(headers={"reuters_code": code}),
            )
        assert sorted(b for b, _ in get_all(ch, "prices")) == [b"A3", b"B1"]


def test_rabbitmq_max_length_drop_head_and_reject_publish(broker: BrokerThread) -> None:
    with connect(broker) as conn:
        ch = conn.channel()
        ch.queue_declare("drop", arguments={"x-max-length": 2})
        ch.queue_declare("refuse", arguments={"x-max-length": 2, "x-overflow": "reject-publish"})
        ch.confirm_delivery()
        nacked = []
        for body in (b"1", b"2", b"3"):
            ch.basic_publish("", "drop", body)
            try:
                ch.basic_publish("", "refuse", body)
            except pika.exceptions.NackError:
                nacked.append(body)
        assert [b for b, _ in get_all(ch, "drop")] == [b"2", b"3"]
        assert [b for b, _ in get_all(ch, "refuse")] == [b"1", b"2"]
        assert nacked == [b"3"]
