"""Consuming through the broker: consume and get, round robin, exclusive, priority, single
active and non-destructive consumers, acks, nacks, recover and releases, prefetch, cancel
notifications, and what closing a channel or a connection gives back."""

from __future__ import annotations

from ringmq.amqp import spec
from ringmq.amqp.reply_codes import ReplyCode
from ringmq.core.effects import CloseConnection, Deliver, ReplyContent
from ringmq.core.session import SettleKind
from tests.facade import admin_over
from tests.unit.adapters.amqp091.kit import Kit, bodies, delivered, methods, of_type


def test_consume_replies_before_deliveries_and_round_robin(kit: Kit) -> None:
    ch = kit.open()
    kit.declare(ch, "q")
    for i in range(4):
        kit.publish(ch, "q", str(i).encode())
    out = kit.consume(ch, "q", "a", no_ack=True)
    assert isinstance(methods(out)[0], spec.BasicConsumeOk)
    assert bodies(out) == [b"0", b"1", b"2", b"3"]
    kit.consume(ch, "q", "b", no_ack=True)
    tags = []
    for i in range(4):
        (d,) = delivered(kit.publish(ch, "q", str(i).encode()))
        tags.append(d.method.consumer_tag)
    assert tags == ["a", "b", "a", "b"]


def test_exclusive_consumer_and_duplicate_tag(kit: Kit) -> None:
    ch = kit.open()
    kit.declare(ch, "q")
    kit.consume(ch, "q", "c1")
    err = kit.error(kit.open(), spec.BasicConsume(queue="q", exclusive=True))
    assert err.code is ReplyCode.ACCESS_REFUSED
    assert err.explanation == "queue 'q' in vhost '/' in exclusive use"
    err = kit.error(ch, spec.BasicConsume(queue="q", consumer_tag="c1"))
    assert err.code is ReplyCode.NOT_ALLOWED
    assert err.explanation == "attempt to reuse consumer tag 'c1'"
    ch2 = kit.open()
    kit.declare(ch2, "solo")
    kit.consume(ch2, "solo", "only", exclusive=True)
    err = kit.error(kit.open(), spec.BasicConsume(queue="solo"))
    assert err.code is ReplyCode.ACCESS_REFUSED


def test_consumer_priorities(kit: Kit) -> None:
    ch = kit.open()
    kit.declare(ch, "q")
    kit.call(ch, spec.BasicQos(prefetch_count=1))
    kit.consume(ch, "q", "low", arguments={"x-priority": 1})
    kit.consume(ch, "q", "high", arguments={"x-priority": 10})
    first = delivered(kit.publish(ch, "q"))
    second = delivered(kit.publish(ch, "q"))
    assert [d.method.consumer_tag for d in first + second] == ["high", "low"]


def test_single_active_consumer(kit: Kit) -> None:
    ch = kit.open()
    kit.declare(ch, "sac", arguments={"x-single-active-consumer": True})
    kit.consume(ch, "sac", "one", no_ack=True)
    kit.consume(ch, "sac", "two", no_ack=True)
    tags = [delivered(kit.publish(ch, "sac"))[0].method.consumer_tag for _ in range(3)]
    assert tags == ["one", "one", "one"]
    kit.call(ch, spec.BasicCancel(consumer_tag="one"))
    assert delivered(kit.publish(ch, "sac"))[0].method.consumer_tag == "two"


def test_basic_get_and_message_count(kit: Kit) -> None:
    ch = kit.open()
    kit.declare(ch, "q")
    assert of_type(kit.call(ch, spec.BasicGet(queue="q")), spec.BasicGetEmpty)
    kit.publish(ch, "q", b"a")
    kit.publish(ch, "q", b"b")
    (got,) = delivered(kit.call(ch, spec.BasicGet(queue="q")))
    assert got.method == spec.BasicGetOk(
        delivery_tag=1, redelivered=False, exchange="", routing_key="q", message_count=1
    )
    assert got.body == b"a"


def test_unknown_delivery_tag_is_406(kit: Kit) -> None:
    ch = kit.open()
    err = kit.error(ch, spec.BasicAck(delivery_tag=5))
    assert err.code is ReplyCode.PRECONDITION_FAILED
    assert err.reply_text == "PRECONDITION_FAILED - unknown delivery tag 5"
    assert (err.class_id, err.method_id) == (60, 80)


def test_multiple_ack_nack_requeue_and_recover(kit: Kit) -> None:
    ch = kit.open()
    kit.declare(ch, "q")
    for i in range(5):
        kit.publish(ch, "q", str(i).encode())
    out = kit.consume(ch, "q", "c")
    assert bodies(out) == [b"0", b"1", b"2", b"3", b"4"]
    kit.call(ch, spec.BasicAck(delivery_tag=2, multiple=True))
    out = kit.call(ch, spec.BasicNack(delivery_tag=3, requeue=True))
    (again,) = delivered(out)
    assert (again.body, again.method.redelivered, again.method.delivery_tag) == (b"2", True, 6)
    out = kit.call(ch, spec.BasicRecover(requeue=True))
    assert isinstance(methods(out)[0], spec.BasicRecoverOk)
    assert sorted(bodies(out)) == [b"2", b"3", b"4"]
    err = kit.error(ch, spec.BasicRecover(requeue=False))
    assert err.code is ReplyCode.NOT_IMPLEMENTED


def test_prefetch_per_consumer_and_global(kit: Kit) -> None:
    ch = kit.open()
    kit.declare(ch, "q")
    for _ in range(10):
        kit.publish(ch, "q")
    kit.call(ch, spec.BasicQos(prefetch_count=2))
    out = kit.consume(ch, "q", "c")
    assert len(bodies(out)) == 2
    out = kit.call(ch, spec.BasicAck(delivery_tag=1))
    assert len(bodies(out)) == 1
    ch2 = kit.open()
    kit.call(ch2, spec.BasicQos(prefetch_count=3, global_=True))
    out = kit.consume(ch2, "q", "g1") + kit.consume(ch2, "q", "g2")
    assert len(bodies(out)) == 3
    err = kit.error(ch2, spec.BasicQos(prefetch_size=10))
    assert err.code is ReplyCode.NOT_IMPLEMENTED


def test_channel_close_requeues_and_set_writable_pauses(kit: Kit) -> None:
    ch = kit.open()
    kit.declare(ch, "q")
    kit.publish(ch, "q", b"m")
    assert bodies(kit.consume(ch, "q", "c")) == [b"m"]
    other = kit.open()
    kit.consume(other, "q", "d")
    out = kit.broker.channel_closed(ch[0], ch[1], kit.now)
    (d,) = delivered(out)
    assert (d.conn_id, d.method.consumer_tag, d.method.redelivered) == (other[0], "d", True)
    kit.broker.set_writable(other[0], False, kit.now)
    assert bodies(kit.publish(kit.open(), "q", b"held")) == []
    assert bodies(kit.broker.set_writable(other[0], True, kit.now)) == [b"held"]


def test_connection_closed_filters_its_own_effects(kit: Kit) -> None:
    ch = kit.open()
    kit.declare(ch, "q")
    out = kit.broker.connection_closed(ch[0], kit.now)
    assert all(e.conn_id != ch[0] for e in out)
    assert not any(isinstance(e, CloseConnection | ReplyContent | Deliver) for e in out)


def test_non_destructive_queue_gives_every_consumer_every_message() -> None:
    kit = Kit()
    ch = kit.open()
    kit.declare(ch, "nd", arguments={"x-non-destructive": True})
    kit.publish(ch, "nd", b"a")
    assert bodies(kit.consume(ch, "nd", "one", no_ack=True)) == [b"a"]
    other = kit.open()
    assert bodies(kit.consume(other, "nd", "two", no_ack=True)) == [b"a"]
    out = kit.publish(ch, "nd", b"b")
    assert sorted((d.method.consumer_tag, d.body) for d in delivered(out)) == [
        ("one", b"b"),
        ("two", b"b"),
    ]
    assert kit.broker.vhosts["/"].queues["nd"].queue.ready_count == 2


def test_global_prefetch_spans_queues() -> None:
    kit = Kit()
    ch = kit.open()
    for name in ("a", "b"):
        kit.declare(ch, name)
        for _ in range(3):
            kit.publish(ch, name)
    kit.call(ch, spec.BasicQos(prefetch_count=2, global_=True))
    out = kit.consume(ch, "a", "ca") + kit.consume(ch, "b", "cb")
    assert len(bodies(out)) == 2
    out = kit.call(ch, spec.BasicAck(delivery_tag=0, multiple=True))
    assert len(bodies(out)) == 2


def test_consumer_cancel_notification_only_for_capable_clients() -> None:
    kit = Kit()
    legacy = kit.channel(kit.connect(caps=False))
    kit.declare(legacy, "q")
    kit.consume(legacy, "q", "c")
    out = kit.call(kit.open(), spec.QueueDelete(queue="q"))
    assert of_type(out, spec.BasicCancel) == []
    assert kit.broker.conns[legacy[0]].sessions[1].consumers == {}


def test_unacked_from_a_deleted_queue_can_still_be_acked() -> None:
    kit = Kit()
    ch = kit.open()
    kit.declare(ch, "gone")
    kit.publish(ch, "gone")
    (got,) = delivered(kit.call(ch, spec.BasicGet(queue="gone")))
    kit.call(ch, spec.QueueDelete(queue="gone"))
    assert kit.call(ch, spec.BasicAck(delivery_tag=got.method.delivery_tag)) == []


def test_single_active_consumer_prefers_the_highest_priority() -> None:
    kit = Kit()
    ch = kit.open()
    kit.declare(ch, "sac", arguments={"x-single-active-consumer": True})
    kit.consume(ch, "sac", "low", no_ack=True)
    kit.consume(ch, "sac", "high", no_ack=True, arguments={"x-priority": 5})
    assert delivered(kit.publish(ch, "sac"))[0].method.consumer_tag == "high"
    (cons,) = [c for c in admin_over(kit.broker).consumers() if c.active]
    assert cons.consumer_tag == "high"


def test_a_released_delivery_goes_back_without_counting_a_failed_delivery() -> None:
    # AMQP 1.0's released outcome (SettleKind.RELEASE) against modified (REQUEUE): with
    # x-delivery-limit 1, one failed delivery is allowed; releases are never failures.
    kit = Kit()
    ch = kit.open()
    kit.declare(ch, "q", arguments={"x-delivery-limit": 1})
    kit.publish(ch, "q", b"m")
    broker = kit.broker
    session = broker.session(*ch)
    assert session is not None
    q = broker.vhosts["/"].queues["q"]
    for _ in range(3):
        got = broker.delivery.get(session, "q", no_ack=False, now_ms=kit.now)
        assert got is not None
        broker.delivery.settle(session, got.delivery_id, False, SettleKind.RELEASE, kit.now)
    assert q.queue.ready_count == 1  # three releases: still there
    for expected_ready in (1, 0):
        got = broker.delivery.get(session, "q", no_ack=False, now_ms=kit.now)
        assert got is not None
        broker.delivery.settle(session, got.delivery_id, False, SettleKind.REQUEUE, kit.now)
        assert q.queue.ready_count == expected_ready  # the second failure is over the limit
