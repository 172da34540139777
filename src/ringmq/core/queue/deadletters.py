"""Dead letters a queue produced and the broker has not routed yet.

Theory of operation
-------------------
`DeadLetters` owns one queue's outbox of `DeadLetter` values and the per-reason counts in
`counters.dead_lettered`. The queue tells it the current target (`target`: the dead-letter
exchange and routing key of its settings); without an exchange, `add` drops the message (the
caller has already counted it as expired, rejected, dropped...). The broker drains the outbox
after each call that can produce dead letters and routes them (building `x-death`).

Invariant: every letter in the outbox was counted once in `dead_lettered` under its reason.
"""

from __future__ import annotations

from ringmq.core.message import Message
from ringmq.core.queue.records import DeadLetter, DeadLetterReason, QueueCounters

__all__ = ["DeadLetters"]


class DeadLetters:
    """One queue's dead-letter outbox (see the module docstring)."""

    __slots__ = ("_counters", "_exchange", "_name", "_out", "_routing_key")

    def __init__(self, name: str, counters: QueueCounters) -> None:
        self._name = name
        self._counters = counters
        self._out: list[DeadLetter] = []
        self._exchange: str | None = None
        self._routing_key: str | None = None

    def target(self, exchange: str | None, routing_key: str | None) -> None:
        """Where later letters go (the queue's settings changed)."""
        self._exchange = exchange
        self._routing_key = routing_key

    def add(self, msg: Message, reason: DeadLetterReason, now_ms: int, deliveries: int) -> None:
        """Dead-letter `msg` (nothing without a dead-letter exchange)."""
        exchange = self._exchange
        if exchange is None:
            return
        dead = self._counters.dead_lettered
        dead[reason.value] = dead.get(reason.value, 0) + 1
        self._out.append(
            DeadLetter(msg, reason, self._name, exchange, self._routing_key, now_ms, deliveries)
        )

    def drain(self) -> list[DeadLetter]:
        """The letters produced since the last call, in order."""
        out = self._out
        self._out = []
        return out
