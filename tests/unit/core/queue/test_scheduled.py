"""Scheduled messages (scheduler.py): due times, the scheduled list and its admin, release
in batches and under the queue's limit."""

from __future__ import annotations

from typing import Any

from ringmq.core.message import SeqId
from ringmq.core.queue import SCHEDULED_RELEASE_BATCH, PublishOutcome
from ringmq.core.queue.lanes import GONE
from tests.unit.core.queue.kit import bodies, dead, msg, queue


def test_scheduled_list_purge_and_deliver_now() -> None:
    q = queue()
    q.publish(msg("late", **{"x-delay": 500}), 1000)
    q.publish(msg("early", _AMQ_SCHED_DELIVERY=1200), 1000)
    q.publish(msg("past", _AMQ_SCHED_DELIVERY=999), 1000)  # already due: enqueued
    assert bodies(q) == ["past"]
    listed = [(s.message.body, s.due_ms) for s in q.list_scheduled()]
    assert listed == [(b"early", 1200), (b"late", 1500)]
    assert q.stats()["scheduled_bytes"] == len("early") + len("late")
    early_seq = q.list_scheduled()[0].seq
    assert q.deliver_scheduled_now([early_seq], 1001) == 1
    assert bodies(q) == ["early", "past"]  # released to the head
    assert q.purge_scheduled() == 1
    assert (q.counters.scheduled, q.message_count) == (0, 2)
    assert q.next_deadline_ms() is None
    q.tick(2000)
    assert bodies(q) == ["early", "past"]


def test_absolute_time_wins_over_relative_delay_and_bad_headers_are_ignored() -> None:
    q = queue()
    assert (
        q.publish(msg("a", _AMQ_SCHED_DELIVERY=5000, **{"x-delay": 1}), 1000)
        is PublishOutcome.SCHEDULED
    )
    assert q.list_scheduled()[0].due_ms == 5000
    bad: dict[str, Any] = {"x-delay": "soon"}
    assert q.publish(msg("b", **bad), 1000) is PublishOutcome.ENQUEUED
    assert q.publish(msg("c", **{"x-delay": -5}), 1000) is PublishOutcome.ENQUEUED


def test_overdue_backlog_is_released_in_batches() -> None:
    q = queue()
    n = SCHEDULED_RELEASE_BATCH + 10
    for i in range(n):
        q.publish(msg(str(i), **{"x-delay": 10}), 0)
    q.tick(10_000)
    assert q.ready_count == SCHEDULED_RELEASE_BATCH
    assert q.counters.scheduled == 10
    assert q.next_deadline_ms() == 10  # still due: the server ticks again at once
    q.tick(10_000)
    assert (q.ready_count, q.counters.scheduled) == (n, 0)


def test_scheduled_release_obeys_reject_publish() -> None:
    q = queue(
        {"x-max-length": 1, "x-overflow": "reject-publish-dlx", "x-dead-letter-exchange": "d"}
    )
    q.publish(msg("S", **{"x-delay": 10}), 0)
    q.publish(msg("A"), 0)
    q.tick(10)
    assert bodies(q) == ["A"]
    assert dead(q) == [("S", "maxlen")]
    assert q.counters.overflow_rejected == 1


def test_scheduled_release_refused_leaves_the_queue_for_good() -> None:
    # A released message the limit refuses leaves the queue (GONE), so the browse index, which
    # holds it since it was scheduled, treats it as removed (and compaction drops it).
    q = queue({"x-max-length": 1, "x-overflow": "reject-publish"})
    assert q.browse_many(None, 1, 0) == []  # builds the browse index
    q.publish(msg("S", **{"x-delay": 10}), 0)
    q.publish(msg("A"), 0)
    q.tick(10)
    assert q.counters.overflow_rejected == 1
    assert q._index is not None
    assert [e.seq for e in q._index if e.state != GONE] == [SeqId(2)]


def test_scheduled_ttl_starts_when_released() -> None:
    q = queue({"x-message-ttl": 5})
    q.publish(msg("S", **{"x-delay": 100}), 0)
    q.tick(100)
    assert q.next_deadline_ms() == 106
    q.tick(105)
    assert bodies(q) == ["S"]
