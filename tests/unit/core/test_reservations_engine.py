"""Reservations over the real queue engine (core/queue/) through `EngineAdapter`."""

from __future__ import annotations

from ringmq.core.message import Message, SeqId
from ringmq.core.queue import Queue
from ringmq.core.reservations import Reservations
from ringmq.core.reserveports import EngineAdapter
from ringmq.core.settings import resolve_queue_settings


def _queue(args: dict[str, object] | None = None) -> Queue:
    return Queue("q", resolve_queue_settings("q", args or {}))


def _pub(q: Queue, body: bytes, now_ms: int = 0, headers: dict[str, object] | None = None) -> None:
    q.publish(
        Message(
            exchange="", routing_key="q", properties_bin=b"\x00\x00", body=body, headers=headers
        ),
        now_ms,
    )


def test_reserve_is_unacked_in_engine_and_settle_deletes() -> None:
    q = _queue()
    for i in range(6):
        _pub(q, b"%d" % i)
    res: Reservations[SeqId] = Reservations(EngineAdapter(q))
    r = res.reserve("spark", 0, 4, now_ms=0)
    assert (r.start, r.end) == (0, 4)
    assert (q.ready_count, q.unacked_count) == (2, 4)
    assert [e.message.body for e in res.read("spark", 1, 3, now_ms=0)] == [b"1", b"2"]
    assert res.settle("spark", 4, now_ms=0) == 4
    assert (q.ready_count, q.unacked_count, q.message_count) == (2, 0, 2)
    assert q.counters.acknowledged == 4


def test_expiry_requeues_at_head_without_delivery_failure() -> None:
    q = _queue({"x-delivery-limit": 1})
    for i in range(3):
        _pub(q, b"%d" % i)
    res: Reservations[SeqId] = Reservations(EngineAdapter(q))
    res.reserve("c", 0, 2, now_ms=0, lease_ms=10)
    assert res.expire(10) == ["c"]
    assert q.ready_count == 3
    d = q.fetch(11, ack_required=True)
    assert d is not None
    assert (d.message.body, d.redelivered) == (b"0", True)
    assert q.counters.dead_lettered == {}


def test_ring_evictions_visible_and_reserved_not_evicted() -> None:
    q = _queue({"x-ring-size": 3})
    for i in range(3):
        _pub(q, b"%d" % i)
    res: Reservations[SeqId] = Reservations(EngineAdapter(q))
    res.reserve("c", 0, 1, now_ms=0)
    for i in range(3, 8):
        _pub(q, b"%d" % i)
    evicted = q.counters.ring_evicted
    assert evicted > 0
    r = res.reserve("c", 1, 10, now_ms=0)
    assert r.skipped == evicted
    got = res.read("c", 0, 10, now_ms=0)
    assert got[0].message.body == b"0"  # held by the lease: a ring counts pending only
    assert len(got) == q.unacked_count == 4  # seq 1 plus the 3 the ring kept


def test_lvq_replacement_counted_as_skipped() -> None:
    q = _queue({"x-last-value-key": "sym"})
    _pub(q, b"a1", headers={"sym": "A"})
    _pub(q, b"b1", headers={"sym": "B"})
    _pub(q, b"a2", headers={"sym": "A"})
    res: Reservations[SeqId] = Reservations(EngineAdapter(q))
    r = res.reserve("c", 0, 10, now_ms=0)
    got = res.read("c", r.start, r.end, now_ms=0)
    assert sorted(e.message.body for e in got) == [b"a2", b"b1"]
    assert q.counters.lvq_replaced == 1
