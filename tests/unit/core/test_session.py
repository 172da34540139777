"""Channel state: delivery tags, multiple settles, confirm coalescing."""

from __future__ import annotations

import pytest

from ringmq.core.entities import Unacked
from ringmq.core.errors import BrokerError, Condition
from ringmq.core.message import SeqId
from ringmq.core.session import Conn, Session


def _session() -> Session:
    return Session(Conn(1, "guest", "/"), 1, vhost=None)  # type: ignore[arg-type]


def _entry(seq: int) -> Unacked:
    return Unacked(queue=None, seq=SeqId(seq), consumer=None)  # type: ignore[arg-type]


def test_tags_and_multiple_take() -> None:
    s = _session()
    tags = [s.track(_entry(i)) for i in range(5)]
    assert tags == [1, 2, 3, 4, 5]
    assert [e.seq for e in s.take(2, multiple=False)] == [1]
    assert [e.seq for e in s.take(3, multiple=True)] == [0, 2]
    with pytest.raises(BrokerError) as exc:
        s.take(3, multiple=False)
    assert exc.value.condition is Condition.PRECONDITION_FAILED
    assert [e.seq for e in s.take(0, multiple=True)] == [3, 4]
    assert s.unacked == {}


def test_confirm_floor_coalesces_multiple_acks() -> None:
    s = _session()
    for _ in range(3):
        s.confirm_held.add(s.next_publish_seq())
    assert s.confirm_acks([2]) == [(2, False)]  # 1 still held: individual ack
    assert s.confirm_acks([1, 3]) == [(3, True)]
    s.next_publish_seq()
    assert s.confirm_acks([4]) == [(4, False)]


def test_multiple_acks_stop_below_nacks() -> None:
    # The defect's channel: odd publishes held for the fsync, 2..10 acked at once, 12..40
    # nacked; the fsync then releases the odd ones (in any order). A multiple ack covering
    # a nack (once `basic.ack 40 multiple`, 40 being nacked) is dropped by aiormq.
    s = _session()
    early: list[tuple[int, bool]] = []
    for _ in range(40):
        seq = s.next_publish_seq()
        if seq % 2:
            s.confirm_held.add(seq)
        elif seq <= 10:
            early += s.confirm_acks([seq])
        else:
            s.confirm_nack(seq)
    assert early == [(n, False) for n in range(2, 11, 2)]
    odd = list(range(1, 40, 2))
    assert s.confirm_acks(odd[::-1]) == [(11, True)] + [(n, False) for n in range(13, 40, 2)]
    assert (s.confirm_floor, s.confirm_nacked) == (40, set())
    assert s.confirm_acks([s.next_publish_seq()]) == [(41, False)]


def test_multiple_ack_names_a_publish_acked_by_it() -> None:
    # 2 was acked alone while 1 was held: releasing 1 acks 1 alone, not `2 multiple` (2 is no
    # longer waiting at the client, which would drop that ack and leave 1 waiting).
    s = _session()
    s.confirm_held.add(s.next_publish_seq())
    assert s.confirm_acks([s.next_publish_seq()]) == [(2, False)]
    assert s.confirm_acks([1]) == [(1, False)]
    seqs = s.next_publish_seqs(3)
    s.confirm_nack(s.next_publish_seq())  # 6, while nothing waits below it
    assert s.confirm_acks(list(seqs)) == [(5, True)]
    assert (s.confirm_floor, s.confirm_nacked) == (6, set())
