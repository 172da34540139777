"""What a paged queue keeps in memory, and reads that must not change it.

`Queue.head_message` (the management API's head message timestamp) is the message the next
fetch takes, read in place; a purge that storage must hear reads the spill back a batch at a
time; the buffer of spilled publishes on their way to the store is bounded in bytes.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

from hypothesis import example, given, settings
from hypothesis import strategies as st

from ringmq.core.message import Message, SeqId
from ringmq.core.queue import MemorySpillStore, Queue
from ringmq.core.queue.paging import SPILL_BATCH_BYTES
from ringmq.core.settings import resolve_queue_settings
from ringmq.storage.bodystore import DiskSpillStore

from .histories import apply_op, queue_ops

_ops = queue_ops(80)
_args = st.sampled_from(
    [
        {},
        {"x-max-length": 5},
        {"x-max-priority": 3},
        {"x-ring-size": 3},
        {"x-last-value-key": "k"},
    ]
)
# A scheduled message released at the head above a spilled one (test_head_seq.py).
_RELEASED_ABOVE_THE_SPILL = (
    [("fetch", False, 0)] * 8 + [("publish", None, 0)] * 3 + [("tick", 20, 0)]
)


def _state(q: Queue) -> tuple[Any, ...]:
    return q.counters.snapshot(), q.spilled, q.paged_in_memory


@settings(max_examples=120, deadline=None)
@given(_args, _ops, st.integers(1, 6), st.booleans())
@example(args={}, ops=_RELEASED_ABOVE_THE_SPILL, bound=1, paged=True)
def test_head_message_is_the_next_delivery_read_in_place(
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
        # The oracle lists a copy in delivery order (`ready_view` pages the copy in).
        waiting = copy.deepcopy(q).ready_view()
        before = _state(q)
        head = q.head_message()
        assert _state(q) == before  # nothing paged in, no counter moved
        assert (head and head.body) == (waiting[0].message.body if waiting else None)


def test_head_message_of_a_paged_queue_reads_the_spill_front_in_place(tmp_path: Path) -> None:
    q = Queue("q", resolve_queue_settings("q", {}), spill=DiskSpillStore(tmp_path / "q"))
    q.set_memory_bound(1, 1 << 20)
    for i in range(300):
        q.publish(Message("", "q", b"", b"%03d" % i), 0)
    assert (q.counters.ready, q.spilled) == (1, 299)
    d = q.fetch(0, True)  # the one in memory; the lane is empty, the spill holds the rest
    assert d is not None
    assert d.message.body == b"000"
    assert (q.counters.ready, q.spilled) == (0, 299)
    for _ in range(3):
        head = q.head_message()
        assert head is not None
        assert head.body == b"001"
        assert (q.counters.ready, q.spilled) == (0, 299)
    q.requeue([d.seq], 0)  # back at its place, ahead of the spill
    head = q.head_message()
    assert head is not None
    assert head.body == b"000"


def test_purge_reads_a_paged_tail_back_one_batch_at_a_time(tmp_path: Path) -> None:
    # Storage must hear every purged seq (`on_remove`), so a purge reads the spill back; it
    # must never hold more of it in memory than a read-ahead batch past the head.
    q = Queue("q", resolve_queue_settings("q", {}), spill=DiskSpillStore(tmp_path / "q"))
    q.set_memory_bound(8, 1 << 20)
    for i in range(1000):
        q.publish(Message("", "q", b"", b"%04d" % i), 0)
    assert q.spilled == 992
    removed: list[SeqId] = []
    in_memory: list[int] = []

    def on_remove(seq: SeqId) -> None:
        removed.append(seq)
        in_memory.append(q.counters.ready)

    q.on_remove = on_remove
    assert q.purge() == 1000
    assert len(set(removed)) == 1000
    assert max(in_memory) <= 8 + 8 // 2
    assert (q.counters.ready, q.counters.paged, q.spilled, q.message_count) == (0, 0, 0, 0)


def test_spilled_publishes_wait_in_memory_below_a_byte_bound(tmp_path: Path) -> None:
    # New publishes behind a spill are buffered on their way to the store; counted paged,
    # they are in memory, so the buffer is bounded in bytes as well as in messages.
    q = Queue("q", resolve_queue_settings("q", {}), spill=DiskSpillStore(tmp_path / "q"))
    q.set_memory_bound(4, 1 << 20)
    body = b"x" * (256 * 1024)
    worst = 0
    for _ in range(200):
        q.publish(Message("", "q", b"", body), 0)
        worst = max(worst, q.paged_in_memory[1])
    assert q.publish_run([Message("", "q", b"", body) for _ in range(50)], 0) is None
    worst = max(worst, q.paged_in_memory[1])
    assert 0 < worst < SPILL_BATCH_BYTES
    assert q.counters.ready_bytes <= 1 << 20
    assert q.spilled == 246
    n, nbytes = q.paged_in_memory
    assert nbytes == n * len(body)
    got = 0
    while (d := q.fetch(0, False)) is not None:  # and every one comes back, in order
        assert d.message.body == body
        got += 1
        assert q.paged_in_memory[1] < SPILL_BATCH_BYTES
    assert got == 250
    assert q.paged_in_memory == (0, 0)
