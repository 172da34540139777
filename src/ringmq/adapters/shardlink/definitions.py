"""Shard 0's definitions feed, sent to the shards that follow it (one owner link each).

Theory of operation
-------------------
`Followers` is shared by every owner link of this broker (`shardlink_handler` makes one). A
link whose origin asks to follow (`FollowAsked`) turns the core's feed on
(`Broker.feed_definitions`) and is sent the snapshot at once; from then on, at the end of every
server batch (`HandlerContext.at_batch_end`: whichever client's read, timer or management call
made the change), it is sent the changes after the last one it has, in order, in one
`Definitions` frame. The core's changes are drained once per batch into `log`, which keeps
only what some follower has not been sent yet; a change drained before a follower's snapshot
is in that snapshot, so each follower's position starts at the snapshot's sequence.

Owns the log and each follower's position. Owned by the loop thread.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ringmq.core.deffeed import DefinitionChange

if TYPE_CHECKING:
    from ringmq.core.broker import Broker
    from ringmq.shardlink.owner import OwnerSession

__all__ = ["Followers"]


class Followers:
    """The links that follow this shard's definitions (see the module docstring)."""

    def __init__(self, broker: Broker) -> None:
        self.broker = broker
        self.log: list[DefinitionChange] = []
        self._sent: dict[OwnerSession, int] = {}  # follower -> the last sequence it was sent

    def follow(self, session: OwnerSession) -> None:
        """`session`'s origin asked to follow: the snapshot goes to it now."""
        broker = self.broker
        self._pull()
        broker.feed_definitions()
        snapshot = broker.definitions_snapshot()
        session.definitions(snapshot, snapshot=True)
        self._sent[session] = max((c.seq for c in snapshot), default=0)

    def send(self, session: OwnerSession) -> bool:
        """The end of a batch: send `session` the changes it does not have yet; True when
        there were some (its link has bytes to write)."""
        last = self._sent.get(session)
        if last is None or session.closed:
            return False
        self._pull()
        new = [c for c in self.log if c.seq > last] if self.log and self.log[-1].seq > last else []
        if not new:
            return False
        session.definitions(new)
        self._sent[session] = new[-1].seq
        self._trim()
        return True

    def leave(self, session: OwnerSession) -> None:
        """`session`'s link is gone."""
        if self._sent.pop(session, None) is not None:
            self._trim()

    def _pull(self) -> None:
        changes = self.broker.drain_definitions()
        if changes and self._sent:
            self.log += changes

    def _trim(self) -> None:
        # keep what some follower has not been sent
        if not self._sent:
            self.log.clear()
            return
        low = min(self._sent.values())
        if self.log and self.log[0].seq <= low:
            self.log = [c for c in self.log if c.seq > low]
