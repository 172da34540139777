"""Queue.browse_ready: browse_many's answer, without the browse index (paging goes on);
Queue.browse_columns: the same rows as columns."""

from __future__ import annotations

import copy
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from ringmq.core.message import Message, SeqId
from ringmq.core.queue import Delivery, MemorySpillStore, Queue
from ringmq.core.queue.columns import Columns
from ringmq.core.settings import resolve_queue_settings

from .histories import apply_op, queue_ops

_args = st.sampled_from(
    [
        {},
        {"x-max-length": 6},
        {"x-max-length": 5, "x-overflow": "reject-publish"},
        {"x-max-priority": 3},  # not pageable: browse_many answers
        {"x-ring-size": 4},
        {"x-last-value-key": "k"},
    ]
)


def _key(ds: list[Delivery]) -> list[tuple[Any, ...]]:
    return [(d.seq, d.message.body, d.redelivered, d.delivery_count) for d in ds]


_COLUMNS = (
    "seqs",
    "redelivered",
    "timestamps",
    "exchanges",
    "routing_keys",
    "properties",
    "bodies",
)


def _ready(q: Queue, after: SeqId | None, limit: int, now_ms: int) -> list[Delivery]:
    """`q.browse_ready(...)`, checked against `q.browse_columns(...)` (same rows)."""
    got = q.browse_ready(after, limit, now_ms)
    want = Columns()
    for d in got:
        want.add_message(d.seq, d.redelivered, d.message)
    cols = q.browse_columns(after, limit, now_ms)
    for name in _COLUMNS:
        assert getattr(cols, name) == getattr(want, name), name
    return got


@settings(max_examples=150, deadline=None)
@given(_args, queue_ops(80), st.integers(1, 6), st.booleans(), st.data())
def test_browse_ready_equals_browse_many(
    args: dict[str, Any],
    ops: list[tuple[str, Any, int]],
    bound: int,
    paged: bool,
    data: st.DataObject,
) -> None:
    q = Queue("q", resolve_queue_settings("q", args))
    if paged:
        q.set_spill(MemorySpillStore())
        q.set_memory_bound(bound, 1 << 20)
    now = 0
    unacked: list[SeqId] = []
    for i, op in enumerate(ops):
        now = apply_op(q, op, i, now, unacked)
        if i % 4 == 0:
            after = data.draw(st.none() | st.integers(0, i + 2).map(SeqId))
            limit = data.draw(st.integers(0, 12))
            pageable = paged and q.pageable
            expected = copy.deepcopy(q).browse_many(after, limit, now)
            spilled = q.spilled
            assert _key(_ready(q, after, limit, now)) == _key(expected)
            if pageable:
                assert q._index is None  # paging goes on
                assert q.spilled == spilled  # nothing paged in


def test_a_paged_queue_is_browsed_to_its_end_and_stays_paged() -> None:
    q = Queue("q", resolve_queue_settings("q", {}))
    q.set_spill(MemorySpillStore())
    q.set_memory_bound(4, 1 << 20)
    for i in range(100):
        q.publish(Message("", "q", b"", b"%d" % i), 0)
    first = q.fetch(0, True)
    assert first is not None
    q.requeue([first.seq], 0)
    assert q.spilled > 80
    seen: list[Delivery] = []
    after: SeqId | None = None
    while page := _ready(q, after, 7, 0):
        seen += page
        after = page[-1].seq
    assert [d.message.body for d in seen] == [b"%d" % i for i in range(100)]
    assert [(d.redelivered, d.delivery_count) for d in seen[:2]] == [(True, 2), (False, 1)]
    assert q._index is None
    assert q.spilled > 80


def test_requeued_and_released_messages_come_in_seq_order() -> None:
    # Requeued messages wait in a heap (its list is not sorted) and released scheduled ones at
    # the head of the lane: the in-memory part must be sorted by seq, as the index is.
    q = Queue("q", resolve_queue_settings("q", {}))
    q.set_spill(MemorySpillStore())
    q.set_memory_bound(8, 1 << 20)
    q.publish(Message("", "q", b"", b"later", {"x-delay": 10}), 0)  # seq 1, scheduled
    for i in range(2, 8):
        q.publish(Message("", "q", b"", b"%d" % i), 0)
    for _ in range(4):  # seqs 2..5
        assert q.fetch(0, True) is not None
    for seq in (3, 5, 2, 4):  # the heap's list ends up [2, 4, 3, 5]
        q.requeue([SeqId(seq)], 0)
    q.tick(10)  # seq 1 is released at the head
    expected = copy.deepcopy(q).browse_many(None, 100, 10)
    assert [d.seq for d in expected] == [1, 2, 3, 4, 5, 6, 7]
    assert _key(_ready(q, None, 100, 10)) == _key(expected)
    assert _key(_ready(q, SeqId(3), 2, 10)) == _key(expected[3:5])


def test_a_recovered_backlog_is_browsed_with_its_stored_flags() -> None:
    # After a crash the backlog past the head stays in the spill with its stored flags; a
    # browse must show them as consumers will get them (as browse_many, which pages in).
    for redelivered in (True, False):
        q = Queue("q", resolve_queue_settings("q", {}))
        q.set_memory_bound(2, 1 << 20)
        for seq in (1, 2):
            msg = Message("", "q", b"", b"%d" % seq)
            q.restore(
                SeqId(seq),
                msg,
                redelivered=redelivered,
                delivery_count=0,
                expiry_ms=None,
                due_ms=None,
            )
        spill = MemorySpillStore()
        spill.push_back([(SeqId(s), Message("", "q", b"", b"%d" % s), None) for s in range(3, 9)])
        q.restore_spilled(
            spill,
            6,
            6,
            redelivered=redelivered,
            delivery_counts={SeqId(4): 3},
            expiring=False,
            below=SeqId(9),
        )
        q.resume_seqs(SeqId(9))
        q.publish(Message("", "q", b"", b"9"), 0)  # a new message: not restored
        expected = copy.deepcopy(q).browse_many(None, 100, 0)
        assert [d.seq for d in expected] == list(range(1, 10))
        got = _ready(q, None, 100, 0)
        assert _key(got) == _key(expected)
        assert (got[3].redelivered, got[3].delivery_count) == (True, 4)
        assert got[8].redelivered is False
        assert q._index is None
        assert q.spilled == 7
        fetched = [q.fetch(0, True) for _ in range(9)]
        assert _key([d for d in fetched if d is not None]) == _key(got)


def test_a_message_released_at_the_head_above_the_spill_is_browsed_in_seq_order() -> None:
    # The spill continues the tail, not everything in memory: seq 3, released at the head,
    # is in memory while seqs 1 and 2 are spilled.
    q = Queue("q", resolve_queue_settings("q", {}))
    q.set_spill(MemorySpillStore())
    q.set_memory_bound(1, 1 << 20)
    for body, headers in ((b"a", None), (b"b", None), (b"c", {"x-delay": 20})):
        q.publish(Message("", "q", b"", body, headers), 0)
    q.tick(20)
    assert q.spilled == 2
    expected = copy.deepcopy(q).browse_many(None, 3, 20)
    assert [d.seq for d in expected] == [1, 2, 3]
    for limit in (1, 2, 3):
        assert _key(_ready(q, None, limit, 20)) == _key(expected[:limit])
    assert _key(_ready(q, SeqId(1), 3, 20)) == _key(expected[1:])
    assert q.spilled == 2


def test_memory_rows_between_spilled_ones_are_merged_by_seq() -> None:
    # A scheduled message released at the head has a higher seq than the spilled ones: the
    # columns of memory and spill interleave (Columns.merged's slow path).
    q = Queue("q", resolve_queue_settings("q", {}))
    q.set_spill(MemorySpillStore())
    q.set_memory_bound(4, 1 << 20)
    for i in range(1, 11):
        q.publish(Message("", "q", b"", b"%d" % i), 0)
    q.publish(Message("", "q", b"", b"11", {"x-delay": 10}), 0)
    q.tick(10)
    assert q.spilled >= 5
    got = _ready(q, None, 100, 10)
    assert [d.seq for d in got] == list(range(1, 12))
    assert [d.seq for d in _ready(q, SeqId(4), 3, 10)] == [5, 6, 7]
    assert [d.seq for d in _ready(q, SeqId(9), 5, 10)] == [10, 11]


def test_a_long_spill_is_browsed_from_the_store_in_pages() -> None:
    # Past SPILL_BATCH the spilled messages are in the store (peek_columns), not the buffer;
    # some expire while spilled and are left out, as browse_many leaves them out.
    q = Queue("q", resolve_queue_settings("q", {}))
    q.set_spill(MemorySpillStore())
    q.set_memory_bound(8, 1 << 20)
    for i in range(1000):
        q.publish(Message("", "q", b"", b"%d" % i, expiration_ms=5 if i % 9 == 0 else None), 0)
    assert q.spilled > 900
    expected = copy.deepcopy(q).browse_many(None, 2000, 10)
    assert len(expected) == 1000 - 112
    seen: list[Delivery] = []
    after: SeqId | None = None
    while page := _ready(q, after, 37, 10):
        seen += page
        after = page[-1].seq
    assert _key(seen) == _key(expected)
