"""A Hypothesis state machine: one consuming channel (prefetch, multiple acks, nack-requeue,
close/reopen, back-pressure) against a ~50-line reference model.

The model: `ready` holds message ids in publish (seq) order, since requeued messages go back
to their original position; `unacked` maps delivery tag -> id; after every step the model
dispatches while the consumer is writable and below its prefetch, lowest id first, with
`redelivered` set for ids delivered before.
"""

from __future__ import annotations

from typing import Any

from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from ringmq.amqp import spec
from ringmq.core.effects import Deliver
from tests.unit.adapters.amqp091.kit import Kit


class Model:
    def __init__(self, prefetch: int) -> None:
        self.prefetch = prefetch
        self.ready: list[int] = []
        self.unacked: dict[int, int] = {}
        self.seen: set[int] = set()
        self.next_tag = 1
        self.writable = True
        self.consuming = True

    def dispatch(self) -> list[tuple[int, int, bool]]:
        out = []
        while self.consuming and self.writable and self.ready and len(self.unacked) < self.prefetch:
            mid = self.ready.pop(0)
            tag = self.next_tag
            self.next_tag += 1
            self.unacked[tag] = mid
            out.append((tag, mid, mid in self.seen))
            self.seen.add(mid)
        return out

    def take(self, tag: int, multiple: bool) -> list[int]:
        tags = [t for t in self.unacked if t <= tag] if multiple else [tag]
        return [self.unacked.pop(t) for t in tags]

    def requeue(self, mids: list[int]) -> None:
        self.ready = sorted(self.ready + mids)


class ChannelMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.kit = Kit()
        self.pub = self.kit.open()
        self.kit.declare(self.pub, "q")
        self.conn = self.kit.connect()
        self.ch_no = 1
        self.chan = self.kit.channel(self.conn, self.ch_no)
        self.next_id = 0
        self.model = Model(1)

    @initialize(prefetch=st.integers(1, 4))
    def start(self, prefetch: int) -> None:
        self.model = Model(prefetch)
        self.kit.call(self.chan, spec.BasicQos(prefetch_count=prefetch))
        self.check(self.kit.consume(self.chan, "q", "c"))

    def check(self, effects: list[Any]) -> None:
        got = [
            (e.delivery_id, int(e.message.body), e.redelivered)
            for e in effects
            if isinstance(e, Deliver)
        ]
        assert got == self.model.dispatch()

    @rule(n=st.integers(1, 3))
    def publish(self, n: int) -> None:
        effects: list[Any] = []
        for _ in range(n):
            effects += self.kit.publish(self.pub, "q", str(self.next_id).encode())
            self.model.ready.append(self.next_id)
            self.next_id += 1
        self.check(effects)

    @precondition(lambda self: self.model.unacked)
    @rule(data=st.data(), multiple=st.booleans())
    def ack(self, data: st.DataObject, multiple: bool) -> None:
        tag = data.draw(st.sampled_from(sorted(self.model.unacked)))
        self.model.take(tag, multiple)
        self.check(self.kit.call(self.chan, spec.BasicAck(delivery_tag=tag, multiple=multiple)))

    @precondition(lambda self: self.model.unacked)
    @rule(data=st.data(), multiple=st.booleans(), requeue=st.booleans())
    def nack(self, data: st.DataObject, multiple: bool, requeue: bool) -> None:
        tag = data.draw(st.sampled_from(sorted(self.model.unacked)))
        mids = self.model.take(tag, multiple)
        if requeue:
            self.model.requeue(mids)
        method = spec.BasicNack(delivery_tag=tag, multiple=multiple, requeue=requeue)
        self.check(self.kit.call(self.chan, method))

    @rule()
    def ack_unknown_tag_closes(self) -> None:
        bad = self.model.next_tag + 100
        err = self.kit.error(self.chan, spec.BasicAck(delivery_tag=bad))
        assert err.explanation == f"unknown delivery tag {bad}"
        self.close_and_reopen()

    @rule()
    def close_and_reopen(self) -> None:
        m = self.model
        m.requeue(list(m.unacked.values()))
        m.unacked.clear()
        m.consuming = False
        self.kit.broker.channel_closed(self.conn, self.ch_no, self.kit.now)
        self.ch_no += 1
        self.chan = self.kit.channel(self.conn, self.ch_no)
        m.next_tag = 1
        m.consuming = True
        self.kit.call(self.chan, spec.BasicQos(prefetch_count=m.prefetch))
        self.check(self.kit.consume(self.chan, "q", "c"))

    @rule(writable=st.booleans())
    def set_writable(self, writable: bool) -> None:
        self.model.writable = writable
        self.check(self.kit.broker.set_writable(self.conn, writable, self.kit.now))

    @invariant()
    def agree(self) -> None:
        q = self.kit.broker.vhosts["/"].queues["q"].queue
        assert q.ready_count == len(self.model.ready)
        assert q.unacked_count == len(self.model.unacked)
        session = self.kit.broker.conns[self.conn].sessions[self.ch_no]
        assert sorted(session.unacked) == sorted(self.model.unacked)
        assert session.global_unacked == len(self.model.unacked)


TestChannelMachine = ChannelMachine.TestCase
