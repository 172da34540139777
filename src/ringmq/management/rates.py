"""Message rates from periodic samples of monotonic counters.

Theory of operation: the core only keeps monotonic totals (published, delivered, acked, ...);
it never computes rates. The management app calls `RateSampler.sample(now_ms, totals)` on a
timer (and lazily before answering a request when the last sample is stale), never per
message. For each key (the whole broker, or one queue) it keeps the previous and the current
sample, so a rate is `(current - previous) / elapsed seconds`.

History: every key (the broker-wide one, each queue, each exchange) also keeps a ring of its
last `history_len` samples, as RabbitMQ's management keeps a short history server-side so that
a chart opened now already shows the last minutes. A ring (`_Ring`) is one flat `array('d')`
allocated when the key first appears: a row per sample, the time then each counter in the key's
fixed order (the names are stored once per key, not per sample). Memory is bounded and fixed: at
the defaults (121 rows of 13 doubles, 10 minutes at 5 s) a queue's ring is 12.6 KB, whatever the
message rate. The broker-wide rates of
`history()` and the per-key samples of `samples()` both read these rings (one implementation).
Keys that vanish from a sample (deleted queues) are forgotten with their ring. Time is an
argument (`now_ms`), so this module is pure and testable.
"""

from __future__ import annotations

from array import array
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Final

DEFAULT_INTERVAL_MS: Final = 5_000
HISTORY_SAMPLES: Final = 120
MAX_POINTS: Final = 1_000  # bound on the points of one `series` answer, whatever age/incr ask


@dataclass(slots=True)
class _Track:
    prev_ms: int
    prev: dict[str, int]
    cur_ms: int
    cur: dict[str, int]
    names: tuple[str, ...]
    ring: _Ring


class _Ring:
    """A fixed-size ring of rows of doubles: the time in ms, then one value per counter.

    One flat `array('d')` of `capacity * width` slots, allocated once: 8 bytes a value.
    """

    __slots__ = ("capacity", "count", "head", "slots", "width")

    def __init__(self, capacity: int, width: int) -> None:
        self.capacity, self.width = capacity, width
        self.slots = array("d", bytes(8 * capacity * width))
        self.head = 0  # the slot row the next append writes
        self.count = 0

    def append(self, row: tuple[float, ...]) -> None:
        at = self.head * self.width
        self.slots[at : at + self.width] = array("d", row)
        self.head = (self.head + 1) % self.capacity
        self.count = min(self.count + 1, self.capacity)

    def pop(self) -> None:
        """Forget the newest row."""
        self.head = (self.head - 1) % self.capacity
        self.count -= 1

    def last_time(self) -> float | None:
        if not self.count:
            return None
        return self.slots[((self.head - 1) % self.capacity) * self.width]

    def rows(self) -> Iterator[array[float]]:
        """The rows, oldest first."""
        for i in range(self.count):
            at = ((self.head - self.count + i) % self.capacity) * self.width
            yield self.slots[at : at + self.width]


@dataclass(slots=True)
class RateSampler:
    """Per-key counter samples and their rates (per second)."""

    interval_ms: int = DEFAULT_INTERVAL_MS
    history_key: str = ""
    history_len: int = HISTORY_SAMPLES
    last_ms: int | None = None
    _tracks: dict[str, _Track] = field(default_factory=dict)

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
                names = tuple(sorted(snapshot))
                # one row more than kept, so the oldest kept sample still has a rate
                ring = _Ring(self.history_len + 1, 1 + len(names))
                track = tracks[key] = _Track(now_ms, snapshot, now_ms, snapshot, names, ring)
            elif now_ms > track.cur_ms:
                track.prev_ms, track.prev = track.cur_ms, track.cur
                track.cur_ms, track.cur = now_ms, snapshot
            else:
                track.cur = snapshot
                if track.ring.last_time() == now_ms:
                    track.ring.pop()  # a second sample at the same instant replaces the first
            track.ring.append((now_ms, *(float(snapshot.get(n, 0)) for n in track.names)))
        self.last_ms = now_ms

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

    def samples(self, key: str, age_ms: int | None = None) -> list[tuple[int, dict[str, float]]]:
        """(sample time, counter values) of `key` from its ring, oldest first.

        With `age_ms`, only the samples of the last `age_ms` before the newest one.
        """
        track = self._tracks.get(key)
        if track is None:
            return []
        return self._window(track, age_ms)[-self.history_len :]

    def series(
        self, key: str, age_ms: int, incr_ms: int, now_ms: int
    ) -> list[tuple[int, dict[str, float]]]:
        """RabbitMQ's `samples` of `key`: newest first, at multiples of `incr_ms` back `age_ms`.

        The value at each point is the newest sample taken at or before it; points older than
        the ring (or than the key) are left out. At most `MAX_POINTS` points.
        """
        track = self._tracks.get(key)
        if track is None or not track.ring.count or incr_ms <= 0 or age_ms < 0:
            return []
        kept = self._window(track, None)[-self.history_len :]
        end = now_ms - now_ms % incr_ms
        out: list[tuple[int, dict[str, float]]] = []
        i = len(kept) - 1
        for step in range(min(age_ms // incr_ms, MAX_POINTS - 1) + 1):
            at = end - step * incr_ms
            while i >= 0 and kept[i][0] > at:
                i -= 1
            if i < 0:
                break
            out.append((at, kept[i][1]))
        return out

    @staticmethod
    def _window(track: _Track, age_ms: int | None) -> list[tuple[int, dict[str, float]]]:
        newest = track.ring.last_time() or 0
        return [
            (int(row[0]), dict(zip(track.names, row[1:], strict=True)))
            for row in track.ring.rows()
            if age_ms is None or newest - row[0] <= age_ms
        ]

    def history(self) -> list[tuple[int, dict[str, float]]]:
        """(sample time, rates) of the broker-wide key, oldest first.

        Each rate is between a sample and the one before it (0 for the very first).
        """
        track = self._tracks.get(self.history_key)
        if track is None:
            return []
        out: list[tuple[int, dict[str, float]]] = []
        prev: tuple[int, dict[str, float]] | None = None
        for t, values in self._window(track, None):
            elapsed_s = (t - prev[0]) / 1000 if prev else 0
            out.append(
                (
                    t,
                    {
                        name: round(max(0.0, value - prev[1].get(name, value)) / elapsed_s, 2)
                        if prev and elapsed_s > 0
                        else 0.0
                        for name, value in values.items()
                    },
                )
            )
            prev = (t, values)
        return out[-self.history_len :]
