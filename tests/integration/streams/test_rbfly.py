"""The RabbitMQ stream protocol over the wire with `rbfly` (the asyncio stream client, its
AMQP 1.0 codec in Cython): connect with its URI, create, publish with confirms (single and
batch publishers, frames up to RabbitMQ's stream frame max), de-duplication by publisher
reference and publishing id, every offset specification it has (first, last, next, an
offset, a timestamp, a stored reference), store and query offsets and a restarted consumer
resuming, credit, publishing with filter values, a stream deleted under a consumer, and
bodies of each AMQP type round-tripping, also to and from pika and rstream.

rbfly has no super streams and no single active consumer (0.10): those are rstream's tests.

rbfly's `write_offset()` without a value stores the offset of the message the consuming task
last got (a context variable), so it is called inside the loop that reads; its subscriptions
count credit in chunks and assert they never get a chunk beyond it (`MessageQueue.set`).
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import logging
import time
import uuid
from collections.abc import AsyncGenerator, AsyncIterator, Callable
from typing import Any, cast

import pika
import pytest
from rbfly.streams import (
    MessageFilter,
    Offset,
    PublisherBatchFast,
    PublisherBatchLimit,
    StreamsClient,
    get_message_ctx,
    stream_message_ctx,
    streams_client,
)
from rbfly.streams import (
    OffsetType as RbOffsetType,
)
from rbfly.streams.error import ProtocolError
from rbfly.types import Symbol
from rstream import (
    AMQPMessage,
    Consumer,
    ConsumerOffsetSpecification,
    MessageContext,
    OffsetType,
    Producer,
    amqp_decoder,
)

from ringmq.node import BrokerThread
from tests.integration.conftest import BrokerFactory

pytestmark = pytest.mark.integration

BOUND_S = 15.0
"""A bound against hanging (never a threshold)."""


# rbfly's Offset.FIRST... are typed as instance fields; these equal them
FIRST = Offset(RbOffsetType.FIRST)
LAST = Offset(RbOffsetType.LAST)
NEXT = Offset(RbOffsetType.NEXT)


@pytest.fixture
def broker(broker_factory: BrokerFactory) -> BrokerThread:
    return broker_factory(stream_port=0)


@contextlib.asynccontextmanager
async def _client(b: BrokerThread) -> AsyncIterator[StreamsClient]:
    client = streams_client(f"rabbitmq-stream://guest:guest@127.0.0.1:{b.port_of('stream')}/")
    try:
        yield client
    finally:
        protocol = await client.get_protocol(wait_connected=False) if client.connected else None
        await asyncio.wait_for(client.disconnect(), BOUND_S)
        # rbfly aborts its transport on the close answer, which closes the socket in a later
        # loop callback: wait for it, or the test's loop may close first and leak the socket
        if protocol is not None:
            await _until(lambda: not protocol.connected)


Got = list[tuple[int, Any]]


def _subscription(
    client: StreamsClient, stream: str, offset: Offset
) -> contextlib.aclosing[AsyncGenerator[Any, None]]:
    # subscribe() is an async generator (typed as an iterator): closed on leaving the block,
    # it unsubscribes then, not when garbage collected
    return contextlib.aclosing(
        cast(AsyncGenerator[Any, None], client.subscribe(stream, offset=offset))
    )


async def _read(
    client: StreamsClient, stream: str, offset: Offset, n: int, *, store_as: str | None = None
) -> Got:
    """The first `n` messages a subscription with `offset` gets: (offset, body); with
    `store_as`, the offset of the last one is stored under that reference (rbfly's
    `write_offset`, from the message context of this task)."""
    got: Got = []

    async def consume() -> None:
        async with _subscription(client, stream, offset) as messages:
            async for body in messages:
                got.append((get_message_ctx().stream_offset, body))
                if len(got) == n:
                    if store_as is not None:
                        await client.write_offset(stream, store_as)
                    return

    await asyncio.wait_for(consume(), BOUND_S)
    return got


async def _until(pred: Callable[[], bool]) -> None:
    async with asyncio.timeout(BOUND_S):
        while not pred():  # noqa: ASYNC110 - polls the client's state, which has no event
            await asyncio.sleep(0.01)


async def _subscribed(client: StreamsClient) -> None:
    """Until a subscription of `client` is asked of the broker: rbfly writes the subscribe
    frame right after it notes the subscription, so what this connection sends next reaches
    the broker after it."""
    protocol = await client.get_protocol()
    await _until(lambda: len(protocol._subscribers) > 0)


async def _query_offset(client: StreamsClient, stream: str, reference: str) -> int:
    # store offset has no answer: a query on the same connection comes after it
    protocol = await client.get_protocol()
    return await protocol.query_offset(stream, reference)


def _bodies(n: int, prefix: str = "m") -> list[bytes]:
    return [f"{prefix}{i}".encode() for i in range(n)]


# one body of each kind rbfly encodes: bytes as a data section, the rest as an amqp-value
# (short and long strings and binaries, maps and lists of every scalar)
BODIES: list[Any] = [
    b"bytes",
    b"\x00\xff" * 200,
    "a string",
    "long " * 100,
    {"k": "v", "n": 1, "nested": {"l": [1, 2.5, None, True]}},
    ["a", -1, 2**40, 2**63 + 1, b"bin"],
    42,
    -(2**40),
    1.5,
    None,
    True,
    False,
    uuid.UUID(int=5),
    datetime.datetime(2024, 1, 2, 3, 4, 5, 678000, tzinfo=datetime.UTC),
    Symbol("sym"),
]


async def test_publish_with_confirms_and_every_amqp_body_round_trips(broker: BrokerThread) -> None:
    async with _client(broker) as client:
        await client.create_stream("s")
        await client.create_stream("s")  # exists: rbfly ignores the answer (code 5)
        async with client.publisher("s") as p:
            for body in BODIES:
                await p.send(body)  # returns once the broker confirmed it
            await p.send(stream_message_ctx(b"props", app_properties={"a": "b", "n": 3}))
        props: list[dict[str, Any]] = []

        async def with_props() -> Got:
            got: Got = []
            async with _subscription(client, "s", FIRST) as it:
                async for body in it:
                    got.append((get_message_ctx().stream_offset, body))
                    props.append(get_message_ctx().app_properties)
                    if len(got) == len(BODIES) + 1:
                        return got
            return got

        got = await asyncio.wait_for(with_props(), BOUND_S)
    assert got == list(enumerate([*BODIES, b"props"]))
    assert props[-1] == {"a": "b", "n": 3}
    assert all(p == {} for p in props[:-1])


async def test_batch_publishers_over_several_frames_and_many_chunks(
    broker: BrokerThread, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO)
    big = [bytes([i % 251]) * 10_000 for i in range(300)]  # 3 MB: several publish frames
    async with _client(broker) as client:
        await client.create_stream("s")
        async with client.publisher("s", cls=PublisherBatchFast) as fast:
            for body in big:
                fast.batch(body)
            await fast.flush()  # returns once every message is confirmed
        async with client.publisher("s", cls=PublisherBatchLimit) as limited:

            async def feed() -> None:
                for i in range(10):
                    await limited.batch(i, max_len=3)  # waits for a flush every 3

            feeding = asyncio.ensure_future(feed())
            async with asyncio.timeout(BOUND_S):
                while not feeding.done():
                    await limited.flush()
                    await asyncio.sleep(0.01)
            await feeding
            await limited.flush()
        # one message per publish: more chunks than rbfly's credit (128) and queue (256)
        async with client.publisher("s") as single:
            for i in range(600):
                await single.send(i)
        got = await _read(client, "s", FIRST, 910)
        # one connection throughout: a chunk beyond the credit fails rbfly's assertion in
        # its data_received, which closes the connection (rbfly would reconnect and go on)
        assert "connection is closed" not in caplog.text
        assert [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR] == []
    assert got == list(enumerate([*big, *range(10), *range(600)]))


async def test_a_consumer_that_does_not_read_gets_no_chunk_beyond_its_credit(
    broker_factory: BrokerFactory, caplog: pytest.LogCaptureFixture
) -> None:
    # rbfly gives 128 chunks of credit, renews it per chunk while fewer than 256 messages
    # wait in its queue, and asserts a chunk never comes without credit (which would close
    # its connection): a consumer that stops reading holds at most 256 + 127 messages here
    caplog.set_level(logging.INFO)
    # confirmed once written: 600 publishes one by one without an fsync each
    broker = broker_factory('[server]\nstream_confirm = "written"\n', stream_port=0)
    async with _client(broker) as client:
        await client.create_stream("s")
        async with client.publisher("s") as p:
            for i in range(600):
                await p.send(i)  # confirmed before the next is sent: one chunk each
        got: list[Any] = []
        async with _subscription(client, "s", FIRST) as it:
            async for body in it:
                got.append(body)
                if len(got) == 1:
                    (sub,) = [info.subscriber for _, info in client._subscribers.items()]
                    queue = sub.queue
                    await _until(lambda: len(queue.data) >= 382)  # noqa: B023 - awaited here
                    await asyncio.sleep(0.5)  # room for a chunk beyond the credit
                    # the queue stopped renewing at 256 (255 or 256 more than the one read,
                    # as the read raced the deliveries), then at most the 128 it had given
                    assert len(queue.data) <= 256 + 127
                if len(got) == 600:
                    break
        assert "connection is closed" not in caplog.text
        assert [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR] == []
    assert got == list(range(600))


async def test_a_message_as_large_as_rabbitmqs_stream_frame_max(broker: BrokerThread) -> None:
    # RabbitMQ's stream.frame_max is 1 MiB; rbfly encodes a publish frame up to the frame max
    # the broker's Tune gave, and refuses a message that does not fit (ValueError)
    body = b"x" * 1_000_000
    async with _client(broker) as client:
        await client.create_stream("s")
        async with client.publisher("s") as p:
            await p.send(body)
            await p.send(b"small")
        assert (await client.get_protocol()).frame_size == 1_048_576
        got = await _read(client, "s", FIRST, 2)
    assert got == [(0, body), (1, b"small")]


async def test_first_last_offset_and_timestamp_specifications(broker: BrokerThread) -> None:
    async with _client(broker) as client:
        await client.create_stream("s")
        async with client.publisher("s") as p:
            for body in _bodies(5):
                await p.send(body)
        await asyncio.sleep(0.05)  # chunk stamps are in ms: the next ones are later
        since = time.time()
        await asyncio.sleep(0.05)
        async with client.publisher("s", cls=PublisherBatchFast) as batch:
            for body in _bodies(4, "b"):
                batch.batch(body)
            await batch.flush()  # one publish frame: one chunk
        everything = list(enumerate(_bodies(5) + _bodies(4, "b")))
        assert await _read(client, "s", FIRST, 9) == everything
        # last: the last chunk from its start (the batch)
        assert await _read(client, "s", LAST, 4) == everything[5:]
        # an offset inside a chunk: rbfly drops the chunk's messages before it
        assert await _read(client, "s", Offset.offset(6), 3) == everything[6:]
        assert await _read(client, "s", Offset.offset(3), 2) == everything[3:5]
        # a timestamp: from the first chunk stamped at or after it
        assert await _read(client, "s", Offset.timestamp(since), 4) == everything[5:]
        assert await _read(client, "s", Offset.timestamp(0), 9) == everything


def _pika_publish_apart(b: BrokerThread, stream: str, n: int) -> list[float]:
    """`n` messages over AMQP 0-9-1, each confirmed, in different milliseconds; returns a
    time taken between each two (after one was confirmed, before the next is sent)."""
    c = pika.BlockingConnection(pika.ConnectionParameters(b.host, b.port))
    between: list[float] = []
    try:
        ch = c.channel()
        ch.queue_declare(stream, durable=True, arguments={"x-queue-type": "stream"})
        ch.confirm_delivery()
        for i in range(n):
            if i:
                time.sleep(0.02)  # the stamps are in ms: the next one is a later one
                between.append(time.time())
                time.sleep(0.02)
            ch.basic_publish("", stream, f"p{i}".encode())
    finally:
        c.close()
    return between


async def test_each_message_has_its_own_chunks_timestamp(broker: BrokerThread) -> None:
    # messages published over AMQP 0-9-1, one chunk each, stamped when stored: the timestamp
    # rbfly gives a message is that of its own chunk, and subscribing from it starts there
    between = await asyncio.to_thread(_pika_publish_apart, broker, "s", 3)
    async with _client(broker) as client:
        stamps: list[tuple[int, float]] = []

        async def consume() -> None:
            async with _subscription(client, "s", FIRST) as it:
                async for _body in it:
                    ctx = get_message_ctx()
                    stamps.append((ctx.stream_offset, ctx.stream_timestamp))
                    if len(stamps) == 3:
                        return

        await asyncio.wait_for(consume(), BOUND_S)
        assert [o for o, _ in stamps] == [0, 1, 2]
        # each stamp is after the time taken before its message was sent
        assert stamps[0][1] < between[0] < stamps[1][1] < between[1] < stamps[2][1]
        for offset, stamp in stamps:
            got = await _read(client, "s", Offset.timestamp(stamp), 1)
            assert got == [(offset, f"p{offset}".encode())]


async def test_next_and_an_offset_past_the_end_wait_for_new_messages(broker: BrokerThread) -> None:
    async with _client(broker) as client:
        await client.create_stream("s")
        async with client.publisher("s") as p:
            await p.send(b"before")
            reading = asyncio.ensure_future(_read(client, "s", NEXT, 1))
            await _subscribed(client)
            await p.send(b"after")
            assert await reading == [(1, b"after")]
            ahead = asyncio.ensure_future(_read(client, "s", Offset.offset(3), 1))
            await _subscribed(client)
            await p.send(b"two")
            await p.send(b"three")
            assert await ahead == [(3, b"three")]
        # last on an empty stream: from the next message on
        await client.create_stream("empty")
        async with client.publisher("empty") as p:
            reading = asyncio.ensure_future(_read(client, "empty", LAST, 1))
            await _subscribed(client)
            await p.send(b"first")
            assert await reading == [(0, b"first")]


async def test_publisher_reference_deduplicates_by_publishing_id(broker: BrokerThread) -> None:
    async with _client(broker) as client:
        await client.create_stream("s")
        async with client.publisher("s", name="app-1") as p:
            assert p.message_id == 1  # nothing stored for the reference: rbfly starts at 1
            for i, body in enumerate(_bodies(3), start=1):
                await p.send(stream_message_ctx(body, publish_id=i))
                await p.send(stream_message_ctx(body, publish_id=i))  # confirmed, not stored
        async with client.publisher("s", name="app-1", cls=PublisherBatchFast) as batch:
            # the broker's last publishing id for the reference, plus one
            assert batch.message_id == 4
            for i in range(2, 6):  # 2 and 3 again, then 4 and 5
                batch.batch(stream_message_ctx(f"b{i}".encode(), publish_id=i))
            await batch.flush()
        async with client.publisher("s", name="app-1") as p:
            assert p.message_id == 6
            await p.send(b"next")  # gets publishing id 6
        async with client.publisher("s", name="app-2") as other:
            await other.send(stream_message_ctx(b"other", publish_id=1))  # its own sequence
        got = await _read(client, "s", FIRST, 7)
    assert [body for _, body in got] == [*_bodies(3), b"b4", b"b5", b"next", b"other"]


async def test_publishing_with_filter_values_and_a_filtered_subscription(
    broker: BrokerThread,
) -> None:
    # with a filter extractor rbfly publishes version 2 frames (a filter value per message);
    # ringmq stores them (no Bloom filter: every chunk is delivered) and rbfly's subscription
    # filter keeps the matching messages
    def region(msg: Any) -> str:
        return str(msg.app_properties["region"])

    async with _client(broker) as client:
        await client.create_stream("s")
        async with asyncio.timeout(BOUND_S), client.publisher("s", filter_extract=region) as p:
            for i, r in enumerate(["eu", "us", "eu", "us"]):  # each confirmed
                await p.send(stream_message_ctx(f"{r}{i}".encode(), app_properties={"region": r}))
        assert await _read(client, "s", FIRST, 4) == [
            (0, b"eu0"), (1, b"us1"), (2, b"eu2"), (3, b"us3")
        ]  # fmt: skip
        got: Got = []

        async def consume() -> None:
            only_us = MessageFilter(region, {"us"})
            subscription = client.subscribe("s", offset=FIRST, filter=only_us)
            gen = cast(AsyncGenerator[Any, None], subscription)
            async with contextlib.aclosing(gen) as it:
                async for body in it:
                    got.append((get_message_ctx().stream_offset, body))
                    if len(got) == 2:
                        return

        await asyncio.wait_for(consume(), BOUND_S)
    assert got == [(1, b"us1"), (3, b"us3")]


async def test_stored_offsets_and_a_restarted_consumer_resumes(broker: BrokerThread) -> None:
    async with _client(broker) as client:
        await client.create_stream("s")
        async with client.publisher("s", cls=PublisherBatchFast) as p:
            for body in _bodies(10):
                p.batch(body)
            await p.flush()
        with pytest.raises(ProtocolError) as none:
            await _query_offset(client, "s", "reader")
        assert none.value.code == 0x13  # no offset
        # a reference with nothing stored reads from the start (rbfly asks, gets "no offset")
        first = await _read(client, "s", Offset.reference("reader"), 4, store_as="reader")
        assert first == list(enumerate(_bodies(10)))[:4]
        assert await _query_offset(client, "s", "reader") == 3
    # a new client (a restarted consumer) resumes after the stored offset
    async with _client(broker) as client:
        again = await _read(client, "s", Offset.reference("reader"), 3, store_as="reader")
        assert again == list(enumerate(_bodies(10)))[4:7]
        assert await _query_offset(client, "s", "reader") == 6
        await client.write_offset("s", "elsewhere", 8)  # an explicit value
        assert await _query_offset(client, "s", "elsewhere") == 8
        assert await _query_offset(client, "s", "reader") == 6
    async with _client(broker) as client:
        rest = await _read(client, "s", Offset.reference("elsewhere"), 1)
    assert rest == [(9, b"m9")]


async def test_a_stream_deleted_under_a_consumer(
    broker: BrokerThread, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="rbfly.streams.protocol")
    async with _client(broker) as client, _client(broker) as admin:
        await client.create_stream("s")
        async with client.publisher("s") as p:
            for body in _bodies(3):
                await p.send(body)
        got: list[Any] = []

        async def consume() -> None:
            async with _subscription(client, "s", FIRST) as it:
                async for body in it:
                    got.append(body)  # noqa: PERF401 - read while it runs

        consuming = asyncio.ensure_future(consume())
        await _until(lambda: len(got) == 3)
        await admin.delete_stream("s")
        # the broker tells the consumer's connection with a metadata update (key 0x0010),
        # which rbfly only logs
        await _until(lambda: "key=0x0010" in caplog.text)
        consuming.cancel()
        # leaving, rbfly unsubscribes: the subscription is gone already (as on RabbitMQ)
        with pytest.raises(ProtocolError) as gone:
            await consuming
        assert gone.value.code == 0x04  # subscription id does not exist
        assert got == _bodies(3)
        # the connection stays usable: the stream again, new and empty
        await client.create_stream("s")
        async with client.publisher("s") as p:
            await p.send(b"again")
        assert await _read(client, "s", FIRST, 1) == [(0, b"again")]


def _pika_publish(b: BrokerThread, stream: str, body: bytes, headers: dict[str, Any]) -> None:
    c = pika.BlockingConnection(pika.ConnectionParameters(b.host, b.port))
    try:
        ch = c.channel()
        ch.confirm_delivery()
        props = pika.BasicProperties(headers=headers, message_id="m-1")
        ch.basic_publish("", stream, body, props)
    finally:
        c.close()


def _pika_read(b: BrokerThread, stream: str, n: int) -> list[tuple[dict[str, Any], bytes]]:
    c = pika.BlockingConnection(pika.ConnectionParameters(b.host, b.port))
    got: list[tuple[dict[str, Any], bytes]] = []
    try:
        ch = c.channel()
        ch.basic_qos(prefetch_count=n)
        for _method, props, body in ch.consume(
            stream, arguments={"x-stream-offset": "first"}, inactivity_timeout=BOUND_S
        ):
            assert body is not None, "nothing delivered"
            got.append((props.headers, body))
            if len(got) == n:
                break
    finally:
        c.close()
    return got


async def test_bodies_round_trip_with_pika_and_rstream(broker: BrokerThread) -> None:
    login: dict[str, Any] = {"username": "guest", "password": "guest"}
    port = broker.port_of("stream")
    async with _client(broker) as client:
        await client.create_stream("s")
        async with client.publisher("s") as p:
            await p.send(stream_message_ctx(b"from-rbfly", app_properties={"k": "v", "n": 7}))
    # AMQP 0-9-1 headers: the message's application properties, as RabbitMQ converts them
    await asyncio.to_thread(_pika_publish, broker, "s", b"from-pika", {"h": "x", "n": 5})
    async with Producer("127.0.0.1", port=port, **login) as producer:
        msg = AMQPMessage(body=b"from-rstream", application_properties={"r": "s"})
        await producer.send_wait("s", msg)

    got: list[tuple[int, bytes, dict[Any, Any]]] = []
    done = asyncio.Event()

    async def on(msg: Any, ctx: MessageContext) -> None:
        got.append((ctx.offset, bytes(msg.body), dict(msg.application_properties or {})))
        if len(got) == 3:
            done.set()

    consumer = Consumer("127.0.0.1", port=port, **login)
    await consumer.start()
    try:
        first = ConsumerOffsetSpecification(OffsetType.FIRST)
        await consumer.subscribe("s", on, decoder=amqp_decoder, offset_specification=first)
        await asyncio.wait_for(done.wait(), BOUND_S)
    finally:
        await consumer.close()
    # rstream's decoder gives an AMQP string as bytes
    assert got == [
        (0, b"from-rbfly", {b"k": b"v", b"n": 7}),
        (1, b"from-pika", {b"h": b"x", b"n": 5}),
        (2, b"from-rstream", {b"r": b"s"}),
    ]
    # and pika, consuming with x-stream-offset: application properties as headers
    assert await asyncio.to_thread(_pika_read, broker, "s", 3) == [
        ({"k": "v", "n": 7, "x-stream-offset": 0}, b"from-rbfly"),
        ({"h": "x", "n": 5, "x-stream-offset": 1}, b"from-pika"),
        ({"r": "s", "x-stream-offset": 2}, b"from-rstream"),
    ]
    async with _client(broker) as client:
        read: list[tuple[int, Any, dict[str, Any], Any]] = []

        async def consume() -> None:
            async with _subscription(client, "s", FIRST) as it:
                async for body in it:
                    ctx = get_message_ctx()
                    read.append((ctx.stream_offset, body, ctx.app_properties, ctx.properties))
                    if len(read) == 3:
                        return

        await asyncio.wait_for(consume(), BOUND_S)
    assert [(o, body, props) for o, body, props, _ in read] == [
        (0, b"from-rbfly", {"k": "v", "n": 7}),
        (1, b"from-pika", {"h": "x", "n": 5}),
        (2, b"from-rstream", {"r": "s"}),
    ]
    assert read[1][3].message_id == "m-1"
