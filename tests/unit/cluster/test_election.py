"""The election machine against a model of etcd: never two leaders (Hypothesis).

The model etcd keeps leases (id -> expiry), the leader key (node, lease) and the epoch, and
applies requests when the test delivers them, at the model's current time, as etcd does (a
lease's TTL counts from when etcd receives the grant or keep-alive). Requests may be delayed
any time, lost before etcd (a partition), or applied with their answer lost; time advances by
any step. The invariants: at every instant at most one node `leads(now)`, and no epoch is ever
led by two nodes.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from hypothesis import event
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

from ringmq.cluster.election import (
    Campaign,
    Effect,
    Election,
    GrantLease,
    Observe,
    RenewLease,
    Resign,
    Role,
    RoleChanged,
)

TTL = 300
NODES = ("a", "b", "c")


@dataclass
class ModelEtcd:
    now: int = 0
    leases: dict[int, int] = field(default_factory=dict)  # id -> expires at
    leader: tuple[str, int, int] | None = None  # node, lease, epoch
    epoch: int = 0
    isr: frozenset[str] = frozenset()
    revision: int = 1
    next_lease: int = 1

    def expire(self) -> None:
        for lid, until in list(self.leases.items()):
            if until <= self.now:
                del self.leases[lid]
                if self.leader is not None and self.leader[1] == lid:
                    self.leader = None
                    self.revision += 1


@dataclass
class Pending:
    node: str
    effect: Effect
    sent: int


class ElectionMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.etcd = ModelEtcd()
        self.nodes = {n: Election(n, ttl_ms=TTL) for n in NODES}
        self.pending: list[Pending] = []
        self.led: dict[int, set[str]] = {}
        self.stopped: set[str] = set()

    def _emit(self, node: str, effects: list[Effect]) -> None:
        for eff in effects:
            if isinstance(eff, RoleChanged):
                continue
            self.pending.append(Pending(node, eff, self.etcd.now))

    def _note_leaders(self) -> None:
        for name, e in self.nodes.items():
            if e.leads(self.etcd.now):
                event(f"a leader in epoch {min(e.epoch, 3)}")
                self.led.setdefault(e.epoch, set()).add(name)

    @rule(node=st.sampled_from(NODES))
    def tick(self, node: str) -> None:
        self._emit(node, self.nodes[node].tick(self.etcd.now))
        self._note_leaders()

    @rule(ms=st.integers(0, TTL // 3))
    def advance(self, ms: int) -> None:
        self.etcd.now += ms
        self.etcd.expire()

    @rule(slack=st.integers(0, 2))
    def until_a_lease_expires(self, slack: int) -> None:
        # the dangerous instant: right when etcd drops a lease (its holder must have fenced)
        if self.etcd.leases:
            self.etcd.now = max(self.etcd.now, min(self.etcd.leases.values()) + slack)
            self.etcd.expire()

    @rule(node=st.sampled_from(NODES))
    def until_a_node_deadline(self, node: str) -> None:
        self.etcd.now = max(self.etcd.now, self.nodes[node].next_deadline_ms())
        self.etcd.expire()

    @rule(node=st.sampled_from(NODES))
    def healthy_round(self, node: str) -> None:
        # the node ticks and etcd answers everything it asked, at once (reaches elections)
        for _ in range(3):
            self.tick(node)
            mine = [p for p in self.pending if p.node == node]
            self.pending = [p for p in self.pending if p.node != node]
            for p in mine:
                self._deliver(p, "answered")

    @rule(data=st.data(), answer=st.sampled_from(["answered", "answer-lost", "request-lost"]))
    def deliver(self, data: st.DataObject, answer: str) -> None:
        if not self.pending:
            return
        self._deliver(self.pending.pop(data.draw(st.integers(0, len(self.pending) - 1))), answer)

    def _deliver(self, p: Pending, answer: str) -> None:
        e = self.nodes[p.node]
        db = self.etcd
        now = db.now
        if answer == "request-lost":
            self._failed(e, p.effect, now)
            return
        out: list[Effect] = []
        match p.effect:
            case GrantLease():
                lid = db.next_lease
                db.next_lease += 1
                db.leases[lid] = now + TTL
                if answer == "answered":
                    e.lease_granted(lid, p.sent)
            case RenewLease(lease_id=lid):
                alive = lid in db.leases
                if alive:
                    db.leases[lid] = now + TTL
                if answer == "answered":
                    if alive:
                        e.lease_renewed(lid, p.sent)
                    else:
                        out = e.lease_expired(lid)
            case Campaign(lease_id=lid, epoch=epoch):
                if lid not in db.leases:  # etcd refuses a put with an unknown lease
                    self._failed(e, p.effect, now)
                    return
                won = db.leader is None and db.epoch == epoch
                if won:
                    db.epoch += 1
                    db.leader = (p.node, lid, db.epoch)
                db.revision += 1
                if answer == "answered":
                    if won:
                        out = e.campaign_won(db.epoch, db.isr, db.revision, now)
                    else:
                        out = e.campaign_lost(
                            db.leader[0] if db.leader else None, db.epoch, db.revision
                        )
                else:
                    e.campaign_failed()
            case Resign(epoch=epoch):
                if db.leader is not None and db.leader[0] == p.node and db.leader[2] == epoch:
                    db.leader = None
                    db.revision += 1
            case Observe():
                if answer == "answered":
                    out = e.observed(
                        db.leader[0] if db.leader else None, db.epoch, db.isr, db.revision, now
                    )
                else:
                    e.observe_failed(now)
            case _:
                raise AssertionError(p.effect)
        if answer == "answer-lost" and isinstance(p.effect, GrantLease | RenewLease):
            e.lease_failed(now)
        self._emit(p.node, out)
        self._note_leaders()

    def _failed(self, e: Election, eff: Effect, now: int) -> None:
        match eff:
            case GrantLease() | RenewLease():
                e.lease_failed(now)
            case Campaign():
                e.campaign_failed()
            case Observe():
                e.observe_failed(now)
            case _:
                pass

    @rule(node=st.sampled_from(NODES))
    def watch_event(self, node: str) -> None:
        self.nodes[node].changed()

    @rule(node=st.sampled_from(NODES))
    def step_down(self, node: str) -> None:
        self._emit(node, self.nodes[node].step_down(self.etcd.now))

    @rule(node=st.sampled_from(NODES), members=st.frozensets(st.sampled_from(NODES)))
    def leader_sets_isr(self, node: str, members: frozenset[str]) -> None:
        # only the leader writes the ISR, and it keeps itself in it
        e = self.nodes[node]
        if e.leads(self.etcd.now):
            self.etcd.isr = members | {node}
            self.etcd.revision += 1

    @invariant()
    def at_most_one_leader_now(self) -> None:
        now = self.etcd.now
        leading = [n for n, e in self.nodes.items() if e.leads(now)]
        assert len(leading) <= 1, (now, leading)

    @invariant()
    def a_leader_holds_the_key(self) -> None:
        # whoever believes it leads holds the leader key in etcd with its epoch
        for name, e in self.nodes.items():
            if e.leads(self.etcd.now):
                assert self.etcd.leader is not None
                assert self.etcd.leader[0] == name
                assert self.etcd.leader[2] == e.epoch

    @invariant()
    def one_leader_per_epoch(self) -> None:
        for epoch, names in self.led.items():
            assert len(names) <= 1, (epoch, names)


TestElection = ElectionMachine.TestCase


def run(e: Election, now: int) -> list[Effect]:
    return e.tick(now)


def test_a_lone_node_is_elected_and_fences_before_its_lease_can_expire() -> None:
    e = Election("a", ttl_ms=3000)
    assert e.margin_ms == 750
    assert e.tick(0) == [GrantLease(3000), Observe()]
    assert e.observed(None, 0, frozenset(), revision=4, now_ms=5) == []
    assert e.tick(6) == []  # no lease yet: no campaign
    e.lease_granted(7, sent_ms=0)
    # a read made before the lease does not count: the leader key may have expired since
    assert e.tick(10) == [Observe()]
    assert e.observed(None, 0, frozenset(), revision=5, now_ms=20) == []
    assert e.tick(20) == [Campaign(7, 0)]
    assert e.campaign_won(1, frozenset(), revision=6, now_ms=30) == [
        RoleChanged(Role.LEADER, 1, "a")
    ]
    assert e.leads(30)
    # renewals fail from now on: it leads until ttl - margin after the last successful send
    assert RenewLease(7) in e.tick(1000)
    e.lease_failed(1500)
    assert e.leads(2249)
    assert not e.leads(2250)
    assert RoleChanged(Role.FOLLOWER, 1, None) in e.tick(2250)
    assert e.role is Role.FOLLOWER


def test_a_node_that_wins_out_of_the_isr_resigns() -> None:
    e = Election("a", ttl_ms=3000)
    e.tick(0)
    e.lease_granted(7, sent_ms=0)
    e.observed(None, 4, frozenset({"a"}), revision=5, now_ms=1)
    assert e.tick(2) == [Campaign(7, 4)]
    assert e.campaign_won(5, frozenset({"b"}), revision=6, now_ms=3) == [Resign(5)]
    assert not e.leads(4)


def test_only_isr_members_campaign() -> None:
    e = Election("a", ttl_ms=3000)
    e.tick(0)
    e.lease_granted(7, sent_ms=0)
    e.observed(None, 4, frozenset({"b", "c"}), revision=5, now_ms=1)
    assert not any(isinstance(x, Campaign) for x in e.tick(2))


def test_step_down_fences_then_resigns_and_holds_off() -> None:
    e = Election("a", ttl_ms=3000)
    e.tick(0)
    e.lease_granted(7, sent_ms=0)
    e.observed(None, 0, frozenset(), revision=5, now_ms=1)
    e.tick(2)
    e.campaign_won(1, frozenset(), revision=6, now_ms=3)
    assert e.step_down(10) == [RoleChanged(Role.FOLLOWER, 1, None), Resign(1)]
    e.observed(None, 1, frozenset({"a"}), revision=7, now_ms=20)
    # others get poll_ms (TTL/5) to see the key gone and win; then it may campaign again
    assert e.poll_ms == 600
    assert not any(isinstance(x, Campaign) for x in e.tick(609))
    assert Campaign(7, 1) in e.tick(610)


def test_a_key_naming_us_that_we_did_not_win_is_resigned() -> None:
    e = Election("a", ttl_ms=3000)
    e.tick(0)
    e.lease_granted(7, sent_ms=0)
    assert e.observed("a", 3, frozenset(), revision=5, now_ms=1) == [Resign(3)]
    assert not e.leads(2)


def test_a_watch_event_reads_at_once_and_again_after_a_read_in_flight() -> None:
    e = Election("a", ttl_ms=3000)
    assert Observe() in e.tick(0)
    e.changed()  # while that read is in flight
    e.observed(None, 0, frozenset(), revision=4, now_ms=5)
    assert Observe() in e.tick(6)  # not at 5 + poll_ms: the read may predate the change
    e.observed(None, 0, frozenset(), revision=5, now_ms=7)
    assert Observe() not in e.tick(8)
    e.changed()
    assert Observe() in e.tick(9)
