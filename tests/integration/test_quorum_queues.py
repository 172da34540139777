"""Quorum queues (`x-queue-type: quorum`) with RabbitMQ 4's semantics, over the wire.

pika and aio-pika against an in-process broker: declares refused with RabbitMQ's 406 texts
(non-durable, exclusive, auto-delete, server-named), `reject-publish-dlx` refused, a delivery
limit of 20 by default with `x-delivery-count` on redeliveries, global QoS refused (540, as
Celery's default meets it), `x-dead-letter-strategy` and `x-quorum-initial-group-size` accepted
and reported, `type` in the management API. On a single node a quorum queue is not replicated.
"""

from __future__ import annotations

from typing import Any

import aio_pika
import httpx
import pika
import pytest
from pika.exceptions import ChannelClosedByBroker, ConnectionClosedByBroker

from ringmq.node import BrokerThread
from tests.integration.conftest import BrokerFactory

pytestmark = pytest.mark.integration

QUORUM: dict[str, Any] = {"x-queue-type": "quorum"}


def connect(b: BrokerThread) -> pika.BlockingConnection:
    return pika.BlockingConnection(
        pika.ConnectionParameters(
            b.host, b.port, credentials=pika.PlainCredentials("guest", "guest")
        )
    )


def refused_declare(b: BrokerThread, queue: str, **kw: Any) -> tuple[int, str]:
    with connect(b) as conn:
        ch = conn.channel()
        with pytest.raises(ChannelClosedByBroker) as exc:
            ch.queue_declare(queue, arguments=QUORUM, **kw)
        return exc.value.reply_code, exc.value.reply_text


@pytest.mark.parametrize(
    ("kw", "prop"),
    [
        ({"durable": False}, "non-durable"),
        ({"durable": True, "exclusive": True}, "exclusive-owner"),
        ({"durable": True, "auto_delete": True}, "auto-delete"),
    ],
)
def test_a_quorum_queue_must_be_durable_and_shared(
    broker: BrokerThread, kw: dict[str, Any], prop: str
) -> None:
    assert refused_declare(broker, "qq", **kw) == (
        406,
        f"PRECONDITION_FAILED - invalid property '{prop}' for queue 'qq' in vhost '/'",
    )


def test_a_server_named_quorum_queue_is_refused(broker: BrokerThread) -> None:
    assert refused_declare(broker, "", durable=True) == (
        406,
        "PRECONDITION_FAILED - Cannot declare a server-named queue for type rabbit_quorum_queue",
    )


def test_reject_publish_dlx_is_refused_and_the_quorum_arguments_accepted(
    broker_factory: BrokerFactory,
) -> None:
    b = broker_factory(http_port=0)
    with connect(b) as conn:
        ch = conn.channel()
        with pytest.raises(ChannelClosedByBroker) as exc:
            ch.queue_declare(
                "qq", durable=True, arguments={**QUORUM, "x-overflow": "reject-publish-dlx"}
            )
        assert exc.value.reply_code == 406
        assert "reject-publish-dlx" in exc.value.reply_text
        ch = conn.channel()
        ch.queue_declare(
            "qq",
            durable=True,
            arguments={
                **QUORUM,
                "x-dead-letter-strategy": "at-least-once",
                "x-overflow": "reject-publish",
                "x-quorum-initial-group-size": 3,
            },
        )
        ch.queue_declare("cq", durable=True, arguments={"x-queue-type": "classic"})
        # a redeclare as classic is not equivalent
        with pytest.raises(ChannelClosedByBroker) as exc:
            ch.queue_declare("qq", durable=True, arguments={"x-queue-type": "classic"})
        assert exc.value.reply_code == 406
    api = f"http://127.0.0.1:{b.port_of('http')}/api/queues/%2F"
    qq = httpx.get(f"{api}/qq", auth=("guest", "guest")).json()
    assert qq["type"] == "quorum"
    assert qq["arguments"]["x-quorum-initial-group-size"] == 3
    assert qq["effective_settings"]["dead_letter_strategy"] == "at-least-once"
    assert qq["effective_settings"]["delivery_limit"] == 20
    assert qq["members"] == [qq["node"]]
    cq = httpx.get(f"{api}/cq", auth=("guest", "guest")).json()
    assert cq["type"] == "classic"
    assert "delivery_limit" not in cq["effective_settings"]


def test_redeliveries_carry_x_delivery_count_and_stop_at_the_default_limit(
    broker: BrokerThread,
) -> None:
    with connect(broker) as conn:
        ch = conn.channel()
        ch.queue_declare("dead", durable=True)
        ch.queue_declare(
            "qq",
            durable=True,
            arguments={**QUORUM, "x-dead-letter-exchange": "", "x-dead-letter-routing-key": "dead"},
        )
        ch.basic_publish("", "qq", b"poison")
        counts: list[int | None] = []
        for _ in range(25):
            method, props, _body = ch.basic_get("qq")
            if method is None:
                break
            counts.append((props.headers or {}).get("x-delivery-count"))
            ch.basic_nack(method.delivery_tag, requeue=True)
        # the first delivery has no header, redeliveries count the earlier ones; after the 20
        # allowed returns the message is dead-lettered (RabbitMQ 4's default delivery limit)
        assert counts == [None, *range(1, 21)]
        method, _props, body = ch.basic_get("dead")
        assert method is not None
        assert body == b"poison"


def test_a_classic_queue_has_no_delivery_limit_nor_count(broker: BrokerThread) -> None:
    with connect(broker) as conn:
        ch = conn.channel()
        ch.queue_declare("cq", durable=True)
        ch.basic_publish("", "cq", b"m")
        for _ in range(25):
            method, props, _body = ch.basic_get("cq")
            assert method is not None
            assert "x-delivery-count" not in (props.headers or {})
            ch.basic_nack(method.delivery_tag, requeue=True)


def test_global_qos_is_refused_on_a_quorum_queue_consumer(broker: BrokerThread) -> None:
    with connect(broker) as conn:
        ch = conn.channel()
        ch.queue_declare("qq", durable=True, arguments=QUORUM)
        ch.queue_declare("cq", durable=True)
        ch.basic_qos(prefetch_count=10, global_qos=True)
        ch.basic_consume("cq", lambda *a: None)  # a classic queue takes it
        with pytest.raises(ConnectionClosedByBroker) as exc:
            ch.basic_consume("qq", lambda *a: None)
    assert exc.value.reply_code == 540
    assert exc.value.reply_text == (
        "NOT_IMPLEMENTED - queue 'qq' in vhost '/' does not support global qos"
    )


async def test_aio_pika_works_a_quorum_queue_with_per_consumer_qos(broker: BrokerThread) -> None:
    url = f"amqp://guest:guest@{broker.host}:{broker.port}/%2F"
    async with await aio_pika.connect(url, timeout=10) as conn:
        ch = await conn.channel(publisher_confirms=True)
        await ch.set_qos(prefetch_count=5)  # per consumer: allowed
        q = await ch.declare_queue("aio-qq", durable=True, arguments=QUORUM)
        for i in range(10):
            await ch.default_exchange.publish(
                aio_pika.Message(str(i).encode(), delivery_mode=aio_pika.DeliveryMode.PERSISTENT),
                routing_key="aio-qq",
            )
        got: list[int] = []
        requeued = False
        async with q.iterator() as it:
            async for msg in it:
                if int(msg.body) == 3 and not requeued:
                    requeued = True
                    await msg.nack(requeue=True)
                    continue
                if int(msg.body) == 3:
                    assert msg.headers["x-delivery-count"] == 1
                got.append(int(msg.body))
                await msg.ack()
                if len(got) == 10:
                    break
        assert sorted(got) == list(range(10))
        with pytest.raises(aio_pika.exceptions.ChannelPreconditionFailed):
            await (await conn.channel()).declare_queue(
                "aio-transient", durable=False, arguments=QUORUM
            )
