"""A timer wheel: keys due at a time, handed out by the first look at or after it.

Theory of operation: time is cut into ticks of `tick_ms`; a key scheduled for `due_ms` waits in
the bucket of the tick that holds that time (`due_ms // tick_ms`), with its exact due time.
`pop_due(now_ms)` takes out whole buckets of the ticks before the one `now_ms` is in (all of
their keys are due) and, from the bucket of `now_ms`'s own tick, the keys due by then. So a key
comes out at the first `pop_due` whose `now_ms` reaches its due time: never earlier, and no
later than the caller looks (the server's sweep looks twice a second, as it did when it
visited every connection). Each key waits at most once: scheduling a key that already waits
keeps the earlier of the two times (the callers re-check what is due when they visit, so an
early visit costs one look, while a late one would break a timeout), and `cancel` takes it out.

Buckets live in a dict by tick number, with a heap of the tick numbers that have one, so a
clock that jumps hours ahead (a suspended machine, a test's fake clock) costs the buckets that
exist, not the ticks that passed. A bucket emptied by `cancel` or by a partial take stays until
its tick has passed, so a tick number is on the heap once. Cost: O(log buckets) for a schedule
that opens a bucket, O(1) for any other schedule or cancel, O(keys due + keys of the current
tick) for `pop_due`.

Owns only its keys' due times; pure (no clock, no I/O). The server's sweep (server/timers.py)
keeps its connections' keep-alive deadlines here.
"""

from __future__ import annotations

import heapq
from collections.abc import Hashable
from typing import Generic, TypeVar

K = TypeVar("K", bound=Hashable)


class TimerWheel(Generic[K]):
    """Keys waiting for their due time (see the module docstring).

    Args:
        tick_ms: the width of a bucket (about how often the owner calls `pop_due`).
    """

    __slots__ = ("_buckets", "_due", "_heap", "tick_ms")

    def __init__(self, tick_ms: int) -> None:
        if tick_ms <= 0:
            raise ValueError(f"tick_ms must be positive, not {tick_ms}")
        self.tick_ms = tick_ms
        self._buckets: dict[int, dict[K, int]] = {}
        """Tick number -> its waiting keys and their due times."""
        self._heap: list[int] = []
        self._due: dict[K, int] = {}
        """Each waiting key's due time."""

    def __len__(self) -> int:
        return len(self._due)

    def __contains__(self, key: object) -> bool:
        return key in self._due

    def due_ms(self, key: K) -> int | None:
        """When `key` is due, or None when it does not wait."""
        return self._due.get(key)

    def schedule(self, key: K, due_ms: int) -> None:
        """Hand `key` out once `due_ms` is reached (or earlier, if it already waits for an
        earlier time)."""
        due = self._due
        old = due.get(key)
        if old is not None:
            if old <= due_ms:
                return
            del self._buckets[old // self.tick_ms][key]
        due[key] = due_ms
        tick = due_ms // self.tick_ms
        bucket = self._buckets.get(tick)
        if bucket is None:
            bucket = self._buckets[tick] = {}
            heapq.heappush(self._heap, tick)
        bucket[key] = due_ms

    def cancel(self, key: K) -> None:
        """Take `key` out (nothing when it does not wait)."""
        old = self._due.pop(key, None)
        if old is not None:
            del self._buckets[old // self.tick_ms][key]

    def pop_due(self, now_ms: int) -> list[K]:
        """Take out and return every key due by `now_ms`, earliest tick first (in the order
        they were scheduled within a tick)."""
        heap = self._heap
        current = now_ms // self.tick_ms
        if not heap or heap[0] > current:
            return []
        out: list[K] = []
        buckets = self._buckets
        due = self._due
        while heap and heap[0] < current:
            bucket = buckets.pop(heapq.heappop(heap))
            for key in bucket:
                del due[key]
            out.extend(bucket)
        if heap and heap[0] == current:
            bucket = buckets[current]
            ready = [key for key, due_ms in bucket.items() if due_ms <= now_ms]
            for key in ready:
                del bucket[key]
                del due[key]
            out.extend(ready)
        return out


__all__ = ["TimerWheel"]
