"""Small builders for the queue engine's tests: a message, a queue from its arguments, its
ready bodies, a fetch that must deliver, its dead letters (no tests of its own)."""

from __future__ import annotations

from typing import Any

from ringmq.core.message import Message
from ringmq.core.queue import Delivery, Queue
from ringmq.core.settings import resolve_queue_settings


def msg(body: str, *, priority: int = 0, ttl: int | None = None, **headers: Any) -> Message:
    return Message(
        "ex",
        "rk",
        b"",
        body.encode(),
        headers=headers or None,
        priority=priority,
        expiration_ms=ttl,
    )


def queue(args: dict[str, Any] | None = None, **kw: Any) -> Queue:
    return Queue("q", resolve_queue_settings("q", args or {}, **kw))


def bodies(q: Queue) -> list[str]:
    return [m.body.decode() for m in q.ready_messages()]


def take(q: Queue, now: int = 0, ack_required: bool = True) -> Delivery:
    d = q.fetch(now, ack_required)
    assert d is not None
    return d


def dead(q: Queue) -> list[tuple[str, str]]:
    return [(d.message.body.decode(), d.reason.value) for d in q.drain_dead_letters()]
