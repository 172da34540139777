"""Confirms, mandatory returns, QoS and redelivery, transactions, cancel notification (pika)."""

from __future__ import annotations

from typing import Any

import pika
import pika.exceptions
import pytest

from ringmq.node import BrokerThread
from tests.facade import admin_of
from tests.integration.conftest import wait_until

pytestmark = pytest.mark.integration


def connect(b: BrokerThread) -> pika.BlockingConnection:
    return pika.BlockingConnection(pika.ConnectionParameters(host=b.host, port=b.port))


def test_publisher_confirms_ack_every_routed_message(broker: BrokerThread) -> None:
    with connect(broker) as conn:
        ch = conn.channel()
        ch.queue_declare("confirmed")
        ch.confirm_delivery()
        for i in range(50):
            ch.basic_publish("", "confirmed", str(i).encode())  # raises on nack
        assert ch.queue_declare("confirmed", passive=True).method.message_count == 50


def test_confirms_nack_when_any_queue_refuses(broker: BrokerThread) -> None:
    with connect(broker) as conn:
        ch = conn.channel()
        ch.exchange_declare("fan", "fanout")
        ch.queue_declare("open")
        ch.queue_declare("full", arguments={"x-max-length": 1, "x-overflow": "reject-publish"})
        ch.queue_bind("open", "fan")
        ch.queue_bind("full", "fan")
        ch.confirm_delivery()
        ch.basic_publish("fan", "", b"1")
        with pytest.raises(pika.exceptions.NackError):
            ch.basic_publish("fan", "", b"2")
        # the open queue still took it: a nack means "not every queue has it"
        assert ch.queue_declare("open", passive=True).method.message_count == 2


def test_mandatory_unroutable_is_returned(broker: BrokerThread) -> None:
    with connect(broker) as conn:
        ch = conn.channel()
        ch.confirm_delivery()
        with pytest.raises(pika.exceptions.UnroutableError) as exc:
            ch.basic_publish("", "no-such-queue", b"lost", mandatory=True)
        (returned,) = exc.value.messages
        assert returned.method.reply_code == 312
        assert returned.method.reply_text == "NO_ROUTE"
        assert returned.body == b"lost"
        # without mandatory the message is silently dropped (and still confirmed)
        ch.basic_publish("", "no-such-queue", b"dropped")


def test_mandatory_return_without_confirms(broker: BrokerThread) -> None:
    with connect(broker) as conn:
        ch = conn.channel()
        returned: list[tuple[Any, bytes]] = []
        ch.add_on_return_callback(lambda _c, m, _p, body: returned.append((m, body)))
        ch.basic_publish(
            "amq.direct", "nowhere", b"r", pika.BasicProperties(message_id="m1"), mandatory=True
        )

        def got() -> bool:
            conn.process_data_events(0)
            return bool(returned)

        wait_until(got)
        m, body = returned[0]
        assert (m.exchange, m.routing_key, body) == ("amq.direct", "nowhere", b"r")


def test_properties_survive_the_round_trip(broker: BrokerThread) -> None:
    props = pika.BasicProperties(
        content_type="application/json",
        content_encoding="utf-8",
        headers={"a": 1, "b": "two", "c": [1, 2], "d": {"x": True}},
        delivery_mode=2,
        priority=3,
        correlation_id="c1",
        reply_to="r",
        expiration="60000",
        message_id="m1",
        timestamp=1700000000,
        type="t",
        user_id="guest",
        app_id="app",
    )
    with connect(broker) as conn:
        ch = conn.channel()
        ch.queue_declare("props")
        ch.basic_publish("", "props", b"{}", props)
        m, got, body = ch.basic_get("props", auto_ack=True)
        assert m is not None
        assert body == b"{}"
        for field in (
            "content_type",
            "content_encoding",
            "headers",
            "delivery_mode",
            "priority",
            "correlation_id",
            "reply_to",
            "expiration",
            "message_id",
            "timestamp",
            "type",
            "user_id",
            "app_id",
        ):
            assert getattr(got, field) == getattr(props, field), field


def test_large_body_spans_frames(broker: BrokerThread) -> None:
    body = bytes(range(256)) * 4096  # 1 MiB: several frames at frame_max 131072
    with connect(broker) as conn:
        ch = conn.channel()
        ch.queue_declare("big")
        ch.basic_publish("", "big", body)
        _, _, got = ch.basic_get("big", auto_ack=True)
        assert got == body


def test_qos_prefetch_limits_unacked_and_nack_requeue_sets_redelivered(
    broker: BrokerThread,
) -> None:
    with connect(broker) as conn:
        ch = conn.channel()
        ch.queue_declare("qos")
        for i in range(10):
            ch.basic_publish("", "qos", str(i).encode())
        ch.basic_qos(prefetch_count=3)
        seen: list[Any] = []
        ch.basic_consume("qos", lambda _c, m, _p, body: seen.append((m, body)))

        def three() -> bool:
            conn.process_data_events(0.01)
            return len(seen) >= 3

        wait_until(three)
        conn.process_data_events(0.1)
        assert len(seen) == 3  # prefetch window is full
        info = broker.call(lambda: admin_of(broker).queue("/", "qos"))
        assert info.messages_unacknowledged == 3
        # nack the first with requeue: it comes back flagged redelivered, before the rest
        first_m, first_body = seen[0]
        ch.basic_nack(first_m.delivery_tag, requeue=True)
        ch.basic_ack(seen[2][0].delivery_tag, multiple=True)  # acks tag 2 (and 1 was nacked)

        def more() -> bool:
            conn.process_data_events(0.01)
            return len(seen) >= 5

        wait_until(more)
        redelivered = [(m.redelivered, b) for m, b in seen[3:]]
        assert (True, first_body) in redelivered
        assert all(not m.redelivered for m, _ in seen[:3])


def test_reject_without_requeue_drops(broker: BrokerThread) -> None:
    with connect(broker) as conn:
        ch = conn.channel()
        ch.queue_declare("rej")
        ch.basic_publish("", "rej", b"x")
        m, _, _ = ch.basic_get("rej")
        assert m is not None
        ch.basic_reject(m.delivery_tag, requeue=False)
        assert ch.queue_declare("rej", passive=True).method.message_count == 0


def test_dead_letter_exchange_on_reject(broker: BrokerThread) -> None:
    with connect(broker) as conn:
        ch = conn.channel()
        ch.exchange_declare("dlx", "fanout")
        ch.queue_declare("dead")
        ch.queue_bind("dead", "dlx")
        ch.queue_declare("work", arguments={"x-dead-letter-exchange": "dlx"})
        ch.basic_publish("", "work", b"bad")
        m, _, _ = ch.basic_get("work")
        assert m is not None
        ch.basic_reject(m.delivery_tag, requeue=False)
        _m2, props, body = ch.basic_get("dead", auto_ack=True)
        assert body == b"bad"
        death = props.headers["x-death"][0]
        assert death["reason"] == "rejected"
        assert death["queue"] == "work"


def test_basic_recover_requeues_unacked(broker: BrokerThread) -> None:
    with connect(broker) as conn:
        ch = conn.channel()
        ch.queue_declare("recover")
        ch.basic_publish("", "recover", b"again")
        m, _, _ = ch.basic_get("recover")
        assert m is not None
        assert not m.redelivered
        ch.basic_recover(requeue=True)
        m2, _, body = ch.basic_get("recover", auto_ack=True)
        assert m2 is not None
        assert m2.redelivered
        assert body == b"again"


def test_transactions_commit_and_rollback(broker: BrokerThread) -> None:
    with connect(broker) as conn:
        ch = conn.channel()
        ch.queue_declare("txq")
        ch.tx_select()
        ch.basic_publish("", "txq", b"1")
        ch.basic_publish("", "txq", b"2")
        observer = conn.channel()
        assert observer.queue_declare("txq", passive=True).method.message_count == 0
        ch.tx_commit()
        assert observer.queue_declare("txq", passive=True).method.message_count == 2
        ch.basic_publish("", "txq", b"3")
        ch.tx_rollback()
        assert observer.queue_declare("txq", passive=True).method.message_count == 2
        # acks are transactional too
        m, _, _ = ch.basic_get("txq")
        assert m is not None
        ch.basic_ack(m.delivery_tag)
        ch.tx_rollback()  # the ack is discarded and the delivery goes back
        assert observer.queue_declare("txq", passive=True).method.message_count == 2


def test_tx_commit_fails_atomically_when_a_queue_refuses(broker: BrokerThread) -> None:
    with connect(broker) as conn:
        ch = conn.channel()
        ch.queue_declare("small", arguments={"x-max-length": 2, "x-overflow": "reject-publish"})
        ch.tx_select()
        for body in (b"1", b"2", b"3"):
            ch.basic_publish("", "small", body)
        with pytest.raises(pika.exceptions.ChannelClosedByBroker) as exc:
            ch.tx_commit()
        assert exc.value.reply_code == 406
        assert conn.channel().queue_declare("small", passive=True).method.message_count == 0


def test_consumer_cancel_notification_when_queue_deleted(broker: BrokerThread) -> None:
    with connect(broker) as conn:
        ch = conn.channel()
        ch.queue_declare("doomed")
        cancelled: list[Any] = []
        ch.add_on_cancel_callback(cancelled.append)
        ch.basic_consume("doomed", lambda *a: None)
        conn.channel().queue_delete("doomed")

        def notified() -> bool:
            conn.process_data_events(0)
            return bool(cancelled)

        wait_until(notified)


def test_exclusive_consumer_blocks_others(broker: BrokerThread) -> None:
    with connect(broker) as conn:
        ch = conn.channel()
        ch.queue_declare("solo")
        ch.basic_consume("solo", lambda *a: None, exclusive=True)
        other = conn.channel()
        with pytest.raises(pika.exceptions.ChannelClosedByBroker) as exc:
            other.basic_consume("solo", lambda *a: None)
        assert exc.value.reply_code == 403


def test_headers_exchange_and_alternate_exchange(broker: BrokerThread) -> None:
    with connect(broker) as conn:
        ch = conn.channel()
        ch.exchange_declare("fallback", "fanout")
        ch.queue_declare("unrouted")
        ch.queue_bind("unrouted", "fallback")
        ch.exchange_declare("hdr", "headers", arguments={"alternate-exchange": "fallback"})
        ch.queue_declare("both")
        ch.queue_bind("both", "hdr", arguments={"x-match": "all", "a": 1, "b": 2})
        ch.basic_publish("hdr", "", b"match", pika.BasicProperties(headers={"a": 1, "b": 2}))
        ch.basic_publish("hdr", "", b"miss", pika.BasicProperties(headers={"a": 1}))
        assert ch.basic_get("both", auto_ack=True)[2] == b"match"
        assert ch.basic_get("unrouted", auto_ack=True)[2] == b"miss"


def test_message_ttl_expires(broker: BrokerThread) -> None:
    with connect(broker) as conn:
        ch = conn.channel()
        ch.queue_declare("ttl", arguments={"x-message-ttl": 100})
        ch.basic_publish("", "ttl", b"short-lived")
        wait_until(
            lambda: ch.queue_declare("ttl", passive=True).method.message_count == 0,
        )


def test_exchange_to_exchange_binding(broker: BrokerThread) -> None:
    with connect(broker) as conn:
        ch = conn.channel()
        ch.exchange_declare("upstream", "topic")
        ch.exchange_declare("downstream", "fanout")
        ch.exchange_bind("downstream", "upstream", routing_key="a.*")
        ch.queue_declare("e2e")
        ch.queue_bind("e2e", "downstream")
        ch.basic_publish("upstream", "a.b", b"yes")
        ch.basic_publish("upstream", "b.b", b"no")
        assert ch.basic_get("e2e", auto_ack=True)[2] == b"yes"
        assert ch.basic_get("e2e", auto_ack=True)[0] is None


def test_slow_consumer_backpressure_keeps_messages_in_the_queue(broker: BrokerThread) -> None:
    """A consumer that stops reading fills its socket; the broker then stops delivering to it
    (pause_writing -> set_writable(False)) instead of buffering the whole queue in memory."""
    body = b"x" * (512 * 1024)
    total = 64  # 32 MiB: well past the transport high-water mark plus kernel buffers
    with connect(broker) as pub, connect(broker) as slow:
        pch = pub.channel()
        pch.queue_declare("firehose")
        sch = slow.channel()
        got = [0]

        def on_message(_c: Any, _m: Any, _p: Any, b: bytes) -> None:
            got[0] += 1

        sch.basic_consume("firehose", on_message, auto_ack=True)
        pch.confirm_delivery()  # every publish below is routed before the next one starts
        for _ in range(total):
            pch.basic_publish("", "firehose", body)

        def ready() -> int:
            return broker.call(lambda: admin_of(broker).queue("/", "firehose")).messages_ready

        # the slow client reads nothing here: part of the queue must stay ready, and stays so
        assert ready() > 0
        pub.sleep(0.3)
        assert ready() > 0
        assert got[0] == 0

        def all_arrived() -> bool:
            slow.process_data_events(0.05)
            return got[0] == total

        wait_until(all_arrived, timeout=60)
        assert ready() == 0


def test_exclusive_and_auto_delete_queues_go_away(broker: BrokerThread) -> None:
    with connect(broker) as owner:
        ch = owner.channel()
        ch.queue_declare("mine-only", exclusive=True)
        ch.queue_declare("autodel", auto_delete=True)
        tag = ch.basic_consume("autodel", lambda *a: None)
        ch.basic_cancel(tag)  # last consumer gone: an auto-delete queue is deleted
        with connect(broker) as other:
            with pytest.raises(pika.exceptions.ChannelClosedByBroker) as exc:
                other.channel().queue_declare("autodel", passive=True)
            assert exc.value.reply_code == 404
    # the owner connection closed: its exclusive queue is gone
    with connect(broker) as other:
        with pytest.raises(pika.exceptions.ChannelClosedByBroker) as exc:
            other.channel().queue_declare("mine-only", passive=True)
        assert exc.value.reply_code == 404


def test_restart_recovers_durable_queues_and_persistent_messages(
    broker_factory: Any, tmp_path: Any
) -> None:
    data = tmp_path / "persist"
    b = broker_factory(data_dir=data)
    with connect(b) as conn:
        ch = conn.channel()
        ch.queue_declare("durable-q", durable=True)
        ch.confirm_delivery()
        ch.basic_publish("", "durable-q", b"keep", pika.BasicProperties(delivery_mode=2))
    b.stop()
    b2 = broker_factory(data_dir=data)
    with connect(b2) as conn:
        _m, _, body = conn.channel().basic_get("durable-q", auto_ack=True)
        assert body == b"keep"
