"""RateSampler: rates between the last two samples, forgotten keys, bounded history."""

from __future__ import annotations

from ringmq.management.rates import RateSampler


def test_rate_is_delta_over_elapsed_seconds() -> None:
    s = RateSampler(interval_ms=1000, history_key="all", history_len=3)
    assert s.due(0)
    s.sample(0, {"all": {"publish": 0}, "q": {"publish": 5}})
    assert s.rates("q") == {"publish": 0.0}
    assert not s.due(999)
    assert s.due(1000)
    s.sample(2000, {"all": {"publish": 10}, "q": {"publish": 9}})
    assert s.rate("all", "publish") == 5.0
    assert s.rate("q", "publish") == 2.0
    assert s.rate("missing", "publish") == 0.0


def test_vanished_keys_are_forgotten_and_restart_at_zero() -> None:
    s = RateSampler()
    s.sample(0, {"q": {"n": 1}})
    s.sample(1000, {})
    assert s.rates("q") == {}
    s.sample(2000, {"q": {"n": 100}})
    assert s.rates("q") == {"n": 0.0}


def test_same_instant_sample_replaces_current() -> None:
    s = RateSampler()
    s.sample(0, {"q": {"n": 0}})
    s.sample(1000, {"q": {"n": 10}})
    s.sample(1000, {"q": {"n": 20}})
    assert s.rate("q", "n") == 20.0


def test_history_is_bounded_and_ordered() -> None:
    s = RateSampler(history_key="all", history_len=3)
    for i in range(6):
        s.sample(i * 1000, {"all": {"n": i * i}})
    hist = s.history()
    assert [t for t, _ in hist] == [3000, 4000, 5000]
    assert [r["n"] for _, r in hist] == [5.0, 7.0, 9.0]


def test_a_counter_that_went_down_has_no_negative_rate() -> None:
    # a queue deleted and declared again under the same key restarts its counters at 0
    s = RateSampler(interval_ms=1000)
    s.sample(0, {"q": {"publish": 50}})
    s.sample(1000, {"q": {"publish": 60}})
    assert s.rate("q", "publish") == 10.0
    s.sample(2000, {"q": {"publish": 3}})
    assert s.rate("q", "publish") == 0.0
