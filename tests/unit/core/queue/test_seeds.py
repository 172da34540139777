"""Every example of the seed documents, with its exact counts.

Seeds: the Artemis ring-queue page (ring of 3, in-delivery cancel, scheduled 12:00-12:05,
default-ring-size for ring.#, runtime resize), the Qpid C++ queue options cheat sheet
(REJECT / RING / RING_STRICT by count and bytes) and the Qpid LVQ notes (ticker example and
its requeue rules).
"""

from __future__ import annotations

from typing import Any

from ringmq.core.message import Message, SeqId
from ringmq.core.policies import AddressSettingsTable
from ringmq.core.queue import Delivery, PublishOutcome, Queue
from ringmq.core.settings import resolve_queue_settings

T_12_00 = 1_700_000_000_000  # an arbitrary wall-clock "12:00" in epoch ms
MINUTE = 60_000


def msg(body: str, **headers: Any) -> Message:
    return Message("", "q", b"", body.encode(), headers=headers or None)


def queue(args: dict[str, Any], name: str = "foo") -> Queue:
    return Queue(name, resolve_queue_settings(name, args))


def bodies(q: Queue) -> list[str]:
    return [m.body.decode() for m in q.ready_messages()]


def take(q: Queue, now: int = 0) -> Delivery:
    d = q.fetch(now)
    assert d is not None
    return d


# --- Artemis ring queues ------------------------------------------------------------------


def test_ring_of_3_sends_A_B_C_D_and_keeps_B_C_D() -> None:
    q = queue({"x-ring-size": 3})
    for name in "ABC":
        assert q.publish(msg(name), 0) is PublishOutcome.ENQUEUED
    assert bodies(q) == ["A", "B", "C"]
    assert q.message_count == 3
    assert q.publish(msg("D"), 0) is PublishOutcome.ENQUEUED
    assert bodies(q) == ["B", "C", "D"]
    assert q.message_count == 3
    assert q.counters.ring_evicted == 1
    assert q.drain_dead_letters() == []  # ring evictions are REPLACED, not dead-lettered


def test_ring_in_delivery_messages_exceed_ring_size_and_cancel_keeps_B_C_D() -> None:
    q = queue({"x-ring-size": 3})
    delivered: list[SeqId] = []
    for i, name in enumerate("ABCD", start=1):
        q.publish(msg(name), 0)
        delivered.append(take(q).seq)
        assert (q.message_count, q.counters.unacked) == (i, i)
    assert q.message_count == 4  # one greater than the ring size
    q.requeue(delivered, 0)  # the consumer closes without acking
    assert bodies(q) == ["B", "C", "D"]
    assert (q.message_count, q.unacked_count, q.ready_count) == (3, 0, 3)
    assert q.counters.ring_evicted == 1
    again = [take(q) for _ in range(3)]
    assert all(d.redelivered for d in again)
    assert [d.delivery_count for d in again] == [2, 2, 2]


def test_ring_rollback_is_treated_like_cancel() -> None:
    q = queue({"x-ring-size": 3})
    q.publish(msg("X"), 0)
    ds = [take(q)]
    for name in "ABC":
        q.publish(msg(name), 0)
    q.requeue([d.seq for d in ds], 0)  # rollback into a full ring: X itself is deleted
    assert bodies(q) == ["A", "B", "C"]
    assert q.counters.ring_evicted == 1


def test_ring_scheduled_message_at_12_05_is_removed_when_ring_is_full() -> None:
    q = queue({"x-ring-size": 3})
    due = T_12_00 + 5 * MINUTE
    a = msg("A", _AMQ_SCHED_DELIVERY=due)
    assert q.publish(a, T_12_00) is PublishOutcome.SCHEDULED
    assert (q.message_count, q.counters.scheduled) == (1, 1)
    for minute, name in ((1, "B"), (2, "C"), (3, "D")):
        q.publish(msg(name), T_12_00 + minute * MINUTE)
        assert (q.message_count, q.counters.scheduled) == (1 + minute, 1)
    assert q.message_count == 4  # one greater than the ring size
    assert q.next_deadline_ms() == due
    q.tick(due - 1)
    assert q.counters.scheduled == 1
    q.tick(due)
    assert bodies(q) == ["B", "C", "D"]
    assert (q.message_count, q.counters.scheduled, q.counters.ring_evicted) == (3, 0, 1)
    assert q.next_deadline_ms() is None


def test_ring_scheduled_message_goes_to_head_when_there_is_room() -> None:
    q = queue({"x-ring-size": 3})
    q.publish(msg("A", **{"x-delay": 5 * MINUTE}), T_12_00)
    q.publish(msg("B"), T_12_00)
    q.tick(T_12_00 + 5 * MINUTE)
    assert bodies(q) == ["A", "B"]


def test_default_ring_size_applies_to_ring_hash_addresses() -> None:
    table = AddressSettingsTable()
    table.set("ring.#", {"default-ring-size": 3})
    for name in ("ring.prices", "ring.a.b", "ring"):
        settings = resolve_queue_settings(name, {}, address_settings=table.resolve(name))
        assert settings.ring_size == 3
        assert settings.limit is not None
        assert settings.limit.max_count == 3
        q = Queue(name, settings)
        for body in "ABCD":
            q.publish(msg(body), 0)
        assert bodies(q) == ["B", "C", "D"]
    other = resolve_queue_settings("orders", {}, address_settings=table.resolve("orders"))
    assert other.limit is None
    assert other.ring_size == -1
    explicit = resolve_queue_settings(
        "ring.x", {"x-ring-size": 5}, address_settings=table.resolve("ring.x")
    )
    assert explicit.ring_size == 5  # an explicit ring-size wins over the default


def test_ring_size_lowered_at_runtime_purges_nothing() -> None:
    q = queue({"x-ring-size": 5})
    for name in "ABCDE":
        q.publish(msg(name), 0)
    q.update_settings(resolve_queue_settings("foo", {"x-ring-size": 3}), 0)
    assert bodies(q) == list("ABCDE")  # not purged at once
    q.publish(msg("F"), 0)
    assert bodies(q) == list("BCDEF")  # each new message evicts one: the queue does not grow
    take(q)
    take(q)
    q.ack([])
    assert q.ready_count == 3  # shrinks only through consumption
    q.publish(msg("G"), 0)
    assert bodies(q) == list("EFG")
    assert q.ready_count == 3


def test_ring_size_raised_at_runtime_grows() -> None:
    q = queue({"x-ring-size": 2})
    for name in "ABC":
        q.publish(msg(name), 0)
    q.update_settings(resolve_queue_settings("foo", {"x-ring-size": 4}), 0)
    for name in "DE":
        q.publish(msg(name), 0)
    assert bodies(q) == list("BCDE")


# --- Qpid size policies -------------------------------------------------------------------


def test_qpid_reject_by_count_counts_acquired_messages() -> None:
    q = queue({"qpid.max_count": 3, "qpid.policy_type": "reject"})
    for name in "ABC":
        assert q.publish(msg(name), 0) is PublishOutcome.ENQUEUED
    assert q.publish(msg("D"), 0) is PublishOutcome.REJECTED
    a = take(q)  # acquired but not accepted: still counts
    assert q.publish(msg("D"), 0) is PublishOutcome.REJECTED
    q.ack([a.seq])
    assert q.publish(msg("D"), 0) is PublishOutcome.ENQUEUED
    assert bodies(q) == ["B", "C", "D"]
    assert q.counters.overflow_rejected == 2


def test_qpid_reject_is_the_default_policy_and_works_by_bytes() -> None:
    q = queue({"qpid.max_size": 10})
    assert q.publish(msg("aaaa"), 0) is PublishOutcome.ENQUEUED
    assert q.publish(msg("bbbb"), 0) is PublishOutcome.ENQUEUED
    assert q.publish(msg("cccc"), 0) is PublishOutcome.REJECTED  # 12 > 10
    assert q.publish(msg("dd"), 0) is PublishOutcome.ENQUEUED  # exactly 10
    assert q.stats()["ready_bytes"] == 10


def test_qpid_ring_by_count_evicts_oldest_even_when_acquired() -> None:
    q = queue({"qpid.max_count": 3, "qpid.policy_type": "ring"})
    for name in "ABC":
        q.publish(msg(name), 0)
    assert q.publish(msg("D"), 0) is PublishOutcome.ENQUEUED
    assert bodies(q) == ["B", "C", "D"]
    b = take(q)  # B is acquired
    assert q.publish(msg("E"), 0) is PublishOutcome.ENQUEUED
    # B was the oldest: evicted under its consumer.
    assert bodies(q) == ["C", "D", "E"]
    assert (q.unacked_count, q.message_count) == (0, 3)
    q.ack([b.seq])  # the consumer's later ack is a no-op
    assert q.counters.acknowledged == 0
    assert q.counters.ring_evicted == 2


def test_qpid_ring_by_bytes_evicts_until_the_new_message_fits() -> None:
    q = queue({"qpid.max_size": 10, "qpid.policy_type": "ring"})
    for body in ("aaaa", "bbbb", "cc"):
        q.publish(msg(body), 0)
    assert q.publish(msg("dddddd"), 0) is PublishOutcome.ENQUEUED  # needs 6: evict 4 + 4
    assert bodies(q) == ["cc", "dddddd"]
    assert q.counters.ring_evicted == 2
    assert q.publish(msg("x" * 11), 0) is PublishOutcome.REJECTED  # bigger than max_size
    assert bodies(q) == ["cc", "dddddd"]


def test_qpid_ring_strict_rejects_when_the_oldest_is_acquired() -> None:
    q = queue({"qpid.max_count": 3, "qpid.policy_type": "ring_strict"})
    for name in "ABC":
        q.publish(msg(name), 0)
    a = take(q)
    assert q.publish(msg("D"), 0) is PublishOutcome.REJECTED
    assert q.message_count == 3
    q.requeue([a.seq], 0)  # A is available again: ring_strict now behaves like ring
    assert q.publish(msg("D"), 0) is PublishOutcome.ENQUEUED
    assert bodies(q) == ["B", "C", "D"]
    assert (q.counters.ring_evicted, q.counters.overflow_rejected) == (1, 1)


def test_qpid_ring_strict_by_bytes() -> None:
    q = queue({"qpid.max_size": 8, "qpid.policy_type": "RING_STRICT"})
    q.publish(msg("aaaa"), 0)
    q.publish(msg("bbbb"), 0)
    take(q)  # aaaa acquired
    assert q.publish(msg("cc"), 0) is PublishOutcome.REJECTED
    assert q.publish(msg("c" * 9), 0) is PublishOutcome.REJECTED  # larger than max_size
    q2 = queue({"qpid.max_size": 8, "qpid.policy_type": "ring_strict"})
    q2.publish(msg("aaaa"), 0)
    q2.publish(msg("bbbb"), 0)
    assert q2.publish(msg("cc"), 0) is PublishOutcome.ENQUEUED
    assert bodies(q2) == ["bbbb", "cc"]


def test_qpid_flow_to_disk_never_refuses_and_pages_bodies() -> None:
    q = queue({"qpid.max_count": 2, "qpid.policy_type": "flow_to_disk"})
    for name in "ABCD":
        assert q.publish(msg(name), 0) is PublishOutcome.ENQUEUED
    stats = q.stats()
    assert (stats["ready"], stats["paged"], stats["ready_in_memory"]) == (4, 2, 2)
    assert q.counters.memory_bytes == 2
    assert bodies(q) == list("ABCD")
    assert [take(q).message.body for _ in range(4)] == [b"A", b"B", b"C", b"D"]
    assert q.stats()["paged"] == 0


# --- last-value queues --------------------------------------------------------------------


def ticker(symbol: str, price: int) -> Message:
    return Message("", "q", b"", f"{symbol}:{price}".encode(), headers={"ticker": symbol})


def lvq(**extra: Any) -> Queue:
    return queue({"qpid.last_value_queue_key": "ticker", **extra}, name="prices")


def test_lvq_ticker_RHT_IBM_JAVA_MSFT_RHT() -> None:
    q = lvq()
    for symbol, price in (("RHT", 1), ("IBM", 2), ("JAVA", 3), ("MSFT", 4), ("RHT", 5)):
        q.publish(ticker(symbol, price), 0)
    assert bodies(q) == ["IBM:2", "JAVA:3", "MSFT:4", "RHT:5"]  # the newest value, at the tail
    assert q.message_count == 4
    assert q.counters.lvq_replaced == 1
    assert [take(q).message.body for _ in range(4)][-1] == b"RHT:5"


def test_lvq_requeue_is_combined_with_a_newer_value() -> None:
    q = lvq()
    q.publish(ticker("RHT", 1), 0)
    old = take(q)  # acquiring is a dequeue
    q.publish(ticker("RHT", 2), 0)
    assert bodies(q) == ["RHT:2"]
    q.requeue([old.seq], 0)  # rule a: combined with the newer message
    assert bodies(q) == ["RHT:2"]
    assert q.message_count == 1
    assert q.counters.lvq_replaced == 1


def test_lvq_update_after_requeue_does_not_replace_the_requeued_message() -> None:
    q = lvq()
    q.publish(ticker("RHT", 1), 0)
    q.requeue([take(q).seq], 0)  # no newer value: it comes back
    assert bodies(q) == ["RHT:1"]
    q.publish(ticker("RHT", 2), 0)  # rule b: does not update the re-queued message
    assert bodies(q) == ["RHT:1", "RHT:2"]
    first = take(q)
    assert first.redelivered
    assert first.message.body == b"RHT:1"
    q.publish(ticker("RHT", 3), 0)  # the non-requeued value is still replaceable
    assert bodies(q) == ["RHT:3"]


def test_lvq_message_without_key_is_an_ordinary_message() -> None:
    q = lvq()
    q.publish(msg("plain"), 0)
    q.publish(msg("plain"), 0)
    q.publish(ticker("IBM", 1), 0)
    assert bodies(q) == ["plain", "plain", "IBM:1"]


def test_lvq_acquired_value_then_ack_keeps_the_new_value() -> None:
    q = lvq()
    q.publish(ticker("IBM", 1), 0)
    d = take(q)
    q.publish(ticker("IBM", 2), 0)
    q.ack([d.seq])
    q.publish(ticker("IBM", 3), 0)
    assert bodies(q) == ["IBM:3"]


def test_lvq_non_destructive_keeps_last_value_for_later_consumers() -> None:
    q = queue({"x-last-value-key": "ticker", "x-non-destructive": True}, name="prices")
    assert q.non_destructive
    for symbol, price in (("RHT", 1), ("IBM", 2), ("RHT", 3)):
        q.publish(ticker(symbol, price), 0)
    first = q.browse(None, 0)
    assert first is not None
    assert first.message.body == b"IBM:2"
    second = q.browse(first.seq, 0)
    assert second is not None
    assert second.message.body == b"RHT:3"
    assert q.browse(second.seq, 0) is None
    d = q.fetch(0)  # fetch on a non-destructive queue removes nothing
    assert d is not None
    assert d.message.body == b"IBM:2"
    assert bodies(q) == ["IBM:2", "RHT:3"]
    later = q.browse(None, 0)  # a later consumer still sees the last values
    assert later is not None
    assert later.message.body == b"IBM:2"
    assert (q.message_count, q.unacked_count) == (2, 0)
