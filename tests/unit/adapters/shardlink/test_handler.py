"""The shard link's owner handler over an in-process broker, an `OriginSession` on the other
side of the bytes (no sockets): forwards and consumers in any vhost, consumer arguments,
delivery counts, credit, strays, a broken link."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence

from ringmq.adapters.amqp091.message import decoded
from ringmq.adapters.handler import HandlerContext, HandlerLimits, Peer, make_login
from ringmq.adapters.shardlink import OwnerLinkHandler, shardlink_handler
from ringmq.amqp.properties import BasicProperties, encode_properties
from ringmq.core.broker import Broker
from ringmq.core.config import BrokerConfig
from ringmq.core.effects import Effect
from ringmq.core.message import Message
from ringmq.core.throttle import LoginGuard
from ringmq.shardlink.codec import Outcome
from ringmq.shardlink.origin import (
    ConsumerGone,
    ConsumerReady,
    ConsumerRefused,
    Delivered,
    Event,
    Opened,
    OriginSession,
    Refused,
    Resolved,
)

SECRET = b"secret"
NOW = 1_000_000


class Kit:
    """One broker, one link handler, the origin's session; `later` runs at `run_later`."""

    def __init__(self, secret: bytes = SECRET) -> None:
        self.broker = Broker(BrokerConfig(name_seed=3))
        self.broker.defer_dispatch = True
        self.timers: list[Callable[[int], None]] = []
        peer = Peer("127.0.0.1", 40001, "127.0.0.1", 7000)
        ctx = HandlerContext(
            broker=self.broker,
            conn_id=1,
            peer=peer,
            limits=HandlerLimits(1 << 20, 131072, 2047, 0),
            login=make_login(self.broker, LoginGuard(), peer, "shard link"),
            emit=self.apply,
            later=lambda _ms, fn: self.timers.append(fn),
        )
        h = shardlink_handler(SECRET)(ctx)
        assert isinstance(h, OwnerLinkHandler)
        self.h = h
        self.origin = OriginSession(3, secret)
        self.events: list[Event] = []
        self.exchange()

    def apply(self, effects: Iterable[Effect]) -> None:
        for e in effects:
            if getattr(e, "conn_id", None) == 1:
                self.h.apply(e)

    def exchange(self) -> None:
        """The origin's bytes to the handler, the dispatch, the handler's bytes back."""
        self.apply(self.h.receive_data(self.origin.data_to_send(), NOW))
        self.apply(self.broker.dispatch_pending(NOW))
        self.events += self.origin.receive_data(self.h.data_to_send())

    def run_later(self) -> None:
        timers, self.timers = self.timers, []
        for fn in timers:
            fn(NOW)
        self.events += self.origin.receive_data(self.h.data_to_send())

    def declare(self, name: str, **arguments: object) -> None:
        self.declare_in("/", name, arguments)

    def declare_in(self, vhost: str, name: str, arguments: dict[str, object]) -> None:
        self.broker.admin.declare_queue(
            vhost, name, durable=False, auto_delete=False, arguments=arguments, now_ms=NOW
        )

    def ready(self, name: str, vhost: str = "/") -> int:
        return self.broker.state.vhosts[vhost].queues[name].queue.ready_count

    def delivered(self, cid: int) -> list[bytes]:
        return [
            d.message.body
            for e in self.events
            if isinstance(e, Delivered) and e.cid == cid
            for d in e.entries
        ]


def _message(body: bytes) -> Message:
    props = encode_properties(BasicProperties(delivery_mode=1))
    return decoded("", "k", props, body, NOW)


def _outcomes(events: Sequence[Event]) -> dict[int, int]:
    out: dict[int, int] = {}
    for e in events:
        if isinstance(e, Resolved):
            out.update({s: e.rejected.get(s, 0) for s in range(e.first, e.upto + 1)})
    return out


def test_forwards_resolve_in_order_with_their_refusals() -> None:
    kit = Kit()
    assert kit.h.opened
    assert any(isinstance(e, Opened) for e in kit.events)
    kit.declare("a")
    kit.declare("full", **{"x-max-length": 1, "x-overflow": "reject-publish"})
    kit.origin.forward("/", ("a",), _message(b"1"))
    kit.origin.forward("/", ("nope",), _message(b"2"))
    kit.origin.forward("/", ("full",), _message(b"3"))
    kit.origin.forward("/", ("full", "a"), _message(b"4"))
    kit.origin.forward("/", (), _message(b"5"))
    kit.exchange()
    assert _outcomes(kit.events) == {1: 0, 2: 404, 3: 0, 4: 406, 5: 0}
    assert (kit.ready("a"), kit.ready("full")) == (2, 1)  # a full queue keeps the others' copies


def test_a_consumer_cancelled_in_the_read_that_gave_credit_returns_its_strays() -> None:
    kit = Kit()
    kit.declare("q")
    for body in (b"m1", b"m2", b"m3"):
        kit.origin.forward("/", ("q",), _message(body))
    cid = kit.origin.subscribe("/", "q", 1)
    kit.exchange()
    assert any(isinstance(e, ConsumerReady) for e in kit.events)
    assert kit.delivered(cid) == [b"m1"]
    # credit and cancel in one read: the core delivers at the credit's end, the link is
    # already cancelled by then; m1 stays unsettled, so the consumer's session stays open
    kit.origin.grant(cid, 2)
    kit.origin.cancel(cid)
    kit.exchange()
    assert kit.delivered(cid) == [b"m1"]
    assert any(isinstance(e, ConsumerGone) for e in kit.events)
    assert kit.ready("q") == 0  # held by the core until the handler's timer runs
    kit.run_later()
    assert kit.ready("q") == 2
    kit.origin.settle(cid, Outcome.ACK, [1])  # still settleable after the cancel
    kit.exchange()
    kit.run_later()
    assert kit.ready("q") == 2
    assert kit.broker.session(1, 2) is None  # the consumer's core session is closed


def test_a_wrong_secret_never_opens_and_garbage_breaks_the_link() -> None:
    bad = Kit(secret=b"other")
    assert not bad.h.opened
    assert bad.h.closed
    assert [e for e in bad.events if isinstance(e, Refused)]
    kit = Kit()
    kit.declare("q")
    kit.origin.forward("/", ("q",), _message(b"m"))
    kit.origin.subscribe("/", "q", 5)
    kit.exchange()
    assert kit.delivered(1) == [b"m"]
    kit.apply(kit.h.receive_data(b"\x00\x00\x00\x01\xee", NOW))  # an unknown frame type
    assert kit.h.closed
    assert kit.ready("q") == 1  # the broken link's delivery went back
    assert kit.h.connection_lost(NOW) == []  # released once


def test_forwards_and_consumers_in_another_vhost() -> None:
    kit = Kit()
    kit.broker.add_vhost("tenant")
    kit.declare_in("tenant", "q", {})
    kit.declare("q")  # the same name in the default vhost stays apart
    kit.origin.forward("tenant", ("q",), _message(b"t1"))
    kit.origin.forward("nowhere", ("q",), _message(b"lost"))
    kit.origin.forward("tenant", ("q",), _message(b"t2"))
    kit.exchange()
    assert _outcomes(kit.events) == {1: 0, 2: 404, 3: 0}  # the link goes on
    assert (kit.ready("q", "tenant"), kit.ready("q")) == (2, 0)
    cid = kit.origin.subscribe("tenant", "q", 5)
    refused = kit.origin.subscribe("nowhere", "q", 5)
    kit.exchange()
    assert kit.delivered(cid) == [b"t1", b"t2"]
    assert [(e.code, e.text) for e in kit.events if isinstance(e, ConsumerRefused)] == [
        (404, "NOT_FOUND - no vhost 'nowhere'")
    ]
    assert refused not in {e.cid for e in kit.events if isinstance(e, ConsumerReady)}
    kit.run_later()
    assert kit.broker.session(1, 3) is None  # nothing left open for the refused one


def test_consumer_arguments_reach_the_core_and_its_refusals_come_back() -> None:
    kit = Kit()
    kit.declare("q")
    low = kit.origin.subscribe("/", "q", 10)
    high = kit.origin.subscribe("/", "q", 10, arguments={"x-priority": 5})
    bad = kit.origin.subscribe("/", "q", 10, arguments={"x-priority": "high"})
    kit.exchange()
    [refused] = [e for e in kit.events if isinstance(e, ConsumerRefused)]
    assert (refused.cid, refused.code) == (bad, 406)
    assert refused.text.startswith("PRECONDITION_FAILED - invalid x-priority")
    for body in (b"m1", b"m2", b"m3"):
        kit.origin.forward("/", ("q",), _message(body))
    kit.exchange()
    assert kit.delivered(high) == [b"m1", b"m2", b"m3"]  # the higher priority takes them all
    assert kit.delivered(low) == []
    only = kit.origin.subscribe("/", "q", 1, exclusive=True)
    kit.exchange()
    [refused] = [e for e in kit.events if isinstance(e, ConsumerRefused) and e.cid == only]
    assert refused.code == 403  # exclusive use of a queue that has consumers: as locally


def test_deliveries_carry_the_queues_delivery_count() -> None:
    kit = Kit()
    kit.declare("q")
    kit.origin.forward("/", ("q",), _message(b"m"))
    cid = kit.origin.subscribe("/", "q", 3)
    kit.exchange()
    for _ in range(2):
        [tag] = kit.origin.unsettled(cid)
        kit.origin.settle(cid, Outcome.REQUEUE, [tag])
        kit.exchange()
    got = [
        (d.redelivered, d.delivery_count)
        for e in kit.events
        if isinstance(e, Delivered)
        for d in e.entries
    ]
    assert got == [(False, 1), (True, 2), (True, 3)]
