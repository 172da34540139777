"""A queue's paging (paging.py): a bounded in-memory head, the paged tail on disk, in order."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from ringmq.core.message import Message
from ringmq.core.queue import MemorySpillStore, PublishOutcome, Queue
from ringmq.core.settings import resolve_queue_settings
from ringmq.storage.bodystore import DiskSpillStore


def msg(body: bytes, **kw: Any) -> Message:
    return Message("", "q", b"", body, **kw)


def paged_queue(tmp_path: Path, args: dict[str, Any] | None = None, bound: int = 4) -> Queue:
    q = Queue(
        "q",
        resolve_queue_settings("q", args or {}),
        spill=DiskSpillStore(tmp_path / "q", run_bytes=256),
    )
    q.set_memory_bound(bound, 1 << 20)
    return q


def drain(q: Queue, ack: bool = True) -> list[bytes]:
    out = []
    while (d := q.fetch(0, ack_required=False)) is not None:
        out.append(d.message.body)
    return out


def test_queue_pages_beyond_its_bound_and_drains_in_order(tmp_path: Path) -> None:
    q = paged_queue(tmp_path)
    for i in range(100):
        assert q.publish(msg(b"%03d" % i), 0) is PublishOutcome.ENQUEUED
    c = q.counters
    assert c.ready == 4
    assert c.paged == 96
    assert q.spilled == 96
    assert c.memory_bytes == 4 * 3
    assert q.message_count == 100
    assert q.stats()["ready"] == 100
    assert any((tmp_path / "q").iterdir())
    assert drain(q) == [b"%03d" % i for i in range(100)]
    assert c.paged == c.ready == 0


def test_no_spill_store_means_no_paging() -> None:
    q = Queue("q", resolve_queue_settings("q", {}))
    q.set_memory_bound(1, 1)
    for i in range(10):
        q.publish(msg(b"%d" % i), 0)
    assert q.counters.paged == 0
    assert q.counters.ready == 10


def test_requeue_returns_to_original_position_ahead_of_the_paged_tail(tmp_path: Path) -> None:
    q = paged_queue(tmp_path, bound=2)
    for i in range(10):
        q.publish(msg(b"%d" % i), 0)
    first = q.fetch(0)
    second = q.fetch(0)
    assert first is not None
    assert second is not None
    q.requeue([second.seq, first.seq], 0)
    got = q.fetch(0)
    assert got is not None
    assert (got.message.body, got.redelivered) == (b"0", True)
    assert drain(q) == [b"1"] + [b"%d" % i for i in range(2, 10)]


def test_lowering_the_bound_pages_out_at_once_and_raising_pages_back_in(tmp_path: Path) -> None:
    q = paged_queue(tmp_path, bound=100)
    for i in range(50):
        q.publish(msg(b"%d" % i), 0)
    assert q.counters.paged == 0
    q.set_memory_bound(5, 1 << 20)
    assert q.counters.ready == 5
    assert q.counters.paged == 45
    q.set_memory_bound(100, 1 << 20)
    assert drain(q) == [b"%d" % i for i in range(50)]


def test_byte_bound(tmp_path: Path) -> None:
    q = paged_queue(tmp_path)
    q.set_memory_bound(1000, 250)
    for _ in range(10):
        q.publish(msg(b"x" * 100), 0)
    assert q.counters.ready_bytes <= 250
    assert q.counters.paged_bytes + q.counters.ready_bytes == 1000


def test_ttl_survives_paging(tmp_path: Path) -> None:
    q = paged_queue(tmp_path, {"x-message-ttl": 10}, bound=2)
    for i in range(6):
        q.publish(msg(b"%d" % i), 0)
    assert q.counters.paged == 4
    q.tick(11)
    assert q.message_count == 0
    assert q.counters.expired == 6


def test_drop_head_limit_counts_paged_messages(tmp_path: Path) -> None:
    q = paged_queue(tmp_path, {"x-max-length": 5}, bound=2)
    for i in range(12):
        q.publish(msg(b"%d" % i), 0)
    assert q.message_count == 5
    assert drain(q) == [b"%d" % i for i in range(7, 12)]


def test_purge_and_close_remove_paged_data(tmp_path: Path) -> None:
    q = paged_queue(tmp_path, bound=2)
    for i in range(300):
        q.publish(msg(b"%d" % i * 10), 0)
    assert q.purge() == 300
    assert q.message_count == 0
    assert q.counters.paged == 0
    q.publish(msg(b"after"), 0)
    assert drain(q) == [b"after"]
    q.close()
    assert not (tmp_path / "q").exists()


def test_introspection_sees_paged_messages() -> None:
    q = Queue("q", resolve_queue_settings("q", {}), spill=MemorySpillStore())
    q.set_memory_bound(2, 1 << 20)
    for i in range(5):
        q.publish(msg(b"%d" % i), 0)
    assert [m.body for m in q.ready_messages()] == [b"%d" % i for i in range(5)]
    assert drain(q) == [b"%d" % i for i in range(5)]


def test_ring_and_priority_queues_do_not_page() -> None:
    for args in ({"x-ring-size": 100}, {"x-max-priority": 3}):
        q = Queue("q", resolve_queue_settings("q", args), spill=MemorySpillStore())
        q.set_memory_bound(1, 1)
        for i in range(5):
            q.publish(msg(b"%d" % i), 0)
        assert q.counters.paged == 0, args


@pytest.mark.parametrize("paged", [False, True])
def test_a_requeued_released_message_keeps_its_seq_position_against_the_paged_tail(
    paged: bool, tmp_path: Path
) -> None:
    # A scheduled message released at the head has a seq above the spilled ones; requeued,
    # it goes back by seq, after them, whether the tail is paged or not.
    q = paged_queue(tmp_path, bound=1) if paged else Queue("q", resolve_queue_settings("q", {}))
    q.publish(msg(b"b"), 0)
    q.publish(msg(b"c"), 0)
    q.publish(msg(b"a", headers={"x-delay": 20}), 0)
    q.tick(20)
    first = q.fetch(20)
    assert first is not None
    assert first.message.body == b"a"  # released at the head
    q.requeue([first.seq], 20)
    assert q.spilled == (2 if paged else 0)
    assert drain(q) == [b"b", b"c", b"a"]
