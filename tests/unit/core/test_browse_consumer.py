"""Browsing consumers on an ordinary queue (`Delivery.consume(browse=True)`, AMQP 1.0
distribution mode `copy`): they read through their own cursor and leave the messages to the
queue's other consumers; settling a browsed delivery does nothing."""

from __future__ import annotations

from collections.abc import Callable

from ringmq.core.effects import Deliver, Drained, Effect
from ringmq.core.session import Session, SettleKind
from tests.unit.core.corekit import Core, bodies


def _browse(k: Core, s: Session, queue: str, tag: str, credit: int | None) -> list[Effect]:
    b = k.broker
    with b.call(k.now) as out:
        b.delivery.consume(
            s, queue, tag, no_ack=False, exclusive=False, arguments={}, now_ms=k.now, browse=True
        )
        if credit is not None:
            b.delivery.flow(s, tag, credit=credit, drain=False)
    return out


def _call(k: Core, step: Callable[[], object]) -> list[Effect]:
    with k.broker.call(k.now) as out:
        step()
    return out


def _setup(n: int) -> tuple[Core, Session]:
    k = Core()
    ch = k.open()
    k.declare(ch, "q")
    for i in range(n):
        k.publish(ch, "q", f"m{i}".encode())
    return k, ch


def _ready(k: Core) -> int:
    return k.broker.vhosts["/"].queues["q"].queue.ready_count


def test_a_browser_reads_everything_and_takes_nothing() -> None:
    k, _ = _setup(4)
    sub = k.open()
    got = _browse(k, sub, "q", "b", None)
    assert bodies(got) == [b"m0", b"m1", b"m2", b"m3"]
    assert _ready(k) == 4
    tags = [e.delivery_id for e in got if isinstance(e, Deliver)]
    s = sub
    _call(k, lambda: k.broker.delivery.settle(s, tags[-1], True, SettleKind.ACK, k.now))
    assert _ready(k) == 4  # accepting a browsed delivery does not consume it
    other = k.open()
    assert bodies(k.consume(other, "q", "c", no_ack=True)) == [b"m0", b"m1", b"m2", b"m3"]
    assert _ready(k) == 0


def test_browser_and_consumer_each_see_a_new_message() -> None:
    k, pub = _setup(0)
    sub = k.open()
    _browse(k, sub, "q", "b", None)
    k.consume(sub, "q", "c", no_ack=True)
    got = k.publish(pub, "q", b"new")
    assert sorted(e.consumer_tag for e in got if isinstance(e, Deliver)) == ["b", "c"]
    assert _ready(k) == 0


def test_a_browser_is_bounded_by_its_credit_and_drains_at_its_cursor() -> None:
    k, _ = _setup(3)
    sub = k.open()
    assert bodies(_browse(k, sub, "q", "b", 2)) == [b"m0", b"m1"]
    s = sub
    got = _call(k, lambda: k.broker.delivery.flow(s, "b", credit=5, drain=True))
    assert bodies(got) == [b"m2"]
    assert [(e.consumer_tag, e.credit) for e in got if isinstance(e, Drained)] == [("b", 4)]
    assert _ready(k) == 3  # all three still there, yet the browser is drained


def test_a_browser_is_never_the_picked_consumer() -> None:
    k, _ = _setup(0)
    sub = k.open()
    k.broker.delivery.set_prefetch(sub, 1, session_wide=False)
    _browse(k, sub, "q", "b", None)
    q = k.broker.vhosts["/"].queues["q"]
    assert q.consumers.pick() is None
    assert q.consumers.browsers
    assert not q.consumers.fetchers
