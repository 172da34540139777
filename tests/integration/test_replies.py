"""RabbitMQ's exact replies as real clients see them (issue 16, section 2).

Each test pins one reply that a client library, or its own test suite, relies on; raw sockets
are used only where no client can express the frames.
"""

from __future__ import annotations

import importlib
import socket
from typing import Any

import aio_pika
import pika
import pika.exceptions
import pytest

from ringmq.amqp import spec
from ringmq.amqp.frames import (
    PROTOCOL_HEADER,
    Frame,
    FrameReader,
    MethodFrame,
    encode_content_frames,
    encode_method_frame,
)
from ringmq.node import BrokerThread

pytestmark = pytest.mark.integration


def connect(b: BrokerThread, **kw: object) -> pika.BlockingConnection:
    return pika.BlockingConnection(pika.ConnectionParameters(host=b.host, port=b.port, **kw))


def url(b: BrokerThread) -> str:
    return f"amqp://guest:guest@{b.host}:{b.port}/%2F"


py_amqp: Any = importlib.import_module("amqp")  # untyped; keep mypy strict elsewhere


class Raw:
    """A socket speaking AMQP with the project's codec, for orderings no client exposes."""

    def __init__(self, b: BrokerThread) -> None:
        self.sock = socket.create_connection((b.host, b.port), timeout=5)
        self.reader = FrameReader(0, expect_protocol_header=False)
        self.pending: list[Frame] = []
        self.sock.sendall(PROTOCOL_HEADER)
        self.expect(spec.ConnectionStart)
        caps = {"capabilities": {"consumer_cancel_notify": True, "publisher_confirms": True}}
        self.send(0, spec.ConnectionStartOk(caps, "PLAIN", b"\x00guest\x00guest", "en_US"))
        self.expect(spec.ConnectionTune)
        self.send(0, spec.ConnectionTuneOk(2047, 131072, 0))
        self.send(0, spec.ConnectionOpen("/"))
        self.expect(spec.ConnectionOpenOk)

    def send(self, channel: int, method: spec.Method) -> None:
        self.sock.sendall(encode_method_frame(channel, method))

    def publish(self, channel: int, method: spec.Method, props: bytes, body: bytes) -> None:
        self.sock.sendall(encode_content_frames(channel, method, props, body, 131072))

    def frame(self) -> Frame:
        while not self.pending:
            data = self.sock.recv(65536)
            if not data:
                raise ConnectionError("closed by the broker")
            self.reader.feed(data)
            while (f := self.reader.next_frame()) is not None:
                self.pending.append(f)
        return self.pending.pop(0)

    def method(self) -> spec.Method:
        """The next method frame's method (content frames are skipped)."""
        while True:
            f = self.frame()
            if isinstance(f, MethodFrame):
                return f.method

    def expect(self, kind: type) -> Any:
        got = self.method()
        assert isinstance(got, kind), got
        return got

    def close(self) -> None:
        self.sock.close()


# ---------------------------------------------------------------- 2.1 unbind of what is gone
def test_unbind_after_the_queue_or_exchange_is_gone_keeps_the_channel(
    broker: BrokerThread,
) -> None:
    with connect(broker) as conn:
        ch = conn.channel()
        ch.exchange_declare("src", exchange_type="fanout")
        ch.exchange_declare("dst", exchange_type="fanout")
        ch.exchange_bind(destination="dst", source="src")
        ch.queue_declare("q")
        ch.queue_bind("q", "src")
        ch.queue_delete("q")
        ch.queue_unbind("q", "src")
        ch.exchange_delete("dst")
        ch.exchange_unbind(destination="dst", source="src")
        ch.queue_declare("q2")
        ch.queue_unbind("q2", "never-declared")
        assert ch.is_open
        ch.queue_declare("q2", passive=True)  # the channel still answers


async def test_aio_pika_unbind_after_queue_delete(broker: BrokerThread) -> None:
    async with await aio_pika.connect(url(broker), timeout=10) as conn:
        ch = await conn.channel()
        ex = await ch.declare_exchange("aio_unbind", aio_pika.ExchangeType.DIRECT)
        q = await ch.declare_queue("aio_unbind_q")
        await q.bind(ex, routing_key="k")
        await q.delete()
        await q.unbind(ex, routing_key="k")  # aio-pika's RPC close does this
        assert not ch.is_closed


# ---------------------------------------------------------------- 2.2 channel_max
def test_channel_max_counts_open_channels_with_rabbitmqs_530(broker: BrokerThread) -> None:
    conn = connect(broker, channel_max=2)
    try:
        conn.channel(channel_number=5000)  # a number above channel_max is fine
        conn.channel(channel_number=7)
        with pytest.raises(pika.exceptions.ConnectionClosedByBroker) as exc:
            conn.channel(channel_number=9)
        assert exc.value.reply_code == 530
        assert exc.value.reply_text == (
            "NOT_ALLOWED - number of channels opened (2) has reached the negotiated channel_max (2)"
        )
    finally:
        if conn.is_open:
            conn.close()


# ---------------------------------------------------------------- 2.3 the default exchange
def test_passive_declare_of_the_default_exchange_is_403(broker: BrokerThread) -> None:
    with connect(broker) as conn:
        ch = conn.channel()
        with pytest.raises(pika.exceptions.ChannelClosedByBroker) as exc:
            ch.exchange_declare("", passive=True)
        assert exc.value.reply_code == 403
        assert exc.value.reply_text == (
            "ACCESS_REFUSED - operation not permitted on the default exchange"
        )


# ---------------------------------------------------------------- 2.4 delete of a consumed queue
def test_delete_ok_comes_before_the_cancel_on_the_wire(broker: BrokerThread) -> None:
    raw = Raw(broker)
    try:
        raw.send(1, spec.ChannelOpen())
        raw.expect(spec.ChannelOpenOk)
        raw.send(1, spec.QueueDeclare(queue="consumed"))
        raw.expect(spec.QueueDeclareOk)
        raw.send(1, spec.BasicConsume(queue="consumed", consumer_tag="ctag"))
        raw.expect(spec.BasicConsumeOk)
        raw.send(1, spec.QueueDelete(queue="consumed"))
        assert raw.method() == spec.QueueDeleteOk(message_count=0)
        assert raw.method() == spec.BasicCancel(consumer_tag="ctag", no_wait=True)
    finally:
        raw.close()


def test_py_amqp_deletes_a_queue_its_channel_consumes(broker: BrokerThread) -> None:
    conn = py_amqp.Connection(host=f"{broker.host}:{broker.port}", connect_timeout=5)
    conn.connect()
    try:
        ch = conn.channel()
        ch.queue_declare("pyamqp_consumed")
        ch.basic_publish(py_amqp.Message(b"m"), routing_key="pyamqp_consumed")
        cancelled: list[str] = []
        ch.basic_consume("pyamqp_consumed", callback=lambda msg: None, on_cancel=cancelled.append)
        assert ch.queue_delete("pyamqp_consumed") == 0  # the message went to the consumer
        conn.drain_events(timeout=5)
        assert len(cancelled) == 1
        ch.queue_declare("pyamqp_after")  # the channel still works
    finally:
        conn.close()


# ---------------------------------------------------------------- 2.5-2.7 expiry timing
def test_ttl_zero_message_is_gone_by_its_confirm(broker: BrokerThread) -> None:
    with connect(broker) as conn:
        ch = conn.channel()
        ch.confirm_delivery()
        ch.queue_declare("ttl0")
        zero = pika.BasicProperties(expiration="0")
        for _ in range(20):
            ch.basic_publish("", "ttl0", b"m", properties=zero)  # returns on the confirm
            assert ch.queue_declare("ttl0", passive=True).method.message_count == 0
            ch.basic_publish("", "ttl0", b"m", properties=zero)
            assert ch.basic_get("ttl0", auto_ack=True) == (None, None, None)


def test_get_ok_count_leaves_out_an_expired_message_behind_it(broker: BrokerThread) -> None:
    with connect(broker) as conn:
        ch = conn.channel()
        ch.confirm_delivery()
        ch.queue_declare("getcount")
        ch.basic_publish("", "getcount", b"a")
        ch.basic_publish("", "getcount", b"b", properties=pika.BasicProperties(expiration="0"))
        method, _, body = ch.basic_get("getcount", auto_ack=True)
        assert body == b"a"
        assert method.message_count == 0


def test_priority_queue_expires_only_at_its_head(broker: BrokerThread) -> None:
    with connect(broker) as conn:
        ch = conn.channel()
        ch.confirm_delivery()
        ch.queue_declare("prio_dlq")
        args = {
            "x-max-priority": 2,
            "x-dead-letter-exchange": "",
            "x-dead-letter-routing-key": "prio_dlq",
        }
        ch.queue_declare("prio_ttl", arguments=args)
        ch.basic_publish("", "prio_ttl", b"a", properties=pika.BasicProperties(priority=2))
        ch.basic_publish("", "prio_ttl", b"b", properties=pika.BasicProperties(expiration="1"))
        conn.sleep(0.1)  # `b` is well past its 1 ms TTL, but not the head
        assert ch.queue_declare("prio_ttl", passive=True).method.message_count == 2
        assert ch.queue_declare("prio_dlq", passive=True).method.message_count == 0
        method, _, body = ch.basic_get("prio_ttl", auto_ack=True)
        assert (body, method.message_count) == (b"a", 0)  # `b` expired once exposed
        _, _, dead = ch.basic_get("prio_dlq", auto_ack=True)
        assert dead == b"b"


# ---------------------------------------------------------------- 2.9 headers RabbitMQ refuses
def test_continuation_flag_in_a_content_header_closes_the_connection(broker: BrokerThread) -> None:
    raw = Raw(broker)
    try:
        raw.send(1, spec.ChannelOpen())
        raw.expect(spec.ChannelOpenOk)
        raw.send(1, spec.QueueDeclare(queue="contflag"))
        raw.expect(spec.QueueDeclareOk)
        raw.publish(1, spec.BasicPublish(routing_key="contflag"), b"\x00\x01", b"body")
        close = raw.expect(spec.ConnectionClose)
        assert close.reply_code == 501
        assert "continuation" in close.reply_text
    finally:
        raw.close()
    with connect(broker) as conn:  # nothing was stored that a peek could not decode
        assert conn.channel().queue_declare("contflag", passive=True).method.message_count == 0


def test_expiration_with_non_ascii_digits_is_406(broker: BrokerThread) -> None:
    with connect(broker) as conn:
        ch = conn.channel()
        ch.confirm_delivery()
        ch.queue_declare("exp_digits")
        five = "\u0665"  # ARABIC-INDIC DIGIT FIVE
        with pytest.raises(pika.exceptions.ChannelClosedByBroker) as exc:
            ch.basic_publish(
                "", "exp_digits", b"m", properties=pika.BasicProperties(expiration=five)
            )
        assert exc.value.reply_code == 406
        assert (
            exc.value.reply_text == f"PRECONDITION_FAILED - invalid expiration '{five}': no_integer"
        )
        ch = conn.channel()
        assert ch.queue_declare("exp_digits", passive=True).method.message_count == 0
