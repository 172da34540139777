"""The login throttle and the log limiter, on a fake clock (issue 16, 1.6)."""

from __future__ import annotations

import logging

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ringmq.core.throttle import LoginGuard, LoginThrottle, LogLimiter

T0 = 1_000_000


def test_the_first_failures_are_free_then_delays_double_up_to_the_cap() -> None:
    t = LoginThrottle(free=3, base_ms=1000, max_ms=5000)
    now = T0
    delays = []
    for _ in range(8):
        delay = t.attempt("10.0.0.1", now)
        assert delay is not None
        delays.append(delay)
        now += delay  # the client waits its turn, then fails
        t.failed("10.0.0.1", now)
    assert delays == [0, 0, 0, 1000, 2000, 4000, 5000, 5000]
    assert t.attempt("10.0.0.2", now) == 0  # other addresses are not affected


def test_a_success_resets_the_address() -> None:
    t = LoginThrottle(free=1, base_ms=100, max_ms=1000)
    for _ in range(3):
        t.failed("a", T0)
    assert t.penalty_ms("a", T0) == 400
    t.succeeded("a")
    assert t.penalty_ms("a", T0) == 0
    assert t.attempt("a", T0) == 0


def test_parallel_attempts_queue_and_past_the_cap_are_refused_unchecked() -> None:
    t = LoginThrottle(free=1, base_ms=1000, max_ms=2500)
    t.failed("a", T0)  # penalty 1000 ms
    assert [t.attempt("a", T0) for _ in range(3)] == [1000, 2000, None]


def test_an_address_is_forgotten_after_a_quiet_period_and_the_table_is_bounded() -> None:
    t = LoginThrottle(free=0, base_ms=10, max_ms=10, forget_ms=1000, max_sources=3)
    t.failed("a", T0)
    assert t.penalty_ms("a", T0 + 999) == 10
    assert t.penalty_ms("a", T0 + 1000) == 0
    for i in range(10):
        t.failed(f"s{i}", T0 + i)
    assert len(t) == 3
    assert t.failures("s9", T0 + 10) == 1
    assert t.failures("s0", T0 + 10) == 0  # the longest idle went first


@given(
    st.lists(
        st.tuples(
            st.sampled_from(["a", "b"]), st.sampled_from(["fail", "ok"]), st.integers(0, 3000)
        ),
        max_size=60,
    )
)
def test_checked_attempts_from_one_address_are_spaced_by_the_penalty(
    steps: list[tuple[str, str, int]],
) -> None:
    # whatever the interleaving: no delay above the cap, and while an address is penalised
    # its checks never come closer together than the penalty in force
    t = LoginThrottle(free=2, base_ms=100, max_ms=800, forget_ms=10**9)
    now = T0
    last_check: dict[str, int] = {}
    for source, outcome, gap in steps:
        now += gap
        penalty = t.penalty_ms(source, now)
        delay = t.attempt(source, now)
        if delay is None:
            continue
        assert 0 <= delay <= 800
        at = now + delay
        if penalty and source in last_check:
            assert at - last_check[source] >= penalty
        last_check[source] = at
        if outcome == "fail":
            t.failed(source, at)
        else:
            t.succeeded(source)
            assert t.penalty_ms(source, at) == 0


def test_log_limiter_admits_one_line_per_period_and_counts_the_rest() -> None:
    lim = LogLimiter(period_ms=1000)
    assert lim.admit(T0) == 0
    assert [lim.admit(T0 + i) for i in range(1, 5)] == [None] * 4
    assert lim.due(T0 + 500) == 0  # not yet
    assert lim.admit(T0 + 1000) == 4
    lim.admit(T0 + 1001)
    assert lim.due(T0 + 2000) == 1  # the summary of a burst that ended
    assert lim.due(T0 + 3000) == 0


def test_guard_logs_user_and_source_rate_limited(caplog: pytest.LogCaptureFixture) -> None:
    g = LoginGuard(LoginThrottle(free=3), log_period_ms=10_000)
    with caplog.at_level(logging.WARNING, logger="ringmq.core.throttle"):
        for i in range(50):
            g.failed("192.0.2.7", "mallory", "AMQP", "bad password", T0 + i)
        g.flush_log(T0 + 10_000)
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 2
    assert "user 'mallory' from 192.0.2.7" in lines[0]
    assert lines[1] == "49 more failed or refused logins not logged"
