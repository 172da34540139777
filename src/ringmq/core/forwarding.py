"""Publishes for queues another shard owns (docs/dev/shards.md).

Theory of operation
-------------------
With several shards, every shard knows every queue (the bindings are the same everywhere) but
owns only some: a queue another shard owns is a copy here whose `QueueEntity.owner` is that
shard's index (None: this shard's own queue). Routing does not change: a publish is routed with
the whole binding table on the shard its publisher is connected to. The per-queue step of the
pipeline (publish.py, step 3) and the routing of dead letters (deadletter.py) hand such a queue
to `forward`, which notes a `ForwardPublish` instead of enqueueing; the server drains them
after each batch (`drain`) and sends them on the shard link to their owner, in the order they
were noted, so a publisher's messages to one queue keep their order.

A confirm waits for every owner that got the message, and for the local fsync where the message
was also persisted here: `Confirms.confirm_joined` holds it with the number of answers still
due, the store's release (`Confirms.confirm_stored`) and the owners' answers
(`Confirms.forwards_resolved`, from the server as the link resolves forwards) each count one
down, and the last one sends the confirm. A refusal by any of them (an owner's full queue, a
lost link) nacks it at once; the later answers find nothing held and are ignored.

A copy holds no messages and serves no consumer here (`QueueBindings.local_queue_for` refuses
consume, get and purge on it; remote consumers come through the link's consumer frames).

Owns the forwards noted since the last drain. Pure: no I/O, no clock.
"""

from __future__ import annotations

from dataclasses import dataclass

from ringmq.core.entities import QueueEntity
from ringmq.core.message import Message


@dataclass(frozen=True, slots=True)
class ForwardPublish:
    """`message` for queue `queue` of vhost `vhost`, which shard `shard` owns. `seq` is the
    publish sequence number of the confirm that waits for the owner's answer on session
    (`conn_id`, `channel`); 0 when nobody waits (no confirm mode, a dead letter, a
    transaction's commit)."""

    shard: int
    vhost: str
    queue: str
    message: Message
    conn_id: int
    channel: int
    seq: int


class Forwards:
    """The forwards noted since the last `drain` (see the module docstring)."""

    def __init__(self) -> None:
        self._out: list[ForwardPublish] = []

    def forward(
        self, q: QueueEntity, msg: Message, conn_id: int | None, channel: int, seq: int
    ) -> None:
        """Note `msg` for `q`, another shard's queue (`q.owner` is not None)."""
        owner = q.owner
        assert owner is not None
        self._out.append(ForwardPublish(owner, q.vhost, q.name, msg, conn_id or 0, channel, seq))

    def drain(self) -> list[ForwardPublish]:
        """The forwards noted since the last call, in order."""
        out, self._out = self._out, []
        return out

    def __len__(self) -> int:
        return len(self._out)
