"""Selector consumers in the core (`Delivery.consume(selector=...)`): they take the first
message they match and leave the rest to others; the scan is bounded; a requeued selected
message comes back once; drain gives back what nothing matches."""

from __future__ import annotations

import pytest

from ringmq.core import dispatch as dispatch_module
from ringmq.core.effects import Deliver, Drained, Effect
from ringmq.core.selector import parse
from ringmq.core.session import Session, SettleKind
from tests.unit.core.corekit import Core, bodies


def _setup(colours: list[str | None]) -> tuple[Core, Session]:
    k = Core()
    ch = k.open()
    k.declare(ch, "q")
    for i, colour in enumerate(colours):
        headers = None if colour is None else {"colour": colour}
        k.publish(ch, "q", f"{colour}{i}".encode(), headers=headers)
    return k, ch


def _select(k: Core, s: Session, tag: str, text: str, credit: int | None = None) -> list[Effect]:
    b = k.broker
    with b.call(k.now) as out:
        b.delivery.consume(
            s, "q", tag, no_ack=False, exclusive=False, arguments={}, now_ms=k.now,
            selector=parse(text),
        )  # fmt: skip
        if credit is not None:
            b.delivery.flow(s, tag, credit=credit, drain=False)
    return out


def _ready(k: Core) -> int:
    return k.broker.vhosts["/"].queues["q"].queue.ready_count


def test_a_selector_takes_its_messages_and_leaves_the_others() -> None:
    k, pub = _setup(["red", "blue", None, "red"])
    sub = k.open()
    assert bodies(_select(k, sub, "r", "colour = 'red'")) == [b"red0", b"red3"]
    assert _ready(k) == 2
    got = k.publish(pub, "q", b"late", headers={"colour": "red"})
    assert [e.consumer_tag for e in got if isinstance(e, Deliver)] == ["r"]
    other = k.open()
    assert bodies(k.consume(other, "q", "c", no_ack=True)) == [b"blue1", b"None2"]


def test_a_requeued_selected_message_comes_back_once() -> None:
    k, _ = _setup(["blue", "red", "blue"])
    sub = k.open()
    got = _select(k, sub, "r", "colour = 'red'", credit=1)
    assert bodies(got) == [b"red1"]
    s = sub
    tag = next(e.delivery_id for e in got if isinstance(e, Deliver))
    with k.broker.call(k.now) as out:
        k.broker.delivery.cancel(s, "r", k.now)
        k.broker.delivery.settle(s, tag, False, SettleKind.RELEASE, k.now)
    assert _ready(k) == 3
    other = k.open()
    assert bodies(out + k.consume(other, "q", "c", no_ack=True)) == [b"blue0", b"red1", b"blue2"]


def test_the_scan_is_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(dispatch_module, "SELECTOR_SCAN", 3)
    k, ch = _setup(["blue", "blue", "blue", "red"])
    sub = k.open()
    assert bodies(_select(k, sub, "r", "colour = 'red'")) == []  # the red one is 4th
    assert _ready(k) == 4
    # the get takes blue0: red3 is in reach (the get's own message is no `Deliver`)
    got = k.run(k.broker.delivery.get, ch, "q", no_ack=True, now_ms=k.now)
    assert bodies(got) == [b"red3"]
    assert _ready(k) == 2


def test_drain_gives_back_what_nothing_matches() -> None:
    k, _ = _setup(["blue", "red"])
    sub = k.open()
    assert bodies(_select(k, sub, "r", "colour = 'red'", credit=0)) == []
    s = sub
    with k.broker.call(k.now) as out:
        k.broker.delivery.flow(s, "r", credit=5, drain=True)
    assert bodies(out) == [b"red1"]
    assert [e.credit for e in out if isinstance(e, Drained)] == [4]
    assert _ready(k) == 1
