"""Hypothesis state machine: message groups (core/groups.py) through the core's dispatch,
against a small model of who owns each group.

The model is the rule as core/groups.py states it (Artemis' grouping): a group's first
delivered message binds it to the consumer that took it; while bound, only that consumer takes
the group's messages; a delivered message with a negative `JMSXGroupSeq` unbinds it after
going to the owner; a consumer that leaves (its session closes, its unacked messages go back)
unbinds its groups; a requeue (rollback) leaves the binding alone. Ring eviction and scheduled
messages change which messages wait, never the bindings. The engine runs with a ring or not,
and prefetch 2, so owners are often full.

Checked after every step: each delivery went to the owner the model expects (binding unbound
groups as the model sees them taken); the engine's table of owners equals the model's; no
message is lost or duplicated (every published message is acked, outstanding at exactly one
consumer, waiting in the queue or evicted by the ring, by the engine's own count); and the
dispatch is live: no consumer with capacity leaves a ready message it may take (ungrouped, of
an unbound group, or of a group it owns).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from ringmq.core.effects import Deliver, Effect
from ringmq.core.groups import closes_group, group_id
from ringmq.core.queue import Queue
from ringmq.core.session import Session, SettleKind
from tests.unit.core.corekit import Core

PREFETCH = 2
MAX_CONSUMERS = 3


@dataclass
class _Consumer:
    tag: str
    session: Session
    outstanding: dict[int, int] = field(default_factory=dict)  # delivery id -> message id


class GroupsMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.kit = Core()
        self.pub = self.kit.open()
        self.consumers: list[_Consumer] = []
        self.next_id = 0
        self.next_tag = 0
        self.headers: dict[int, dict[str, Any]] = {}  # id -> headers published
        self.owner: dict[str, str] = {}  # group -> consumer tag (the model)
        self.acked: set[int] = set()

    @initialize(ring=st.sampled_from([None, 3]))
    def declare(self, ring: int | None) -> None:
        args = {} if ring is None else {"x-ring-size": ring}
        self.kit.declare(self.pub, "q", args)
        self._join()

    # --- helpers ---------------------------------------------------------------------------

    @property
    def engine(self) -> Queue:
        return self.kit.queue("q")

    def _absorb(self, effects: list[Effect]) -> None:
        by_session = {(c.session.conn_id, c.session.channel): c for c in self.consumers}
        for d in effects:
            if not isinstance(d, Deliver):
                continue
            c = by_session[(d.conn_id, d.channel)]
            assert d.consumer_tag == c.tag
            mid = int(d.message.body)
            assert all(mid not in o.outstanding.values() for o in self.consumers), mid
            assert mid not in self.acked
            c.outstanding[d.delivery_id] = mid
            headers = self.headers[mid]
            gid = group_id(headers)
            if gid is not None:
                bound = self.owner.setdefault(gid, c.tag)
                assert bound == c.tag, f"group {gid} owned by {bound}, delivered to {c.tag}"
                if closes_group(headers):
                    del self.owner[gid]

    def _join(self) -> None:
        s = self.kit.open()
        self.kit.broker.delivery.set_prefetch(s, PREFETCH, session_wide=False)
        tag = f"c{self.next_tag}"
        self.next_tag += 1
        c = _Consumer(tag, s)
        self.consumers.append(c)
        self._absorb(self.kit.consume(s, "q", tag))

    # --- rules -----------------------------------------------------------------------------

    @rule(
        group=st.sampled_from([None, "a", "b", "c"]),
        close=st.booleans(),
        delay=st.sampled_from([0, 0, 0, 50]),
    )
    def publish(self, group: str | None, close: bool, delay: int) -> None:
        mid = self.next_id
        self.next_id += 1
        headers: dict[str, Any] = {}
        if group is not None:
            headers["JMSXGroupID"] = group
            if close:
                headers["JMSXGroupSeq"] = -1
        if delay:
            headers["_AMQ_SCHED_DELIVERY"] = self.kit.now + delay
        self.headers[mid] = headers
        self._absorb(self.kit.publish(self.pub, "q", b"%d" % mid, headers=headers or None))

    @precondition(lambda self: any(c.outstanding for c in self.consumers))
    @rule(pick=st.integers(0, 100), requeue=st.booleans())
    def settle(self, pick: int, requeue: bool) -> None:
        busy = [c for c in self.consumers if c.outstanding]
        c = busy[pick % len(busy)]
        delivery_id = sorted(c.outstanding)[pick % len(c.outstanding)]
        mid = c.outstanding.pop(delivery_id)
        if requeue:  # a rollback: back to its place, the binding stays
            kind = SettleKind.REQUEUE
        else:
            self.acked.add(mid)
            kind = SettleKind.ACK
        self._absorb(self.kit.settle(c.session, delivery_id, kind))

    @precondition(lambda self: self.consumers)
    @rule(pick=st.integers(0, 100))
    def leave(self, pick: int) -> None:
        c = self.consumers.pop(pick % len(self.consumers))
        self.owner = {g: t for g, t in self.owner.items() if t != c.tag}
        c.outstanding.clear()  # they go back to the queue
        s = c.session
        self._absorb(self.kit.broker.channel_closed(s.conn_id, s.channel, self.kit.now))

    @precondition(lambda self: len(self.consumers) < MAX_CONSUMERS)
    @rule()
    def join(self) -> None:
        self._join()

    @rule(ms=st.sampled_from([10, 60]))
    def tick(self, ms: int) -> None:
        self._absorb(self.kit.tick(ms))

    # --- invariants ------------------------------------------------------------------------

    @invariant()
    def owners_match(self) -> None:
        groups = self.engine.groups
        real = {} if groups is None else {b.group: b.owner.tag for _, b in groups.bindings()}
        assert real == self.owner

    @invariant()
    def nothing_lost_or_duplicated(self) -> None:
        c = self.engine.counters
        outstanding = sum(len(x.outstanding) for x in self.consumers)
        waiting = c.ready + c.paged + c.scheduled
        assert self.next_id == len(self.acked) + outstanding + waiting + c.ring_evicted

    @invariant()
    def dispatch_is_live(self) -> None:
        ready = self.engine.ready_messages()
        for c in self.consumers:
            if len(c.outstanding) >= PREFETCH:
                continue
            for msg in ready:
                gid = group_id(msg.headers)
                why = f"{c.tag} has capacity and may take {msg.body!r} (group {gid})"
                assert gid is not None, why
                assert self.owner.get(gid, c.tag) != c.tag, why


GroupsMachine.TestCase.settings = settings(max_examples=150, stateful_step_count=40, deadline=None)
test_groups = GroupsMachine.TestCase
