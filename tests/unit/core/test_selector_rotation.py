"""Selector consumers in the queue's rotation (`ConsumerSet.pick`, `Delivery._dispatch`):
they take turns with plain consumers, honour `x-priority` and single-active-consumer, as
Artemis serves filtered consumers round robin with the others. A table of cases, then a
Hypothesis property over random consumer mixes."""

from __future__ import annotations

from dataclasses import dataclass

from hypothesis import given, settings
from hypothesis import strategies as st

from ringmq.core.effects import Deliver, Effect
from ringmq.core.selector import parse
from tests.unit.core.corekit import Core

COLOURS = ("red", "blue", None)
SELECTORS = {"red": "colour = 'red'", "blue": "colour = 'blue'", "any": None}


@dataclass(frozen=True)
class Spec:
    """One consumer: its selector (a key of SELECTORS), x-priority and prefetch (0: none)."""

    select: str
    priority: int = 0
    prefetch: int = 0


def _run(
    colours: list[str | None], consumers: list[Spec], arguments: dict[str, object] | None = None
) -> tuple[list[tuple[str, str | None]], int]:
    """Publish `colours`, then register `consumers` (c0, c1...) in one core call; returns the
    deliveries (consumer tag, colour) in order, and the messages left ready."""
    k = Core()
    pub = k.open()
    k.declare(pub, "q", dict(arguments or {}))
    for i, colour in enumerate(colours):
        headers = None if colour is None else {"colour": colour}
        k.publish(pub, "q", f"{colour}-{i}".encode(), headers=headers)
    b = k.broker
    sessions = [k.open() for _ in consumers]
    out: list[Effect]
    with b.call(k.now) as out:
        for i, (c, s) in enumerate(zip(consumers, sessions, strict=True)):
            b.delivery.set_prefetch(s, c.prefetch, session_wide=False)
            text = SELECTORS[c.select]
            b.delivery.consume(
                s, "q", f"c{i}", no_ack=False, exclusive=False,
                arguments={"x-priority": c.priority}, now_ms=k.now,
                selector=None if text is None else parse(text),
            )  # fmt: skip
    got = []
    for e in out:
        if isinstance(e, Deliver):
            colour = e.message.body.decode().split("-")[0]
            got.append((e.consumer_tag, None if colour == "None" else colour))
    return got, b.vhosts["/"].queues["q"].queue.ready_count


def test_a_selector_consumer_takes_turns_with_a_plain_one() -> None:
    got, left = _run(["red"] * 4, [Spec("red"), Spec("any")])
    assert [tag for tag, _ in got] == ["c0", "c1", "c0", "c1"]  # round robin, not all to c0
    assert left == 0


def test_priority_wins_over_selectors() -> None:
    # a plain consumer of higher priority takes everything it can; the selector one waits
    got, _ = _run(["red"] * 3, [Spec("red", priority=0), Spec("any", priority=5)])
    assert {tag for tag, _ in got} == {"c1"}
    # a selector consumer of higher priority takes its matches first, the plain one the rest
    got, _ = _run(["red", "blue", "red"], [Spec("any"), Spec("red", priority=5, prefetch=1)])
    assert ("c1", "red") in got
    assert [c for t, c in got if t == "c0"] == ["blue", "red"]


def test_single_active_consumer_includes_selector_consumers() -> None:
    sac: dict[str, object] = {"x-single-active-consumer": True}
    got, left = _run(["red", "blue"], [Spec("any"), Spec("red")], sac)
    assert got == [("c0", "red"), ("c0", "blue")]  # the first consumer is the active one
    got, left = _run(["red", "blue"], [Spec("red"), Spec("any")], sac)
    assert got == [("c0", "red")]  # an active selector consumer: the others wait
    assert left == 1


def test_a_selector_that_matches_nothing_does_not_stop_the_others() -> None:
    got, left = _run(["blue", None, "blue"], [Spec("red"), Spec("any")])
    assert [t for t, _ in got] == ["c1", "c1", "c1"]
    assert left == 0


@settings(max_examples=60, deadline=None)
@given(
    colours=st.lists(st.sampled_from(COLOURS), max_size=12),
    consumers=st.lists(
        st.builds(
            Spec,
            select=st.sampled_from(sorted(SELECTORS)),
            priority=st.integers(0, 2),
            prefetch=st.integers(0, 3),
        ),
        min_size=1,
        max_size=4,
    ),
)
def test_rotation_rules(colours: list[str | None], consumers: list[Spec]) -> None:
    got, left = _run(colours, consumers)
    by_tag = {f"c{i}": c for i, c in enumerate(consumers)}
    count = {tag: sum(1 for t, _ in got if t == tag) for tag in by_tag}

    def matches(c: Spec, colour: str | None) -> bool:
        return c.select == "any" or c.select == colour

    def full(tag: str) -> bool:
        c = by_tag[tag]
        return bool(c.prefetch) and count[tag] >= c.prefetch

    # each delivery matches its consumer's selector, and no consumer is over its prefetch
    assert all(matches(by_tag[t], colour) for t, colour in got)
    assert all(not by_tag[t].prefetch or count[t] <= by_tag[t].prefetch for t in by_tag)
    # every message is delivered once or left: nothing lost, nothing twice
    assert len(got) + left == len(colours)
    # a message left ready is one no consumer with room matches (work-conserving)
    waiting = list(colours)
    for _, colour in got:
        waiting.remove(colour)
    for colour in waiting:
        assert all(full(t) or not matches(c, colour) for t, c in by_tag.items())
    # priorities: a message reaches a consumer only when every consumer of a higher priority
    # that matches it is full
    for t, colour in got:
        p = by_tag[t].priority
        assert all(full(o) or not matches(c, colour) for o, c in by_tag.items() if c.priority > p)
