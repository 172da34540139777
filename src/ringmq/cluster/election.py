"""Leader election of one shard over etcd: a sans-IO state machine.

Theory of operation: etcd owns consensus; this machine only decides, from what etcd answered
and the time, what one node believes and what it asks etcd next. It reads no clock and does no
I/O: the asyncio side (`ringmq.cluster.agent`) calls `tick(now_ms)` and the `*_ok`/`*_failed`
methods with etcd's answers, and carries out the returned effects (`GrantLease`, `RenewLease`,
`Campaign`, `Resign`, `Observe`, `RoleChanged`). Times are a monotonic clock's milliseconds.

The rules (after LavinMQ's etcd coordinator and Artemis' activation sequence):

* A node holds one lease (TTL `ttl_ms`). A lease granted, or renewed, by a request *sent* at
  `t` lives in etcd at least until `t + ttl_ms` (etcd starts the TTL when it receives the
  request, which is after `t`), so `valid_until_ms` is a lower bound of the lease's life that
  needs no clock shared with etcd. Renewals go out every `ttl_ms / 3`.
* Campaign: one etcd transaction creates the shard's leader key, with the lease, only if it
  is absent, and in the same transaction raises the shard's epoch by one (the compare also
  checks the epoch it read, so two winners can never share an epoch). Only members of the ISR
  campaign (an empty ISR, a new cluster, lets anyone); a node that wins while the ISR it then
  reads does not hold it resigns at once.
* Fencing: a leader believes it leads only while `now_ms < valid_until_ms - margin_ms`
  (`leads`). When the renewals stop succeeding it stops leading (`RoleChanged(FOLLOWER)`, the
  node's fence) at that deadline, `margin_ms` *before* etcd can expire the lease and let
  another node win: two nodes never both believe they lead, in one epoch or across epochs.
  An observation (a read of the shard's keys) newer than the victory that shows another leader
  or epoch fences at once too.
* Reads: the shard's keys are read every `poll_ms`, and at once when a watch reports a change
  (`changed`), so a deleted leader key is seen without waiting for the next poll.
* Planned step-down: fence first, then delete the leader key (`Resign`, only if it is still
  ours), then hold off campaigning for `poll_ms` so that another ISR member takes over (its
  watch, or at worst its next read, sees the key gone within that time; a longer hold-off
  would leave nobody to lead after consecutive step-downs).

Invariants: `role is LEADER` implies a lease and an epoch won by this node; at most one request
of each kind is in flight (the I/O side answers each one exactly once, success or failure).
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum
from typing import Final, TypeAlias

__all__ = [
    "Campaign",
    "Effect",
    "Election",
    "GrantLease",
    "Observe",
    "RenewLease",
    "Resign",
    "Role",
    "RoleChanged",
]

DEFAULT_TTL_MS: Final = 5000


class Role(Enum):
    """What a node is for its shard (the wire strings of `/api/nodes`)."""

    FOLLOWER = "follower"
    LEADER = "leader"


@dataclass(frozen=True, slots=True)
class GrantLease:
    """Ask etcd for a new lease of `ttl_ms` (answer: `lease_granted` or `lease_failed`)."""

    ttl_ms: int


@dataclass(frozen=True, slots=True)
class RenewLease:
    """Keep `lease_id` alive (answer: `lease_renewed`, `lease_expired` or `lease_failed`)."""

    lease_id: int


@dataclass(frozen=True, slots=True)
class Campaign:
    """Create the leader key with `lease_id` if absent and raise the epoch from `epoch` to
    `epoch + 1`, both in one transaction (answer: `campaign_won`, `campaign_lost` or
    `campaign_failed`)."""

    lease_id: int
    epoch: int


@dataclass(frozen=True, slots=True)
class Resign:
    """Delete the leader key if it still names this node in `epoch` (no answer needed)."""

    epoch: int


@dataclass(frozen=True, slots=True)
class Observe:
    """Read the shard's keys (answer: `observed` or `observe_failed`)."""


@dataclass(frozen=True, slots=True)
class RoleChanged:
    """This node's role changed: a FOLLOWER here after LEADER is the fence (stop confirming).

    `leader` is the leader's node name where known (None: nobody leads as far as we know)."""

    role: Role
    epoch: int
    leader: str | None


Effect: TypeAlias = GrantLease | RenewLease | Campaign | Resign | Observe | RoleChanged


class Election:
    """One node's view of one shard's leadership (see the module docstring).

    Args:
        node: this node's name (the leader key's value names it).
        ttl_ms: the lease TTL.
        margin_ms: stop leading this long before the lease can expire (default `ttl_ms / 4`).
        poll_ms: read the shard's keys this often (default `ttl_ms / 5`, at most 1 s).
    """

    def __init__(
        self,
        node: str,
        *,
        ttl_ms: int = DEFAULT_TTL_MS,
        margin_ms: int | None = None,
        poll_ms: int | None = None,
    ) -> None:
        if ttl_ms < 3:
            raise ValueError("the lease TTL must be at least 3 ms")
        self.node = node
        self.ttl_ms = ttl_ms
        self.margin_ms = ttl_ms // 4 if margin_ms is None else margin_ms
        if not 0 < self.margin_ms < ttl_ms:
            raise ValueError("margin_ms must be between 0 and the TTL")
        self.renew_ms = ttl_ms // 3
        self.retry_ms = max(1, ttl_ms // 10)
        self.poll_ms = min(1000, max(1, ttl_ms // 5)) if poll_ms is None else poll_ms
        self.role = Role.FOLLOWER
        self.epoch = 0
        """The shard's epoch as last known (the one this node won while it leads)."""
        self.leader: str | None = None
        """The leader's name as last observed (this node's while it leads)."""
        self.isr: frozenset[str] = frozenset()
        self.lease_id: int | None = None
        self.valid_until_ms = 0
        self.revision = 0
        """etcd revision of the newest answer applied (older observations are stale)."""
        self.stopped = False
        self._next_renew_ms = 0
        self._next_grant_ms = 0
        self._next_observe_ms = 0
        self._holdoff_until_ms = 0
        self._granting = self._renewing = self._campaigning = self._observing = False
        self._observed_since_lease = False
        self._observe_again = False

    # -- what the node believes ----------------------------------------------------------------

    def fence_at_ms(self) -> int:
        """When a leader stops leading unless a renewal succeeds first."""
        return self.valid_until_ms - self.margin_ms

    def leads(self, now_ms: int) -> bool:
        """True while this node leads: the one test a confirm may pass on (see the docstring)."""
        return self.role is Role.LEADER and now_ms < self.fence_at_ms()

    def in_isr(self) -> bool:
        """May this node campaign: it is in the ISR, or the ISR is empty (a new cluster)."""
        return not self.isr or self.node in self.isr

    # -- time ----------------------------------------------------------------------------------

    def tick(self, now_ms: int) -> list[Effect]:
        """Everything due at `now_ms`: fence, renew, grant, observe, campaign."""
        out: list[Effect] = []
        if self.role is Role.LEADER and now_ms >= self.fence_at_ms():
            out += self._fence()
        if self.lease_id is not None and now_ms >= self.valid_until_ms:
            self._drop_lease()  # it may be gone in etcd: take a new one
        if self.stopped:
            return out
        if self.lease_id is None:
            if not self._granting and now_ms >= self._next_grant_ms:
                self._granting = True
                out.append(GrantLease(self.ttl_ms))
        elif not self._renewing and now_ms >= self._next_renew_ms:
            self._renewing = True
            out.append(RenewLease(self.lease_id))
        if not self._observing and now_ms >= self._next_observe_ms:
            self._observing = True
            out.append(Observe())
        if self._may_campaign(now_ms):
            assert self.lease_id is not None
            self._campaigning = True
            out.append(Campaign(self.lease_id, self.epoch))
        return out

    def next_deadline_ms(self) -> int:
        """When `tick` next has something to do (the I/O side also ticks after each answer)."""
        times = [self._next_observe_ms]
        if self.role is Role.LEADER:
            times.append(self.fence_at_ms())
        if self.lease_id is None:
            times.append(self._next_grant_ms)
        else:
            times += [self._next_renew_ms, self.valid_until_ms]
        if self._holdoff_until_ms:
            times.append(self._holdoff_until_ms)
        return min(times)

    def _may_campaign(self, now_ms: int) -> bool:
        return (
            self.role is Role.FOLLOWER
            and self.lease_id is not None
            and not self._campaigning
            and self._observed_since_lease
            and self.leader is None
            and self.in_isr()
            and now_ms >= self._holdoff_until_ms
            and now_ms < self.fence_at_ms()
        )

    # -- etcd's answers ------------------------------------------------------------------------

    def lease_granted(self, lease_id: int, sent_ms: int) -> None:
        """A lease asked for at `sent_ms` was granted."""
        self._granting = False
        self.lease_id = lease_id
        self.valid_until_ms = sent_ms + self.ttl_ms
        self._next_renew_ms = sent_ms + self.renew_ms
        # the leader key may name a dead node's lease: decide only on a read made with this one
        self._observed_since_lease = False
        self._next_observe_ms = 0

    def lease_renewed(self, lease_id: int, sent_ms: int) -> None:
        """A renewal sent at `sent_ms` succeeded (etcd answered a TTL above 0)."""
        self._renewing = False
        if lease_id != self.lease_id:
            return  # an answer about a lease dropped meanwhile
        self.valid_until_ms = max(self.valid_until_ms, sent_ms + self.ttl_ms)
        self._next_renew_ms = sent_ms + self.renew_ms

    def lease_expired(self, lease_id: int) -> list[Effect]:
        """etcd says `lease_id` is gone: fence at once if it held the leader key."""
        self._renewing = False
        if lease_id != self.lease_id:
            return []
        out = self._fence() if self.role is Role.LEADER else []
        self._drop_lease()
        return out

    def lease_failed(self, now_ms: int) -> None:
        """A grant or renewal got no answer (etcd unreachable, no quorum): retry soon; the
        fence deadline stands."""
        if self._granting:
            self._next_grant_ms = now_ms + self.retry_ms
        if self._renewing:
            self._next_renew_ms = now_ms + self.retry_ms
        self._granting = self._renewing = False

    def observed(
        self, leader: str | None, epoch: int, isr: frozenset[str], revision: int, now_ms: int
    ) -> list[Effect]:
        """A read of the shard's keys at etcd `revision`: the leader key's node (None: absent),
        the epoch and the ISR."""
        self._observing = False
        self._next_observe_ms = 0 if self._observe_again else now_ms + self.poll_ms
        self._observe_again = False
        if revision < self.revision:
            return []  # older than an answer already applied (a slow read)
        self.revision = revision
        self.isr = isr
        self._observed_since_lease = self.lease_id is not None
        out: list[Effect] = []
        if self.role is Role.LEADER and (leader != self.node or epoch != self.epoch):
            out += self._fence()  # the key is gone or another node's: we lead no more
        if self.role is Role.FOLLOWER and leader == self.node:
            # a key naming us that we did not win: a campaign whose answer was lost, or our
            # previous run's (killed) key; lead only on an answered victory, so delete it
            out.append(Resign(epoch))
        elif self.role is Role.FOLLOWER and (leader != self.leader or epoch != self.epoch):
            out.append(RoleChanged(Role.FOLLOWER, epoch, leader))
        self.leader = leader
        self.epoch = epoch
        return out

    def changed(self) -> None:
        """etcd says the shard's keys changed (a watch event): read them now, and again after a
        read already in flight (it may predate the change)."""
        self._next_observe_ms = 0
        self._observe_again = self._observing

    def observe_failed(self, now_ms: int) -> None:
        self._observing = False
        self._next_observe_ms = now_ms + self.retry_ms

    def campaign_won(
        self, epoch: int, isr: frozenset[str], revision: int, now_ms: int
    ) -> list[Effect]:
        """The transaction created the leader key and set the epoch to `epoch`; `isr` is the
        ISR read in the same transaction."""
        self._campaigning = False
        self.revision = max(self.revision, revision)
        self.epoch = epoch
        self.isr = isr
        if self.stopped or not self.in_isr() or now_ms >= self.fence_at_ms():
            # won out of the ISR (LavinMQ steps down too), or too late to lead safely
            self.leader = None
            self._holdoff_until_ms = now_ms + self.poll_ms
            return [Resign(epoch)]
        self.role = Role.LEADER
        self.leader = self.node
        return [RoleChanged(Role.LEADER, epoch, self.node)]

    def campaign_lost(self, leader: str | None, epoch: int, revision: int) -> list[Effect]:
        """The leader key existed (naming `leader`) or the epoch had moved on."""
        self._campaigning = False
        if revision < self.revision:
            return []
        self.revision = revision
        out: list[Effect] = []
        if leader != self.leader or epoch != self.epoch:
            out.append(RoleChanged(Role.FOLLOWER, epoch, leader))
        self.leader = leader
        self.epoch = epoch
        return out

    def campaign_failed(self) -> None:
        """No answer: whether the transaction applied is unknown. A key it created carries our
        lease; the next observation shows it naming us while we do not lead, and `observed`
        resigns it."""
        self._campaigning = False

    # -- operator ------------------------------------------------------------------------------

    def step_down(self, now_ms: int) -> list[Effect]:
        """Planned switchover: fence, delete our leader key, let another ISR member win."""
        if self.role is not Role.LEADER:
            return []
        epoch = self.epoch
        out = self._fence()
        self._holdoff_until_ms = now_ms + self.poll_ms
        return [*out, Resign(epoch)]

    def stop(self, now_ms: int) -> list[Effect]:
        """The node shuts down: step down and campaign no more."""
        out = self.step_down(now_ms)
        self.stopped = True
        return out

    # -- helpers -------------------------------------------------------------------------------

    def _fence(self) -> list[Effect]:
        self.role = Role.FOLLOWER
        self.leader = None
        return [RoleChanged(Role.FOLLOWER, self.epoch, None)]

    def _drop_lease(self) -> None:
        self.lease_id = None
        self.valid_until_ms = 0
        self._renewing = False
        self._observed_since_lease = False
