"""The RabbitMQ stream protocol over the wire with `rstream`: connect, create and delete,
publish with confirms and de-duplication, consume from each offset specification, store and
query offsets (a consumer restart resumes), a stream deleted under a consumer, and the same
stream read and written over AMQP 0-9-1."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import Any

import pika
import pytest
from rstream import (
    AMQPMessage,
    Consumer,
    ConsumerOffsetSpecification,
    MessageContext,
    OffsetType,
    Producer,
    amqp_decoder,
)
from rstream.exceptions import OffsetNotFound, StreamDoesNotExist

from ringmq.node import BrokerThread
from tests.integration.conftest import BrokerFactory

pytestmark = pytest.mark.integration

LOGIN: dict[str, Any] = {"username": "guest", "password": "guest"}


@pytest.fixture
def broker(broker_factory: BrokerFactory) -> BrokerThread:
    return broker_factory(stream_port=0)


def _port(b: BrokerThread) -> int:
    return b.port_of("stream")


@contextlib.asynccontextmanager
async def _producer(b: BrokerThread) -> AsyncIterator[Producer]:
    async with Producer("127.0.0.1", port=_port(b), **LOGIN) as p:
        yield p


async def _read(
    b: BrokerThread, stream: str, spec: ConsumerOffsetSpecification, n: int
) -> list[tuple[int, bytes]]:
    got: list[tuple[int, bytes]] = []
    done = asyncio.Event()

    async def on(msg: Any, ctx: MessageContext) -> None:
        got.append((ctx.offset, bytes(msg.body)))
        if len(got) >= n:
            done.set()

    c = Consumer("127.0.0.1", port=_port(b), **LOGIN)
    await c.start()
    try:
        await c.subscribe(stream, on, decoder=amqp_decoder, offset_specification=spec)
        await asyncio.wait_for(done.wait(), 10)
    finally:
        await c.close()
    return got[:n]


def _bodies(n: int, prefix: str = "m") -> list[bytes]:
    return [f"{prefix}{i}".encode() for i in range(n)]


async def test_publish_with_confirms_then_read_from_each_offset_spec(broker: BrokerThread) -> None:
    async with _producer(broker) as p:
        await p.create_stream("s")
        for body in _bodies(10):
            await p.send_wait("s", AMQPMessage(body=body))  # returns once confirmed
        await p.send_batch("s", [AMQPMessage(body=b) for b in _bodies(5, "b")])
    everything = list(enumerate(_bodies(10) + _bodies(5, "b")))
    first = ConsumerOffsetSpecification(OffsetType.FIRST)
    assert await _read(broker, "s", first, 15) == everything
    at = ConsumerOffsetSpecification(OffsetType.OFFSET, 12)
    assert await _read(broker, "s", at, 3) == everything[12:]
    since = ConsumerOffsetSpecification(OffsetType.TIMESTAMP, 0)
    assert await _read(broker, "s", since, 15) == everything
    # last: the last chunk, from its start (the batch went as one publish frame, stored as
    # one chunk, as RabbitMQ stores it)
    last = ConsumerOffsetSpecification(OffsetType.LAST)
    assert await _read(broker, "s", last, 5) == everything[10:]


async def test_next_gets_only_what_is_published_after(broker: BrokerThread) -> None:
    async with _producer(broker) as p:
        await p.create_stream("s")
        await p.send_wait("s", AMQPMessage(body=b"before"))
        reading = asyncio.ensure_future(
            _read(broker, "s", ConsumerOffsetSpecification(OffsetType.NEXT), 1)
        )
        await asyncio.sleep(0.5)  # the subscription is in place (a bound, not a threshold)
        await p.send_wait("s", AMQPMessage(body=b"after"))
        assert await reading == [(1, b"after")]


async def test_publisher_reference_deduplicates_by_publishing_id(broker: BrokerThread) -> None:
    async with _producer(broker) as p:
        await p.create_stream("s")
        batch = []
        for i, body in enumerate(_bodies(5)):
            m = AMQPMessage(body=body)
            m.publishing_id = i + 1  # explicit ids: the second send repeats them
            batch.append(m)
        await p.send_batch("s", batch, publisher_name="app-1")
        await p.send_batch("s", batch, publisher_name="app-1")  # the same ids again
    async with _producer(broker) as p:
        # a new producer with the same reference continues after the last stored id
        await p.send_wait("s", AMQPMessage(body=b"next"), publisher_name="app-1")
    got = await _read(broker, "s", ConsumerOffsetSpecification(OffsetType.FIRST), 6)
    assert [body for _, body in got] == [*_bodies(5), b"next"]


async def test_stored_offset_lets_a_consumer_resume(broker: BrokerThread) -> None:
    async with _producer(broker) as p:
        await p.create_stream("s")
        await p.send_batch("s", [AMQPMessage(body=b) for b in _bodies(10)])
    c = Consumer("127.0.0.1", port=_port(broker), **LOGIN)
    await c.start()
    try:
        with pytest.raises(OffsetNotFound):
            await c.query_offset("s", "reader")
        await c.store_offset("s", "reader", 6)
        for _ in range(50):  # store offset has no reply: the next query follows it
            with contextlib.suppress(Exception):
                if await c.query_offset("s", "reader") == 6:
                    break
            await asyncio.sleep(0.05)
        stored = await c.query_offset("s", "reader")
    finally:
        await c.close()
    assert stored == 6
    resumed = ConsumerOffsetSpecification(OffsetType.OFFSET, stored + 1)
    assert await _read(broker, "s", resumed, 3) == list(enumerate(_bodies(10)))[7:]


async def test_create_existing_delete_and_missing_streams(broker: BrokerThread) -> None:
    async with _producer(broker) as p:
        await p.create_stream("s", arguments={"max-length-bytes": 10_000_000, "max-age": "1h"})
        await p.create_stream("s", exists_ok=True)
        assert await p.stream_exists("s")
        await p.delete_stream("s")
        assert not await p.stream_exists("s")
        with pytest.raises(StreamDoesNotExist):
            await p.send_wait("gone", AMQPMessage(body=b"x"))


def test_the_same_stream_over_amqp091_and_the_stream_protocol(broker: BrokerThread) -> None:
    c = pika.BlockingConnection(pika.ConnectionParameters(broker.host, broker.port))
    try:
        ch = c.channel()
        ch.queue_declare("s", durable=True, arguments={"x-queue-type": "stream"})
        ch.confirm_delivery()
        ch.basic_publish("", "s", b"from-0-9-1")
    finally:
        c.close()

    async def stream_side() -> list[tuple[int, bytes]]:
        async with _producer(broker) as p:
            await p.send_wait("s", AMQPMessage(body=b"from-stream"))
        return await _read(broker, "s", ConsumerOffsetSpecification(OffsetType.FIRST), 2)

    assert asyncio.run(stream_side()) == [(0, b"from-0-9-1"), (1, b"from-stream")]
    c = pika.BlockingConnection(pika.ConnectionParameters(broker.host, broker.port))
    try:
        ch = c.channel()
        ch.basic_qos(prefetch_count=2)
        got = []
        for method, props, body in ch.consume("s", arguments={"x-stream-offset": "first"}):
            assert method is not None
            got.append((props.headers["x-stream-offset"], method.routing_key, body))
            if len(got) == 2:
                break
    finally:
        c.close()
    # a message published over the stream protocol has no routing key of its own: RabbitMQ
    # gives it the stream's name (the default exchange's route to the stream)
    assert got == [(0, "s", b"from-0-9-1"), (1, "s", b"from-stream")]


async def test_super_stream_create_route_partitions_and_delete(
    broker: BrokerThread,
) -> None:
    from rstream import RouteType, SuperStreamCreationOption, SuperStreamProducer

    option = SuperStreamCreationOption(n_partitions=0, binding_keys=["eu", "us"])

    async def region(m: AMQPMessage) -> str:
        return str(m.application_properties["region"])

    async with SuperStreamProducer(
        "127.0.0.1", port=_port(broker), **LOGIN, super_stream="orders",
        super_stream_creation_option=option, routing=RouteType.Key,
        routing_extractor=region,
    ) as p:  # fmt: skip
        # one key only: rstream's key routing keeps the first route it is given, whatever the
        # key (its Metadata.routes), so a second key would not tell anything about the broker
        for i in range(3):
            msg = AMQPMessage(body=f"o{i}".encode(), application_properties={"region": "us"})
            await p.send(msg)
        await asyncio.sleep(0.5)  # send() batches: its flush is timed (a bound, not a check)
    first = ConsumerOffsetSpecification(OffsetType.FIRST)
    assert await _read(broker, "orders-us", first, 3) == [(0, b"o0"), (1, b"o1"), (2, b"o2")]
    # the route of each key, and the partitions in order (what hash routing asks)
    c = Consumer("127.0.0.1", port=_port(broker), **LOGIN)
    await c.start()
    try:
        client = await c.default_client
        assert await client.partitions("orders") == ["orders-eu", "orders-us"]
        assert await client.route("us", "orders") == ["orders-us"]
        assert await client.route("eu", "orders") == ["orders-eu"]
        await client.delete_super_stream("orders")
        assert not await client.stream_exists("orders-eu")
    finally:
        await c.close()


async def test_the_stream_protocol_over_tls(broker_factory: BrokerFactory, tmp_path: Any) -> None:
    import ssl

    from tests.integration.test_config import _self_signed

    cert, key = _self_signed(tmp_path)
    b = broker_factory(
        f'[tls]\ncert_file = "{cert}"\nkey_file = "{key}"\nport = 0\nstream_port = 0\n',
        stream_port=0,
    )
    port = b.port_of("stream/ssl")
    ctx = ssl.create_default_context(cafile=str(cert))
    ctx.check_hostname = False
    async with Producer("127.0.0.1", port=port, ssl_context=ctx, **LOGIN) as p:
        await p.create_stream("secure")
        await p.send_wait("secure", AMQPMessage(body=b"over tls"))
    got: list[bytes] = []
    done = asyncio.Event()

    async def on(msg: Any, _ctx: MessageContext) -> None:
        got.append(bytes(msg.body))
        done.set()

    c = Consumer("127.0.0.1", port=port, ssl_context=ctx, **LOGIN)
    await c.start()
    try:
        first = ConsumerOffsetSpecification(OffsetType.FIRST)
        await c.subscribe("secure", on, decoder=amqp_decoder, offset_specification=first)
        await asyncio.wait_for(done.wait(), 10)
    finally:
        await c.close()
    assert got == [b"over tls"]
