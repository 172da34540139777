"""Other clients unchanged: aio-pika (asyncio, aiormq underneath) and kombu (py-amqp)."""

from __future__ import annotations

import asyncio
import importlib
from typing import Any

import aio_pika
import pytest

from ringmq.node import BrokerThread

pytestmark = pytest.mark.integration

kombu: Any = importlib.import_module("kombu")  # untyped calls; keep mypy strict elsewhere


def url(b: BrokerThread) -> str:
    return f"amqp://guest:guest@{b.host}:{b.port}/%2F"


async def test_aio_pika_round_trip_with_confirms(broker: BrokerThread) -> None:
    conn = await aio_pika.connect_robust(url(broker), timeout=10)
    async with conn:
        ch = await conn.channel(publisher_confirms=True)
        await ch.set_qos(prefetch_count=10)
        q = await ch.declare_queue("aio", durable=True)
        for i in range(20):
            await ch.default_exchange.publish(
                aio_pika.Message(str(i).encode(), headers={"i": i}), routing_key="aio"
            )
        got: list[int] = []
        async with q.iterator() as it:
            async for msg in it:
                async with msg.process():
                    assert msg.headers["i"] == int(msg.body)
                    got.append(int(msg.body))
                if len(got) == 20:
                    break
        assert got == list(range(20))


async def test_aio_pika_topic_and_rpc_reply_to(broker: BrokerThread) -> None:
    async with await aio_pika.connect(url(broker), timeout=10) as conn:
        ch = await conn.channel()
        ex = await ch.declare_exchange("aio_topic", aio_pika.ExchangeType.TOPIC)
        q = await ch.declare_queue(exclusive=True)
        await q.bind(ex, routing_key="stock.#")
        await ex.publish(aio_pika.Message(b"ibm"), routing_key="stock.nyse.ibm")
        await ex.publish(aio_pika.Message(b"nope"), routing_key="bond.x")
        msg = await q.get(timeout=5)
        assert msg is not None
        assert msg.body == b"ibm"
        await msg.ack()
        assert await q.get(fail=False) is None

        # direct reply-to between two channels of the same connection
        server_ch = await conn.channel()
        rpc_q = await server_ch.declare_queue("aio_rpc")

        async def serve(message: aio_pika.abc.AbstractIncomingMessage) -> None:
            async with message.process():
                assert message.reply_to is not None
                await server_ch.default_exchange.publish(
                    aio_pika.Message(message.body.upper(), correlation_id=message.correlation_id),
                    routing_key=message.reply_to,
                )

        await rpc_q.consume(serve)
        replies: asyncio.Queue[aio_pika.abc.AbstractIncomingMessage] = asyncio.Queue()
        reply_q = await ch.get_queue("amq.rabbitmq.reply-to", ensure=False)
        await reply_q.consume(replies.put, no_ack=True)
        await ch.default_exchange.publish(
            aio_pika.Message(b"ping", reply_to="amq.rabbitmq.reply-to", correlation_id="1"),
            routing_key="aio_rpc",
        )
        reply = await asyncio.wait_for(replies.get(), 5)
        assert (reply.body, reply.correlation_id) == (b"PING", "1")


async def test_aio_pika_channel_error_codes(broker: BrokerThread) -> None:
    async with await aio_pika.connect(url(broker), timeout=10) as conn:
        ch = await conn.channel()
        with pytest.raises(aio_pika.exceptions.ChannelNotFoundEntity):
            await ch.declare_queue("absent", passive=True)
        ch = await conn.channel()
        await ch.declare_queue("aio406", arguments={"x-max-length": 1})
        with pytest.raises(aio_pika.exceptions.ChannelPreconditionFailed):
            await ch.declare_queue("aio406", arguments={"x-max-length": 2})


def test_kombu_simple_queue_and_producer(broker: BrokerThread) -> None:
    with kombu.Connection(f"pyamqp://guest:guest@{broker.host}:{broker.port}//") as conn:
        exchange = kombu.Exchange("kombu_ex", type="direct")
        queue = kombu.Queue("kombu_q", exchange, routing_key="k")
        with conn.Producer() as producer:
            for i in range(5):
                producer.publish(
                    {"n": i},
                    exchange=exchange,
                    routing_key="k",
                    declare=[queue],
                    serializer="json",
                    retry=False,
                )
        received: list[int] = []

        def on_message(body: dict[str, int], message: Any) -> None:
            received.append(body["n"])
            message.ack()

        with conn.Consumer(queue, callbacks=[on_message], accept=["json"]):
            for _ in range(50):
                if len(received) == 5:
                    break
                try:
                    conn.drain_events(timeout=0.2)
                except TimeoutError:
                    pass
        assert received == list(range(5))

        simple = conn.SimpleQueue("kombu_simple")
        simple.put({"hello": "world"})
        msg = simple.get(block=True, timeout=5)
        assert msg.payload == {"hello": "world"}
        msg.ack()
        simple.close()
