"""The shards' definitions feed (core/deffeed.py): shard 1 applying shard 0's changes has the
same definitions and routes every publish to the same queues.

The state machine drives shard 0 as clients and the management API do (queues of every kind,
queues placed on shard 1, exchanges of every type, queue and exchange bindings, unbinds,
deletes, auto-delete by the last consumer, an exclusive queue's connection closing, policies,
vhosts) and after each step hands its drained changes to shard 1. Invariants: the same
vhosts, exchanges, queues (shard 0's own ones are copies on shard 1, shard 1's are its own)
and policies; every exchange routes every routing key to the same queue names on both; and a
third shard started from a snapshot is the same as shard 1."""

from __future__ import annotations

from typing import Any

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
)

from ringmq.core.broker import Broker
from ringmq.core.entities import ELSEWHERE
from ringmq.core.errors import BrokerError
from ringmq.core.routing import QUEUE
from ringmq.core.session import Session
from ringmq.core.vhost import VHost
from tests.unit.core.corekit import Core

QUEUES = ("q1", "q2", "q3", "q4")
EXCHANGES = ("e1", "e2", "e3")
SOURCES = (*EXCHANGES, "amq.topic", "amq.direct", "amq.fanout", "amq.headers")
KEYS = ("a", "b", "a.b", "#", "*.b")
ARGUMENTS: tuple[dict[str, Any], ...] = (
    {},
    {"x-max-length": 5},
    {"x-message-ttl": 1000},
    {"x-queue-type": "quorum"},
)
HEADERS = (None, {"k": "a"}, {"k": "b"})
VHOSTS = ("/", "other")


def _shard() -> Core:
    return Core()


def _queues(vh: VHost) -> dict[str, tuple[Any, ...]]:
    return {
        name: (q.durable, q.auto_delete, dict(q.arguments), q.settings)
        for name, q in vh.queues.items()
    }


def _exchanges(vh: VHost) -> dict[str, tuple[Any, ...]]:
    return {
        name: (x.type, x.durable, x.auto_delete, x.internal, dict(x.arguments))
        for name, x in vh.exchanges.items()
    }


def _routes(vh: VHost) -> dict[tuple[str, str, int], list[str]]:
    out = {}
    for name, x in vh.exchanges.items():
        for rk in (*KEYS, *QUEUES):
            for i, headers in enumerate(HEADERS):
                out[(name, rk, i)] = sorted(q.name for q in vh.route(x, rk, headers))
    return out


def same_definitions(zero: Broker, other: Broker, shard: int) -> None:
    """`other` (shard `shard`) holds shard 0's definitions as its copy."""
    assert sorted(zero.state.vhosts) == sorted(other.state.vhosts)
    for name, vh in zero.state.vhosts.items():
        there = other.state.vhosts[name]
        assert _exchanges(vh) == _exchanges(there)
        assert _queues(vh) == _queues(there)
        for qname, q in vh.queues.items():
            copy = there.queues[qname]
            owner = q.owner if q.owner is not None else 0
            if owner == shard:
                assert copy.owner is None, qname  # its own
            else:
                assert copy.owner == owner, qname
                assert (copy.exclusive_owner == ELSEWHERE) == (q.exclusive_owner is not None)
        assert _routes(vh) == _routes(there)
    assert [p.as_dict() for p in zero.policies.list()] == [
        p.as_dict() for p in other.policies.list()
    ]
    assert zero.state.auth.permissions.keys() == other.state.auth.permissions.keys()


class FeedMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.zero = _shard()
        self.zero.broker.feed_definitions()
        self.one = _shard()
        self.sessions: dict[str, Session] = {"/": self.zero.open()}
        self.consumers: list[tuple[Session, str]] = []
        self.exclusive: list[int] = []
        self.cut = False

    @initialize()
    def some_of_each(self) -> None:
        # something to bind, unbind and delete from the first step on
        zero, s = self.zero, self.sessions["/"]
        zero.declare(s, "q1", durable=True)
        zero.declare(s, "q2")
        zero.run(zero.broker.topology.create_copy, "/", "q3", 1)
        zero.exchange(s, "e1", "topic")
        zero.exchange(s, "e2", "headers", durable=True)
        zero.bind(s, "q1", "e1", "a.#")
        zero.bind(s, "q3", "e1", "*.b")
        zero.bind(s, "q2", "e2", "", {"k": "a"})
        self._ship()

    def _ship(self) -> None:
        if self.cut:
            return  # the link is down: the changes wait for `resync`
        changes = self.zero.broker.drain_definitions()
        seqs = [c.seq for c in changes]
        assert seqs == sorted(seqs)
        self.one.broker.apply_definitions(changes, shard=1, now_ms=self.zero.now)

    def _try(self, step: Any, *args: Any, **kw: Any) -> None:
        try:
            self.zero.run(step, *args, **kw)
        except BrokerError:
            pass  # refused on shard 0 (inequivalent, in use...): nothing to copy
        self._ship()

    def _session(self, vhost: str) -> Session | None:
        if vhost not in self.zero.broker.state.vhosts:
            return None
        s = self.sessions.get(vhost)
        if s is None or s.conn_id not in self.zero.broker.state.conns:
            self.zero.broker.state.auth.set_permissions("guest", vhost)
            self.zero.broker.definitions_changed()
            s = self.sessions[vhost] = self.zero.session(self.zero.connect(vhost=vhost))
        return s

    @rule(
        vhost=st.sampled_from(VHOSTS),
        name=st.sampled_from(QUEUES),
        durable=st.booleans(),
        auto_delete=st.booleans(),
        arguments=st.sampled_from(ARGUMENTS),
    )
    def declare_queue(
        self, vhost: str, name: str, durable: bool, auto_delete: bool, arguments: dict[str, Any]
    ) -> None:
        s = self._session(vhost)
        if s is None:
            return
        if arguments.get("x-queue-type") == "quorum":
            durable = True
        try:
            self.zero.declare(s, name, dict(arguments), durable=durable, auto_delete=auto_delete)
        except BrokerError:
            pass
        self._ship()

    @rule(name=st.sampled_from(QUEUES))
    def declare_exclusive(self, name: str) -> None:
        conn = self.zero.connect()
        s = self.zero.session(conn)
        try:
            self.zero.declare(s, name, exclusive=True)
            self.exclusive.append(conn)
        except BrokerError:
            self.zero.broker.connection_closed(conn, self.zero.now)
        self._ship()

    @precondition(lambda self: self.exclusive)
    @rule()
    def close_exclusive(self) -> None:
        self.zero.broker.connection_closed(self.exclusive.pop(0), self.zero.now)
        self._ship()

    @rule(vhost=st.sampled_from(VHOSTS), name=st.sampled_from(QUEUES), durable=st.booleans())
    def place_on_shard_one(self, vhost: str, name: str, durable: bool) -> None:
        vh = self.zero.broker.state.vhosts.get(vhost)
        if vh is None or name in vh.queues:
            return
        self._try(self.zero.broker.topology.create_copy, vhost, name, 1, durable=durable)

    @rule(
        vhost=st.sampled_from(VHOSTS),
        name=st.sampled_from(EXCHANGES),
        type_=st.sampled_from(("direct", "topic", "fanout", "headers")),
        durable=st.booleans(),
        auto_delete=st.booleans(),
    )
    def declare_exchange(
        self, vhost: str, name: str, type_: str, durable: bool, auto_delete: bool
    ) -> None:
        s = self._session(vhost)
        if s is None:
            return
        try:
            self.zero.exchange(s, name, type_, durable=durable, auto_delete=auto_delete)
        except BrokerError:
            pass
        self._ship()

    @rule(
        vhost=st.sampled_from(VHOSTS),
        queue=st.sampled_from(QUEUES),
        source=st.sampled_from(SOURCES),
        key=st.sampled_from(KEYS),
        headers=st.sampled_from(({}, {"k": "a"}, {"x-match": "any", "k": "b"})),
    )
    def bind_queue(
        self, vhost: str, queue: str, source: str, key: str, headers: dict[str, Any]
    ) -> None:
        s = self._session(vhost)
        if s is None:
            return
        self._try(self.zero.broker.topology.bind_queue, s, queue, source, key, dict(headers))

    @rule(
        vhost=st.sampled_from(VHOSTS),
        source=st.sampled_from(SOURCES),
        dest=st.sampled_from(EXCHANGES),
        key=st.sampled_from(KEYS),
    )
    def bind_exchange(self, vhost: str, source: str, dest: str, key: str) -> None:
        s = self._session(vhost)
        if s is None:
            return
        exchanges = self.zero.broker.exchanges
        self._try(exchanges.bind_exchange, s.vhost, source, dest, key, {}, grant=s)

    @rule(data=st.data())
    def unbind(self, data: st.DataObject) -> None:
        bound = [
            (vh.name, x.name, b)
            for vh in self.zero.broker.state.vhosts.values()
            for x in vh.exchanges.values()
            if x.name
            for b in x.bindings.values()
        ]
        if not bound:
            return
        vhost, source, b = data.draw(st.sampled_from(bound))
        s = self._session(vhost)
        assert s is not None
        kind, name = b.dest
        if kind == QUEUE:
            unbind_queue = self.zero.broker.topology.unbind_queue
            self._try(unbind_queue, s, name, source, b.routing_key, dict(b.arguments))
        else:
            unbind_exchange = self.zero.broker.exchanges.unbind_exchange
            args = dict(b.arguments)
            self._try(unbind_exchange, s.vhost, source, name, b.routing_key, args, grant=s)

    @rule(vhost=st.sampled_from(VHOSTS), name=st.sampled_from(QUEUES))
    def delete_queue(self, vhost: str, name: str) -> None:
        vh = self.zero.broker.state.vhosts.get(vhost)
        q = vh.queues.get(name) if vh is not None else None
        if vh is None or q is None:
            return
        self._try(self.zero.broker.topology.delete_queue, vh, q, self.zero.now)

    @rule(vhost=st.sampled_from(VHOSTS), name=st.sampled_from(EXCHANGES))
    def delete_exchange(self, vhost: str, name: str) -> None:
        s = self._session(vhost)
        if s is None:
            return
        exchanges = self.zero.broker.exchanges
        self._try(exchanges.delete_exchange, s.vhost, name, if_unused=False, grant=s)

    @rule(name=st.sampled_from(QUEUES), tag=st.sampled_from(("c1", "c2")))
    def consume(self, name: str, tag: str) -> None:
        s = self.sessions["/"]
        if tag in s.consumers or self.zero.broker.state.vhosts["/"].queues.get(name) is None:
            return
        q = self.zero.broker.state.vhosts["/"].queues[name]
        if q.owner is not None or q.exclusive_owner is not None:
            return
        try:
            self.zero.consume(s, name, tag)
            self.consumers.append((s, tag))
        except BrokerError:
            pass
        self._ship()

    @precondition(lambda self: self.consumers)
    @rule()
    def cancel(self) -> None:
        s, tag = self.consumers.pop(0)
        if tag in s.consumers:
            self.zero.cancel(s, tag)  # an auto-delete queue goes with its last consumer
        self._ship()

    @rule(
        vhost=st.sampled_from(VHOSTS),
        pattern=st.sampled_from(("^q1$", "^q", "^e")),
        definition=st.sampled_from(({"max-length": 2}, {"message-ttl": 50}, {})),
    )
    def policy(self, vhost: str, pattern: str, definition: dict[str, Any]) -> None:
        broker = self.zero.broker
        vh = broker.state.vhosts.get(vhost)
        if vh is None:
            return
        if definition:
            broker.policies.set("p", pattern, definition, vhost=vhost)
        else:
            broker.policies.clear("p", vhost=vhost)
        with broker.call(self.zero.now):
            broker.topology.reapply_settings(vh, self.zero.now)
        broker.definitions_changed(full=False)
        self._ship()

    @rule(add=st.booleans())
    def other_vhost(self, add: bool) -> None:
        broker = self.zero.broker
        vh = broker.state.vhosts.get("other")
        if add:
            broker.add_vhost("other")
        elif vh is not None:
            with broker.call(self.zero.now):
                broker.topology.delete_vhost(vh, self.zero.now)
            self.sessions.pop("other", None)
        broker.definitions_changed()
        self._ship()

    @rule()
    def cut_the_link(self) -> None:
        self.cut = True

    @rule()
    def resync(self) -> None:
        # shard 1 takes a snapshot over what it has (a link to shard 0 made again): the
        # changes it missed meanwhile are not applied, the snapshot replaces them; but its
        # own queues are never deleted on a snapshot's word, so a missed delete of one is
        # applied as a change
        self.cut = False
        missed = self.zero.broker.drain_definitions()
        own = {
            f"{vh.name}\x1f{q.name}"
            for vh in self.one.broker.state.vhosts.values()
            for q in vh.queues.values()
            if q.owner is None
        }
        if any(c.kind == "queue" and c.value is None and c.key in own for c in missed):
            self.one.broker.apply_definitions(missed, shard=1, now_ms=self.zero.now)
            return
        snapshot = self.zero.broker.definitions_snapshot()
        self.one.broker.apply_definitions(snapshot, shard=1, now_ms=self.zero.now, snapshot=True)

    @invariant()
    def shard_one_has_shard_zero_definitions(self) -> None:
        if self.cut:
            return
        same_definitions(self.zero.broker, self.one.broker, 1)

    def teardown(self) -> None:
        # a shard started from a snapshot of the end state (each step's would cost a broker)
        two = _shard()
        snapshot = self.zero.broker.definitions_snapshot()
        two.broker.apply_definitions(snapshot, shard=2, now_ms=self.zero.now, snapshot=True)
        same_definitions(self.zero.broker, two.broker, 2)


TestFeed = FeedMachine.TestCase
TestFeed.settings = settings(TestFeed.settings, max_examples=150, stateful_step_count=40)


def test_queues_placed_on_the_applying_shard_are_its_own_and_the_rest_copies() -> None:
    zero, one = _shard(), _shard()
    zero.broker.feed_definitions()
    s = zero.open()
    zero.declare(s, "here", durable=True)
    zero.run(zero.broker.topology.create_copy, "/", "there", 1, durable=True)
    zero.exchange(s, "x", "topic")
    zero.bind(s, "here", "x", "a.#")
    zero.bind(s, "there", "x", "#")
    changes = zero.broker.drain_definitions()
    assert [c.seq for c in changes] == list(range(changes[0].seq, changes[-1].seq + 1))
    one.broker.apply_definitions(changes, shard=1, now_ms=zero.now)
    vh = one.broker.state.vhosts["/"]
    assert vh.queues["here"].owner == 0
    assert vh.queues["there"].owner is None  # shard 1's own queue
    assert sorted(q.name for q in vh.route(vh.exchanges["x"], "a.b", None)) == ["here", "there"]
    assert zero.broker.drain_definitions() == []  # nothing new
    # applying the same changes again changes nothing (each states what a key holds now)
    one.broker.apply_definitions(changes, shard=1, now_ms=zero.now)
    same_definitions(zero.broker, one.broker, 1)


def test_the_feed_is_off_until_asked() -> None:
    kit = _shard()
    s = kit.open()
    kit.declare(s, "q")
    assert kit.broker.drain_definitions() == []
    kit.broker.feed_definitions()
    (vhost, *rest) = [c for c in kit.broker.drain_definitions() if c.kind == "queue"]
    assert (vhost.key, vhost.value is not None, rest) == ("/\x1fq", True, [])
