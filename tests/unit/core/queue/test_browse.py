"""Browsing a queue: ready messages in seq order, state unchanged, and the browse index and
lanes compacted as messages leave."""

from __future__ import annotations

from ringmq.core.message import SeqId
from tests.unit.core.queue.kit import bodies, msg, queue, take


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
