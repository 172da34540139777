"""Random queue histories for the engine's property tests (browse_many, head_seq)."""

from __future__ import annotations

from typing import Any

from hypothesis import strategies as st


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
