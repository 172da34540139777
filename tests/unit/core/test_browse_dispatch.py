"""Non-destructive (browsing) consumers: batched browse dispatch keeps prefetch limits exact."""

from __future__ import annotations

from ringmq.core.session import Session, SettleKind
from tests.unit.core.corekit import Core, bodies

ACK = SettleKind.ACK


def _setup(n: int) -> tuple[Core, Session]:
    kit = Core()
    ch = kit.open()
    kit.declare(ch, "nd", {"x-non-destructive": True})
    for i in range(n):
        kit.publish(ch, "nd", f"m{i}".encode())
    return kit, ch


def test_per_consumer_prefetch_caps_each_browse_batch() -> None:
    kit, _ = _setup(10)
    sub = kit.open()
    kit.broker.delivery.set_prefetch(sub, 3, session_wide=False)
    assert bodies(kit.consume(sub, "nd", "c")) == [b"m0", b"m1", b"m2"]
    got = kit.settle(sub, 2, ACK, multiple=True)
    assert bodies(got) == [b"m3", b"m4"]
    got = kit.settle(sub, 5, ACK, multiple=True)
    assert bodies(got) == [b"m5", b"m6", b"m7"]


def test_global_prefetch_is_shared_by_the_channels_browsers() -> None:
    kit, _ = _setup(6)
    sub = kit.open()
    kit.broker.delivery.set_prefetch(sub, 4, session_wide=True)
    first = bodies(kit.consume(sub, "nd", "a"))
    second = bodies(kit.consume(sub, "nd", "b"))
    assert first == [b"m0", b"m1", b"m2", b"m3"]
    assert second == []  # the channel's 4 are taken by the first browser
    got = kit.settle(sub, 4, ACK, multiple=True)
    assert len(bodies(got)) == 4  # room for 4 again, shared by both cursors


def test_no_ack_browsers_take_everything() -> None:
    kit, _ = _setup(5)
    sub = kit.open()
    kit.broker.delivery.set_prefetch(sub, 1, session_wide=False)
    assert bodies(kit.consume(sub, "nd", "c", no_ack=True)) == [f"m{i}".encode() for i in range(5)]
