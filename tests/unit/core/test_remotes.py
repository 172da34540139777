"""Consumers of a copy of another shard's queue (core/remotes.py): one subscription per copy,
the owner's deliveries dispatched by the core, every settlement sent back once.

The state machine plays the owner (its queue, the subscriptions' credit and unsettled tags)
and the server between them (the link grants back what was settled), and reads the core's
`Deliver` effects as clients do. Checked after every step: every message is in exactly one
place (the owner's queue, unsettled on a subscription, acknowledged, rejected); no tag is
settled twice or before it was delivered; the copy never holds more of the owner's messages
than the credit allows; a client's ack of a delivery whose subscription lives reaches the
owner."""

from __future__ import annotations

from collections import deque
from typing import Any

from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from ringmq.core.config import BrokerConfig
from ringmq.core.effects import CancelConsumer, Deliver, Effect
from ringmq.core.remotes import WINDOW, RemoteCancel, RemoteSettle, RemoteSubscribe
from ringmq.core.session import Session, SettleKind
from tests.unit.core.corekit import Core, message

_CAPS = {"capabilities": {"consumer_cancel_notify": True}}


def _copy_kit() -> tuple[Core, Session]:
    kit = Core(BrokerConfig(name_seed=7))
    s = kit.session(kit.connect(properties=_CAPS))
    kit.run(kit.broker.topology.create_copy, "/", "r", 1)
    return kit, s


def _deliver(kit: Core, sub: int, first: int, bodies: list[bytes], redelivered: bool = False):
    entries = [(message("r", b), redelivered, 2 if redelivered else 1) for b in bodies]
    return kit.broker.remote_delivered(sub, first, entries)


def test_the_first_consumer_subscribes_and_the_owners_deliveries_reach_it() -> None:
    kit, s = _copy_kit()
    kit.prefetch(s, 2)
    kit.consume(s, "r", "c1")
    kit.consume(s, "r", "c2")
    assert kit.broker.drain_remote_ops() == [RemoteSubscribe(1, 1, "/", "r", WINDOW)]
    out = _deliver(kit, 1, 1, [b"a", b"b", b"c"], redelivered=True)
    got = [e for e in out if isinstance(e, Deliver)]
    assert sorted(e.message.body for e in got) == [b"a", b"b", b"c"]
    assert all(e.redelivered and e.delivery_count == 2 for e in got)
    first = next(e for e in got if e.message.body == b"a")
    kit.settle(s, first.delivery_id, SettleKind.ACK)
    assert kit.broker.drain_remote_ops() == [RemoteSettle(1, SettleKind.ACK, (1,))]


def test_requeue_and_reject_go_to_the_owner() -> None:
    kit, s = _copy_kit()
    kit.consume(s, "r", "c")
    kit.broker.drain_remote_ops()
    got = [e for e in _deliver(kit, 1, 5, [b"a", b"b"]) if isinstance(e, Deliver)]
    kit.settle(s, got[0].delivery_id, SettleKind.REQUEUE)
    kit.settle(s, got[1].delivery_id, SettleKind.REJECT)
    assert kit.broker.drain_remote_ops() == [
        RemoteSettle(1, SettleKind.REQUEUE, (5,)),
        RemoteSettle(1, SettleKind.REJECT, (6,)),
    ]
    assert kit.queue("r").ready_count == 0  # requeued on the owner, not here


def test_a_no_ack_delivery_is_acked_to_the_owner_as_it_goes_out() -> None:
    kit, s = _copy_kit()
    kit.consume(s, "r", "c", no_ack=True)
    kit.broker.drain_remote_ops()
    got = [e for e in _deliver(kit, 1, 1, [b"a", b"b"]) if isinstance(e, Deliver)]
    assert [e.message.body for e in got] == [b"a", b"b"]
    assert kit.broker.drain_remote_ops() == [RemoteSettle(1, SettleKind.ACK, (1, 2))]


def test_the_last_consumer_gone_cancels_and_sends_back_what_waits() -> None:
    kit, s = _copy_kit()
    kit.prefetch(s, 1)
    kit.consume(s, "r", "c")
    kit.broker.drain_remote_ops()
    (d,) = [e for e in _deliver(kit, 1, 1, [b"a", b"b", b"c"]) if isinstance(e, Deliver)]
    kit.cancel(s, "c")
    assert kit.broker.drain_remote_ops() == [
        RemoteCancel(1),
        RemoteSettle(1, SettleKind.REQUEUE, (2, 3)),
    ]
    kit.settle(s, d.delivery_id, SettleKind.ACK)  # still settleable after the cancel
    assert kit.broker.drain_remote_ops() == [RemoteSettle(1, SettleKind.ACK, (1,))]
    late = _deliver(kit, 1, 4, [b"d"])  # on its way before the cancel arrived: sent back
    assert [e for e in late if isinstance(e, Deliver)] == []
    assert kit.broker.drain_remote_ops() == [RemoteSettle(1, SettleKind.REQUEUE, (4,))]
    assert kit.broker.remote_gone(1, kept=True) == []  # the owner's answer to the cancel
    kit.consume(s, "r", "again")  # a new subscription: its numbers follow the old ones'
    assert kit.broker.drain_remote_ops() == [RemoteSubscribe(2, 1, "/", "r", WINDOW)]
    (d2,) = [e for e in _deliver(kit, 2, 1, [b"e"]) if isinstance(e, Deliver)]
    kit.settle(s, d2.delivery_id, SettleKind.ACK)
    assert kit.broker.drain_remote_ops() == [RemoteSettle(2, SettleKind.ACK, (1,))]


def test_an_owner_ending_the_subscription_cancels_the_consumers() -> None:
    kit, s = _copy_kit()
    kit.prefetch(s, 1)
    kit.consume(s, "r", "c")
    kit.broker.drain_remote_ops()
    (d,) = [e for e in _deliver(kit, 1, 1, [b"a", b"b"]) if isinstance(e, Deliver)]
    out = kit.broker.remote_gone(1)
    assert out == [CancelConsumer(s.conn_id, s.channel, "c")]
    assert kit.queue("r").ready_count == 0
    kit.settle(s, d.delivery_id, SettleKind.ACK)  # the owner took it back: nothing to send
    assert kit.broker.drain_remote_ops() == []
    kit.consume(s, "r", "c")  # consuming again subscribes again
    assert [type(op) for op in kit.broker.drain_remote_ops()] == [RemoteSubscribe]


class _Owner:
    """The owner's queue and its subscriptions, as the link would show them to it."""

    def __init__(self) -> None:
        self.ready: deque[int] = deque()
        self.unsettled: dict[int, dict[int, int]] = {}  # sub -> tag -> message id
        self.credit: dict[int, int] = {}
        self.next_tag: dict[int, int] = {}
        self.live: set[int] = set()  # subscriptions the origin has not cancelled
        self.cancelling: set[int] = set()  # cancelled by the origin, not answered yet
        self.acked: set[int] = set()
        self.rejected: set[int] = set()

    def apply(self, ops: list[Any]) -> None:
        for op in ops:
            if isinstance(op, RemoteSubscribe):
                assert op.sub not in self.unsettled
                self.unsettled[op.sub] = {}
                self.credit[op.sub] = op.credit
                self.next_tag[op.sub] = 1
                self.live.add(op.sub)
            elif isinstance(op, RemoteCancel):
                assert op.sub in self.live
                self.live.discard(op.sub)
                self.cancelling.add(op.sub)
            else:
                assert isinstance(op, RemoteSettle)
                held = self.unsettled[op.sub]
                for tag in op.tags:
                    assert tag in held, f"tag {tag} of {op.sub} settled twice or never sent"
                    mid = held.pop(tag)
                    if op.outcome is SettleKind.ACK:
                        self.acked.add(mid)
                    elif op.outcome is SettleKind.REJECT:
                        self.rejected.add(mid)
                    else:
                        self.ready.appendleft(mid)
                self.credit[op.sub] += len(op.tags)  # the server grants back what settled

    def take(self, sub: int, n: int) -> tuple[int, list[int]]:
        n = min(n, self.credit[sub], len(self.ready))
        first = self.next_tag[sub]
        ids = [self.ready.popleft() for _ in range(n)]
        for i, mid in enumerate(ids):
            self.unsettled[sub][first + i] = mid
        self.next_tag[sub] = first + n
        self.credit[sub] -= n
        return first, ids

    def gone(self, sub: int) -> None:
        self.ready.extendleft(reversed(list(self.unsettled.pop(sub).values())))
        self.live.discard(sub)
        del self.credit[sub]


class RemoteConsumers(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.kit, self.s = _copy_kit()
        self.owner = _Owner()
        self.next_id = 0
        self.tags: list[str] = []  # live consumer tags
        self.n = 0
        self.unacked: dict[int, tuple[int, int]] = {}  # delivery id -> (message id, sub)
        self.client_acked_live: set[int] = set()
        self.no_ack_tags: set[str] = set()

    def _read(self, effects: list[Effect]) -> None:
        for e in effects:
            if isinstance(e, Deliver):
                mid = int(e.message.body)
                if e.consumer_tag in self.no_ack_tags:
                    continue
                (sub,) = [k for k, u in self.owner.unsettled.items() if mid in u.values()]
                self.unacked[e.delivery_id] = (mid, sub)
            elif isinstance(e, CancelConsumer):
                self.tags.remove(e.consumer_tag)
        self.owner.apply(self.kit.broker.drain_remote_ops())

    @rule(n=st.integers(1, 5))
    def publish_at_owner(self, n: int) -> None:
        for _ in range(n):
            self.owner.ready.append(self.next_id)
            self.next_id += 1

    @rule(prefetch=st.integers(0, 3), no_ack=st.booleans())
    def consume(self, prefetch: int, no_ack: bool) -> None:
        self.n += 1
        tag = f"c{self.n}"
        self.kit.prefetch(self.s, prefetch)
        if no_ack:
            self.no_ack_tags.add(tag)
        self.tags.append(tag)
        self._read(self.kit.consume(self.s, "r", tag, no_ack=no_ack))

    @precondition(lambda self: self.tags)
    @rule(data=st.data())
    def cancel(self, data: Any) -> None:
        tag = data.draw(st.sampled_from(self.tags))
        self.tags.remove(tag)
        self._read(self.kit.cancel(self.s, tag))

    @precondition(lambda self: self.owner.live)
    @rule(data=st.data(), n=st.integers(1, 6))
    def owner_delivers(self, data: Any, n: int) -> None:
        sub = data.draw(st.sampled_from(sorted(self.owner.live)))
        first, ids = self.owner.take(sub, n)
        if ids:
            entries = [(message("r", str(i).encode()), False, 1) for i in ids]
            self._read(self.kit.broker.remote_delivered(sub, first, entries))

    @precondition(lambda self: self.unacked)
    @rule(data=st.data(), kind=st.sampled_from(list(SettleKind)))
    def settle(self, data: Any, kind: SettleKind) -> None:
        tag = data.draw(st.sampled_from(sorted(self.unacked)))
        mid, sub = self.unacked.pop(tag)
        if kind is SettleKind.ACK and mid in self.owner.unsettled.get(sub, {}).values():
            self.client_acked_live.add(mid)  # its subscription still holds it: it must ack
        self._read(self.kit.settle(self.s, tag, kind))

    @precondition(lambda self: self.owner.cancelling)
    @rule(data=st.data(), n=st.integers(0, 3))
    def owner_answers_a_cancel(self, data: Any, n: int) -> None:
        # deliveries sent before the cancel arrived may come first; then the answer, after
        # which the unsettled deliveries stay settleable
        sub = data.draw(st.sampled_from(sorted(self.owner.cancelling)))
        first, ids = self.owner.take(sub, n)
        if ids:
            entries = [(message("r", str(i).encode()), False, 1) for i in ids]
            self._read(self.kit.broker.remote_delivered(sub, first, entries))
        self.owner.cancelling.discard(sub)
        self._read(self.kit.broker.remote_gone(sub, kept=True))

    @precondition(lambda self: self.owner.live)
    @rule(data=st.data())
    def owner_ends(self, data: Any) -> None:
        sub = data.draw(st.sampled_from(sorted(self.owner.live)))
        self.owner.gone(sub)
        self._read(self.kit.broker.remote_gone(sub))

    @invariant()
    def every_message_in_one_place(self) -> None:
        o = self.owner
        places = [
            list(o.ready),
            [m for u in o.unsettled.values() for m in u.values()],
            list(o.acked),
            list(o.rejected),
        ]
        flat = [m for p in places for m in p]
        assert sorted(flat) == list(range(self.next_id))

    @invariant()
    def the_copy_holds_no_more_than_the_credit(self) -> None:
        held = sum(len(u) for u in self.owner.unsettled.values())
        assert held <= WINDOW * len(self.owner.unsettled)
        q = self.kit.queue("r")
        assert q.ready_count + len(self.unacked) <= held + len(self.unacked)

    @invariant()
    def client_acks_reach_the_owner(self) -> None:
        assert self.client_acked_live <= self.owner.acked


TestRemoteConsumers = RemoteConsumers.TestCase
