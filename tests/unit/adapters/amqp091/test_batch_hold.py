"""A 0-9-1 publish batch of persistent messages under delayed confirms (`Amqp091.publish_batch`,
raw property lists in, basic.ack and basic.nack out) is held or refused as the core holds a
batch (the core's side is tests/unit/core/queue/test_durability_hold.py)."""

from __future__ import annotations

from ringmq.adapters.amqp091 import as_frames
from ringmq.amqp import spec
from ringmq.amqp.properties import BasicProperties, encode_properties
from ringmq.core.config import BrokerConfig
from ringmq.core.effects import Effect
from ringmq.storage import MemoryStore
from tests.unit.adapters.amqp091.kit import StoreKit, bodies, methods


def _publisher() -> tuple[StoreKit, tuple[int, int]]:
    kit = StoreKit(MemoryStore(), BrokerConfig(name_seed=7, delay_persistent_confirms=True))
    ch = kit.open()
    kit.call(ch, spec.ConfirmSelect())
    kit.declare(ch, "d", durable=True)
    return kit, ch


def _batch(kit: StoreKit, ch: tuple[int, int], *bodies: bytes) -> list[Effect]:
    pb = encode_properties(BasicProperties(delivery_mode=2))
    rows = [("d", pb, body) for body in bodies]
    done = kit.amqp.publish_batch(ch[0], ch[1], "", rows, 0, len(rows), kit.now)
    assert done.error is None
    assert done.published == len(rows)
    return as_frames(done.effects)


def test_a_0_9_1_batch_waits_for_the_fsync_without_acks() -> None:
    kit, ch = _publisher()
    sub = kit.open()
    kit.call(sub, spec.BasicQos(prefetch_count=100))
    kit.consume(sub, "d")
    out = _batch(kit, ch, b"p1", b"p2") + as_frames(kit.broker.dispatch_pending(kit.now))
    assert bodies(out) == []
    assert [m for m in methods(out) if isinstance(m, spec.BasicAck)] == []
    stored = as_frames(kit.broker.stored(kit.store.sync()))
    assert bodies(stored) == [b"p1", b"p2"]


def test_a_0_9_1_batch_is_nacked_while_the_store_fails() -> None:
    kit, ch = _publisher()
    kit.publish(ch, "d", b"ok", props=BasicProperties(delivery_mode=2))
    durable = kit.store.sync()
    kit.broker.stored(durable)
    kit.publish(ch, "d", b"lost", props=BasicProperties(delivery_mode=2))
    kit.broker.unstored(durable)
    out = _batch(kit, ch, b"refused1", b"refused2")
    assert methods(out) == [spec.BasicNack(delivery_tag=3), spec.BasicNack(delivery_tag=4)]
