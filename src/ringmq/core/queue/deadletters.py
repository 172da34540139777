"""Dead letters a queue produced and the broker has not routed yet.

Theory of operation
-------------------
`DeadLetters` owns one queue's outbox of `DeadLetter` values and the per-reason counts in
`counters.dead_lettered`. The queue tells it the current targets (`target`: the RabbitMQ
dead-letter exchange and routing key of its settings, else Artemis' dead-letter address for
rejected and over-limit messages and expiry address for expired ones, each with its
auto-created queue); without a target for a reason, `add` drops the message (the caller has
already counted it as expired, rejected, dropped...). Artemis does not dead-letter what a
limit drops, so `maxlen` has no Artemis target. The broker drains the outbox after each call
that can produce dead letters and routes them (building `x-death`).

Invariant: every letter in the outbox was counted once in `dead_lettered` under its reason.
"""

from __future__ import annotations

from ringmq.core.message import Message
from ringmq.core.queue.records import DeadLetter, DeadLetterReason, QueueCounters

__all__ = ["DeadLetters"]


class DeadLetters:
    """One queue's dead-letter outbox (see the module docstring)."""

    __slots__ = ("_counters", "_dla", "_exchange", "_expiry", "_name", "_out", "_routing_key")

    def __init__(self, name: str, counters: QueueCounters) -> None:
        self._name = name
        self._counters = counters
        self._out: list[DeadLetter] = []
        self._exchange: str | None = None
        self._routing_key: str | None = None
        self._dla: tuple[str, str | None] | None = None
        self._expiry: tuple[str, str | None] | None = None

    def target(
        self,
        exchange: str | None,
        routing_key: str | None,
        *,
        dead_letter_address: tuple[str, str | None] | None = None,
        expiry_address: tuple[str, str | None] | None = None,
    ) -> None:
        """Where later letters go (the queue's settings changed): a RabbitMQ DLX for every
        reason, else Artemis' addresses `(address, auto-created queue)` by reason."""
        self._exchange = exchange
        self._routing_key = routing_key
        self._dla = dead_letter_address
        self._expiry = expiry_address

    def add(self, msg: Message, reason: DeadLetterReason, now_ms: int, deliveries: int) -> None:
        """Dead-letter `msg` (nothing without a target for `reason`)."""
        exchange = self._exchange
        if exchange is not None:
            letter = DeadLetter(
                msg, reason, self._name, exchange, self._routing_key, now_ms, deliveries
            )
        else:
            address = self._expiry if reason is DeadLetterReason.EXPIRED else self._dla
            if address is None or reason is DeadLetterReason.MAXLEN:
                return
            letter = DeadLetter(
                msg, reason, self._name, address[0], None, now_ms, deliveries, True, address[1]
            )
        dead = self._counters.dead_lettered
        dead[reason.value] = dead.get(reason.value, 0) + 1
        self._out.append(letter)

    def drain(self) -> list[DeadLetter]:
        """The letters produced since the last call, in order."""
        out = self._out
        self._out = []
        return out
