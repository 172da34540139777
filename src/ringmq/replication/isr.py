"""Which followers a leader's confirms wait for: the in-sync replicas (ISR), sans-IO.

Theory of operation
-------------------
A leader releases a confirm only when its own fsync and the acknowledgement of every follower
in the ISR cover the record (`covers`). The ISR lives in etcd (the control plane writes it;
only ISR members may campaign), so a follower may leave it only by a write to etcd that
completes *before* the leader confirms anything without that follower, and may join it only
when it already holds everything the leader confirmed:

* `IsrKeeper.isr` is the set etcd holds (as last written or read). While a write is under way
  (`proposed`), `covers` waits for the union of both sets: a follower being removed still
  counts until etcd has the new set, and one being added already counts, so no confirm is
  released that a member of either set lacks.
* `decide(now_ms, acked, confirmed, waiting)` returns the set to write, or None:
  - a member that holds back one waiting confirm (`acked` below `waiting`, the position of the
    oldest fsynced group still parked, when first noticed) or is not connected at all (absent
    from `acked`) for `timeout_ms` is dropped;
  - a connected follower outside the set whose acknowledgement reaches `confirmed` (the log
    position of the last group released: every confirm so far) is added; from that instant
    it counts (`proposed`), so it holds every later confirm too.
  The caller writes the answer to etcd and reports `written(ok)`; nothing else changes the
  set meanwhile.

The leader itself is always a member; `acked` maps each connected, in-step follower to the
last position it acknowledged (`server.replication_leader.ReplicationLeader.acked`).
"""

from __future__ import annotations

from collections.abc import Mapping

__all__ = ["IsrKeeper"]

_ABSENT = 1 << 62  # no position clears a follower that is not connected: only reconnecting


class IsrKeeper:
    """The ISR rules of one leader for one epoch (see the module docstring)."""

    def __init__(self, me: str, isr: frozenset[str], timeout_ms: int) -> None:
        self.me = me
        self.isr = isr | {me}
        self.timeout_ms = timeout_ms
        self.proposed: frozenset[str] | None = None
        """The set being written to etcd (None: no write under way)."""
        self._behind: dict[str, tuple[int, int]] = {}
        """Followers found late: since when, and the position that clears them."""

    def counted(self) -> frozenset[str]:
        """The followers a confirm waits for now (both sets while a write is under way)."""
        names = self.isr | (self.proposed or frozenset())
        return names - {self.me}

    def covers(self, position: int, acked: Mapping[str, int]) -> bool:
        """Every counted follower acknowledged `position`."""
        return all(acked.get(name, 0) >= position for name in self.counted())

    def decide(
        self, now_ms: int, acked: Mapping[str, int], confirmed: int, waiting: int | None
    ) -> frozenset[str] | None:
        """The ISR to write now (then `written`), or None to keep it (module docstring)."""
        if self.proposed is not None:
            return None
        drop = set()
        for name in self.isr - {self.me}:
            # late: absent, or below the confirm it was first found holding back (a follower
            # that keeps acknowledging, each confirm a little late, is not dropped)
            noticed = self._behind.get(name)
            if noticed is not None and name in acked and acked[name] >= noticed[1]:
                del self._behind[name]
                noticed = None
            if noticed is None:
                if name not in acked:
                    noticed = (now_ms, _ABSENT)
                elif waiting is not None and acked[name] < waiting:
                    noticed = (now_ms, waiting)
                else:
                    continue
                self._behind[name] = noticed
            if now_ms - noticed[0] >= self.timeout_ms:
                drop.add(name)
        add = {n for n, pos in acked.items() if n not in self.isr and pos >= confirmed}
        if not drop and not add:
            return None
        self.proposed = (self.isr - drop) | add
        return self.proposed

    def written(self, ok: bool) -> None:
        """The write of `proposed` to etcd succeeded (`ok`) or did not."""
        if ok and self.proposed is not None:
            for name in self.isr - self.proposed:
                self._behind.pop(name, None)
            self.isr = self.proposed
        self.proposed = None
