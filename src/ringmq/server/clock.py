"""Clocks: the only place the broker reads time.

`Clock` gives wall time in milliseconds (persisted: TTL expiry, scheduled `due_ms`, message
timestamps) and a monotonic time in seconds (heartbeats, handshake timeout, rates). The core never
reads a clock; the server passes `now_ms = clock.wall_ms()` into every core call.

`FakeClock` moves both together under test control, so timer logic is tested without sleeping.
"""

from __future__ import annotations

import time
from typing import Protocol


class Clock(Protocol):
    """Source of time for the server layer."""

    def wall_ms(self) -> int:
        """Milliseconds since the Unix epoch."""
        ...

    def monotonic(self) -> float:
        """Seconds on a clock that never goes backwards."""
        ...


class SystemClock:
    """The real clock: `time.time_ns` and `time.monotonic`."""

    __slots__ = ()

    def wall_ms(self) -> int:
        return time.time_ns() // 1_000_000

    def monotonic(self) -> float:
        return time.monotonic()


class FakeClock:
    """A clock that only moves when told to.

    Args:
        wall_ms: initial wall time in milliseconds.
        monotonic: initial monotonic time in seconds.
    """

    __slots__ = ("_mono", "_wall_ms")

    def __init__(self, wall_ms: int = 1_700_000_000_000, monotonic: float = 1000.0) -> None:
        self._wall_ms = wall_ms
        self._mono = monotonic

    def wall_ms(self) -> int:
        return self._wall_ms

    def monotonic(self) -> float:
        return self._mono

    def advance(self, ms: int) -> None:
        """Move both clocks forward by `ms` milliseconds."""
        if ms < 0:
            raise ValueError("a clock cannot go backwards")
        self._wall_ms += ms
        self._mono += ms / 1000.0
