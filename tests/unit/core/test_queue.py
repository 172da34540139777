"""Queue engine behaviour beyond the seeds: FIFO, RabbitMQ limits, TTL, DLX, priorities,
delivery limit, scheduling admin, browsing, paging, counters and live settings."""

from __future__ import annotations

from typing import Any

import pytest

from ringmq.core.message import Message, SeqId
from ringmq.core.policies import AddressFullPolicy, AddressSettings
from ringmq.core.queue import (
    SCHEDULED_RELEASE_BATCH,
    DeadLetterReason,
    Delivery,
    MemoryBodyStore,
    PublishOutcome,
    Queue,
)
from ringmq.core.queue.lanes import GONE
from ringmq.core.settings import resolve_queue_settings


def msg(body: str, *, priority: int = 0, ttl: int | None = None, **headers: Any) -> Message:
    return Message(
        "ex",
        "rk",
        b"",
        body.encode(),
        headers=headers or None,
        priority=priority,
        expiration_ms=ttl,
    )


def queue(args: dict[str, Any] | None = None, **kw: Any) -> Queue:
    return Queue("q", resolve_queue_settings("q", args or {}, **kw))


def bodies(q: Queue) -> list[str]:
    return [m.body.decode() for m in q.ready_messages()]


def take(q: Queue, now: int = 0, ack_required: bool = True) -> Delivery:
    d = q.fetch(now, ack_required)
    assert d is not None
    return d


def dead(q: Queue) -> list[tuple[str, str]]:
    return [(d.message.body.decode(), d.reason.value) for d in q.drain_dead_letters()]


# --- plain FIFO -------------------------------------------------------------------------------


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


# --- RabbitMQ limits ----------------------------------------------------------------------------


def test_drop_head_dead_letters_maxlen_and_acks_publisher() -> None:
    q = queue({"x-max-length": 2, "x-dead-letter-exchange": "dlx"})
    for name in "ABC":
        assert q.publish(msg(name), 0) is PublishOutcome.ENQUEUED
    assert bodies(q) == ["B", "C"]
    assert dead(q) == [("A", "maxlen")]
    assert q.counters.maxlen_dropped == 1


def test_drop_head_max_length_zero_drops_the_new_message() -> None:
    q = queue({"x-max-length": 0})
    assert q.publish(msg("A"), 0) is PublishOutcome.DROPPED
    assert q.message_count == 0


def test_drop_head_by_bytes_drops_until_under() -> None:
    q = queue({"x-max-length-bytes": 5})
    for body in ("aa", "bb", "c"):
        q.publish(msg(body), 0)
    assert q.publish(msg("dddd"), 0) is PublishOutcome.ENQUEUED
    assert bodies(q) == ["c", "dddd"]
    assert q.publish(msg("x" * 6), 0) is PublishOutcome.DROPPED  # bigger than the limit
    assert bodies(q) == []


def test_drop_head_counts_ready_only_and_requeued_messages_go_first() -> None:
    q = queue({"x-max-length": 2, "x-dead-letter-exchange": "dlx"})
    q.publish(msg("A"), 0)
    a = take(q)
    q.publish(msg("B"), 0)
    q.publish(msg("C"), 0)  # unacked A is not counted
    assert (q.ready_count, q.message_count) == (2, 3)
    q.requeue([a.seq], 0)  # back at its position (the head), then dropped first
    assert bodies(q) == ["B", "C"]
    assert dead(q) == [("A", "maxlen")]


def test_reject_publish_refuses_and_requeue_may_exceed_the_limit() -> None:
    q = queue({"x-max-length": 1, "x-overflow": "reject-publish", "x-dead-letter-exchange": "d"})
    assert q.publish(msg("A"), 0) is PublishOutcome.ENQUEUED
    assert q.publish(msg("B"), 0) is PublishOutcome.REJECTED
    assert dead(q) == []  # plain reject-publish does not dead-letter
    a = take(q)
    assert q.publish(msg("C"), 0) is PublishOutcome.ENQUEUED
    q.requeue([a.seq], 0)
    assert bodies(q) == ["A", "C"]  # above the limit, nothing dropped
    assert q.publish(msg("D"), 0) is PublishOutcome.REJECTED
    assert q.counters.overflow_rejected == 2
    assert q.over_limit


def test_reject_publish_dlx_dead_letters_the_refused_message() -> None:
    q = queue({"x-max-length-bytes": 3, "x-overflow": "reject-publish-dlx"})
    q.publish(msg("abc"), 0)
    assert q.publish(msg("d"), 0) is PublishOutcome.REJECTED
    assert dead(q) == []  # no DLX configured: counted only
    q2 = queue(
        {"x-max-length": 0, "x-overflow": "reject-publish-dlx", "x-dead-letter-exchange": ""}
    )
    assert q2.publish(msg("Z"), 0) is PublishOutcome.REJECTED
    assert dead(q2) == [("Z", "maxlen")]  # "" (the default exchange) is a valid DLX


def test_policy_lowering_max_length_drops_at_once() -> None:
    q = queue({}, policy={"max-length": 5})
    for name in "ABCDE":
        q.publish(msg(name), 0)
    q.update_settings(resolve_queue_settings("q", {}, policy={"max-length": 2}), 0)
    assert bodies(q) == ["D", "E"]
    q.update_settings(resolve_queue_settings("q", {}), 0)  # policy removed: unlimited
    for name in "FGH":
        q.publish(msg(name), 0)
    assert bodies(q) == ["D", "E", "F", "G", "H"]


def test_policy_switching_overflow_back_to_drop_head() -> None:
    reject = resolve_queue_settings("q", {}, policy={"max-length": 1, "overflow": "reject-publish"})
    q = Queue("q", reject)
    q.publish(msg("A"), 0)
    assert q.publish(msg("B"), 0) is PublishOutcome.REJECTED
    q.update_settings(resolve_queue_settings("q", {}, policy={"max-length": 1}), 0)
    assert q.publish(msg("B"), 0) is PublishOutcome.ENQUEUED
    assert bodies(q) == ["B"]


# --- Artemis address-full policies ------------------------------------------------------------


def test_address_drop_discards_new_messages_silently() -> None:
    address = AddressSettings(address_full_policy=AddressFullPolicy.DROP, max_size_messages=1)
    q = queue(address_settings=address)
    assert q.publish(msg("A"), 0) is PublishOutcome.ENQUEUED
    assert q.publish(msg("B"), 0) is PublishOutcome.DROPPED
    assert q.counters.overflow_dropped == 1
    assert bodies(q) == ["A"]


def test_address_block_accepts_but_reports_over_limit() -> None:
    address = AddressSettings(address_full_policy=AddressFullPolicy.BLOCK, max_size_messages=2)
    q = queue(address_settings=address)
    q.publish(msg("A"), 0)
    assert not q.over_limit
    q.publish(msg("B"), 0)
    full: bool = q.over_limit
    assert full
    assert q.publish(msg("C"), 0) is PublishOutcome.ENQUEUED
    q.ack([take(q).seq, take(q).seq])
    assert q.over_limit is False


def test_address_page_hands_bodies_to_the_body_store() -> None:
    store = MemoryBodyStore()
    address = AddressSettings(max_size_bytes=2)  # PAGE by default
    q = Queue("q", resolve_queue_settings("q", {}, address_settings=address), body_store=store)
    for name in "ABCD":
        q.publish(msg(name), 0)
    assert len(store) == 2
    assert q.stats()["paged"] == 2
    assert q.counters.memory_bytes == 2
    assert q.message_count == 4
    assert bodies(q) == list("ABCD")
    first = q.browse(None, 0)
    assert first is not None
    assert q.purge() == 4
    assert len(store) == 0


# --- TTL and expiry ----------------------------------------------------------------------------


def test_queue_ttl_expires_at_head_on_fetch_and_tick() -> None:
    q = queue({"x-message-ttl": 100, "x-dead-letter-exchange": "dlx"})
    q.publish(msg("A"), 0)
    q.publish(msg("B"), 50)
    assert q.next_deadline_ms() == 101
    q.tick(100)
    assert bodies(q) == ["A", "B"]  # expires strictly after publish + ttl
    q.tick(101)
    assert bodies(q) == ["B"]
    assert dead(q) == [("A", "expired")]
    assert q.next_deadline_ms() == 151
    assert q.fetch(151) is None
    assert dead(q) == [("B", "expired")]
    assert q.counters.expired == 2


def test_message_expiration_is_only_checked_at_the_head() -> None:
    q = queue()
    q.publish(msg("long", ttl=1000), 0)
    q.publish(msg("short", ttl=10), 0)
    q.tick(500)
    assert bodies(q) == ["long", "short"]  # RabbitMQ: expired only at the head
    assert take(q, 500).message.body == b"long"
    assert q.fetch(500) is None
    assert q.counters.expired == 1


def test_lower_of_queue_and_message_ttl_applies() -> None:
    q = queue({"x-message-ttl": 50})
    q.publish(msg("A", ttl=500), 0)
    q.publish(msg("B", ttl=5), 0)
    q.tick(51)
    assert bodies(q) == []


def test_ttl_zero_delivers_now_or_expires() -> None:
    q = queue({"x-message-ttl": 0})
    q.publish(msg("A"), 10)
    assert take(q, 10).message.body == b"A"  # a consumer takes it in the same instant
    q.publish(msg("B"), 10)
    q.tick(11)
    assert q.message_count == 1  # only A, unacked


def test_expiry_survives_requeue() -> None:
    q = queue({"x-message-ttl": 100})
    q.publish(msg("A"), 0)
    q.requeue([take(q, 50).seq], 60)
    q.tick(101)
    assert q.ready_count == 0


def test_plain_queue_switches_off_fast_path_for_expiring_messages() -> None:
    q = queue()
    q.publish(msg("A"), 0)
    q.publish(msg("B", ttl=10), 0)
    q.tick(11)
    assert bodies(q) == ["A", "B"]
    take(q, 11)
    q.tick(11)
    assert bodies(q) == []


# --- delivery limit ----------------------------------------------------------------------------


def test_delivery_limit_dead_letters_after_too_many_failures() -> None:
    q = queue({"x-delivery-limit": 1, "x-dead-letter-exchange": "dlx"})
    q.publish(msg("A"), 0)
    q.requeue([take(q).seq], 0)  # failure 1: allowed
    d = take(q)
    assert d.delivery_count == 2
    q.requeue([d.seq], 0)  # failure 2 > limit
    assert q.message_count == 0
    assert dead(q) == [("A", "delivery_limit")]


def test_rollback_does_not_count_a_failed_delivery() -> None:
    q = queue({"x-delivery-limit": 0})
    q.publish(msg("A"), 0)
    q.requeue([take(q).seq], 0, count_failure=False)
    assert q.ready_count == 1
    q.requeue([take(q).seq], 0)
    assert q.message_count == 0


def test_delivery_limit_from_policy_applies_live() -> None:
    q = queue()
    q.publish(msg("A"), 0)
    q.update_settings(resolve_queue_settings("q", {}, policy={"delivery-limit": 0}), 0)
    q.requeue([take(q).seq], 0)
    assert q.message_count == 0


# --- priorities --------------------------------------------------------------------------------


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


# --- scheduled messages ------------------------------------------------------------------------


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


# --- browse -------------------------------------------------------------------------------------


def test_browse_walks_ready_messages_in_seq_order_without_changing_state() -> None:
    q = queue()
    for name in "ABCD":
        q.publish(msg(name), 0)
    b = take(q)  # A is unacked: browse skips it
    seen: list[str] = []
    cursor: SeqId | None = None
    while (d := q.browse(cursor, 0)) is not None:
        seen.append(d.message.body.decode())
        cursor = d.seq
    assert seen == ["B", "C", "D"]
    q.publish(msg("E"), 0)
    tail = q.browse(cursor, 0)
    assert tail is not None
    assert tail.message.body == b"E"
    q.requeue([b.seq], 0)
    first = q.browse(None, 0)
    assert first is not None
    assert first.message.body == b"A"
    assert (q.ready_count, q.unacked_count) == (5, 0)


def test_browse_index_compacts_after_many_removals() -> None:
    q = queue()
    q.browse(None, 0)
    for i in range(2000):
        q.publish(msg(str(i)), 0)
        q.ack([take(q).seq])
    q.publish(msg("last"), 0)
    d = q.browse(None, 0)
    assert d is not None
    assert d.message.body == b"last"


def test_lvq_replacement_compacts_lanes() -> None:
    q = queue({"x-last-value-key": "k"})
    for i in range(3000):
        q.publish(msg(str(i), k="same"), 0)
    assert bodies(q) == ["2999"]
    assert q.counters.lvq_replaced == 2999


# --- counters -----------------------------------------------------------------------------------


def test_stats_snapshot() -> None:
    q = queue({"x-max-length": 10, "x-dead-letter-exchange": "dlx"})
    q.publish(msg("aa"), 0)
    q.publish(msg("bbb"), 0)
    q.publish(msg("c", **{"x-delay": 10}), 0)
    d = take(q)
    s = q.stats()
    assert s["message_count"] == 3
    assert s["message_bytes"] == 6
    assert (s["ready"], s["ready_bytes"]) == (1, 3)
    assert (s["delivering"], s["delivering_bytes"]) == (1, 2)
    assert (s["scheduled"], s["scheduled_bytes"]) == (1, 1)
    assert s["added"] == 3
    assert s["limit"] == {
        "family": "rabbit",
        "counts": "ready",
        "max_count": 10,
        "max_bytes": None,
        "action": "drop-head",
    }
    q.reject([d.seq], 0)
    assert q.stats()["dead_lettered"] == {"rejected": 1}
    assert len(q) == 2


@pytest.mark.parametrize("args", [{}, {"x-ring-size": 5}, {"x-last-value-key": "k"}])
def test_unacked_view_and_next_deadline_without_work(args: dict[str, Any]) -> None:
    q = queue(args)
    q.publish(msg("A"), 0)
    d = take(q)
    assert q.unacked_seqs() == [d.seq]
    assert q.next_deadline_ms() is None


def test_last_seq_counts_every_publish_including_refused_ones() -> None:
    q = queue({"x-max-length": 1, "x-overflow": "reject-publish"})
    assert q.last_seq == 0
    for name in "ABC":
        q.publish(msg(name), 0)
    assert (q.last_seq, q.counters.added) == (3, 1)
    assert q.last_seq == 3  # reading it does not consume a seq


def test_update_settings_keeps_structural_fields() -> None:
    q = queue({"x-max-priority": 3, "x-non-destructive": False})
    q.update_settings(resolve_queue_settings("q", {"x-last-value-key": "k"}), 0)
    assert q.settings.max_priority == 3
    assert q.settings.lvq_key is None
    q.publish(msg("lo", priority=0, k="a"), 0)
    q.publish(msg("hi", priority=3, k="a"), 0)
    assert bodies(q) == ["hi", "lo"]  # still a priority queue, not an LVQ


def test_switching_to_a_qpid_ring_at_runtime_orders_existing_messages() -> None:
    q = queue()
    for name in "ABC":
        q.publish(msg(name), 0)
    a = take(q)
    q.update_settings(
        resolve_queue_settings("q", {"qpid.max_count": 3, "qpid.policy_type": "ring"}), 0
    )
    q.publish(msg("D"), 0)  # A (acquired) is the oldest: evicted under its consumer
    assert bodies(q) == ["B", "C", "D"]
    assert q.unacked_count == 0
    q.ack([a.seq])
    assert q.counters.acknowledged == 0


def test_would_refuse_counts_what_publish_counts() -> None:
    # RabbitMQ reject-publish: ready messages only.
    q = queue({"x-max-length": 2, "x-max-length-bytes": 10, "x-overflow": "reject-publish"})
    q.publish(msg("abc"), 0)
    take(q)  # unacked: not counted
    q.publish(msg("def"), 0)
    assert q.would_refuse(1, 3) is None
    assert q.would_refuse(2, 2) == "would exceed its limit of 2 messages"
    assert q.would_refuse(1, 8) == "would exceed its limit of 10 bytes"
    assert q.publish(msg("g"), 0) is PublishOutcome.ENQUEUED
    assert q.would_refuse(1, 0) is not None
    assert q.publish(msg("h"), 0) is PublishOutcome.REJECTED


def test_would_refuse_qpid_reject_counts_acquired_and_ignores_other_actions() -> None:
    q = queue({"qpid.max_count": 2})  # qpid.policy_type reject (the default)
    q.publish(msg("a"), 0)
    take(q)
    assert q.would_refuse(1, 1) is None
    assert q.would_refuse(2, 2) == "would exceed its limit of 2 messages"
    drop_head = queue({"x-max-length": 1})
    drop_head.publish(msg("a"), 0)
    assert drop_head.would_refuse(5, 5) is None
