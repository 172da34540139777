"""Message rates from periodic samples of monotonic counters.

Theory of operation: the core only keeps monotonic totals (published, delivered, acked, ...);
it never computes rates. The management app calls `RateSampler.sample(now_ms, totals)` on a
timer (and lazily before answering a request when the last sample is stale), never per
message. For each key (the whole broker, or one queue) it keeps the previous and the current
sample, so a rate is `(current - previous) / elapsed seconds`. The broker-wide key also keeps a
bounded history of rates for the console's live plot. Keys that vanish from a sample (deleted
queues) are forgotten. Time is an argument (`now_ms`), so this module is pure and testable.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Final

DEFAULT_INTERVAL_MS: Final = 5_000
HISTORY_SAMPLES: Final = 120


@dataclass(slots=True)
class _Track:
    prev_ms: int
    prev: dict[str, int]
    cur_ms: int
    cur: dict[str, int]


@dataclass(slots=True)
class RateSampler:
    """Per-key counter samples and their rates (per second)."""

    interval_ms: int = DEFAULT_INTERVAL_MS
    history_key: str = ""
    history_len: int = HISTORY_SAMPLES
    last_ms: int | None = None
    _tracks: dict[str, _Track] = field(default_factory=dict)
    _history: deque[tuple[int, dict[str, float]]] = field(default_factory=deque)

    def due(self, now_ms: int) -> bool:
        """True when no sample was taken in the last `interval_ms`."""
        return self.last_ms is None or now_ms - self.last_ms >= self.interval_ms

    def sample(self, now_ms: int, totals: Mapping[str, Mapping[str, int]]) -> None:
        """Record the counters of every key at `now_ms`; drop keys that are gone."""
        tracks = self._tracks
        for key in list(tracks):
            if key not in totals:
                del tracks[key]
        for key, counters in totals.items():
            snapshot = dict(counters)
            track = tracks.get(key)
            if track is None:
                tracks[key] = _Track(now_ms, snapshot, now_ms, snapshot)
            elif now_ms > track.cur_ms:
                track.prev_ms, track.prev = track.cur_ms, track.cur
                track.cur_ms, track.cur = now_ms, snapshot
            else:
                track.cur = snapshot
        self.last_ms = now_ms
        if self.history_key in tracks:
            self._history.append((now_ms, self.rates(self.history_key)))
            while len(self._history) > self.history_len:
                self._history.popleft()

    def rates(self, key: str) -> dict[str, float]:
        """Per-second rate of each counter of `key` between its last two samples (0 if one)."""
        track = self._tracks.get(key)
        if track is None:
            return {}
        elapsed_s = (track.cur_ms - track.prev_ms) / 1000
        if elapsed_s <= 0:
            return dict.fromkeys(track.cur, 0.0)
        # counters only grow; one that went down was reset (its queue deleted and declared
        # again under the same key): no negative rate, which the console would draw below 0
        return {
            name: round(max(0, value - track.prev.get(name, value)) / elapsed_s, 2)
            for name, value in track.cur.items()
        }

    def rate(self, key: str, counter: str) -> float:
        return self.rates(key).get(counter, 0.0)

    def history(self) -> list[tuple[int, dict[str, float]]]:
        """(sample time, rates) of the broker-wide key, oldest first."""
        return list(self._history)
