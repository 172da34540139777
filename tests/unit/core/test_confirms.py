"""Publisher confirms (core/transactions.py `Confirms`, core/session.py `confirm_acks`): any
interleaving of accepted, held-then-released (in any order), store-failed and refused
publishes, read from the core's `Confirm` effects as a client reads its acks and nacks, settles
every publish exactly once, with its own outcome, and never before its outcome is known."""

from __future__ import annotations

from typing import Any

from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from ringmq.core.config import BrokerConfig
from ringmq.core.effects import Confirm, Effect
from ringmq.core.message import Message
from tests.unit.core.corekit import Core, message

# Where a publish goes decides its outcome: a persistent message to the durable queue is held
# for the fsync; one to a transient queue or to no queue is acked at once; one to the full
# reject-publish queue is nacked at once.
_HELD, _ACK, _NACK = "held", "ack", "nack"
_KINDS = {"durable": _HELD, "transient": _ACK, "nowhere": _ACK, "full": _NACK}


def _persistent(rk: str) -> Message:
    return message(rk, b"x", persistent=True)


class ClientView:
    """A confirm channel as the client reads it (aiormq's rule, and the stricter one of
    `Session.confirm_acks`): every confirm names a publish still waiting; a multiple ack
    settles every waiting publish up to its tag, and its range above the settled floor holds
    no nacked publish."""

    def __init__(self) -> None:
        self.waiting: set[int] = set()
        self.settled: dict[int, bool] = {}  # publish seq -> acked
        self.floor = 0  # every publish up to it is settled

    def read(self, effects: list[Effect], outcome: dict[int, str]) -> None:
        for e in effects:
            if isinstance(e, Confirm):
                self._confirm(e.seq, e.multiple, e.ok, outcome)

    def _confirm(self, tag: int, multiple: bool, ok: bool, outcome: dict[int, str]) -> None:
        assert tag in self.waiting, f"confirm of tag {tag}, which is not waiting"
        if multiple:
            assert ok, "a multiple nack"
            for q in range(self.floor + 1, tag + 1):
                assert self.settled.get(q, True), f"multiple ack {tag} covers nacked {q}"
            covered = sorted(q for q in self.waiting if q <= tag)
        else:
            covered = [tag]
        for q in covered:
            assert outcome.get(q) == (_ACK if ok else _NACK), (
                f"publish {q} settled {'ack' if ok else 'nack'}, its outcome is {outcome.get(q)}"
            )
            self.waiting.remove(q)
            self.settled[q] = ok
        while self.floor + 1 in self.settled:
            self.floor += 1


class ConfirmMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.kit = Core(BrokerConfig(name_seed=7, delay_persistent_confirms=True))
        kit = self.kit
        setup = kit.open()
        kit.run(
            kit.broker.topology.declare_queue, setup, "durable", durable=True, exclusive=False,
            auto_delete=False, arguments=None, now_ms=kit.now,
        )  # fmt: skip
        kit.declare(setup, "transient")
        kit.declare(setup, "full", {"x-max-length": 1, "x-overflow": "reject-publish"})
        kit.publish(setup, "full")  # full from now on
        self.ch = kit.open()
        kit.broker.confirms.select(self.ch)
        self.seq = 0
        self.outcome: dict[int, str] = {}  # publish seq -> ack or nack, once known
        self.held: list[int] = []  # publishes held for the fsync, not yet released or failed
        self.client = ClientView()

    def _numbered(self, kinds: list[str]) -> None:
        for rk in kinds:
            self.seq += 1
            self.client.waiting.add(self.seq)
            kind = _KINDS[rk]
            if kind == _HELD:
                self.held.append(self.seq)
            else:
                self.outcome[self.seq] = kind

    def _drain(self) -> None:
        ch = self.ch
        got = self.kit.broker.drain_unconfirmed()
        assert all((c, n) == (ch.conn_id, ch.channel) for c, n, _ in got)

    @rule(rk=st.sampled_from(sorted(_KINDS)))
    def publish(self, rk: str) -> None:
        self._numbered([rk])
        effects = self.kit.publish(self.ch, rk, persistent=True)
        self._drain()
        self.client.read(effects, self.outcome)

    @rule(rks=st.lists(st.sampled_from(sorted(_KINDS)), min_size=1, max_size=12))
    def publish_batch(self, rks: list[str]) -> None:
        messages = [_persistent(rk) for rk in rks]
        self._numbered(rks)
        kit = self.kit
        ch = self.ch
        done = kit.broker.publish_batch(ch.conn_id, ch.channel, "", messages, kit.now)
        assert done.error is None
        self._drain()
        self.client.read(done.effects, self.outcome)

    def _pick(self, data: Any) -> list[int]:
        # Some held publishes, in any order (the store may release them so).
        picked: list[int] = data.draw(st.lists(st.sampled_from(self.held), min_size=1, unique=True))
        for q in picked:
            self.held.remove(q)
        return picked

    @precondition(lambda self: self.held)
    @rule(data=st.data())
    def release(self, data: Any) -> None:
        picked = self._pick(data)
        for q in picked:
            self.outcome[q] = _ACK
        effects = self.kit.broker.confirm_stored(self.ch.conn_id, self.ch.channel, picked)
        self.client.read(effects, self.outcome)

    @precondition(lambda self: self.held)
    @rule(data=st.data())
    def fail(self, data: Any) -> None:
        picked = self._pick(data)
        for q in picked:
            self.outcome[q] = _NACK
        effects = self.kit.broker.fail_unconfirmed(self.ch.conn_id, self.ch.channel, picked)
        self.client.read(effects, self.outcome)

    @invariant()
    def settled_once_known(self) -> None:
        # Each publish whose outcome is known is settled (with it: checked as read); the held
        # ones still wait.
        assert self.client.waiting == set(self.held)
        assert set(self.client.settled) == set(self.outcome)


TestConfirmMachine = ConfirmMachine.TestCase
