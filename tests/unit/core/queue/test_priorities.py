"""Priority queues: highest first and FIFO within a level, requeue to its level, and which
message a limit evicts."""

from __future__ import annotations

from tests.unit.core.queue.kit import bodies, msg, queue, take


def test_priority_queue_delivers_highest_first_fifo_within_level() -> None:
    q = queue({"x-max-priority": 5})
    for name, prio in (("a0", 0), ("b3", 3), ("c9", 9), ("d3", 3), ("e1", 1)):
        q.publish(msg(name, priority=prio), 0)
    assert [take(q).message.body.decode() for _ in range(5)] == ["c9", "b3", "d3", "e1", "a0"]


def test_priority_requeue_returns_to_its_level() -> None:
    q = queue({"x-max-priority": 2})
    q.publish(msg("lo", priority=0), 0)
    q.publish(msg("hi", priority=2), 0)
    hi = take(q)
    q.publish(msg("hi2", priority=2), 0)
    q.requeue([hi.seq], 0)
    assert bodies(q) == ["hi", "hi2", "lo"]


def test_priority_with_drop_head_evicts_the_delivery_head() -> None:
    q = queue({"x-max-priority": 3, "x-max-length": 2})
    q.publish(msg("lo", priority=0), 0)
    q.publish(msg("hi", priority=3), 0)
    q.publish(msg("mid", priority=1), 0)
    assert bodies(q) == ["mid", "lo"]


def test_qpid_ring_with_priorities_evicts_lowest_priority_oldest() -> None:
    q = queue({"x-max-priority": 3, "qpid.max_count": 2, "qpid.policy_type": "ring"})
    q.publish(msg("hi", priority=3), 0)
    q.publish(msg("lo", priority=0), 0)
    q.publish(msg("mid", priority=1), 0)
    assert bodies(q) == ["hi", "mid"]
