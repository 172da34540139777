"""The six RabbitMQ tutorials, with pika's BlockingConnection, against a real ringmq."""

from __future__ import annotations

import threading
import uuid
from typing import Any

import pika
import pytest
from pika.adapters.blocking_connection import BlockingChannel

from ringmq.node import BrokerThread

pytestmark = pytest.mark.integration


def connect(b: BrokerThread, **kw: Any) -> pika.BlockingConnection:
    return pika.BlockingConnection(pika.ConnectionParameters(host=b.host, port=b.port, **kw))


def drain(ch: BlockingChannel, queue: str, count: int, *, ack: bool = True) -> list[bytes]:
    """Consume exactly `count` bodies from `queue` (bounded by an inactivity timeout)."""
    got: list[bytes] = []
    for method, _props, body in ch.consume(queue, auto_ack=not ack, inactivity_timeout=5):
        if method is None:
            break
        got.append(body)
        if ack:
            ch.basic_ack(method.delivery_tag)
        if len(got) == count:
            break
    ch.cancel()
    return got


def test_hello_world(broker: BrokerThread) -> None:
    with connect(broker) as conn:
        ch = conn.channel()
        ch.queue_declare(queue="hello")
        ch.basic_publish(exchange="", routing_key="hello", body=b"Hello World!")
        assert drain(ch, "hello", 1, ack=False) == [b"Hello World!"]


def test_work_queues_prefetch_and_acks(broker: BrokerThread) -> None:
    with connect(broker) as pub, connect(broker) as c1, connect(broker) as c2:
        p = pub.channel()
        p.queue_declare(queue="task_queue", durable=True)
        for i in range(10):
            p.basic_publish(
                exchange="",
                routing_key="task_queue",
                body=f"task {i}".encode(),
                properties=pika.BasicProperties(delivery_mode=pika.DeliveryMode.Persistent),
            )
        ch1, ch2 = c1.channel(), c2.channel()
        ch1.basic_qos(prefetch_count=1)
        ch2.basic_qos(prefetch_count=1)
        # with prefetch 1, worker 1 holds one unacked task; worker 2 gets the next one
        m1, _, b1 = ch1.basic_get("task_queue")
        assert m1 is not None
        got1: list[bytes] = []

        def work(ch: BlockingChannel, m: Any, _p: Any, body: bytes) -> None:
            got1.append(body)
            ch.basic_ack(m.delivery_tag)

        ch2.basic_consume("task_queue", work)
        deadline = 200
        while len(got1) < 9 and deadline:
            c2.process_data_events(time_limit=0.05)
            deadline -= 1
        assert sorted([b1, *got1]) == sorted(f"task {i}".encode() for i in range(10))
        ch1.basic_ack(m1.delivery_tag)
        q = p.queue_declare(queue="task_queue", durable=True, passive=True)
        assert q.method.message_count == 0


def test_work_queue_redelivers_unacked_on_close(broker: BrokerThread) -> None:
    with connect(broker) as pub:
        p = pub.channel()
        p.queue_declare(queue="redeliver")
        p.basic_publish(exchange="", routing_key="redeliver", body=b"x")
        with connect(broker) as worker:
            w = worker.channel()
            w.basic_qos(prefetch_count=1)
            m, _, _ = w.basic_get("redeliver")
            assert m is not None
            assert m.redelivered is False
        # the worker died without acking: the message comes back, flagged redelivered
        m2, _, body = p.basic_get("redeliver", auto_ack=True)
        assert m2 is not None
        assert m2.redelivered is True
        assert body == b"x"


def test_publish_subscribe_fanout(broker: BrokerThread) -> None:
    with connect(broker) as conn:
        ch = conn.channel()
        ch.exchange_declare(exchange="logs", exchange_type="fanout")
        queues = []
        for _ in range(3):
            r = ch.queue_declare(queue="", exclusive=True)
            assert r.method.queue.startswith("amq.gen-")
            ch.queue_bind(exchange="logs", queue=r.method.queue)
            queues.append(r.method.queue)
        ch.basic_publish(exchange="logs", routing_key="", body=b"info: hi")
        for q in queues:
            assert drain(ch, q, 1) == [b"info: hi"]


def test_routing_direct(broker: BrokerThread) -> None:
    with connect(broker) as conn:
        ch = conn.channel()
        ch.exchange_declare(exchange="direct_logs", exchange_type="direct")
        errors = ch.queue_declare(queue="", exclusive=True).method.queue
        everything = ch.queue_declare(queue="", exclusive=True).method.queue
        ch.queue_bind(exchange="direct_logs", queue=errors, routing_key="error")
        for sev in ("info", "warning", "error"):
            ch.queue_bind(exchange="direct_logs", queue=everything, routing_key=sev)
        for sev in ("info", "warning", "error", "debug"):
            ch.basic_publish(exchange="direct_logs", routing_key=sev, body=sev.encode())
        assert drain(ch, errors, 1) == [b"error"]
        assert drain(ch, everything, 3) == [b"info", b"warning", b"error"]
        assert ch.queue_declare(queue=errors, passive=True).method.message_count == 0


@pytest.mark.parametrize(
    ("binding", "matches"),
    [
        ("*.orange.*", {"quick.orange.rabbit", "lazy.orange.elephant", "quick.orange.fox"}),
        ("*.*.rabbit", {"quick.orange.rabbit", "lazy.brown.rabbit"}),
        ("lazy.#", {"lazy.orange.elephant", "lazy.brown.rabbit", "lazy.pink.rabbit.x", "lazy"}),
        ("#", None),
    ],
)
def test_topics(broker: BrokerThread, binding: str, matches: set[str] | None) -> None:
    keys = [
        "quick.orange.rabbit",
        "lazy.orange.elephant",
        "quick.orange.fox",
        "lazy.brown.rabbit",
        "lazy.pink.rabbit.x",
        "quick.brown.fox",
        "orange",
        "lazy",
    ]
    with connect(broker) as conn:
        ch = conn.channel()
        ch.exchange_declare(exchange="topic_logs", exchange_type="topic")
        q = ch.queue_declare(queue="", exclusive=True).method.queue
        ch.queue_bind(exchange="topic_logs", queue=q, routing_key=binding)
        for k in keys:
            ch.basic_publish(exchange="topic_logs", routing_key=k, body=k.encode())
        want = [k for k in keys if matches is None or k in matches]
        assert drain(ch, q, len(want)) == [k.encode() for k in want]
        assert ch.queue_declare(queue=q, passive=True).method.message_count == 0


def _rpc_server(b: BrokerThread, ready: threading.Event, stop: threading.Event) -> None:
    with connect(b) as conn:
        ch = conn.channel()
        ch.queue_declare(queue="rpc_queue")
        ch.basic_qos(prefetch_count=1)

        def on_request(ch: BlockingChannel, method: Any, props: Any, body: bytes) -> None:
            n = int(body)
            ch.basic_publish(
                exchange="",
                routing_key=props.reply_to,
                properties=pika.BasicProperties(correlation_id=props.correlation_id),
                body=str(n * n).encode(),
            )
            ch.basic_ack(method.delivery_tag)

        ch.basic_consume(queue="rpc_queue", on_message_callback=on_request)
        ready.set()
        while not stop.is_set():
            conn.process_data_events(time_limit=0.05)


@pytest.mark.parametrize("reply_mode", ["callback_queue", "direct_reply_to"])
def test_rpc(broker: BrokerThread, reply_mode: str) -> None:
    ready, stop = threading.Event(), threading.Event()
    server = threading.Thread(target=_rpc_server, args=(broker, ready, stop), daemon=True)
    server.start()
    try:
        assert ready.wait(10)
        with connect(broker) as conn:
            ch = conn.channel()
            if reply_mode == "callback_queue":
                reply_to = ch.queue_declare(queue="", exclusive=True).method.queue
                auto_ack = False
            else:
                reply_to = "amq.rabbitmq.reply-to"
                auto_ack = True  # direct reply-to requires no-ack consumers
            replies: dict[str, bytes] = {}

            def on_reply(ch: BlockingChannel, method: Any, props: Any, body: bytes) -> None:
                replies[props.correlation_id] = body
                if not auto_ack:
                    ch.basic_ack(method.delivery_tag)

            ch.basic_consume(queue=reply_to, on_message_callback=on_reply, auto_ack=auto_ack)
            ids = {}
            for n in (2, 7, 12):
                cid = str(uuid.uuid4())
                ids[cid] = n
                ch.basic_publish(
                    exchange="",
                    routing_key="rpc_queue",
                    properties=pika.BasicProperties(reply_to=reply_to, correlation_id=cid),
                    body=str(n).encode(),
                )
            for _ in range(200):
                if len(replies) == 3:
                    break
                conn.process_data_events(time_limit=0.05)
            assert {cid: int(v) for cid, v in replies.items()} == {
                cid: n * n for cid, n in ids.items()
            }
    finally:
        stop.set()
        server.join(10)
