"""Limits and the Qpid ring's age order: what a queue's counted set is measured against.

Theory of operation
-------------------
A queue has at most one `settings.Limit` (what is counted, count and byte bounds, the action).
This module holds the rules that read it: whether the counted set (ready + paged, plus
acquired when the limit counts them) with some extra messages would exceed it (`over`,
`over_count`, `over_bytes`), the reason a reject-publish limit gives (`refusal`), and the
plain-int thresholds the queue's bounded publish fast path compares (`FastBounds`), and which
fast paths a configuration allows (`FastPaths`: the one rule, whose `plain` every publish path
reads). The overflow actions themselves (evict, drop, dead-letter) change lanes: they are
`Overflow`'s (overflow.py, one `match` in `enforce`).

`QpidOrder` (held by `Overflow` under a Qpid ring limit) is the age order the legacy Qpid ring
evicts by: per priority level, the queue's entries (ready or acquired) in seq order.
Invariant: every READY or ACQUIRED entry of the queue is in the deque of its level, in
ascending seq; entries that leave are dropped lazily from the front (`oldest`).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, Final

from ringmq.core.queue.lanes import ACQUIRED, READY, Entry
from ringmq.core.queue.records import UNBOUNDED, QueueCounters
from ringmq.core.settings import Counted, Limit, LimitAction, QueueSettings

__all__ = [
    "FAST_ACTIONS",
    "PAGEABLE_ACTIONS",
    "QPID_ACTIONS",
    "FastBounds",
    "FastPaths",
    "QpidOrder",
    "describe",
    "over",
    "over_bytes",
    "over_count",
    "refusal",
]

FAST_ACTIONS: Final = (
    LimitAction.RING,
    LimitAction.DROP_HEAD,
    LimitAction.REJECT_PUBLISH,
    LimitAction.REJECT_PUBLISH_DLX,
)
"""Actions the bounded publish fast path handles (with a ready-counted limit)."""

PAGEABLE_ACTIONS: Final = (
    LimitAction.DROP_HEAD,
    LimitAction.REJECT_PUBLISH,
    LimitAction.REJECT_PUBLISH_DLX,
    LimitAction.DROP_NEW,
    LimitAction.BLOCK,
)
"""Actions that need no envelope in memory, so a queue with them can spill its tail."""

QPID_ACTIONS: Final = (LimitAction.QPID_RING, LimitAction.QPID_RING_STRICT)

_REJECT_ACTIONS: Final = (LimitAction.REJECT_PUBLISH, LimitAction.REJECT_PUBLISH_DLX)


@dataclass(frozen=True, slots=True)
class FastBounds:
    """The bounded fast path's thresholds as plain ints (`UNBOUNDED`: no such bound), so the
    hot path compares ints instead of reading the limit and its enum members."""

    reject_n: int = UNBOUNDED
    reject_b: int = UNBOUNDED
    evict_n: int = UNBOUNDED
    evict_b: int = UNBOUNDED
    reject_dlx: bool = False
    evict_ring: bool = False

    @classmethod
    def of(cls, limit: Limit | None) -> FastBounds:
        """The thresholds of `limit` (one of `FAST_ACTIONS`); none for None."""
        if limit is None:
            return cls()
        max_n = UNBOUNDED if limit.max_count is None else limit.max_count
        max_b = UNBOUNDED if limit.max_bytes is None else limit.max_bytes
        if limit.action is LimitAction.RING:
            return cls(evict_n=max_n, evict_ring=True)  # Artemis rings count messages only
        if limit.action is LimitAction.DROP_HEAD:
            return cls(evict_n=max_n, evict_b=max_b)
        return cls(
            reject_n=max_n,
            reject_b=max_b,
            reject_dlx=limit.action is LimitAction.REJECT_PUBLISH_DLX,
        )


@dataclass(frozen=True, slots=True)
class FastPaths:
    """Which fast paths a queue's configuration allows: computed by `of` alone, once per
    settings change (`Queue._apply`) and when the first message with an expiry time arrives,
    and read by every path that has a fast one (see engine.py)."""

    plain: bool
    """No setting changes what a publish does, and no message so far had an expiry time: no
    limit, message TTL, LVQ key, priorities or non-destructive consumption. The one answer
    to "may a publish to this queue take its fast path?" (`Queue.plain`), read by the
    engine's plain publish, the publisher's per-queue step (core/publish.py) and the bulk
    ingest of runs and columns (`Queue.takes_runs`, core/ingest.py). Settings it leaves
    alone: dead-lettering (publish refuses and evicts nothing on a queue without a limit or
    TTL), the delivery limit (settlement), the queue's own expiry and single active consumer
    (dispatch). tests/unit/core/queue/test_fast_paths.py classifies every queue argument."""
    bounded: Limit | None
    """Publish: the limit, when a ready-counted `FAST_ACTIONS` limit is the only option."""
    fetch: bool
    """Fetch: one lane, no expiry to check, destructive consumers."""
    lvq: bool
    """Publish: the LVQ key is the only option."""
    pageable: bool
    """The tail may page: one lane, no LVQ, destructive consumers, and no limit that needs
    envelopes in memory (`PAGEABLE_ACTIONS`); `Queue.pageable` adds "no browse index"."""

    @classmethod
    def of(cls, settings: QueueSettings, saw_expiry: bool, *, grouped: bool = False) -> FastPaths:
        """The fast paths of `settings`; none that checks no expiry once a message had one,
        and no plain one once a message had a group id (`grouped`: core/groups.py, whose
        owners dispatch asks message by message)."""
        limit = settings.limit
        fetch = (
            settings.message_ttl_ms is None
            and not saw_expiry
            and not settings.max_priority
            and not settings.non_destructive
        )
        simple = fetch and settings.lvq_key is None
        bounded = (
            simple
            and limit is not None
            and limit.counts is Counted.READY
            and limit.action in FAST_ACTIONS
        )
        return cls(
            plain=simple and limit is None and not grouped,
            bounded=limit if bounded else None,
            fetch=fetch,
            lvq=settings.lvq_key is not None and limit is None and fetch,
            pageable=(
                not settings.max_priority
                and settings.lvq_key is None
                and not settings.non_destructive
                and (limit is None or limit.action in PAGEABLE_ACTIONS)
            ),
        )


def over(limit: Limit, c: QueueCounters, extra_n: int, extra_b: int) -> bool:
    """Whether the counted set plus (extra_n, extra_b) exceeds the limit."""
    n = c.ready + c.paged + extra_n
    b = c.ready_bytes + c.paged_bytes + extra_b
    if limit.counts is Counted.READY_AND_ACQUIRED:
        n += c.unacked
        b += c.unacked_bytes
    return (limit.max_count is not None and n > limit.max_count) or (
        limit.max_bytes is not None and b > limit.max_bytes
    )


def over_count(limit: Limit, c: QueueCounters, extra_n: int) -> bool:
    """Whether the counted messages plus `extra_n` exceed the count bound."""
    n = c.ready + c.paged + extra_n
    if limit.counts is Counted.READY_AND_ACQUIRED:
        n += c.unacked
    return limit.max_count is not None and n > limit.max_count


def over_bytes(limit: Limit, c: QueueCounters, extra_b: int) -> bool:
    """Whether the counted bytes plus `extra_b` exceed the byte bound."""
    b = c.ready_bytes + c.paged_bytes + extra_b
    if limit.counts is Counted.READY_AND_ACQUIRED:
        b += c.unacked_bytes
    return limit.max_bytes is not None and b > limit.max_bytes


def refusal(limit: Limit | None, c: QueueCounters, n: int, nbytes: int) -> str | None:
    """Why a reject-publish limit would refuse `n` more messages of `nbytes` bytes in all;
    None when they fit or the limit is not a reject-type one."""
    if limit is None or limit.action not in _REJECT_ACTIONS:
        return None
    if over_count(limit, c, n):
        return f"would exceed its limit of {limit.max_count} messages"
    if over_bytes(limit, c, nbytes):
        return f"would exceed its limit of {limit.max_bytes} bytes"
    return None


def describe(limit: Limit | None) -> dict[str, Any] | None:
    """The limit as management shows it."""
    if limit is None:
        return None
    return {
        "family": limit.family,
        "counts": str(limit.counts),
        "max_count": limit.max_count,
        "max_bytes": limit.max_bytes,
        "action": str(limit.action),
    }


class QpidOrder:
    """The Qpid legacy ring's age order (see the module docstring)."""

    __slots__ = ("_levels",)

    def __init__(self, levels: int, live: Iterable[Entry]) -> None:
        self._levels: list[deque[Entry]] = [deque() for _ in range(levels)]
        for e in sorted(live):
            self._levels[e.level].append(e)

    def insert(self, e: Entry) -> None:
        """Add an entry that joined the queue (new, restored or a released scheduled one)."""
        dq = self._levels[e.level]
        if not dq or dq[-1].seq < e.seq:
            dq.append(e)
        elif e not in dq:
            # Released scheduled message with an old seq: keep the age order.
            items = sorted([*dq, e])
            dq.clear()
            dq.extend(items)

    def oldest(self) -> Entry | None:
        """The oldest enqueued entry (ready or acquired), lowest priority first (Qpid ring
        order)."""
        for dq in self._levels:
            while dq and dq[0].state not in (READY, ACQUIRED):
                dq.popleft()
            if dq:
                return dq[0]
        return None
