"""`messages_persistent` and the churn counters, read from a running broker."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import pika
import pytest

from ringmq.node import BrokerThread
from ringmq.server.runtime import ServerOptions

AUTH = ("guest", "guest")


@pytest.fixture
def live(tmp_path: Path) -> Iterator[BrokerThread]:
    b = BrokerThread(
        ServerOptions(host="127.0.0.1", amqp_port=0, http_port=0, data_dir=tmp_path / "d")
    )
    b.start()
    yield b
    b.stop()


def test_messages_persistent_counts_journaled_messages(live: BrokerThread) -> None:
    url = f"http://127.0.0.1:{live.server.http_port}"
    with pika.BlockingConnection(pika.ConnectionParameters("127.0.0.1", live.port)) as conn:
        ch = conn.channel()
        ch.confirm_delivery()
        ch.queue_declare("d", durable=True)
        ch.queue_declare("t", durable=False)
        for i in range(5):
            ch.basic_publish("", "d", b"p%d" % i, pika.BasicProperties(delivery_mode=2))
        for i in range(3):
            ch.basic_publish("", "d", b"n%d" % i)
            ch.basic_publish("", "t", b"x%d" % i, pika.BasicProperties(delivery_mode=2))
        method, _, _ = ch.basic_get("d", auto_ack=True)
        assert method is not None
        q = httpx.get(url + "/api/queues/%2F/d", auth=AUTH).json()
        assert (q["messages"], q["messages_persistent"]) == (7, 4)
        listed = {x["name"]: x for x in httpx.get(url + "/api/queues", auth=AUTH).json()}
        assert listed["d"]["messages_persistent"] == 4
        assert listed["t"]["messages_persistent"] == 0  # a transient queue journals nothing
        per_object = httpx.get(url + "/metrics/per-object").text
        assert 'rabbitmq_queue_messages_persistent{vhost="/",queue="d"} 4' in per_object
        assert "rabbitmq_queue_messages_persistent 4" in httpx.get(url + "/metrics").text


def test_churn_counters_follow_connections_channels_and_queues(live: BrokerThread) -> None:
    url = f"http://127.0.0.1:{live.server.http_port}"
    for _ in range(2):
        with pika.BlockingConnection(pika.ConnectionParameters("127.0.0.1", live.port)) as conn:
            ch = conn.channel()
            ch.queue_declare("", exclusive=True)
            conn.channel().close()
    text = httpx.get(url + "/metrics").text.splitlines()
    assert "rabbitmq_connections_opened_total 2" in text
    assert "rabbitmq_connections_closed_total 2" in text
    assert "rabbitmq_channels_opened_total 4" in text
    assert "rabbitmq_channels_closed_total 4" in text
    assert "rabbitmq_queues_declared_total 2" in text
    assert "rabbitmq_queues_created_total 2" in text
    assert "rabbitmq_queues_deleted_total 2" in text  # exclusive queues go with their owner
