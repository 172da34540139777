"""Settings changed on a live queue: structural fields stay, a new Qpid ring orders the
messages already there."""

from __future__ import annotations

from ringmq.core.settings import resolve_queue_settings
from tests.unit.core.queue.kit import bodies, msg, queue, take


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
