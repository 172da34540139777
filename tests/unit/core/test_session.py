"""Channel state: delivery tags, multiple settles, confirm coalescing."""

from __future__ import annotations

import pytest

from ringmq.core.errors import BrokerError, Condition
from ringmq.core.message import SeqId
from ringmq.core.session import Conn, Session, Unacked


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
