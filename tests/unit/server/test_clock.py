from __future__ import annotations

import pytest

from ringmq.server.clock import Clock, FakeClock, SystemClock


def test_fake_clock_moves_both_clocks() -> None:
    c = FakeClock(wall_ms=1000, monotonic=5.0)
    c.advance(1500)
    assert c.wall_ms() == 2500
    assert c.monotonic() == pytest.approx(6.5)
    with pytest.raises(ValueError, match="backwards"):
        c.advance(-1)


def test_system_clock_is_sane() -> None:
    c: Clock = SystemClock()
    a = c.monotonic()
    assert c.monotonic() >= a
    assert c.wall_ms() > 1_600_000_000_000
