"""Expiry: queue and message TTL (the lower applies; checked at the head; kept over a requeue;
zero delivers now or expires), and where and when messages expire: only at the head of the
whole queue, and `drop_expired` (RabbitMQ's drop_expired_msgs, run by the broker after a
dispatch and after a basic.get)."""

from __future__ import annotations

from tests.unit.core.queue.kit import bodies, dead, msg, queue, take


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


def test_priority_queue_expires_only_at_the_overall_head() -> None:
    # RabbitMQ: `b` waits behind the higher-priority `a` past its TTL until `a` is fetched
    q = queue({"x-max-priority": 2, "x-dead-letter-exchange": "dlx"})
    q.publish(msg("a", priority=2), 0)
    q.publish(msg("b", ttl=200), 0)
    assert q.next_deadline_ms() is None  # the head has no TTL: no timer
    q.tick(1_000)
    assert bodies(q) == ["a", "b"]
    assert dead(q) == []
    assert take(q, 1_000).message.body == b"a"
    assert q.drop_expired(1_000) == 1  # the fetch exposed an expired head
    assert dead(q) == [("b", "expired")]
    assert q.ready_count == 0


def test_a_ttl_message_that_overtakes_the_head_expires_at_its_time() -> None:
    # the higher-priority message with a TTL is the head: its timer runs and it is never
    # delivered expired (RabbitMQ 3.10 may keep it and deliver it expired)
    q = queue({"x-max-priority": 2, "x-dead-letter-exchange": "dlx"})
    q.publish(msg("a"), 0)
    q.publish(msg("b", priority=2, ttl=200), 0)
    assert q.next_deadline_ms() == 201
    q.tick(201)
    assert dead(q) == [("b", "expired")]
    assert bodies(q) == ["a"]
    q.publish(msg("c", priority=2, ttl=200), 300)
    assert take(q, 501).message.body == b"a"  # `c` expired on the way, never delivered
    assert dead(q) == [("c", "expired")]


def test_dead_letter_order_follows_the_overall_head() -> None:
    q = queue({"x-max-priority": 1, "x-dead-letter-exchange": "dlx"})
    q.publish(msg("lo", ttl=100), 0)
    q.publish(msg("hi", priority=1, ttl=200), 0)
    q.tick(150)  # `lo` is past its time but not the head
    assert dead(q) == []
    assert q.next_deadline_ms() == 201
    q.tick(201)
    assert dead(q) == [("hi", "expired"), ("lo", "expired")]


def test_reject_publish_counts_a_waiting_expired_message_until_it_is_the_head() -> None:
    q = queue({"x-max-priority": 2, "x-max-length": 2, "x-overflow": "reject-publish"})
    q.publish(msg("a", priority=2), 0)
    q.publish(msg("b", ttl=200), 0)
    q.tick(1_000)
    assert q.publish(msg("c"), 1_000).value == "rejected"  # `b` still counts
    take(q, 1_000)
    q.drop_expired(1_000)
    assert q.publish(msg("c"), 1_000).value == "enqueued"


def test_drop_expired_takes_a_ttl_zero_head_at_once_and_fetch_may_deliver_it_first() -> None:
    q = queue({"x-dead-letter-exchange": "dlx"})
    q.publish(msg("now", ttl=0), 5)
    assert take(q, 5).message.body == b"now"  # a consumer ready at once gets it
    q.publish(msg("idle", ttl=0), 5)
    assert q.drop_expired(5) == 1  # nobody took it: gone before the next operation
    assert dead(q) == [("idle", "expired")]
    assert q.ready_count == 0


def test_drop_expired_stops_at_a_live_head_and_ignores_queues_without_expiry() -> None:
    q = queue()
    q.publish(msg("a"), 0)
    assert q.drop_expired(10) == 0
    q.publish(msg("b", ttl=0), 0)
    assert q.drop_expired(10) == 0  # `b` waits behind `a` (RabbitMQ: head only)
    take(q, 10)
    assert q.drop_expired(10) == 1
    q.publish(msg("c", ttl=5), 10)
    assert q.drop_expired(14) == 0
    assert q.drop_expired(15) == 1  # reached (RabbitMQ's Now >= Expiry)
