"""A plain queue: FIFO publish, fetch and ack, requeue to the original position, reject,
purge."""

from __future__ import annotations

from ringmq.core.message import SeqId
from ringmq.core.queue import DeadLetterReason, PublishOutcome
from tests.unit.core.queue.kit import bodies, dead, msg, queue, take


def test_plain_fifo_publish_fetch_ack() -> None:
    q = queue()
    for name in "ABC":
        assert q.publish(msg(name), 0) is PublishOutcome.ENQUEUED
    a = take(q)
    assert (a.message.body, a.redelivered, a.delivery_count) == (b"A", False, 1)
    assert (q.ready_count, q.unacked_count, q.message_count) == (2, 1, 3)
    q.ack([a.seq])
    q.ack([a.seq])  # acking twice is a no-op
    assert (q.ready_count, q.unacked_count, q.counters.acknowledged) == (2, 0, 1)
    assert [take(q).message.body for _ in range(2)] == [b"B", b"C"]
    assert q.fetch(0) is None
    assert q.counters.delivered == 3


def test_no_ack_fetch_removes_at_once() -> None:
    q = queue()
    q.publish(msg("A"), 0)
    d = take(q, ack_required=False)
    assert d.message.body == b"A"
    assert (q.message_count, q.unacked_count, q.counters.acknowledged) == (0, 0, 1)


def test_requeue_returns_to_original_position_with_redelivered() -> None:
    q = queue()
    for name in "ABCD":
        q.publish(msg(name), 0)
    a, b, c = take(q), take(q), take(q)
    q.requeue([c.seq, a.seq], 0)
    assert bodies(q) == ["A", "C", "D"]
    again = take(q)
    assert (again.message.body, again.redelivered, again.delivery_count) == (b"A", True, 2)
    assert q.counters.redelivered == 1
    q.ack([b.seq])
    assert q.counters.requeued == 2


def test_requeue_interleaves_with_new_messages_by_seq() -> None:
    q = queue()
    q.publish(msg("A"), 0)
    q.publish(msg("B"), 0)
    a = take(q)
    b = take(q)
    q.publish(msg("C"), 0)
    q.requeue([b.seq], 0)
    q.requeue([a.seq], 0)
    assert bodies(q) == ["A", "B", "C"]


def test_reject_without_dlx_drops_and_with_dlx_dead_letters() -> None:
    q = queue()
    q.publish(msg("A"), 0)
    q.reject([take(q).seq], 0)
    assert q.message_count == 0
    assert dead(q) == []
    assert q.counters.rejected == 1
    q2 = queue({"x-dead-letter-exchange": "dlx", "x-dead-letter-routing-key": "dead"})
    q2.publish(msg("A"), 5)
    q2.reject([take(q2).seq], 7)
    (letter,) = q2.drain_dead_letters()
    assert letter.reason is DeadLetterReason.REJECTED
    assert (letter.exchange, letter.routing_key, letter.queue) == ("dlx", "dead", "q")
    assert (letter.time_ms, letter.delivery_count) == (7, 1)
    assert q2.counters.dead_lettered == {"rejected": 1}
    assert q2.drain_dead_letters() == []


def test_purge_removes_ready_only() -> None:
    q = queue()
    for name in "ABC":
        q.publish(msg(name), 0)
    d = take(q)
    q.publish(msg("S", **{"x-delay": 100}), 0)
    assert q.purge() == 2
    assert (q.ready_count, q.unacked_count, q.counters.scheduled) == (0, 1, 1)
    q.requeue([d.seq], 0)
    assert bodies(q) == ["A"]


def test_unknown_seqs_are_ignored() -> None:
    q = queue()
    q.ack([SeqId(42)])
    q.requeue([SeqId(42)], 0)
    q.reject([SeqId(42)], 0)
    assert q.message_count == 0
