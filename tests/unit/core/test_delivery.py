"""Consuming on the core's API: consume and get, round robin, exclusive, priority, single
active and non-destructive consumers, settles (ack, requeue, release) and recover, prefetch,
cancel notifications, and what closing a session or a connection gives back."""

from __future__ import annotations

from ringmq.core.effects import CancelConsumer, CloseConnection, Deliver, Effect, ReplyContent
from ringmq.core.errors import Condition
from ringmq.core.session import SettleKind
from tests.facade import admin_over
from tests.unit.core.corekit import Core, bodies

NOTIFIED = {"capabilities": {"consumer_cancel_notify": True}}


def _delivers(effects: list[Effect]) -> list[Deliver]:
    return [e for e in effects if isinstance(e, Deliver)]


def test_consume_delivers_the_ready_messages_then_round_robin() -> None:
    core = Core()
    s = core.open()
    core.declare(s, "q")
    for i in range(4):
        core.publish(s, "q", str(i).encode())
    assert bodies(core.consume(s, "q", "a", no_ack=True)) == [b"0", b"1", b"2", b"3"]
    core.consume(s, "q", "b", no_ack=True)
    tags = []
    for i in range(4):
        (d,) = _delivers(core.publish(s, "q", str(i).encode()))
        tags.append(d.consumer_tag)
    assert tags == ["a", "b", "a", "b"]


def test_exclusive_consumer_and_duplicate_tag() -> None:
    core = Core()
    s = core.open()
    core.declare(s, "q")
    core.consume(s, "q", "c1")
    err = core.refused(core.consume, core.open(), "q", "x", exclusive=True)
    assert err.condition is Condition.ACCESS_REFUSED
    assert err.explanation == "queue 'q' in vhost '/' in exclusive use"
    err = core.refused(core.consume, s, "q", "c1")
    assert err.condition is Condition.NOT_ALLOWED
    assert err.explanation == "attempt to reuse consumer tag 'c1'"
    s2 = core.open()
    core.declare(s2, "solo")
    core.consume(s2, "solo", "only", exclusive=True)
    assert core.refused(core.consume, core.open(), "solo", "y").condition is (
        Condition.ACCESS_REFUSED
    )


def test_consumer_priorities() -> None:
    core = Core()
    s = core.open()
    core.declare(s, "q")
    core.prefetch(s, 1)
    core.consume(s, "q", "low", arguments={"x-priority": 1})
    core.consume(s, "q", "high", arguments={"x-priority": 10})
    first = _delivers(core.publish(s, "q"))
    second = _delivers(core.publish(s, "q"))
    assert [d.consumer_tag for d in first + second] == ["high", "low"]


def test_single_active_consumer() -> None:
    core = Core()
    s = core.open()
    core.declare(s, "sac", {"x-single-active-consumer": True})
    core.consume(s, "sac", "one", no_ack=True)
    core.consume(s, "sac", "two", no_ack=True)
    tags = [_delivers(core.publish(s, "sac"))[0].consumer_tag for _ in range(3)]
    assert tags == ["one", "one", "one"]
    core.cancel(s, "one")
    assert _delivers(core.publish(s, "sac"))[0].consumer_tag == "two"


def test_get_takes_the_head_and_counts_the_rest() -> None:
    core = Core()
    s = core.open()
    core.declare(s, "q")
    assert core.get(s, "q") is None
    core.publish(s, "q", b"a")
    core.publish(s, "q", b"b")
    got = core.get(s, "q")
    assert got is not None
    assert (got.delivery_id, got.redelivered, got.message_count) == (1, False, 1)
    assert (got.message.exchange, got.message.routing_key, got.message.body) == ("", "q", b"a")


def test_settling_an_unknown_delivery_id_is_refused() -> None:
    core = Core()
    err = core.refused(core.settle, core.open(), 5, SettleKind.ACK)
    assert err.condition is Condition.PRECONDITION_FAILED
    assert err.text == "PRECONDITION_FAILED - unknown delivery tag 5"


def test_multiple_ack_requeue_and_recover() -> None:
    core = Core()
    s = core.open()
    core.declare(s, "q")
    for i in range(5):
        core.publish(s, "q", str(i).encode())
    assert bodies(core.consume(s, "q", "c")) == [b"0", b"1", b"2", b"3", b"4"]
    core.settle(s, 2, SettleKind.ACK, multiple=True)
    (again,) = _delivers(core.settle(s, 3, SettleKind.REQUEUE))
    assert (again.message.body, again.redelivered, again.delivery_id) == (b"2", True, 6)
    out = core.run(core.broker.delivery.recover, s, core.now)
    assert sorted(bodies(out)) == [b"2", b"3", b"4"]


def test_prefetch_per_consumer_and_session_wide() -> None:
    core = Core()
    s = core.open()
    core.declare(s, "q")
    for _ in range(10):
        core.publish(s, "q")
    core.prefetch(s, 2)
    assert len(bodies(core.consume(s, "q", "c"))) == 2
    assert len(bodies(core.settle(s, 1, SettleKind.ACK))) == 1
    s2 = core.open()
    core.prefetch(s2, 3, session_wide=True)
    out = core.consume(s2, "q", "g1") + core.consume(s2, "q", "g2")
    assert len(bodies(out)) == 3


def test_session_close_requeues_and_set_writable_pauses() -> None:
    core = Core()
    b = core.broker
    s = core.open()
    core.declare(s, "q")
    core.publish(s, "q", b"m")
    assert bodies(core.consume(s, "q", "c")) == [b"m"]
    other = core.open()
    core.consume(other, "q", "d")
    (d,) = _delivers(b.channel_closed(s.conn_id, s.channel, core.now))
    assert (d.conn_id, d.consumer_tag, d.redelivered) == (other.conn_id, "d", True)
    b.set_writable(other.conn_id, False, core.now)
    assert bodies(core.publish(core.open(), "q", b"held")) == []
    assert bodies(b.set_writable(other.conn_id, True, core.now)) == [b"held"]


def test_connection_closed_filters_its_own_effects() -> None:
    core = Core()
    s = core.open()
    core.declare(s, "q")
    out = core.broker.connection_closed(s.conn_id, core.now)
    assert all(e.conn_id != s.conn_id for e in out)
    assert not any(isinstance(e, CloseConnection | ReplyContent | Deliver) for e in out)


def test_non_destructive_queue_gives_every_consumer_every_message() -> None:
    core = Core()
    s = core.open()
    core.declare(s, "nd", {"x-non-destructive": True})
    core.publish(s, "nd", b"a")
    assert bodies(core.consume(s, "nd", "one", no_ack=True)) == [b"a"]
    assert bodies(core.consume(core.open(), "nd", "two", no_ack=True)) == [b"a"]
    out = core.publish(s, "nd", b"b")
    assert sorted((d.consumer_tag, d.message.body) for d in _delivers(out)) == [
        ("one", b"b"),
        ("two", b"b"),
    ]
    assert core.queue("nd").ready_count == 2


def test_session_wide_prefetch_spans_queues() -> None:
    core = Core()
    s = core.open()
    for name in ("a", "b"):
        core.declare(s, name)
        for _ in range(3):
            core.publish(s, name)
    core.prefetch(s, 2, session_wide=True)
    out = core.consume(s, "a", "ca") + core.consume(s, "b", "cb")
    assert len(bodies(out)) == 2
    assert len(bodies(core.settle(s, 0, SettleKind.ACK, multiple=True))) == 2


def test_consumer_cancel_notification_only_for_capable_clients() -> None:
    core = Core()
    legacy = core.open()
    core.declare(legacy, "q")
    core.consume(legacy, "q", "c")
    assert [e for e in core.delete(core.open(), "q") if isinstance(e, CancelConsumer)] == []
    assert core.broker.conns[legacy.conn_id].sessions[1].consumers == {}
    capable = core.session(core.connect(properties=NOTIFIED))
    core.declare(capable, "q")
    core.consume(capable, "q", "c")
    out = core.delete(core.open(), "q")
    assert [e.consumer_tag for e in out if isinstance(e, CancelConsumer)] == ["c"]


def test_unacked_from_a_deleted_queue_can_still_be_acked() -> None:
    core = Core()
    s = core.open()
    core.declare(s, "gone")
    core.publish(s, "gone")
    got = core.get(s, "gone")
    assert got is not None
    core.delete(s, "gone")
    assert core.settle(s, got.delivery_id, SettleKind.ACK) == []


def test_single_active_consumer_prefers_the_highest_priority() -> None:
    core = Core()
    s = core.open()
    core.declare(s, "sac", {"x-single-active-consumer": True})
    core.consume(s, "sac", "low", no_ack=True)
    core.consume(s, "sac", "high", no_ack=True, arguments={"x-priority": 5})
    assert _delivers(core.publish(s, "sac"))[0].consumer_tag == "high"
    (cons,) = [c for c in admin_over(core.broker).consumers() if c.active]
    assert cons.consumer_tag == "high"


def test_a_released_delivery_goes_back_without_counting_a_failed_delivery() -> None:
    # AMQP 1.0's released outcome (SettleKind.RELEASE) against modified (REQUEUE): with
    # x-delivery-limit 1, one failed delivery is allowed; releases are never failures.
    core = Core()
    s = core.open()
    core.declare(s, "q", {"x-delivery-limit": 1})
    core.publish(s, "q", b"m")
    q = core.queue("q")
    for _ in range(3):
        got = core.get(s, "q")
        assert got is not None
        core.settle(s, got.delivery_id, SettleKind.RELEASE)
    assert q.ready_count == 1  # three releases: still there
    for expected_ready in (1, 0):
        got = core.get(s, "q")
        assert got is not None
        core.settle(s, got.delivery_id, SettleKind.REQUEUE)
        assert q.ready_count == expected_ready  # the second failure is over the limit
