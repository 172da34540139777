"""The benchmark client's hand-encoded frames, checked against pamqp (no broker needed)."""

from __future__ import annotations

import asyncio
import struct
from typing import Any

import pytest
from benchmarks import amqp_client
from benchmarks import amqp_wire as wire
from benchmarks.amqp_load import percentiles_ms
from hypothesis import given
from hypothesis import strategies as st
from pamqp import body as pbody
from pamqp import commands, frame
from pamqp import header as pheader


def _frames(data: bytes) -> list[tuple[int, Any]]:
    out = []
    while data:
        used, channel, value = frame.unmarshal(data)
        out.append((channel, value))
        data = data[used:]
    return out


def _one(data: bytes) -> tuple[int, Any]:
    (only,) = _frames(data)
    return only


def test_connection_methods_decode_as_pamqp_reads_them() -> None:
    _, start_ok = _one(wire.connection_start_ok("guest", "secret"))
    assert isinstance(start_ok, commands.Connection.StartOk)
    assert start_ok.mechanism == "PLAIN"
    assert start_ok.response == "\x00guest\x00secret"
    capabilities = start_ok.client_properties["capabilities"]
    assert isinstance(capabilities, dict)
    assert capabilities["publisher_confirms"] is True
    _, tune_ok = _one(wire.connection_tune_ok(2047, 131072, 0))
    assert (tune_ok.channel_max, tune_ok.frame_max, tune_ok.heartbeat) == (2047, 131072, 0)
    _, open_ = _one(wire.connection_open("/vh"))
    assert isinstance(open_, commands.Connection.Open)
    assert open_.virtual_host == "/vh"


def test_queue_declare_carries_flags_and_arguments() -> None:
    data = wire.queue_declare(
        3, "q1", durable=True, arguments={"x-max-length": 1000, "x-overflow": "drop-head"}
    )
    channel, decl = _one(data)
    assert channel == 3
    assert isinstance(decl, commands.Queue.Declare)
    assert (decl.queue, decl.durable, decl.passive, decl.exclusive) == ("q1", True, False, False)
    assert decl.arguments == {"x-max-length": 1000, "x-overflow": "drop-head"}
    _, passive = _one(wire.queue_declare(1, "q1", passive=True))
    assert passive.passive is True
    assert passive.durable is False


def test_basic_methods_decode_as_pamqp_reads_them() -> None:
    _, qos = _one(wire.basic_qos(1, 1000))
    assert (qos.prefetch_count, qos.global_) == (1000, False)
    _, consume = _one(wire.basic_consume(2, "q", "tag-1"))
    assert (consume.queue, consume.consumer_tag, consume.no_ack) == ("q", "tag-1", False)
    _, ack = _one(wire.basic_ack(1, 2**40, multiple=True))
    assert (ack.delivery_tag, ack.multiple) == (2**40, True)
    _, reject = _one(wire.basic_reject(1, 7))
    assert (reject.delivery_tag, reject.requeue) == (7, True)
    _, bind = _one(wire.queue_bind(1, "q", "x", "rk"))
    assert (bind.queue, bind.exchange, bind.routing_key) == ("q", "x", "rk")
    _, xdecl = _one(wire.exchange_declare(1, "x", "fanout"))
    assert (xdecl.exchange, xdecl.exchange_type) == ("x", "fanout")


@given(
    body=st.binary(min_size=0, max_size=3000),
    persistent=st.booleans(),
    frame_max=st.sampled_from([4096, 131072]),
)
def test_publish_template_is_method_header_and_split_body(
    body: bytes, persistent: bool, frame_max: int
) -> None:
    template = wire.publish(5, "ex", "rk", body, persistent=persistent, frame_max=frame_max)
    frames = _frames(template.frames)
    channels = {ch for ch, _ in frames}
    assert channels == {5}
    pub, head, *bodies = (value for _, value in frames)
    assert isinstance(pub, commands.Basic.Publish)
    assert (pub.exchange, pub.routing_key, pub.mandatory) == ("ex", "rk", False)
    assert isinstance(head, pheader.ContentHeader)
    assert head.body_size == len(body)
    assert head.properties.delivery_mode == (2 if persistent else None)
    assert all(isinstance(b, pbody.ContentBody) for b in bodies)
    assert all(len(b.value) <= frame_max - wire.FRAME_OVERHEAD for b in bodies)
    assert b"".join(b.value for b in bodies) == body
    # The stamp offset points at the body's first byte (used by the latency scenario).
    if body:
        assert template.frames[template.body_offset : template.body_offset + 1] == body[:1]


def test_frame_reader_splits_byte_by_byte_and_rejects_bad_frame_end() -> None:
    stream = wire.basic_ack(1, 9) + wire.channel_open(2) + b"\x01\x00"
    reader = wire.FrameReader()
    got = []
    for i in range(len(stream)):
        reader.feed(stream[i : i + 1])
        got.extend(reader.frames())
    assert [(t, ch, wire.method_id(p)) for t, ch, p in got] == [(1, 1, (60, 80)), (1, 2, (20, 10))]
    bad = bytearray(wire.channel_open(1))
    bad[-1] = 0x00
    reader = wire.FrameReader()
    reader.feed(bytes(bad))
    with pytest.raises(wire.WireError):
        reader.frames()


def _payload(method: Any) -> bytes:
    data: bytes = frame.marshal(method, 1)
    return data[wire.FRAME_HEADER_SIZE : -1]


def test_decoders_read_what_pamqp_writes() -> None:
    ok = _payload(commands.Queue.DeclareOk(queue="q9", message_count=12, consumer_count=3))
    assert wire.decode_queue_declare_ok(ok) == ("q9", 12, 3)
    get_ok = _payload(
        commands.Basic.GetOk(
            delivery_tag=44, redelivered=True, exchange="", routing_key="q", message_count=99
        )
    )
    assert wire.decode_get_ok(get_ok) == (44, 99)
    close = commands.Channel.Close(
        reply_code=406, reply_text="PRECONDITION_FAILED", class_id=50, method_id=10
    )
    assert wire.decode_close(_payload(close)) == (406, "PRECONDITION_FAILED", 50, 10)
    ack = _payload(commands.Basic.Nack(delivery_tag=5, multiple=True, requeue=False))
    assert wire.decode_basic_ack(ack) == (5, True)


def test_confirms_settle_multiple_single_and_out_of_order() -> None:
    async def scenario() -> amqp_client.Confirms:
        tracker = amqp_client.Confirms()
        tracker.sent(5, now_ns=1_000)
        tracker.settle(3, True, False, now_ns=3_000)  # tags 1..3
        tracker.settle(5, False, True, now_ns=4_000)  # nack of 5 before 4
        assert tracker.in_flight == 1
        tracker.settle(5, True, False, now_ns=5_000)  # 4 acked, 5 not counted twice
        return tracker

    tracker = asyncio.run(scenario())
    assert (tracker.confirmed, tracker.nacked, tracker.in_flight) == (4, 1, 0)
    assert sorted(tracker.latencies_ns) == [2_000, 2_000, 2_000, 3_000, 4_000]


def test_percentiles_are_nearest_rank() -> None:
    samples = [i * 1_000_000 for i in range(1, 101)]  # 1..100 ms
    got = percentiles_ms(samples)
    assert (got["p50_ms"], got["p99_ms"], got["max_ms"]) == (50.0, 99.0, 100.0)
    assert percentiles_ms([]) == {}


def test_amqp_url_parsing() -> None:
    url = amqp_client.AMQPURL.parse("amqp://u%40x:p@127.0.0.1:5673/%2Fv")
    assert (url.host, url.port, url.user, url.password, url.vhost) == (
        "127.0.0.1",
        5673,
        "u@x",
        "p",
        "/v",
    )
    assert amqp_client.AMQPURL.parse("amqp://127.0.0.1").vhost == "/"
    with pytest.raises(ValueError, match="amqp://"):
        amqp_client.AMQPURL.parse("amqps://127.0.0.1")
    assert struct.calcsize(">BHI") == wire.FRAME_HEADER_SIZE


class _FakeTransport:
    def __init__(self) -> None:
        self.written: list[bytes] = []

    def write(self, data: bytes) -> None:
        self.written.append(data)

    def set_write_buffer_limits(self, high: int) -> None:
        pass


def test_consumer_acks_with_multiple_every_n_and_at_the_target() -> None:
    async def scenario() -> tuple[amqp_client.Consumer, list[bytes]]:
        client = amqp_client.AMQPClient()
        transport = _FakeTransport()
        client.connection_made(transport)  # type: ignore[arg-type]
        consumer = amqp_client.Consumer(channel=1, target=7, ack_every=3)
        client.add_consumer(consumer)
        stream = b""
        for tag in range(1, 8):
            deliver = commands.Basic.Deliver(
                consumer_tag="c", delivery_tag=tag, exchange="", routing_key="q"
            )
            stream += frame.marshal(deliver, 1)
            stream += frame.marshal(pheader.ContentHeader(body_size=2), 1)
            stream += frame.marshal(pbody.ContentBody(b"hi"), 1)
        for i in range(0, len(stream), 5):  # arbitrary read boundaries
            client.data_received(stream[i : i + 5])
        assert consumer.done is not None
        assert consumer.done.done()
        return consumer, transport.written

    consumer, written = asyncio.run(scenario())
    assert consumer.received == 7
    acks = [_one(w)[1] for w in written]
    assert [(a.delivery_tag, a.multiple) for a in acks] == [(3, True), (6, True), (7, True)]
