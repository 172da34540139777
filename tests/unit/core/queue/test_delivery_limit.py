"""The delivery limit (x-delivery-limit): a message failed too often is dead-lettered; a
rollback is not a failure."""

from __future__ import annotations

from ringmq.core.settings import resolve_queue_settings
from tests.unit.core.queue.kit import dead, msg, queue, take


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
