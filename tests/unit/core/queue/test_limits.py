"""Queue limits (limits.py, overflow.py): RabbitMQ's max-length / max-length-bytes with each
overflow action, Artemis address-full policies, and `would_refuse` counting as publish does."""

from __future__ import annotations

from ringmq.core.policies import AddressFullPolicy, AddressSettings
from ringmq.core.queue import MemoryBodyStore, PublishOutcome, Queue
from ringmq.core.settings import resolve_queue_settings
from tests.unit.core.queue.kit import bodies, dead, msg, queue, take

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
