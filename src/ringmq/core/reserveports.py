"""The ports between reservations and a queue: `ReservableQueue`, and `EngineAdapter`, the
queue engine behind it.

`core.reservations` talks to a queue only through `ReservableQueue` (take with an ack
required, ack, requeue: a reservation is a delivery not yet acked). `EngineAdapter` is that
port over `ringmq.core.queue.Queue`, whose tags are its seqs; over it a reserve takes its run
in one call (`Queue.take_run`, which may hand page rows over raw: `Held`). Stateless.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Generic, Protocol, TypeVar

from ringmq.core.message import Message, SeqId
from ringmq.core.queue.ports import RawRows

TagT = TypeVar("TagT")

Held = Message | RawRows
"""What a lease holds for one row: the message, or the raw page rows it is one of."""


@dataclass(frozen=True, slots=True)
class Taken(Generic[TagT]):
    """One message the queue handed over with an ack required."""

    tag: TagT
    seq: SeqId
    message: Message
    redelivered: bool


class ReservableQueue(Protocol[TagT]):
    """What reservations need from a queue (the broker adapts its backing queue to this).

    `take` must behave as a delivery with ack required: the message stops being ready and is
    held under `tag` until `ack` (delete) or `requeue` (back to its original position, flagged
    redelivered).
    """

    def take(self, now_ms: int) -> Taken[TagT] | None:
        """Return the head message with an ack required, or None when nothing is ready."""
        ...

    def ack(self, tags: list[TagT], now_ms: int) -> None:
        """Delete taken messages."""
        ...

    def requeue(self, tags: list[TagT], now_ms: int) -> None:
        """Return taken messages to the queue at their original position, redelivered."""
        ...


class EngineQueue(Protocol):
    """The part of `ringmq.core.queue.Queue` that `EngineAdapter` uses."""

    def fetch(self, now_ms: int, ack_required: bool = True) -> _Delivery | None: ...
    def take_run(
        self,
        max_count: int,
        max_bytes: int | None,
        now_ms: int,
        seqs: list[SeqId],
        messages: list[Held],
        redelivered: list[bool],
    ) -> int: ...
    def ack(self, seqs: Iterable[SeqId]) -> None: ...
    def requeue(
        self, seqs: Sequence[SeqId], now_ms: int, *, count_failure: bool = True
    ) -> None: ...


class _Delivery(Protocol):
    @property
    def seq(self) -> SeqId: ...
    @property
    def message(self) -> Message: ...
    @property
    def redelivered(self) -> bool: ...


class EngineAdapter:
    """`ReservableQueue` over the queue engine: the tag of a reserved message is its seq.

    A reservation is a delivery with ack required, so the engine's counters show reserved
    messages as unacked ("delivering"); giving them back is a requeue that does not count as a
    delivery failure (no `x-delivery-limit` penalty for an expired lease). A settle acks
    through `ack` when given (the broker's `ack_seqs`, which also journals the ACKs of
    persisted messages, as for an AMQP basic.ack), else straight on the engine.
    """

    __slots__ = ("_ack", "engine")

    def __init__(
        self, engine: EngineQueue, ack: Callable[[list[SeqId]], None] | None = None
    ) -> None:
        self.engine = engine
        self._ack = ack

    def take(self, now_ms: int) -> Taken[SeqId] | None:
        d = self.engine.fetch(now_ms, ack_required=True)
        if d is None:
            return None
        return Taken(d.seq, d.seq, d.message, d.redelivered)

    def ack(self, tags: list[SeqId], now_ms: int) -> None:
        if self._ack is not None:
            self._ack(tags)
        else:
            self.engine.ack(tags)

    def requeue(self, tags: list[SeqId], now_ms: int) -> None:
        self.engine.requeue(tags, now_ms, count_failure=False)


__all__ = [
    "EngineAdapter",
    "EngineQueue",
    "Held",
    "ReservableQueue",
    "TagT",
    "Taken",
]
