"""Non-destructive (browsing) consumers: batched browse dispatch keeps prefetch limits exact."""

from __future__ import annotations

from ringmq.amqp import spec
from tests.unit.adapters.amqp091.kit import Kit, bodies


def _setup(n: int) -> tuple[Kit, tuple[int, int]]:
    kit = Kit()
    ch = kit.open()
    kit.declare(ch, "nd", arguments={"x-non-destructive": True})
    for i in range(n):
        kit.publish(ch, "nd", f"m{i}".encode())
    return kit, ch


def test_per_consumer_prefetch_caps_each_browse_batch() -> None:
    kit, _ = _setup(10)
    sub = kit.open()
    kit.call(sub, spec.BasicQos(prefetch_count=3))
    assert bodies(kit.consume(sub, "nd", "c")) == [b"m0", b"m1", b"m2"]
    got = kit.call(sub, spec.BasicAck(delivery_tag=2, multiple=True))
    assert bodies(got) == [b"m3", b"m4"]
    got = kit.call(sub, spec.BasicAck(delivery_tag=5, multiple=True))
    assert bodies(got) == [b"m5", b"m6", b"m7"]


def test_global_prefetch_is_shared_by_the_channels_browsers() -> None:
    kit, _ = _setup(6)
    sub = kit.open()
    kit.call(sub, spec.BasicQos(prefetch_count=4, global_=True))
    first = bodies(kit.consume(sub, "nd", "a"))
    second = bodies(kit.consume(sub, "nd", "b"))
    assert first == [b"m0", b"m1", b"m2", b"m3"]
    assert second == []  # the channel's 4 are taken by the first browser
    got = kit.call(sub, spec.BasicAck(delivery_tag=4, multiple=True))
    assert len(bodies(got)) == 4  # room for 4 again, shared by both cursors


def test_no_ack_browsers_take_everything() -> None:
    kit, _ = _setup(5)
    sub = kit.open()
    kit.call(sub, spec.BasicQos(prefetch_count=1))
    assert bodies(kit.consume(sub, "nd", "c", no_ack=True)) == [f"m{i}".encode() for i in range(5)]
