"""Queue.head_seq: the lowest ready or unacked seq, without paging the queue in."""

from __future__ import annotations

import copy
from typing import Any

from hypothesis import example, given, settings
from hypothesis import strategies as st

from ringmq.core.message import Message, SeqId
from ringmq.core.queue import MemorySpillStore, Queue
from ringmq.core.settings import resolve_queue_settings

from .histories import apply_op, queue_ops

_ops = queue_ops(80)
_args = st.sampled_from(
    [
        {},
        {"x-max-length": 5},
        {"x-max-length": 4, "x-overflow": "reject-publish"},
        {"x-max-priority": 3},
        {"x-ring-size": 3},
        {"x-last-value-key": "k"},
    ]
)


def _by_browse(q: Queue) -> SeqId | None:
    # The definition the streams API used before: the first ready message in seq order
    # (through the browse index) or the oldest unacked message, whichever is lower.
    d = q.browse(None, 0)
    found = [min(q.unacked_seqs())] if q.unacked_count else []
    if d is not None:
        found.append(d.seq)
    return min(found) if found else None


# A scheduled message released at the head above a spilled one (the spill continues the
# tail, not everything in memory): seq 3 is released, seq 1 pages out behind it.
_RELEASED_ABOVE_THE_SPILL = (
    [("fetch", False, 0)] * 8 + [("publish", None, 0)] * 3 + [("tick", 20, 0)]
)


@settings(max_examples=120, deadline=None)
@given(_args, _ops, st.integers(1, 6), st.booleans())
@example(args={}, ops=_RELEASED_ABOVE_THE_SPILL, bound=1, paged=True)
def test_head_seq_equals_the_browse_definition(
    args: dict[str, Any], ops: list[tuple[str, Any, int]], bound: int, paged: bool
) -> None:
    q = Queue("q", resolve_queue_settings("q", args))
    if paged:
        q.set_spill(MemorySpillStore())
        q.set_memory_bound(bound, 1 << 20)
    now = 0
    unacked: list[SeqId] = []
    for i, op in enumerate(ops):
        now = apply_op(q, op, i, now, unacked)
        # The oracle browses a copy: its browse index must not change the queue under test.
        expected = _by_browse(copy.deepcopy(q))
        spilled = q.spilled
        assert q.head_seq() == expected
        assert q.spilled <= spilled  # at most a read-ahead batch came back
        assert q._index is None  # no browse index, so paging goes on


def test_head_seq_of_a_paged_queue_pages_nothing_in() -> None:
    q = Queue("q", resolve_queue_settings("q", {}))
    q.set_spill(MemorySpillStore())
    q.set_memory_bound(4, 1 << 20)
    for i in range(100):
        q.publish(Message("", "q", b"", str(i).encode()), 0)
    assert q.spilled == 96
    assert q.head_seq() == SeqId(1)
    assert q.spilled == 96
    for _ in range(4):  # memory runs dry; the spill is behind every message in memory
        d = q.fetch(0, True)
        assert d is not None
    assert q.head_seq() == SeqId(1)  # the unacked ones are the head
    q.ack([SeqId(s) for s in range(1, 5)])
    spilled = q.spilled
    assert q.head_seq() == SeqId(5)  # the next message, paged in by the fetches or by us
    assert spilled - q.spilled <= 2  # one read-ahead batch at most (half the bound)
    assert q._index is None


def test_head_seq_sees_requeued_and_unacked_messages() -> None:
    q = Queue("q", resolve_queue_settings("q", {}))
    for body in (b"a", b"b", b"c"):
        q.publish(Message("", "q", b"", body), 0)
    first = q.fetch(0, True)
    assert first is not None
    assert q.head_seq() == first.seq  # unacked
    q.requeue([first.seq], 0)
    assert q.head_seq() == first.seq  # back among the returns, before the tail


def test_head_seq_of_an_empty_queue() -> None:
    q = Queue("q", resolve_queue_settings("q", {}))
    assert q.head_seq() is None
    q.publish(Message("", "q", b"", b"x"), 0)
    d = q.fetch(0, False)
    assert d is not None
    assert q.head_seq() is None
