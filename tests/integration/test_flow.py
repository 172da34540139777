"""Publisher flow over the wire: pausing a publisher never loses, reorders or stalls it."""

from __future__ import annotations

import threading
import time

import pika
import pytest

from ringmq.core.resources import FLOW_HIGH
from ringmq.node import BrokerThread
from tests.integration.conftest import wait_until

pytestmark = pytest.mark.integration


def connect(b: BrokerThread) -> pika.BlockingConnection:
    return pika.BlockingConnection(pika.ConnectionParameters(host=b.host, port=b.port))


def _ready(b: BrokerThread, queue: str) -> int:
    return int(b.call(lambda: b.broker.vhosts["/"].queues[queue].queue.ready_count))


def _flow(b: BrokerThread) -> dict[str, int]:
    return dict(b.call(lambda: dict(b.server.flow_stats)))


def test_a_stalled_consumer_pauses_its_publisher_only_briefly(broker: BrokerThread) -> None:
    n = FLOW_HIGH + 2000
    with connect(broker) as cconn, connect(broker) as pconn:
        cch = cconn.channel()
        cch.queue_declare("stalled")
        cch.basic_qos(prefetch_count=1)
        cch.basic_consume("stalled", lambda *_: None)  # takes one and never acks
        pch = pconn.channel()
        for i in range(n):
            pch.basic_publish("", "stalled", b"%d" % i)
        wait_until(lambda: _ready(broker, "stalled") == n - 1, timeout=15)
        stats = _flow(broker)
        assert stats["paused"] >= 1
        assert stats["stalled"] + stats["timeout"] >= 1
        assert stats["settled"] == 0


def test_a_publisher_that_consumes_on_its_own_connection_is_never_paused(
    broker: BrokerThread,
) -> None:
    n = FLOW_HIGH + 500
    with connect(broker) as conn:
        ch = conn.channel()
        ch.queue_declare("self")
        ch.basic_qos(prefetch_count=1)
        ch.basic_consume("self", lambda *_: None)
        for i in range(n):
            ch.basic_publish("", "self", b"%d" % i)
        # pausing it would also stop the acks it would send: a deadlock
        assert ch.queue_declare("self", passive=True).method.message_count == n - 1
    assert _flow(broker)["paused"] == 0


def test_a_flooding_publisher_loses_and_reorders_nothing(broker: BrokerThread) -> None:
    n = 3 * FLOW_HIGH
    got: list[int] = []
    ready = threading.Event()
    failure: list[BaseException] = []

    def consume() -> None:
        try:
            with connect(broker) as conn:
                ch = conn.channel()
                ch.queue_declare("flood")
                ch.basic_qos(prefetch_count=500)
                ready.set()
                deadline = time.monotonic() + 60
                for method, _props, body in ch.consume("flood", inactivity_timeout=1):
                    if method is not None:
                        got.append(int(body))
                        if len(got) % 100 == 0 or len(got) == n:
                            ch.basic_ack(method.delivery_tag, multiple=True)
                    if len(got) == n or time.monotonic() > deadline:
                        break
                ch.cancel()
        except BaseException as exc:  # noqa: BLE001 - reported by the test thread
            failure.append(exc)
            ready.set()

    t = threading.Thread(target=consume, daemon=True)
    t.start()
    assert ready.wait(10)
    with connect(broker) as conn:
        ch = conn.channel()
        for i in range(n):
            ch.basic_publish("", "flood", b"%d" % i)
        t.join(90)
    assert not failure
    assert got == list(range(n))
    stats = _flow(broker)
    assert stats["paused"] == stats["settled"] + stats["stalled"] + stats["timeout"]


def test_management_shows_a_held_publisher_in_flow_state(broker: BrokerThread) -> None:
    # A consumer that keeps progressing, slowly: its publisher is held (up to FLOW_MAX_PAUSE_S
    # at a time) and the connection list says "flow", as RabbitMQ's does.
    stop = threading.Event()
    ready = threading.Event()

    def slow_consumer() -> None:
        with connect(broker) as conn:
            ch = conn.channel()
            ch.queue_declare("slow")
            ch.basic_qos(prefetch_count=1)
            ready.set()
            deadline = time.monotonic() + 30
            for method, _props, _body in ch.consume("slow", inactivity_timeout=0.1):
                if method is not None:
                    time.sleep(0.005)
                    ch.basic_ack(method.delivery_tag)
                if stop.is_set() or time.monotonic() > deadline:
                    break
            ch.cancel()

    t = threading.Thread(target=slow_consumer, daemon=True)
    t.start()
    assert ready.wait(10)
    states: set[str] = set()
    with connect(broker) as conn:
        ch = conn.channel()
        for i in range(FLOW_HIGH + 4000):
            ch.basic_publish("", "slow", b"%d" % i)

        def seen_flow() -> bool:
            states.update(c.state for c in broker.call(broker.server.connections))
            return "flow" in states

        try:
            wait_until(seen_flow, timeout=20, interval=0.005)
        finally:
            stop.set()
            t.join(30)
    assert "flow" in states
