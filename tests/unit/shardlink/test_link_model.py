"""The shard link's two sessions against a model: random forwards and outcomes, consumers with
credit, settlements, cancels from either side, bytes cut anywhere, and lost links.

The two sessions talk through two byte pipes that the machine delivers in random pieces.
What is checked:

* order: the owner receives the forwarded messages of a link in the order they were
  forwarded, each once, with their bodies, vhosts and queues;
* outcomes: the origin learns each sequence's outcome exactly once, and it is the one the
  owner gave; when a link is lost, every sequence the origin never learnt about is in its
  `Lost` (so its publish is nacked, never left waiting);
* consumers: the owner is asked for exactly the vhost, queue, flags and arguments the origin
  subscribed with;
* credit: the owner never has more deliveries on their way than the origin granted, tags run
  on per consumer, the origin sees every delivery the owner made (with its redelivered flag
  and delivery count) until a loss;
* settlements: the owner learns exactly the settlements the origin made, of tags it
  delivered; after a loss, the owner's tags to requeue are exactly those delivered and not
  settled on its side; a queue that went drops its consumer's unsettled tags on both sides.
"""

from __future__ import annotations

from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from ringmq.core.message import Message
from ringmq.shardlink import origin as o
from ringmq.shardlink import owner as w
from ringmq.shardlink.codec import Outcome

SECRET = b"shard-secret"
VHOSTS = ("/", "tenant-ä")
QUEUES = ("q1", "q2", "q3")
ARGUMENTS = st.fixed_dictionaries(
    {}, optional={"x-priority": st.integers(-5, 5), "x-stream-offset": st.sampled_from(["first"])}
)


def _message(body: bytes) -> Message:
    return Message("", "rk", b"\x00\x00", body, persistent=True, timestamp_ms=1)


class LinkMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.links = 0
        self._new_link()

    def _new_link(self) -> None:
        self.links += 1
        self.origin = o.OriginSession(1, SECRET)
        self.owner = w.OwnerSession(2, SECRET)
        self.o2w = b""
        self.w2o = b""
        self.opened = False
        self.forwarded: dict[int, tuple[str, tuple[str, ...], bytes]] = {}
        self.received: list[int] = []  # sequences the owner got, in order
        self.awaiting: list[int] = []  # received, not resolved at the owner
        self.owner_outcome: dict[int, int] = {}
        self.origin_outcome: dict[int, int] = {}
        # consumers: cid -> model
        self.granted: dict[int, int] = {}  # total credit the origin granted
        self.owner_granted: dict[int, int] = {}  # what reached the owner
        self.delivered: dict[int, list[int]] = {}  # tags the owner delivered
        self.seen: dict[int, list[int]] = {}  # tags the origin got
        self.origin_unsettled: dict[int, set[int]] = {}
        self.owner_settled: dict[int, set[int]] = {}
        self.origin_settled: dict[int, set[int]] = {}
        self.settled_mode: dict[int, bool] = {}
        self.asked: dict[int, tuple[str, str, bool, bool, dict[str, object]]] = {}
        self.counts: dict[int, list[tuple[bool, int]]] = {}  # (redelivered, count) per tag
        self.cancelled: set[int] = set()  # the origin asked
        self.gone_at_owner: set[int] = set()
        self.ready: set[int] = set()
        self.refused: set[int] = set()
        self.origin_gone: set[int] = set()

    # the wire

    @rule(n=st.integers(1, 400))
    def carry_to_owner(self, n: int) -> None:
        self.o2w += self.origin.data_to_send()
        piece, self.o2w = self.o2w[:n], self.o2w[n:]
        for ev in self.owner.receive_data(piece):
            self._owner_event(ev)

    @rule(n=st.integers(1, 400))
    def carry_to_origin(self, n: int) -> None:
        self.w2o += self.owner.data_to_send()
        piece, self.w2o = self.w2o[:n], self.w2o[n:]
        for ev in self.origin.receive_data(piece):
            self._origin_event(ev)

    def _owner_event(self, ev: w.Event) -> None:
        match ev:
            case w.Opened():
                assert ev.origin == 1
            case w.Received():
                for i, entry in enumerate(ev.entries):
                    seq = ev.first + i
                    assert seq == len(self.received) + 1, "a gap or a repeat in the forwards"
                    assert (entry.vhost, entry.queues, entry.message.body) == self.forwarded[seq]
                    self.received.append(seq)
                    self.awaiting.append(seq)
            case w.SubscribeAsked():
                assert ev.queue in QUEUES
                assert (ev.vhost, ev.queue, ev.settled, ev.exclusive, ev.arguments) == self.asked[
                    ev.cid
                ]
                self.owner_granted[ev.cid] = ev.credit
                if ev.queue == "q3":
                    self.refused.add(ev.cid)
                    self.owner.refuse(ev.cid, 404, "no queue 'q3'")
                else:
                    self.owner.subscribed(ev.cid)
            case w.CreditAdded():
                self.owner_granted[ev.cid] += ev.add
            case w.Settled():
                for t in ev.tags:
                    assert t in self.delivered[ev.cid]
                    assert t not in self.owner_settled[ev.cid], "settled twice"
                    self.owner_settled[ev.cid].add(t)
            case w.CancelAsked():
                assert ev.cid in self.cancelled
                assert self.owner.credit(ev.cid) == 0
            case w.Closed():
                raise AssertionError(f"the owner refused the link: {ev.reason}")

    def _origin_event(self, ev: o.Event) -> None:
        match ev:
            case o.Opened():
                assert ev.shard == 2
                self.opened = True
            case o.Resolved():
                for seq in range(ev.first, ev.upto + 1):
                    assert seq not in self.origin_outcome, "an outcome learnt twice"
                    self.origin_outcome[seq] = ev.rejected.get(seq, 0)
                    assert self.origin_outcome[seq] == self.owner_outcome[seq]
            case o.ConsumerReady():
                self.ready.add(ev.cid)
            case o.ConsumerRefused():
                assert ev.code == 404
                self.granted.pop(ev.cid)
            case o.Delivered():
                seen = self.seen[ev.cid]
                for i, d in enumerate(ev.entries):
                    tag = ev.first_tag + i
                    assert tag == len(seen) + 1
                    assert d.message.body == f"{ev.cid}:{tag}".encode()
                    assert (d.redelivered, d.delivery_count) == self.counts[ev.cid][tag - 1]
                    seen.append(tag)
                    if not self.settled_mode[ev.cid]:
                        self.origin_unsettled[ev.cid].add(tag)
                assert len(seen) <= self.granted[ev.cid], "more deliveries than credit"
            case o.ConsumerGone():
                assert ev.cid not in self.origin_gone, "a consumer ended twice"
                self.origin_gone.add(ev.cid)
                if ev.dropped:
                    assert ev.cid in self.gone_at_owner
                    assert set(ev.dropped) == self.origin_unsettled[ev.cid]
                    self.origin_unsettled[ev.cid].clear()
            case o.Refused():
                raise AssertionError(f"the link was refused: {ev.reason}")

    # publishes

    @rule(
        vhost=st.sampled_from(VHOSTS),
        queues=st.sets(st.sampled_from(QUEUES[:2]), min_size=1),
        size=st.integers(0, 3000),
    )
    def forward(self, vhost: str, queues: set[str], size: int) -> None:
        body = bytes([len(self.forwarded) % 251]) * size
        qs = tuple(sorted(queues))
        seq = self.origin.forward(vhost, qs, _message(body))
        assert seq == len(self.forwarded) + 1
        self.forwarded[seq] = (vhost, qs, body)

    @precondition(lambda self: self.awaiting)
    @rule(data=st.data(), code=st.sampled_from([0, 0, 0, 312]))
    def resolve(self, data: st.DataObject, code: int) -> None:
        seq = data.draw(st.sampled_from(self.awaiting))
        self.awaiting.remove(seq)
        self.owner_outcome[seq] = code
        if code:
            self.owner.reject(seq, code)
        else:
            self.owner.accept(seq)

    # consumers

    @rule(
        vhost=st.sampled_from(VHOSTS),
        queue=st.sampled_from(QUEUES),
        credit=st.integers(0, 5),
        settled=st.booleans(),
        exclusive=st.booleans(),
        arguments=ARGUMENTS,
    )
    def subscribe(
        self,
        vhost: str,
        queue: str,
        credit: int,
        settled: bool,
        exclusive: bool,
        arguments: dict[str, object],
    ) -> None:
        cid = self.origin.subscribe(
            vhost, queue, credit, settled=settled, exclusive=exclusive, arguments=arguments
        )
        assert cid not in self.granted
        self.asked[cid] = (vhost, queue, settled, exclusive, arguments)
        self.counts[cid] = []
        self.granted[cid] = credit
        self.delivered[cid], self.seen[cid] = [], []
        self.origin_unsettled[cid], self.origin_settled[cid] = set(), set()
        self.owner_settled[cid] = set()
        self.settled_mode[cid] = settled

    @precondition(lambda self: self.owner_granted)
    @rule(data=st.data(), count=st.integers(1, 2**32 - 1))
    def owner_delivers(self, data: st.DataObject, count: int) -> None:
        cid = data.draw(st.sampled_from(sorted(self.owner_granted)))
        if self.owner.credit(cid) == 0:
            return
        tag = len(self.delivered[cid]) + 1
        redelivered = count > 1
        got = self.owner.deliver(cid, redelivered, count, _message(f"{cid}:{tag}".encode()))
        assert got == tag
        self.counts[cid].append((redelivered, count))
        self.delivered[cid].append(tag)
        assert len(self.delivered[cid]) <= self.owner_granted[cid]

    @precondition(lambda self: self.ready - self.cancelled - self.origin_gone)
    @rule(data=st.data(), add=st.integers(1, 4))
    def grant(self, data: st.DataObject, add: int) -> None:
        cid = data.draw(st.sampled_from(sorted(self.ready - self.cancelled - self.origin_gone)))
        self.origin.grant(cid, add)
        self.granted[cid] += add

    @precondition(lambda self: any(self.origin_unsettled.values()))
    @rule(data=st.data(), outcome=st.sampled_from(list(Outcome)))
    def settle(self, data: st.DataObject, outcome: Outcome) -> None:
        cid = data.draw(st.sampled_from([c for c, t in self.origin_unsettled.items() if t]))
        tags = data.draw(st.sets(st.sampled_from(sorted(self.origin_unsettled[cid])), min_size=1))
        self.origin.settle(cid, outcome, sorted(tags))
        self.origin_unsettled[cid] -= tags
        self.origin_settled[cid] |= tags

    @precondition(lambda self: self.granted.keys() - self.cancelled)
    @rule(data=st.data())
    def cancel(self, data: st.DataObject) -> None:
        # a consumer not answered yet, or ended by the owner already, may be cancelled too
        cid = data.draw(st.sampled_from(sorted(self.granted.keys() - self.cancelled)))
        self.cancelled.add(cid)
        self.origin.cancel(cid)

    @precondition(lambda self: set(self.owner_granted) - self.gone_at_owner - self.refused)
    @rule(data=st.data())
    def queue_goes(self, data: st.DataObject) -> None:
        live = set(self.owner_granted) - self.gone_at_owner - self.refused
        cid = data.draw(st.sampled_from(sorted(live)))
        self.gone_at_owner.add(cid)
        dropped = self.owner.gone(cid, "queue deleted")
        assert set(dropped) == self._owner_outstanding(cid)

    def _owner_outstanding(self, cid: int) -> set[int]:
        if self.settled_mode[cid]:
            return set()
        return set(self.delivered[cid]) - self.owner_settled[cid]

    # loss

    @rule()
    def lose_the_link(self) -> None:
        lost_o = self.origin.lost()
        lost_w = self.owner.lost()
        unknown = set(self.forwarded) - set(self.origin_outcome)
        assert unknown == set(range(lost_o.first, lost_o.upto + 1))
        for cid, tags in lost_w.outstanding.items():
            assert set(tags) == self._owner_outstanding(cid)
            assert cid not in self.gone_at_owner
        for cid, delivered in self.delivered.items():
            if cid in lost_w.outstanding or cid in self.gone_at_owner:
                continue
            assert set(delivered) <= self.owner_settled[cid] or self.settled_mode[cid]
        assert not self.origin.receive_data(b"x")
        assert not self.owner.receive_data(b"x")
        self._new_link()

    # invariants

    @invariant()
    def owner_never_over_credit(self) -> None:
        for cid, granted in self.owner_granted.items():
            assert len(self.delivered[cid]) <= granted <= self.granted.get(cid, granted)

    @invariant()
    def origin_settles_only_what_it_saw(self) -> None:
        for cid, settled in self.origin_settled.items():
            assert settled <= set(self.seen[cid])

    def teardown(self) -> None:
        # everything on its way arrives and the owner resolves the rest: both sides agree
        for _ in range(200):
            for seq in list(self.awaiting):
                self.awaiting.remove(seq)
                self.owner_outcome[seq] = 0
                self.owner.accept(seq)
            self.o2w += self.origin.data_to_send()
            self.w2o += self.owner.data_to_send()
            if not self.o2w and not self.w2o:
                break
            self.carry_to_owner(1 << 30)
            self.carry_to_origin(1 << 30)
        assert set(self.origin_outcome) == set(self.forwarded), "an outcome never arrived"
        for seq, code in self.owner_outcome.items():
            assert self.origin_outcome[seq] == code
        for cid, tags in self.delivered.items():
            assert self.seen[cid] == tags, f"deliveries to {cid} lost on the way"
            if cid in self.gone_at_owner:  # settlements after the queue went are void
                assert self.owner_settled[cid] <= self.origin_settled[cid]
            else:
                assert self.owner_settled[cid] == self.origin_settled[cid]


TestShardLink = LinkMachine.TestCase
