"""Paging is transparent: a queue paging its tail delivers what the same queue in memory does."""

from __future__ import annotations

from typing import Any

from hypothesis import example, given, settings
from hypothesis import strategies as st

from ringmq.core.message import SeqId
from ringmq.core.queue import MemorySpillStore, Queue
from ringmq.core.settings import resolve_queue_settings

from .histories import apply_op, queue_ops

_args = st.sampled_from(
    [
        {},
        {"x-max-length": 5},
        {"x-max-length": 4, "x-overflow": "reject-publish"},
        {"x-message-ttl": 15},
        {"x-max-priority": 3},  # not pageable: both stay in memory
    ]
)

# Seq 3 is released from the schedule to the head while seqs 1 and 2 are spilled, fetched,
# then requeued: it goes back by seq, behind the spilled ones, as in memory.
_RELEASED_THEN_REQUEUED = (
    [("fetch", False, 0)] * 3
    + [("publish", None, 0)] * 3
    + [("tick", 20, 0), ("fetch", True, 0), ("requeue", 0, 0)]
    + [("fetch", False, 0)] * 3
)


@settings(max_examples=100, deadline=None)
@given(_args, queue_ops(80), st.integers(1, 6))
@example(args={}, ops=_RELEASED_THEN_REQUEUED, bound=1)
def test_a_paged_queue_delivers_as_the_same_queue_in_memory(
    args: dict[str, Any], ops: list[tuple[str, Any, int]], bound: int
) -> None:
    mem = Queue("q", resolve_queue_settings("q", args))
    paged = Queue("q", resolve_queue_settings("q", args))
    paged.set_spill(MemorySpillStore())
    paged.set_memory_bound(bound, 1 << 20)
    now = 0
    unacked_mem: list[SeqId] = []
    unacked_paged: list[SeqId] = []
    for i, op in enumerate(ops):
        if op[0] == "fetch":
            a, b = mem.fetch(now, op[1]), paged.fetch(now, op[1])
            assert (a and a.seq) == (b and b.seq)
            if a is not None and b is not None and op[1]:
                unacked_mem.append(a.seq)
                unacked_paged.append(b.seq)
            continue
        before = now
        now = apply_op(mem, op, i, before, unacked_mem)
        apply_op(paged, op, i, before, unacked_paged)
        assert mem.head_seq() == paged.head_seq()
        assert mem.message_count == paged.message_count
    mem.requeue(unacked_mem, now)
    paged.requeue(unacked_paged, now)
    rest_mem = [d.seq for d in iter(lambda: mem.fetch(now, False), None)]
    rest_paged = [d.seq for d in iter(lambda: paged.fetch(now, False), None)]
    assert rest_mem == rest_paged
