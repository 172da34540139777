"""Chunks kept as published: a stream-protocol publish frame of N messages is stored as one
chunk and delivered to a stream-protocol consumer with the same entry bytes and a valid CRC-32;
messages published over AMQP 0-9-1 in between land in chunks every consumer reads (a stream
consumer gets them gathered into chunks, a 0-9-1 consumer gets the stream-published ones
decoded; gathered only within one millisecond's stamp, a chunk's timestamp being each of its
messages'). Stream statistics (first and committed chunk ids) follow the chunks. The consumer
here is a bare socket speaking the protocol with rstream's own frame codec, so the delivered
chunk's bytes are seen as they came."""

from __future__ import annotations

import asyncio
import zlib
from typing import Any

import pika
import pytest
from rstream import AMQPMessage, OffsetType, Producer, amqp_decoder, schema
from rstream.encoding import decode_frame, encode_frame

from ringmq.node import BrokerThread
from ringmq.streamproto import FrameReader
from tests.integration.conftest import BrokerFactory

pytestmark = pytest.mark.integration

LOGIN: dict[str, Any] = {"username": "guest", "password": "guest"}
STATS_RESPONSE = 28 | 0x8000


@pytest.fixture
def broker(broker_factory: BrokerFactory) -> BrokerThread:
    return broker_factory(stream_port=0)


class Wire:
    """One stream-protocol connection, frames in and out with rstream's codec."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.r, self.w = reader, writer
        self.frames = FrameReader(1 << 24)
        self.got: list[Any] = []

    @classmethod
    async def open(cls, port: int) -> Wire:
        wire = cls(*await asyncio.open_connection("127.0.0.1", port))
        await wire.call(schema.PeerProperties(1, []), schema.PeerPropertiesResponse)
        await wire.call(schema.SaslHandshake(2), schema.SaslHandshakeResponse)
        auth = schema.SaslAuthenticate(3, "PLAIN", b"\x00guest\x00guest")
        await wire.call(auth, schema.Tune)
        wire.send(schema.Tune(1 << 20, 0))
        await wire.call(schema.Open(4, "/"), schema.OpenResponse)
        return wire

    def send(self, frame: Any) -> None:
        self.w.write(encode_frame(frame))

    async def next(self) -> Any:
        while not self.got:
            data = await asyncio.wait_for(self.r.read(1 << 16), 10)
            assert data, "the broker closed the connection"
            self.frames.feed(data)
            while (f := self.frames.next_frame()) is not None:
                key, version, content = f
                if key == STATS_RESPONSE:  # not in rstream's codec: kept raw
                    self.got.append((key, content))
                    continue
                head = key.to_bytes(2, "big") + version.to_bytes(2, "big")
                self.got.append(decode_frame(head + content))
        return self.got.pop(0)

    async def call(self, frame: Any, answer: type) -> Any:
        self.send(frame)
        while not isinstance(got := await self.next(), answer):
            pass
        return got

    async def stats(self, stream: str) -> tuple[int, dict[str, int]]:
        """StreamStats (key 28): the response code and the statistics."""
        name = stream.encode()
        body = (7).to_bytes(4, "big") + len(name).to_bytes(2, "big") + name
        self.w.write((len(body) + 4).to_bytes(4, "big") + b"\x00\x1c\x00\x01" + body)
        while not isinstance(got := await self.next(), tuple):
            pass
        content = got[1]
        assert int.from_bytes(content[:4], "big") == 7  # the correlation id
        code = int.from_bytes(content[4:6], "big")
        n, pos, out = int.from_bytes(content[6:10], "big"), 10, {}
        for _ in range(n):
            k = int.from_bytes(content[pos : pos + 2], "big")
            key = content[pos + 2 : pos + 2 + k].decode()
            out[key] = int.from_bytes(content[pos + 2 + k : pos + 10 + k], "big", signed=True)
            pos += 10 + k
        return code, out

    async def close(self) -> None:
        self.w.close()
        await self.w.wait_closed()


def _entries(data: bytes) -> list[bytes]:
    # A chunk's simple entries ([u32 size][message]) in order.
    out, pos = [], 0
    while pos < len(data):
        n = int.from_bytes(data[pos : pos + 4], "big")
        out.append(data[pos + 4 : pos + 4 + n])
        pos += 4 + n
    return out


async def test_a_published_chunk_is_delivered_as_it_arrived(broker: BrokerThread) -> None:
    port = broker.port_of("stream")
    sent = [AMQPMessage(body=f"r{i}".encode()) for i in range(20)]
    async with Producer("127.0.0.1", port=port, **LOGIN) as p:
        await p.create_stream("s")
        done = asyncio.Event()
        confirmed: list[object] = []

        def on_confirm(c: object) -> None:
            confirmed.append(c)
            if len(confirmed) == len(sent):
                done.set()

        await p.send_batch("s", sent, on_publish_confirm=on_confirm)  # one frame of 20
        await asyncio.wait_for(done.wait(), 10)
    # three 0-9-1 publishes after it, each its own publish
    c = pika.BlockingConnection(pika.ConnectionParameters(broker.host, broker.port))
    ch = c.channel()
    ch.confirm_delivery()
    for i in range(3):
        ch.basic_publish("", "s", f"p{i}".encode())
    wire = await Wire.open(port)
    try:
        first = schema.OffsetSpec(OffsetType.FIRST)
        sub = await wire.call(schema.Subscribe(9, 1, "s", first, 10, []), schema.SubscribeResponse)
        assert sub.response_code == 1
        chunks = [await wire.next()]
        while sum(d.num_entries for d in chunks) < 23:
            chunks.append(await wire.next())
    finally:
        await wire.close()
    assert all(isinstance(d, schema.Deliver) for d in chunks)
    one, *rest = chunks
    # the stream-published chunk: its entries byte for byte as rstream encoded them
    assert (one.chunk_first_offset, one.num_entries, one.num_records) == (0, 20, 20)
    assert one.data == b"".join(len(bytes(m)).to_bytes(4, "big") + bytes(m) for m in sent)
    assert one.chunk_crc == zlib.crc32(one.data)
    # the 0-9-1 publishes, each confirmed before the next: gathered into a chunk while
    # stamped in the same millisecond, each chunk with its own valid CRC
    assert rest[0].chunk_first_offset == 20
    assert all(d.chunk_crc == zlib.crc32(d.data) for d in rest)
    assert [d.timestamp for d in rest] == sorted({d.timestamp for d in rest})
    entries = [e for d in rest for e in _entries(d.data)]
    assert [bytes(amqp_decoder(e).body) for e in entries] == [b"p0", b"p1", b"p2"]
    # and a 0-9-1 consumer reads both kinds, in order
    ch.basic_qos(prefetch_count=100)
    bodies: list[bytes] = []
    for _m, _p, body in ch.consume(
        "s", arguments={"x-stream-offset": "first"}, inactivity_timeout=10
    ):
        assert body is not None, "timed out"
        bodies.append(body)
        if len(bodies) == 23:
            break
    c.close()
    assert bodies == [f"r{i}".encode() for i in range(20)] + [b"p0", b"p1", b"p2"]


async def test_stream_stats_follow_the_chunks(broker: BrokerThread) -> None:
    port = broker.port_of("stream")
    wire = await Wire.open(port)
    try:
        assert (await wire.stats("nope"))[0] == 2  # stream does not exist
        async with Producer("127.0.0.1", port=port, **LOGIN) as p:
            await p.create_stream("s")
            empty = await wire.stats("s")
            confirmed: list[object] = []
            done = asyncio.Event()

            def on_confirm(c: object) -> None:
                confirmed.append(c)
                if len(confirmed) % 5 == 0:
                    done.set()

            # three frames of five, each confirmed before the next is sent (frames that
            # arrive together are one chunk): chunks at 0, 5 and 10
            for k in range(3):
                done.clear()
                batch = [AMQPMessage(body=b"%d" % k) for _ in range(5)]
                await p.send_batch("s", batch, on_publish_confirm=on_confirm)
                await asyncio.wait_for(done.wait(), 10)
        full = await wire.stats("s")
    finally:
        await wire.close()
    assert empty == (1, {"first_chunk_id": -1, "committed_chunk_id": -1})
    assert full == (1, {"first_chunk_id": 0, "committed_chunk_id": 10})
