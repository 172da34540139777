"""Random queue histories for the engine's property tests (browse_many, browse_ready, head_seq)."""

from __future__ import annotations

from typing import Any

from hypothesis import strategies as st

from ringmq.core.message import Message, SeqId
from ringmq.core.queue import Queue


def queue_ops(max_size: int) -> st.SearchStrategy[list[tuple[str, Any, int]]]:
    """Lists of (op, a, b): publish (TTL ms or None, priority), fetch (ack_required), ack
    and requeue (index into the unacked), tick (ms)."""
    return st.lists(
        st.one_of(
            st.tuples(st.just("publish"), st.none() | st.integers(1, 50), st.integers(0, 3)),
            st.tuples(st.just("fetch"), st.booleans(), st.just(0)),
            st.tuples(st.just("ack"), st.integers(0, 5), st.just(0)),
            st.tuples(st.just("requeue"), st.integers(0, 5), st.just(0)),
            st.tuples(st.just("tick"), st.integers(0, 30), st.just(0)),
        ),
        max_size=max_size,
    )


def apply_op(q: Queue, op: tuple[str, Any, int], i: int, now: int, unacked: list[SeqId]) -> int:
    """Apply the `i`-th op of a `queue_ops` history to `q`; returns the new clock.

    Publishes carry the LVQ key header `k` (three values) and every fifth a 20 ms `x-delay`
    (scheduled, later released at the head); fetched unacked seqs are kept in `unacked`.
    """
    kind, a, b = op
    if kind == "publish":
        headers: dict[str, Any] = {"k": str(i % 3)}
        if i % 5 == 0:
            headers["x-delay"] = 20
        q.publish(
            Message("", "q", b"", f"m{i}".encode(), headers, priority=b, expiration_ms=a), now
        )
    elif kind == "fetch":
        d = q.fetch(now, a)
        if d is not None and a:
            unacked.append(d.seq)
    elif kind == "ack" and unacked:
        q.ack([unacked.pop(a % len(unacked))])
    elif kind == "requeue" and unacked:
        q.requeue([unacked.pop(a % len(unacked))], now)
    elif kind == "tick":
        now += a
        q.tick(now)
    return now
