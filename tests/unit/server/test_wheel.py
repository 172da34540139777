"""The timer wheel against a dict of due times: each deadline comes out once, not early, and at
the first look that reaches it; the earlier of two schedules wins; cancel takes it out."""

from __future__ import annotations

import pytest
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

from ringmq.server.wheel import TimerWheel

KEYS = st.sampled_from("abcdefgh")


class WheelMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.now = 1_000
        self.real: TimerWheel[str] = TimerWheel(500)
        self.model: dict[str, int] = {}  # key -> due time; the whole reference model

    @rule(key=KEYS, delay=st.integers(-600, 3_000))
    def schedule(self, key: str, delay: int) -> None:
        due = self.now + delay
        self.real.schedule(key, due)
        self.model[key] = min(self.model.get(key, due), due)

    @rule(key=KEYS)
    def cancel(self, key: str) -> None:
        self.real.cancel(key)
        self.model.pop(key, None)

    @rule(ms=st.one_of(st.integers(0, 700), st.integers(0, 100_000)))
    def look(self, ms: int) -> None:
        self.now += ms
        got = self.real.pop_due(self.now)
        want = {k for k, due in self.model.items() if due <= self.now}
        assert len(got) == len(set(got)), "a key came out twice"
        assert set(got) == want
        for k in want:
            del self.model[k]

    @invariant()
    def agree(self) -> None:
        assert len(self.real) == len(self.model)
        for k in "abcdefgh":
            assert self.real.due_ms(k) == self.model.get(k)
            assert (k in self.real) == (k in self.model)


TestWheel = WheelMachine.TestCase


def test_a_deadline_comes_out_at_the_first_look_that_reaches_it() -> None:
    w: TimerWheel[str] = TimerWheel(500)
    w.schedule("a", 1_250)
    assert w.pop_due(1_000) == []
    assert w.pop_due(1_249) == []
    assert w.pop_due(1_250) == ["a"]
    assert w.pop_due(10_000) == []


def test_the_earlier_schedule_wins_and_a_clock_jump_costs_only_the_buckets() -> None:
    w: TimerWheel[str] = TimerWheel(500)
    w.schedule("a", 5_000)
    w.schedule("a", 9_000)  # later: ignored
    w.schedule("b", 10**12)
    assert w.due_ms("a") == 5_000
    assert w.pop_due(10**11) == ["a"]
    assert w.pop_due(10**12) == ["b"]
    assert len(w) == 0


def test_tick_must_be_positive() -> None:
    with pytest.raises(ValueError, match="positive"):
        TimerWheel(0)
