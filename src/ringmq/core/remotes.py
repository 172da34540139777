"""Consumers here of queues another shard owns (docs/dev/shards.md).

Theory of operation
-------------------
A copy of another shard's queue (`QueueEntity.owner`, core/forwarding.py) takes consumers like
any queue. While it has at least one, this shard holds one subscription to the queue on its
owner (`RemoteSubscribe`, which the server opens on the shard link with `WINDOW` deliveries
of credit); the owner's deliveries come back through `delivered` and enter the copy's engine
as ready messages, with the owner's redelivered flag and delivery count, so the core's own
dispatch hands them to the local consumers (their prefetch, priorities, no-ack, redelivery
all as for a local queue). The copy's engine numbers them `base + tag`, `base` being the
highest number the copy used before the subscription began, so numbers never repeat across
subscriptions.

What a client does with such a delivery (ack, requeue, release, reject; a no-ack delivery is
acked as it goes out) leaves the copy's engine and becomes a `RemoteSettle` for the owner,
which decides (requeue for another consumer, dead-letter, delete) as for its own consumers;
the server gives the link back as much credit as was settled, so at most `WINDOW` of the
owner's messages are here (waiting or unacked) per copy.

When the copy's last consumer goes, the subscription is cancelled (`RemoteCancel`) and what
waited here undelivered goes back to the owner (requeued), as do deliveries still on their
way; the owner's answer (`gone`, `kept`) ends it, and deliveries still unacked stay settleable
until the client settles them. When the owner ends the subscription on its own
(its queue went, it refused the consumer, the link was lost: `gone`), the owner has taken its
messages back: what waits here is dropped, the local consumers are cancelled (the consumer
cancel notification, as when a queue is deleted), and later settles of its deliveries are
ignored.

Owns the subscriptions and the operations noted for the server since the last `drain`.
Pure: no I/O, no clock.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Final

from ringmq.core.entities import QueueEntity
from ringmq.core.message import Message, SeqId
from ringmq.core.session import SettleKind

WINDOW: Final = 256
"""The owner's messages a copy holds at most (waiting or unacked): the link credit of its
subscription."""


@dataclass(frozen=True, slots=True)
class RemoteSubscribe:
    """Open subscription `sub` to queue `queue` of `vhost` on shard `shard`, `credit` granted."""

    sub: int
    shard: int
    vhost: str
    queue: str
    credit: int


@dataclass(frozen=True, slots=True)
class RemoteSettle:
    """Deliveries `tags` of subscription `sub` were settled so (`outcome`); grant as many
    deliveries again."""

    sub: int
    outcome: SettleKind
    tags: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class RemoteCancel:
    """End subscription `sub` (deliveries on their way still arrive; unacked ones stay
    settleable)."""

    sub: int


RemoteOp = RemoteSubscribe | RemoteSettle | RemoteCancel


@dataclass(slots=True, eq=False)
class _Sub:
    id: int
    queue: QueueEntity
    base: int
    live: bool = True
    """Its copy still has consumers here (no `RemoteCancel` yet)."""
    ended: bool = False
    """The owner ended it (its answer to the cancel, or on its own)."""
    held: set[SeqId] = field(default_factory=set)
    """Its deliveries in the copy's engine, waiting or unacked."""


class Remotes:
    """The subscriptions of copies (see the module docstring)."""

    def __init__(self) -> None:
        self._subs: dict[int, _Sub] = {}
        self._live: dict[int, _Sub] = {}  # id(copy) -> its live subscription
        self._of: dict[int, list[_Sub]] = {}  # id(copy) -> its subscriptions, live or not
        self._top: dict[int, int] = {}  # id(copy) -> highest engine number it used
        self._ops: list[RemoteOp] = []
        self._ids = itertools.count(1)

    def drain(self) -> list[RemoteOp]:
        """The operations noted since the last call, in order."""
        out, self._ops = self._ops, []
        return out

    # -- the copy's consumers ----------------------------------------------------------------

    def consumer_added(self, q: QueueEntity) -> None:
        """A consumer joined copy `q`: subscribe on its owner unless subscribed already."""
        if id(q) in self._live:
            return
        assert q.owner is not None
        sub = _Sub(next(self._ids), q, self._top.get(id(q), 0))
        self._subs[sub.id] = sub
        self._live[id(q)] = sub
        self._of.setdefault(id(q), []).append(sub)
        self._ops.append(RemoteSubscribe(sub.id, q.owner, q.vhost, q.name, WINDOW))

    def consumer_removed(self, q: QueueEntity, now_ms: int) -> None:
        """A consumer left copy `q`: with none left, cancel and send back what waits."""
        if q.consumers:
            return
        sub = self._live.pop(id(q), None)
        if sub is None:
            return
        sub.live = False
        self._ops.append(RemoteCancel(sub.id))
        self.settled(q, self._take_waiting(q, now_ms), SettleKind.REQUEUE)

    # -- the owner's side ----------------------------------------------------------------------

    def delivered(
        self,
        sub_id: int,
        first_tag: int,
        entries: Sequence[tuple[Message, bool, int]],
        now_ms: int,
    ) -> QueueEntity | None:
        """The owner delivered `entries` (message, redelivered, delivery count including this
        one) as tags `first_tag`...: into the copy's engine; the copy, to dispatch (None when
        the subscription was cancelled meanwhile: they go back at once, or has ended)."""
        sub = self._subs.get(sub_id)
        if sub is None or not entries:
            return None
        tags = range(first_tag, first_tag + len(entries))
        q = sub.queue
        if not sub.live or q.deleted:
            self._ops.append(RemoteSettle(sub_id, SettleKind.REQUEUE, tuple(tags)))
            return None
        engine = q.queue
        for tag, (msg, redelivered, count) in zip(tags, entries, strict=True):
            seq = SeqId(sub.base + tag)
            engine.restore(
                seq,
                msg,
                redelivered=redelivered,
                delivery_count=max(0, count - 1),  # the copy's delivery counts it once more
                expiry_ms=None,
                due_ms=None,
            )
            sub.held.add(seq)
        top = sub.base + tags[-1]
        if top > self._top.get(id(q), 0):
            self._top[id(q)] = top
        return q

    def gone(self, sub_id: int, now_ms: int, *, kept: bool = False) -> list[QueueEntity]:
        """The owner ended subscription `sub_id`: its answer to our `RemoteCancel` (`kept`:
        the deliveries still unacked here stay settleable until the client settles them), or
        on its own, or it refused it, or the link went (it took its messages back: what waits
        here is dropped and the unacked ones forgotten). The copy whose consumers must be
        cancelled (none when the subscription was no longer live)."""
        sub = self._subs.get(sub_id)
        if sub is None:
            return []
        q = sub.queue
        was_live = sub.live
        if was_live:
            sub.live = False
            del self._live[id(q)]
            self._take_waiting(q, now_ms)
        sub.ended = True
        if not kept or not sub.held:
            self._forget(sub)
        return [q] if was_live else []

    # -- the client's side ---------------------------------------------------------------------

    def settled(self, q: QueueEntity, seqs: Iterable[SeqId], kind: SettleKind) -> None:
        """The client settled deliveries `seqs` of copy `q` (`kind`; a no-ack delivery is an
        ACK as it goes out): they leave the copy and their owner is told."""
        seqs = list(seqs)
        if not seqs:
            return
        q.queue.ack(seqs)
        by_sub: dict[int, list[int]] = {}
        subs = self._of.get(id(q), ())
        for seq in seqs:
            for sub in subs:
                if seq in sub.held:
                    sub.held.discard(seq)
                    by_sub.setdefault(sub.id, []).append(seq - sub.base)
                    break
        for sub_id, tags in by_sub.items():
            self._ops.append(RemoteSettle(sub_id, kind, tuple(tags)))
            sub = self._subs[sub_id]
            if sub.ended and not sub.held:
                self._forget(sub)  # ended, and nothing of it left to settle

    def _forget(self, sub: _Sub) -> None:
        sub.held.clear()
        del self._subs[sub.id]
        subs = self._of[id(sub.queue)]
        subs.remove(sub)
        if not subs:
            del self._of[id(sub.queue)]

    @staticmethod
    def _take_waiting(q: QueueEntity, now_ms: int) -> list[SeqId]:
        # The copy's waiting (undelivered) messages, out of its engine.
        out: list[SeqId] = []
        engine = q.queue
        while (d := engine.fetch(now_ms, False)) is not None:
            out.append(d.seq)
        return out
