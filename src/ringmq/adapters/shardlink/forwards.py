"""Forwarded publishes of one shard link: enqueued into the named queues, resolved by confirms.

Theory of operation: the origin routed each message already (with the full binding table), so
the owner routes nothing: each `Received` entry's message goes into the entry's queues of the
entry's vhost through the publish pipeline's enqueue step (`Publisher.publish` with `queues`
given, which skips routing), on the link's one core session in confirm mode (the pipeline takes
the vhost as an argument, so one session, and one confirm order, serves every vhost). The core
numbers each publish on that session and later answers it with `Confirm` effects, singly or
cumulatively, exactly as it answers a 0-9-1 publisher in confirm mode: persistent messages
reaching durable queues after the group commit's fsync, the others at once, negatively with a
reason when a queue refused the message (reject-publish, an Artemis FAIL address, a failing
store). The acks of one received run go out together, as a 0-9-1 publish run's do
(`Publisher.publish`'s `released`), so a run costs one cumulative confirm. `_waiting` maps each
core publish number to its link sequence, oldest first, so a cumulative confirm resolves a run
of link sequences (`OwnerSession.accept` / `reject`), and the session answers the origin
cumulatively in turn.

One link sequence is one core publish, whatever the number of queues: its confirm comes once
every queue's copy is stored, or negative when any queue refused it (the others keep theirs,
as with a 0-9-1 publish that a full queue nacks). A forward naming a vhost or a queue this
shard does not have is refused whole (404) before anything is enqueued: the origin's routing
is stale. That refusal is the forward's alone: the link and the forwards after it go on.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ringmq.core.errors import BrokerError
from ringmq.shardlink import codes

if TYPE_CHECKING:
    from ringmq.core.broker import Broker
    from ringmq.core.effects import Confirm
    from ringmq.core.entities import QueueEntity
    from ringmq.core.session import Session
    from ringmq.core.vhost import VHost
    from ringmq.shardlink.owner import OwnerSession, Received


class Forwards:
    """The publishes of one link (see the module docstring).

    Args:
        broker: the core.
        owner: the link's session (resolutions go there).
        session: the link's core session for publishes, in confirm mode.
    """

    def __init__(self, broker: Broker, owner: OwnerSession, session: Session) -> None:
        self.broker = broker
        self.owner = owner
        self.session = session
        self._waiting: dict[int, int] = {}
        """Core publish number -> link sequence, in publish order (both only grow)."""

    @property
    def waiting(self) -> int:
        """Forwards enqueued whose confirm has not come back yet."""
        return len(self._waiting)

    def received(self, ev: Received, now_ms: int) -> None:
        """Enqueue a run of forwards, in order (inside a core call that publishes)."""
        s = self.session
        vhosts = self.broker.state.vhosts
        publisher = self.broker.publisher
        publish = publisher.publish
        owner = self.owner
        released: list[int] = []  # the run's acks, sent together (coalesced) at its end
        seq = ev.first
        for entry in ev.entries:
            vh = vhosts.get(entry.vhost)
            queues = None if vh is None else _queues(vh, entry.queues)
            if vh is None or queues is None:
                owner.reject(seq, codes.NOT_FOUND)
            elif not queues:
                owner.accept(seq)  # asked to store nowhere: nothing can fail
            else:
                # the default exchange: for the engine's per-exchange bookkeeping (dedup)
                default = vh.exchanges[""]
                try:
                    publish(
                        entry.message, session=s, vhost=vh, exchange=default, now_ms=now_ms,
                        queues=queues, released=released,
                    )  # fmt: skip
                except BrokerError as exc:
                    # refused outright (the pipeline raises only where no confirm follows): it
                    # is resolved now, or every later outcome would wait behind it
                    owner.reject(seq, codes.of_condition(exc.condition))
                else:
                    self._waiting[s.publish_seq] = seq
            seq += 1
        if released:
            publisher.confirms.send(s, released)

    def confirmed(self, c: Confirm) -> None:
        """The core's confirm of publishes on the link's session: their link sequences are
        resolved."""
        waiting = self._waiting
        if c.multiple:
            done = []
            for core_seq in waiting:
                if core_seq > c.seq:
                    break
                done.append(core_seq)
        else:
            done = [c.seq] if c.seq in waiting else []
        owner = self.owner
        for core_seq in done:
            seq = waiting.pop(core_seq)
            if c.ok:
                owner.accept(seq)
            else:
                owner.reject(seq, codes.of_reason(c.reason))


def _queues(vh: VHost, names: tuple[str, ...]) -> tuple[QueueEntity, ...] | None:
    # the entry's queues in `vh`, each once; None when one is missing
    queues = vh.queues
    found: dict[str, QueueEntity] = {}
    for name in names:
        q = queues.get(name)
        if q is None or q.deleted:
            return None
        found[name] = q
    return tuple(found.values())
