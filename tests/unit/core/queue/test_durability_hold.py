"""The durability hold (core/queue/hold.py): under delayed confirms a persistent message on a
durable queue whose publisher waits for a confirm reaches no consumer until an fsync covers its
write, and one whose write failed never does."""

from __future__ import annotations

from ringmq.adapters.amqp091 import as_frames
from ringmq.amqp import spec
from ringmq.amqp.properties import BasicProperties, encode_properties
from ringmq.core.config import BrokerConfig
from ringmq.core.effects import Effect
from ringmq.storage import MemoryStore
from tests.unit.adapters.amqp091.kit import StoreKit, bodies, delivered, methods

PERSISTENT = BasicProperties(delivery_mode=2)


def _kit() -> StoreKit:
    return StoreKit(MemoryStore(), BrokerConfig(name_seed=7, delay_persistent_confirms=True))


def _publisher(kit: StoreKit) -> tuple[int, int]:
    ch = kit.open()
    kit.call(ch, spec.ConfirmSelect())
    return ch


def _consumer(kit: StoreKit, queue: str) -> tuple[int, int]:
    sub = kit.open()
    kit.call(sub, spec.BasicQos(prefetch_count=100))
    kit.consume(sub, queue)
    return sub


def _stored(kit: StoreKit) -> list[Effect]:
    return as_frames(kit.broker.stored(kit.store.sync()))


def test_a_persistent_message_waits_for_the_fsync() -> None:
    kit = _kit()
    ch = _publisher(kit)
    kit.declare(ch, "d", durable=True)
    sub = _consumer(kit, "d")
    out = kit.publish(ch, "d", b"p1", props=PERSISTENT)
    out += kit.publish(ch, "d", b"t1")  # transient, behind it: waits too (order kept)
    out += as_frames(kit.broker.dispatch_pending(kit.now))
    assert bodies(out) == []
    assert bodies(_stored(kit)) == [b"p1", b"t1"]  # nothing is held any more
    assert sub
    assert kit.broker.vhosts["/"].queues["d"].queue.hold_from == 1 << 62


def test_transient_traffic_and_non_durable_queues_are_not_held() -> None:
    kit = _kit()
    ch = _publisher(kit)
    kit.declare(ch, "d", durable=True)
    kit.declare(ch, "t", durable=False)
    _consumer(kit, "d")
    _consumer(kit, "t")
    out = kit.publish(ch, "d", b"x1")
    out += kit.publish(ch, "t", b"p1", props=PERSISTENT)
    out += as_frames(kit.broker.dispatch_pending(kit.now))
    assert sorted(bodies(out)) == [b"p1", b"x1"]


def test_a_refused_write_leaves_the_queue_unseen() -> None:
    kit = _kit()
    ch = _publisher(kit)
    kit.declare(ch, "d", durable=True)
    kit.publish(ch, "d", b"ok", props=PERSISTENT)
    durable = kit.store.sync()
    kit.broker.stored(durable)
    kit.publish(ch, "d", b"lost1", props=PERSISTENT)
    kit.publish(ch, "d", b"lost2", props=PERSISTENT)
    kit.broker.unstored(durable)  # the writes after `durable` failed
    q = kit.broker.vhosts["/"].queues["d"].queue
    assert q.message_count == 1
    # while the store fails, a persistent publish to a durable queue is refused up front
    kit.publish(ch, "d", b"refused", props=PERSISTENT)
    assert q.message_count == 1
    sub = kit.open()
    kit.call(sub, spec.BasicQos(prefetch_count=100))
    out = kit.consume(sub, "d") + as_frames(kit.broker.dispatch_pending(kit.now))
    assert bodies(out) == [b"ok"]
    kit.broker.stored(kit.store.sync())  # the disk is back: publishes are taken again
    kit.publish(ch, "d", b"again", props=PERSISTENT)
    assert bodies(_stored(kit)) == [b"again"]


def test_a_basic_get_does_not_see_a_held_message() -> None:
    kit = _kit()
    ch = _publisher(kit)
    kit.declare(ch, "d", durable=True)
    kit.publish(ch, "d", b"p1", props=PERSISTENT)
    assert delivered(kit.call(ch, spec.BasicGet(queue="d", no_ack=True))) == []
    kit.broker.stored(kit.store.sync())
    got = delivered(kit.call(ch, spec.BasicGet(queue="d", no_ack=True)))
    assert [d.body for d in got] == [b"p1"]


def test_a_publish_nobody_confirms_is_not_held() -> None:
    """RabbitMQ's order on one channel: a basic.publish then a basic.get finds the message."""
    kit = _kit()
    ch = kit.open()
    kit.declare(ch, "d", durable=True)
    kit.publish(ch, "d", b"p1", props=PERSISTENT)
    got = delivered(kit.call(ch, spec.BasicGet(queue="d", no_ack=True)))
    assert [d.body for d in got] == [b"p1"]


def _batch(kit: StoreKit, ch: tuple[int, int], *bodies: bytes) -> list[Effect]:
    # A read's run of persistent publishes on a confirm channel, as the server hands it over
    # (`Amqp091.publish_batch`: one batch, each message through the publish pipeline).
    pb = encode_properties(PERSISTENT)
    rows = [("d", pb, body) for body in bodies]
    done = kit.amqp.publish_batch(ch[0], ch[1], "", rows, 0, len(rows), kit.now)
    assert done.error is None
    assert done.published == len(rows)
    return as_frames(done.effects)


def test_a_batch_holds_its_persistent_messages_as_single_publishes_do() -> None:
    kit = _kit()
    ch = _publisher(kit)
    kit.declare(ch, "d", durable=True)
    _consumer(kit, "d")
    out = _batch(kit, ch, b"p1", b"p2")
    out += as_frames(kit.broker.dispatch_pending(kit.now))
    assert bodies(out) == []
    assert [m for m in methods(out) if isinstance(m, spec.BasicAck)] == []
    session = kit.broker.session(*ch)
    assert session is not None
    assert session.confirm_held == {1, 2}  # their confirms wait for the fsync too
    assert bodies(_stored(kit)) == [b"p1", b"p2"]


def test_a_batch_is_refused_up_front_while_the_store_fails() -> None:
    kit = _kit()
    ch = _publisher(kit)
    kit.declare(ch, "d", durable=True)
    kit.publish(ch, "d", b"ok", props=PERSISTENT)
    durable = kit.store.sync()
    kit.broker.stored(durable)
    kit.publish(ch, "d", b"lost", props=PERSISTENT)
    kit.broker.unstored(durable)  # the writes after `durable` failed: the store fails
    q = kit.broker.vhosts["/"].queues["d"].queue
    assert q.message_count == 1
    out = _batch(kit, ch, b"refused1", b"refused2")
    assert q.message_count == 1
    assert methods(out) == [spec.BasicNack(delivery_tag=3), spec.BasicNack(delivery_tag=4)]
