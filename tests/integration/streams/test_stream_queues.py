"""Stream queues over AMQP 0-9-1 (pika): declare, RabbitMQ's refusals, offsets, retention,
recovery. A stream is read from an offset, non-destructively, acks only give credit back."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pika
import pytest
from pika.adapters.blocking_connection import BlockingChannel
from pika.exceptions import ChannelClosedByBroker, ConnectionClosedByBroker

from ringmq.node import BrokerThread
from tests.integration.conftest import BrokerFactory

pytestmark = pytest.mark.integration

STREAM: dict[str, Any] = {"x-queue-type": "stream"}


@pytest.fixture
def conn(broker: BrokerThread) -> Iterator[pika.BlockingConnection]:
    c = pika.BlockingConnection(pika.ConnectionParameters(broker.host, broker.port))
    yield c
    if c.is_open:
        c.close()


def _publish(ch: BlockingChannel, queue: str, bodies: list[bytes]) -> None:
    ch.confirm_delivery()
    for b in bodies:
        ch.basic_publish("", queue, b)


def _read(
    ch: BlockingChannel, queue: str, offset: Any, n: int, prefetch: int = 1
) -> list[tuple[int, bytes]]:
    """The first `n` deliveries of a consumer starting at `offset`, acked as they come but the
    last: so no more than `prefetch` arrive past it, which pika's cancel would reject with
    requeue (refused on a stream). Read to the end of the stream with a larger prefetch."""
    ch.basic_qos(prefetch_count=prefetch)
    got: list[tuple[int, bytes]] = []
    args = {} if offset is None else {"x-stream-offset": offset}
    for method, props, body in ch.consume(queue, arguments=args, inactivity_timeout=5):
        assert method is not None, f"only {len(got)} of {n} deliveries came"
        got.append((props.headers["x-stream-offset"], body))
        if len(got) == n:
            break
        ch.basic_ack(method.delivery_tag)
    ch.cancel()
    return got


def test_consumers_read_from_each_offset_spec_and_consume_nothing(
    conn: pika.BlockingConnection,
) -> None:
    ch = conn.channel()
    ok = ch.queue_declare("s", durable=True, arguments=STREAM)
    assert ok.method.message_count == 0
    bodies = [f"m{i}".encode() for i in range(20)]
    _publish(ch, "s", bodies)
    everything = list(enumerate(bodies))
    assert _read(ch, "s", "first", 20, prefetch=10) == everything
    assert _read(ch, "s", "first", 20, prefetch=10) == everything  # nothing was removed
    assert _read(ch, "s", 7, 13) == everything[7:]
    assert _read(ch, "s", "last", 1) == everything[19:]
    # a timestamp before the stream, and an interval back from now: from the start
    assert _read(ch, "s", datetime(2000, 1, 1, tzinfo=UTC), 20) == everything
    assert _read(ch, "s", "1h", 20) == everything
    # prefetch 2 (credit): every message still comes, as acks give the credit back
    assert _read(ch, "s", 0, 20, prefetch=2) == everything
    assert ch.queue_declare("s", passive=True).method.message_count == 20


def test_next_waits_for_new_messages(conn: pika.BlockingConnection) -> None:
    ch = conn.channel()
    ch.queue_declare("s", durable=True, arguments=STREAM)
    _publish(ch, "s", [b"old"])
    ch.basic_qos(prefetch_count=5)
    got: list[tuple[int, bytes]] = []

    def on(c: BlockingChannel, m: Any, p: pika.BasicProperties, body: bytes) -> None:
        got.append((p.headers["x-stream-offset"], body))
        c.basic_ack(m.delivery_tag)

    ch.basic_consume("s", on, arguments={"x-stream-offset": "next"})
    pub = conn.channel()
    pub.basic_publish("", "s", b"new")
    conn.process_data_events(time_limit=0.5)
    for _ in range(50):
        if got:
            break
        conn.process_data_events(time_limit=0.1)
    assert got == [(1, b"new")]


@pytest.mark.parametrize(
    ("durable", "exclusive", "auto_delete", "args", "text"),
    [
        (False, False, False, {}, "invalid property 'non-durable' for queue 'x' in vhost '/'"),
        (True, True, False, {}, "invalid property 'exclusive-owner' for queue 'x' in vhost '/'"),
        (True, False, True, {}, "invalid property 'auto-delete' for queue 'x' in vhost '/'"),
        (
            True,
            False,
            False,
            {"x-max-priority": 5},
            "invalid arg 'x-max-priority' for queue 'x' in vhost '/' of queue type "
            "rabbit_stream_queue",
        ),
    ],
)
def test_declares_rabbitmq_refuses_on_a_stream(
    conn: pika.BlockingConnection,
    durable: bool,
    exclusive: bool,
    auto_delete: bool,
    args: dict[str, Any],
    text: str,
) -> None:
    ch = conn.channel()
    with pytest.raises(ChannelClosedByBroker) as err:
        ch.queue_declare(
            "x",
            durable=durable,
            exclusive=exclusive,
            auto_delete=auto_delete,
            arguments={**STREAM, **args},
        )
    assert err.value.reply_code == 406
    assert err.value.reply_text == f"PRECONDITION_FAILED - {text}"


def test_get_no_prefetch_no_ack_and_requeue_are_refused_as_rabbitmq_does(
    broker: BrokerThread,
) -> None:
    opened: list[pika.BlockingConnection] = []

    def fresh() -> tuple[pika.BlockingConnection, BlockingChannel]:
        c = pika.BlockingConnection(pika.ConnectionParameters(broker.host, broker.port))
        opened.append(c)
        return c, c.channel()

    try:
        _refusals(fresh)
    finally:
        for c in opened:
            if c.is_open:
                c.close()


def _refusals(fresh: Any) -> None:
    c, ch = fresh()
    ch.queue_declare("s", durable=True, arguments=STREAM)
    _publish(ch, "s", [b"a", b"b"])
    with pytest.raises(ConnectionClosedByBroker) as hard:
        ch.basic_get("s")
    assert hard.value.reply_code == 540
    assert hard.value.reply_text == (
        "NOT_IMPLEMENTED - basic.get not supported by stream queues queue 's' in vhost '/'"
    )
    c, ch = fresh()
    with pytest.raises(ChannelClosedByBroker) as soft:
        ch.basic_consume("s", lambda *a: None)
    assert soft.value.reply_code == 406
    assert soft.value.reply_text == (
        "PRECONDITION_FAILED - consumer prefetch count is not set for 'queue 's' in vhost '/''"
    )
    ch = c.channel()
    ch.basic_qos(prefetch_count=1)
    with pytest.raises(ConnectionClosedByBroker) as hard:  # noqa: PT012 - the close follows
        ch.basic_consume("s", lambda *a: None, auto_ack=True)
        ch.queue_declare("s", passive=True)
    assert hard.value.reply_code == 540
    assert "automatic acknowledgement not supported by stream queues" in hard.value.reply_text
    c, ch = fresh()
    ch.basic_qos(prefetch_count=1)
    method, _p, _b = next(ch.consume("s", arguments={"x-stream-offset": "first"}))
    assert method is not None
    with pytest.raises(ConnectionClosedByBroker) as hard:  # noqa: PT012 - the close follows
        ch.basic_nack(method.delivery_tag, requeue=True)
        ch.queue_declare("s", passive=True)  # a round trip: the close arrives first
    assert hard.value.reply_code == 540
    assert hard.value.reply_text == (
        "NOT_IMPLEMENTED - basic.nack and basic.reject not supported by stream queues "
        "queue 's' in vhost '/'"
    )


def test_retention_by_size_removes_whole_segments_and_keeps_offsets(
    conn: pika.BlockingConnection,
) -> None:
    ch = conn.channel()
    args = {**STREAM, "x-stream-max-segment-size-bytes": 500, "x-max-length-bytes": 1500}
    ch.queue_declare("s", durable=True, arguments=args)
    bodies = [b"%03d" % i + b"x" * 60 for i in range(100)]
    _publish(ch, "s", bodies)
    kept = _read(ch, "s", "first", 1)
    first = kept[0][0]
    assert 0 < first < 100
    left = _read(ch, "s", "first", 100 - first)
    assert left == [(i, bodies[i]) for i in range(first, 100)]  # a suffix, same offsets
    # an offset retention removed starts at the first one kept
    assert _read(ch, "s", 0, 1) == [(first, bodies[first])]


def test_a_restart_keeps_the_stream_and_its_offsets(
    broker_factory: BrokerFactory, tmp_path: Path
) -> None:
    data = tmp_path / "keep"
    b = broker_factory(data_dir=data)
    c = pika.BlockingConnection(pika.ConnectionParameters(b.host, b.port))
    ch = c.channel()
    ch.queue_declare("s", durable=True, arguments={**STREAM, "x-max-age": "7D"})
    _publish(ch, "s", [b"one", b"two"])
    c.close()
    b.stop()
    b = broker_factory(data_dir=data)
    c = pika.BlockingConnection(pika.ConnectionParameters(b.host, b.port))
    ch = c.channel()
    _publish(ch, "s", [b"three"])
    assert _read(ch, "s", "first", 3) == [(0, b"one"), (1, b"two"), (2, b"three")]
    c.close()


def test_a_stream_deleted_and_declared_again_starts_empty(conn: pika.BlockingConnection) -> None:
    ch = conn.channel()
    ch.queue_declare("s", durable=True, arguments=STREAM)
    _publish(ch, "s", [b"old"])
    ch.queue_delete("s")
    ch.queue_declare("s", durable=True, arguments=STREAM)
    assert ch.queue_declare("s", passive=True).method.message_count == 0
    _publish(ch, "s", [b"new"])
    assert _read(ch, "s", "first", 1) == [(0, b"new")]


def test_dead_letters_routed_to_a_stream_are_appended(conn: pika.BlockingConnection) -> None:
    ch = conn.channel()
    ch.queue_declare("audit", durable=True, arguments=STREAM)
    ch.queue_declare(
        "work", arguments={"x-dead-letter-exchange": "", "x-dead-letter-routing-key": "audit"}
    )
    ch.basic_publish("", "work", b"failed")
    method, _props, _body = ch.basic_get("work")
    assert method is not None
    ch.basic_reject(method.delivery_tag, requeue=False)
    ch.queue_declare("work", passive=True)  # a round trip: the reject is handled
    assert _read(ch, "audit", "first", 1) == [(0, b"failed")]
