"""Publishes for queues another shard owns (core/forwarding.py): what a shard forwards, and the
confirm that waits for every owner's answer and the local fsync (`Confirms.confirm_joined`).

The state machine reads the core's `Confirm` effects as a client does (`ClientView` of
test_confirms.py) while publishes go to any mix of a local durable queue (held for the fsync),
copies of queues owned by shards 1 and 2, and nowhere; the store and the owners answer in any
order, ok or refused: every publish is settled exactly once, positively only when every answer
due was positive, never before the last one, and negatively at the first refusal."""

from __future__ import annotations

from typing import Any

from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from ringmq.core.config import BrokerConfig
from ringmq.core.effects import Confirm
from ringmq.core.errors import Condition
from ringmq.core.forwarding import ForwardPublish
from tests.unit.core.corekit import Core
from tests.unit.core.test_confirms import ClientView

_ACK, _NACK = "ack", "nack"
_FSYNC = "fsync"

# routing key -> what a persistent publish to the fanout-free direct exchange "x" reaches:
# the local durable queue (an fsync answer due) and the copies owned by shards 1 and 2
_ROUTES: dict[str, tuple[str | int, ...]] = {
    "local": (_FSYNC,),
    "one": (1,),
    "two": (1, 2),
    "mixed": (_FSYNC, 2),
    "nowhere": (),
}


def _kit(delay: bool = True) -> tuple[Core, Any]:
    kit = Core(BrokerConfig(name_seed=7, delay_persistent_confirms=delay))
    s = kit.open()
    kit.declare(s, "d", durable=True)
    topology = kit.broker.topology
    kit.run(topology.create_copy, "/", "r1", 1, durable=True)
    kit.run(topology.create_copy, "/", "r2", 2)
    kit.exchange(s, "x")
    for rk, targets in _ROUTES.items():
        for t in targets:
            kit.bind(s, {_FSYNC: "d", 1: "r1", 2: "r2"}[t], "x", rk)
    return kit, s


def test_a_publish_to_a_copy_is_forwarded_and_confirmed_by_its_owner_answer() -> None:
    kit, _ = _kit()
    ch = kit.open()
    kit.broker.confirms.select(ch)
    assert kit.publish(ch, "r1", b"hello", persistent=True) == []  # no confirm yet
    (fwd,) = kit.broker.drain_forwards()
    assert isinstance(fwd, ForwardPublish)
    assert (fwd.shard, fwd.vhost, fwd.queue, fwd.seq) == (1, "/", "r1", 1)
    assert (fwd.conn_id, fwd.channel, fwd.message.body) == (ch.conn_id, ch.channel, b"hello")
    assert kit.broker.drain_unconfirmed() == []  # nothing local to fsync
    assert kit.queue("r1").ready_count == 0  # a copy holds nothing
    effects = kit.broker.forwards_resolved([(ch.conn_id, ch.channel, 1, None)])
    assert effects == [Confirm(ch.conn_id, ch.channel, 1, False, True)]
    assert kit.broker.forwards_resolved([(ch.conn_id, ch.channel, 1, None)]) == []  # answered once


def test_an_owner_refusal_nacks_with_its_reason() -> None:
    kit, _ = _kit()
    ch = kit.open()
    kit.broker.confirms.select(ch)
    kit.publish(ch, "r2", persistent=False)
    kit.broker.drain_forwards()
    effects = kit.broker.forwards_resolved([(ch.conn_id, ch.channel, 1, "overflow")])
    assert effects == [Confirm(ch.conn_id, ch.channel, 1, False, False, "overflow")]


def test_a_local_and_a_remote_queue_both_answer_before_the_confirm() -> None:
    for fsync_first in (True, False):
        kit, _ = _kit()
        ch = kit.open()
        kit.broker.confirms.select(ch)
        assert kit.publish(ch, "mixed", exchange="x", persistent=True) == []
        assert [f.queue for f in kit.broker.drain_forwards()] == ["r2"]
        assert kit.broker.drain_unconfirmed() == [(ch.conn_id, ch.channel, 1)]
        first = (
            kit.broker.confirm_stored(ch.conn_id, ch.channel, [1])
            if fsync_first
            else kit.broker.forwards_resolved([(ch.conn_id, ch.channel, 1, None)])
        )
        assert first == []
        last = (
            kit.broker.forwards_resolved([(ch.conn_id, ch.channel, 1, None)])
            if fsync_first
            else kit.broker.confirm_stored(ch.conn_id, ch.channel, [1])
        )
        assert last == [Confirm(ch.conn_id, ch.channel, 1, False, True)]
        assert kit.queue("d").ready_count == 1


def test_without_confirms_a_forward_names_no_publish() -> None:
    kit, _ = _kit()
    ch = kit.open()
    kit.publish(ch, "two", exchange="x")
    assert [(f.shard, f.queue, f.seq) for f in kit.broker.drain_forwards()] == [
        (1, "r1", 0),
        (2, "r2", 0),
    ]
    assert kit.broker.drain_forwards() == []


def test_what_only_the_owner_can_do_is_refused_on_a_copy() -> None:
    kit, s = _kit()
    for step in (
        lambda: kit.broker.delivery.get(s, "r1", no_ack=False, now_ms=kit.now),
        lambda: kit.broker.topology.purge_for(s, "r1"),
        lambda: kit.broker.topology.delete_for(s, "r1", if_unused=False, if_empty=False),
    ):
        err = kit.refused(step)
        assert err.condition is Condition.NOT_IMPLEMENTED
        assert "owned by shard 1" in str(err)
    assert "r1" in s.vhost.queues


def test_an_exclusive_copy_belongs_to_no_connection_here() -> None:
    kit, s = _kit()
    kit.run(kit.broker.topology.create_copy, "/", "reply", 1, exclusive=True)
    err = kit.refused(kit.broker.topology.bind_queue, s, "reply", "x", "k", {})
    assert err.condition is Condition.RESOURCE_LOCKED
    kit.publish(s, "reply")  # routed to by name, as an RPC reply is
    assert [f.queue for f in kit.broker.drain_forwards()] == ["reply"]


def test_a_transaction_publishing_to_a_copy_is_refused_whole() -> None:
    # commit-ok means stored; the owner would store it only after: refused, not half-kept
    kit, _ = _kit()
    ch = kit.open()
    kit.broker.transactions.select(ch)
    kit.publish(ch, "local", exchange="x", persistent=True)
    kit.publish(ch, "one", exchange="x", persistent=True)
    err = kit.refused(kit.broker.transactions.commit, ch, kit.now)
    assert err.condition is Condition.NOT_IMPLEMENTED
    assert "owned by shard 1" in str(err)
    assert "nothing was committed" in str(err)
    assert kit.broker.drain_forwards() == []
    assert kit.queue("d").ready_count == 0


def test_a_dead_letter_for_a_copy_is_forwarded() -> None:
    kit, s = _kit()
    args = {"x-dead-letter-exchange": "", "x-dead-letter-routing-key": "r1", "x-message-ttl": 5}
    kit.declare(s, "src", args)
    kit.publish(s, "src", b"dead")
    kit.tick(10)
    (fwd,) = kit.broker.drain_forwards()
    assert (fwd.queue, fwd.seq, fwd.message.body) == ("r1", 0, b"dead")
    assert fwd.message.headers is not None
    assert "x-death" in fwd.message.headers


class ForwardedConfirms(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.kit, _ = _kit()
        self.ch = self.kit.open()
        self.kit.broker.confirms.select(self.ch)
        self.seq = 0
        self.due: dict[int, set[str | int]] = {}  # publish seq -> answers still due
        self.outcome: dict[int, str] = {}
        self.client = ClientView()

    def _publish(self, rk: str) -> None:
        self.seq += 1
        self.client.waiting.add(self.seq)
        due = set(_ROUTES[rk])
        if due:
            self.due[self.seq] = due
        else:
            self.outcome[self.seq] = _ACK
        effects = self.kit.publish(self.ch, rk, exchange="x", persistent=True)
        forwarded = [(f.shard, f.seq) for f in self.kit.broker.drain_forwards()]
        assert sorted(forwarded) == sorted((t, self.seq) for t in due if t != _FSYNC)
        held = self.kit.broker.drain_unconfirmed()
        assert held == ([(self.ch.conn_id, 1, self.seq)] if _FSYNC in due else [])
        self.client.read(effects, self.outcome)

    @rule(rk=st.sampled_from(sorted(_ROUTES)))
    def publish(self, rk: str) -> None:
        self._publish(rk)

    def _expect(self, seq: int, who: str | int, ok: bool) -> None:
        # the model: the first refusal settles it nacked, the last answer due acked
        due = self.due.get(seq)
        if due is not None and who in due:
            due.discard(who)
            if not ok:
                self.outcome[seq] = _NACK
                del self.due[seq]
            elif not due:
                self.outcome[seq] = _ACK
                del self.due[seq]

    def _answer(self, seq: int, who: str | int, ok: bool) -> None:
        self._expect(seq, who, ok)
        b, ch = self.kit.broker, self.ch
        if who == _FSYNC:
            effects = (
                b.confirm_stored(ch.conn_id, ch.channel, [seq])
                if ok
                else b.fail_unconfirmed(ch.conn_id, ch.channel, [seq])
            )
        else:
            effects = b.forwards_resolved(
                [(ch.conn_id, ch.channel, seq, None if ok else "overflow")]
            )
        self.client.read(effects, self.outcome)

    @precondition(lambda self: self.due)
    @rule(data=st.data(), ok=st.sampled_from([True, True, True, False]))
    def answer(self, data: Any, ok: bool) -> None:
        seq = data.draw(st.sampled_from(sorted(self.due)))
        who = data.draw(st.sampled_from(sorted(self.due[seq], key=str)))
        self._answer(seq, who, ok)

    @precondition(lambda self: any(w != _FSYNC for d in self.due.values() for w in d))
    @rule(data=st.data())
    def owners_answer_together(self, data: Any) -> None:
        # what one read of the links brings: several owners' answers in one call
        pending = sorted((q, w) for q, d in self.due.items() for w in d if w != _FSYNC)
        picked = data.draw(st.lists(st.sampled_from(pending), min_size=1, unique=True))
        answers = []
        for seq, who in picked:
            ok = data.draw(st.sampled_from([True, True, False]))
            self._expect(seq, who, ok)
            answers.append((self.ch.conn_id, self.ch.channel, seq, None if ok else "overflow"))
        self.client.read(self.kit.broker.forwards_resolved(answers), self.outcome)

    @precondition(lambda self: len(self.due) < self.seq)
    @rule(data=st.data(), who=st.sampled_from([_FSYNC, 1, 2]), ok=st.booleans())
    def late_answer(self, data: Any, who: str | int, ok: bool) -> None:
        # an answer for a publish already settled (nacked at another's refusal): ignored. The
        # server answers only for what it drained, so no answer comes for a publish that is
        # still held without it (`drain_unconfirmed`, `drain_forwards` say which are due).
        seq = data.draw(st.sampled_from(sorted(set(range(1, self.seq + 1)) - set(self.due))))
        self._answer(seq, who, ok)

    @invariant()
    def settled_once_known(self) -> None:
        assert self.client.waiting == set(self.due)
        assert set(self.client.settled) == set(self.outcome)


TestForwardedConfirms = ForwardedConfirms.TestCase
