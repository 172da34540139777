"""Queue.browse_many equals repeated Queue.browse, over random queue histories."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from ringmq.core.message import Message, SeqId
from ringmq.core.queue import Delivery, Queue
from ringmq.core.settings import resolve_queue_settings

from .histories import queue_ops

_ops = queue_ops(60)
_args = st.sampled_from(
    [
        {},
        {"x-max-length": 5},
        {"x-max-length": 4, "x-overflow": "reject-publish"},
        {"x-max-priority": 3},
    ]
)


def _repeated(q: Queue, after: SeqId | None, limit: int, now: int) -> list[Delivery]:
    out: list[Delivery] = []
    cursor = after
    for _ in range(limit):
        d = q.browse(cursor, now)
        if d is None:
            break
        out.append(d)
        cursor = d.seq
    return out


def _key(ds: list[Delivery]) -> list[tuple[Any, ...]]:
    return [(d.seq, d.message.body, d.redelivered, d.delivery_count) for d in ds]


@settings(max_examples=80, deadline=None)
@given(_args, _ops, st.data())
def test_browse_many_equals_repeated_browse(
    args: dict[str, Any], ops: list[tuple[str, Any, int]], data: st.DataObject
) -> None:
    q = Queue("q", resolve_queue_settings("q", args))
    now = 0
    unacked: list[SeqId] = []
    for i, (op, a, b) in enumerate(ops):
        if op == "publish":
            q.publish(Message("", "q", b"", f"m{i}".encode(), expiration_ms=a, priority=b), now)
        elif op == "fetch":
            d = q.fetch(now, a)
            if d is not None and a:
                unacked.append(d.seq)
        elif op == "ack" and unacked:
            q.ack([unacked.pop(a % len(unacked))])
        elif op == "requeue" and unacked:
            q.requeue([unacked.pop(a % len(unacked))], now)
        elif op == "tick":
            now += a
        if i % 7 == 0:
            q.browse(None, now)  # build the index part-way, so later changes update it
    top = max([0, *(int(d.seq) for d in q.browse_many(None, 1000, now))])
    after = data.draw(st.none() | st.integers(0, top + 2).map(SeqId))
    limit = data.draw(st.integers(0, 12))
    got = q.browse_many(after, limit, now)
    assert _key(got) == _key(_repeated(q, after, limit, now))
    assert len(got) <= limit
    assert [d.seq for d in got] == sorted(d.seq for d in got)


def test_examples() -> None:
    q = Queue("q", resolve_queue_settings("q", {}))
    for i in range(5):
        q.publish(Message("", "q", b"", str(i).encode()), 0)
    first = q.fetch(0, True)
    assert first is not None
    assert [d.message.body for d in q.browse_many(None, 10, 0)] == [b"1", b"2", b"3", b"4"]
    q.requeue([first.seq], 0)
    got = q.browse_many(None, 2, 0)
    assert [(d.message.body, d.redelivered) for d in got] == [(b"0", True), (b"1", False)]
    assert [d.message.body for d in q.browse_many(got[-1].seq, 10, 0)] == [b"2", b"3", b"4"]
    assert q.browse_many(None, 0, 0) == []
