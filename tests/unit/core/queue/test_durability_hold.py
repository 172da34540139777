"""The durability hold (core/queue/hold.py) on the core's API: under delayed confirms a
persistent message on a durable queue whose publisher waits for a confirm reaches no consumer
until an fsync covers its write, and one whose write failed never does."""

from __future__ import annotations

from ringmq.core.config import BrokerConfig
from ringmq.core.effects import Confirm, Effect
from ringmq.core.session import Session
from ringmq.storage import MemoryStore
from tests.unit.core.corekit import Core, bodies, message


def _core() -> Core:
    return Core(BrokerConfig(name_seed=7, delay_persistent_confirms=True), MemoryStore())


def _publisher(core: Core) -> Session:
    s = core.open()
    core.broker.confirms.select(s)
    return s


def _consumer(core: Core, queue: str) -> Session:
    sub = core.open()
    core.prefetch(sub, 100)
    core.consume(sub, queue, "c")
    return sub


def _stored(core: Core) -> list[Effect]:
    return core.broker.stored(core.store.sync())


def test_a_persistent_message_waits_for_the_fsync() -> None:
    core = _core()
    s = _publisher(core)
    core.declare(s, "d", durable=True)
    _consumer(core, "d")
    out = core.publish(s, "d", b"p1", persistent=True)
    out += core.publish(s, "d", b"t1")  # transient, behind it: waits too (order kept)
    out += core.broker.dispatch_pending(core.now)
    assert bodies(out) == []
    assert bodies(_stored(core)) == [b"p1", b"t1"]  # nothing is held any more
    assert core.queue("d").hold_from == 1 << 62


def test_transient_traffic_and_non_durable_queues_are_not_held() -> None:
    core = _core()
    s = _publisher(core)
    core.declare(s, "d", durable=True)
    core.declare(s, "t")
    _consumer(core, "d")
    _consumer(core, "t")
    out = core.publish(s, "d", b"x1")
    out += core.publish(s, "t", b"p1", persistent=True)
    out += core.broker.dispatch_pending(core.now)
    assert sorted(bodies(out)) == [b"p1", b"x1"]


def test_a_refused_write_leaves_the_queue_unseen() -> None:
    core = _core()
    b = core.broker
    s = _publisher(core)
    core.declare(s, "d", durable=True)
    core.publish(s, "d", b"ok", persistent=True)
    durable = core.store.sync()
    b.stored(durable)
    core.publish(s, "d", b"lost1", persistent=True)
    core.publish(s, "d", b"lost2", persistent=True)
    b.unstored(durable)  # the writes after `durable` failed
    q = core.queue("d")
    assert q.message_count == 1
    # while the store fails, a persistent publish to a durable queue is refused up front
    core.publish(s, "d", b"refused", persistent=True)
    assert q.message_count == 1
    sub = core.open()
    core.prefetch(sub, 100)
    out = core.consume(sub, "d", "c") + b.dispatch_pending(core.now)
    assert bodies(out) == [b"ok"]
    b.stored(core.store.sync())  # the disk is back: publishes are taken again
    core.publish(s, "d", b"again", persistent=True)
    assert bodies(_stored(core)) == [b"again"]


def test_a_get_does_not_see_a_held_message() -> None:
    core = _core()
    s = _publisher(core)
    core.declare(s, "d", durable=True)
    core.publish(s, "d", b"p1", persistent=True)
    assert core.get(s, "d", no_ack=True) is None
    core.broker.stored(core.store.sync())
    got = core.get(s, "d", no_ack=True)
    assert got is not None
    assert got.message.body == b"p1"


def test_a_publish_nobody_confirms_is_not_held() -> None:
    """RabbitMQ's order on one session: a publish then a get finds the message."""
    core = _core()
    s = core.open()
    core.declare(s, "d", durable=True)
    core.publish(s, "d", b"p1", persistent=True)
    got = core.get(s, "d", no_ack=True)
    assert got is not None
    assert got.message.body == b"p1"


def _batch(core: Core, s: Session, *bodies: bytes) -> list[Effect]:
    # A batch of persistent publishes on a confirming session, as a read's run hands it over
    # (`Broker.publish_batch`: one batch, each message through the publish pipeline).
    msgs = [message("d", body, persistent=True, timestamp_ms=core.now) for body in bodies]
    done = core.broker.publish_batch(s.conn_id, s.channel, "", msgs, core.now)
    assert done.error is None
    assert done.published == len(msgs)
    return done.effects


def test_a_batch_holds_its_persistent_messages_as_single_publishes_do() -> None:
    core = _core()
    s = _publisher(core)
    core.declare(s, "d", durable=True)
    _consumer(core, "d")
    out = _batch(core, s, b"p1", b"p2")
    out += core.broker.dispatch_pending(core.now)
    assert bodies(out) == []
    assert [e for e in out if isinstance(e, Confirm)] == []
    assert s.confirm_held == {1, 2}  # their confirms wait for the fsync too
    assert bodies(_stored(core)) == [b"p1", b"p2"]


def test_a_batch_is_refused_up_front_while_the_store_fails() -> None:
    core = _core()
    b = core.broker
    s = _publisher(core)
    core.declare(s, "d", durable=True)
    core.publish(s, "d", b"ok", persistent=True)
    durable = core.store.sync()
    b.stored(durable)
    core.publish(s, "d", b"lost", persistent=True)
    b.unstored(durable)  # the writes after `durable` failed: the store fails
    q = core.queue("d")
    assert q.message_count == 1
    out = _batch(core, s, b"refused1", b"refused2")
    assert q.message_count == 1
    assert [(e.seq, e.multiple, e.ok) for e in out if isinstance(e, Confirm)] == [
        (3, False, False),
        (4, False, False),
    ]
