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


def test_every_key_keeps_a_bounded_ring_of_samples_in_order() -> None:
    s = RateSampler(history_len=4)
    for i in range(10):
        s.sample(i * 5000, {"q1": {"messages": i, "publish": 10 * i}, "q2": {"messages": -i}})
    q1 = s.samples("q1")
    assert [t for t, _ in q1] == [30_000, 35_000, 40_000, 45_000]
    assert [v["messages"] for _, v in q1] == [6.0, 7.0, 8.0, 9.0]
    assert [v["publish"] for _, v in q1] == [60.0, 70.0, 80.0, 90.0]
    assert len(s.samples("q2")) == 4
    # only the last `age_ms` before the newest sample
    assert [t for t, _ in s.samples("q1", age_ms=10_000)] == [35_000, 40_000, 45_000]
    # a vanished key loses its ring with it
    s.sample(50_000, {"q1": {"messages": 1, "publish": 100}})
    assert s.samples("q2") == []


def test_series_is_newest_first_at_multiples_of_the_increment() -> None:
    s = RateSampler()
    for i in range(1, 5):  # samples at 5.1 s, 10.1 s, 15.1 s, 20.1 s
        s.sample(i * 5000 + 100, {"q": {"messages": i}})
    points = s.series("q", age_ms=60_000, incr_ms=5000, now_ms=22_000)
    # the value at each point is the newest sample at or before it; none before the first
    assert points == [
        (20_000, {"messages": 3.0}),
        (15_000, {"messages": 2.0}),
        (10_000, {"messages": 1.0}),
    ]
    assert s.series("missing", 60_000, 5000, 22_000) == []
    assert len(s.series("q", age_ms=10**12, incr_ms=1, now_ms=25_000)) <= 1_000
