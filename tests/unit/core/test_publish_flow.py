"""Publisher flow requests and per-batch dispatch (`defer_dispatch`) in the pure broker, on the
core's own API."""

from __future__ import annotations

from ringmq.core.effects import Effect
from ringmq.core.resources import FLOW_HIGH, FLOW_LOW
from ringmq.core.session import Session
from tests.unit.core.corekit import Core, bodies


def _publish(k: Core, s: Session, queue: str, body: bytes) -> list[Effect]:
    return k.publish(s, queue, body)


def _fill(k: Core, s: Session, queue: str, n: int) -> None:
    for i in range(n):
        _publish(k, s, queue, b"%d" % i)


def _prefetch_one(k: Core, s: Session) -> None:
    k.broker.delivery.set_prefetch(s, 1, session_wide=False)


def test_a_consumed_queue_over_the_high_mark_asks_to_pause_its_publisher() -> None:
    k = Core()
    cons = k.open()
    k.declare(cons, "q")
    _prefetch_one(k, cons)
    k.consume(cons, "q", "c1")
    pub_conn = k.connect()
    pub = k.session(pub_conn)
    _fill(k, pub, "q", FLOW_HIGH + 1)  # one delivered (prefetch 1), FLOW_HIGH ready
    assert k.broker.take_flow() == []
    _publish(k, pub, "q", b"over")
    taken = k.broker.take_flow()
    assert [(conn, q.name) for conn, q in taken] == [(pub_conn, "q")]
    assert k.broker.take_flow() == []  # taking clears the requests
    q = taken[0][1]
    assert not k.broker.flow_settled(q)
    getter = k.open()
    while q.queue.ready_count > FLOW_LOW + 1:
        k.get(getter, "q", no_ack=True)
    assert not k.broker.flow_settled(q)
    k.get(getter, "q", no_ack=True)
    assert k.broker.flow_settled(q)  # drained to the low mark
    _fill(k, pub, "q", FLOW_HIGH)
    assert not k.broker.flow_settled(q)
    k.run(k.broker.delivery.cancel, cons, "c1", k.now)
    assert k.broker.flow_settled(q)  # no consumers: pausing cannot help any more


def test_queues_without_consumers_and_consuming_publishers_never_ask_for_flow() -> None:
    k = Core()
    ch = k.open()
    k.declare(ch, "idle")
    _fill(k, ch, "idle", FLOW_HIGH + 10)  # a backlog with no consumer is just a backlog
    assert k.broker.take_flow() == []
    k.declare(ch, "busy")
    _prefetch_one(k, ch)
    k.consume(ch, "busy", "mine")
    # the publisher consumes on its own connection: pausing its reads would stop its acks
    _fill(k, ch, "busy", FLOW_HIGH + 10)
    assert k.broker.take_flow() == []


def test_bounded_lvq_and_browsed_queues_apply_their_own_policy_instead_of_flow() -> None:
    # A ring or max-length queue drops or refuses by its own rule, an LVQ replaces, browsers
    # never drain: pausing the publisher would defeat the policy the user chose.
    k = Core()
    cons = k.open()
    _prefetch_one(k, cons)
    args: dict[str, dict[str, object]] = {
        "ring": {"x-ring-size": FLOW_HIGH * 4},
        "maxlen": {"x-max-length": FLOW_HIGH * 4},
        "lvq": {"x-last-value-key": "k"},
        "browse": {"x-non-destructive": True},
    }
    for name, a in args.items():
        k.declare(cons, name, a)
        k.consume(cons, name, name)
    pub = k.session(k.connect())
    for name in args:
        _fill(k, pub, name, FLOW_HIGH + 10)
        assert k.broker.take_flow() == [], name
    k.declare(cons, "plain")
    k.consume(cons, "plain", "plain")
    _fill(k, pub, "plain", FLOW_HIGH + 10)
    assert [q.name for _, q in k.broker.take_flow()] == ["plain"]


def test_deferred_dispatch_delivers_a_batch_of_publishes_once_per_batch() -> None:
    k = Core()
    k.broker.defer_dispatch = True
    cons = k.open()
    k.declare(cons, "plain")
    k.consume(cons, "plain", "c", no_ack=True)
    pub = k.open()
    assert bodies(_publish(k, pub, "plain", b"a")) == []
    assert bodies(_publish(k, pub, "plain", b"b")) == []
    out = k.broker.dispatch_pending(k.now)
    assert bodies(out) == [b"a", b"b"]
    assert k.broker.dispatch_pending(k.now) == []


def test_deferred_dispatch_still_delivers_at_once_where_timing_matters() -> None:
    # A ring counts pending messages: deliver before the next publish, as without deferral.
    k = Core()
    k.broker.defer_dispatch = True
    cons = k.open()
    k.declare(cons, "ring", {"x-ring-size": 1})
    k.consume(cons, "ring", "c", no_ack=True)
    pub = k.open()
    got = [bodies(_publish(k, pub, "ring", b)) for b in (b"A", b"B")]
    assert got == [[b"A"], [b"B"]]


def test_a_non_publish_method_flushes_deferred_deliveries_first() -> None:
    k = Core()
    k.broker.defer_dispatch = True
    cons = k.open()
    k.declare(cons, "plain")
    k.consume(cons, "plain", "c", no_ack=True)
    pub = k.open()
    _publish(k, pub, "plain", b"x")
    out = k.run(k.broker.topology.declare_queue_passive, pub, "plain", k.now)
    assert bodies(out) == [b"x"]
