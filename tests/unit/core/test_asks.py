"""A shard that follows shard 0 asks it for its clients' definition steps (core/asks.py,
core/askrun.py): the step checks, raises `DefinitionElsewhere` with nothing changed, shard 0
makes it (placing a client-local queue on the asking shard), the feed brings it back, and the
step run again is local and answers as it always does. Shard 0's refusal is the client's."""

from __future__ import annotations

from typing import Any

import pytest

from ringmq.core.asks import DefinitionElsewhere, DefinitionRequest
from ringmq.core.effects import DefinitionAnswered
from ringmq.core.errors import BrokerError, Condition
from ringmq.core.session import Session
from tests.unit.core.corekit import Core
from tests.unit.core.test_definition_feed import same_definitions


class Shards:
    """Shard 0 and shard 1 (following it), with the link's session on shard 0."""

    def __init__(self) -> None:
        self.zero, self.one = Core(), Core()
        self.zero.broker.feed_definitions()
        self.one.broker.defer_definitions()
        self.link = self.zero.open()  # the link's session (the guest may do anything on /)
        self.ship()

    def ship(self) -> None:
        changes = self.zero.broker.drain_definitions()
        self.one.broker.apply_definitions(changes, shard=1, now_ms=self.one.now)

    def step(self, s: Session, fn: Any, *args: Any, **kw: Any) -> Any:
        """Run a client step on shard 1 as its adapter does: when it is shard 0's to make,
        ask, let shard 0 make it, ship the feed, answer, and run the step again."""
        one = self.one.broker
        try:
            with one.call(self.one.now):
                return fn(*args, **kw)
        except DefinitionElsewhere as asked:
            rid = one.ask_definition(s.conn_id, s.channel, asked.request)
        ((got_rid, request),) = one.drain_definition_asks()
        assert got_rid == rid
        try:
            self.zero.broker.run_definition_request(
                self.link.conn_id, self.link.channel, request, origin=1, now_ms=self.zero.now
            )
        except BrokerError as refused:
            (answer,) = one.definition_answered(rid, refused.condition, refused.text)
            assert isinstance(answer, DefinitionAnswered)
            raise
        self.ship()
        (answer,) = one.definition_answered(rid, None)
        assert isinstance(answer, DefinitionAnswered)
        assert (answer.conn_id, answer.channel, answer.condition) == (s.conn_id, s.channel, None)
        with one.call(self.one.now):
            return fn(*args, **kw)  # local now


def test_a_declare_on_shard_one_is_made_by_shard_zero_and_placed_on_shard_one() -> None:
    sh = Shards()
    s = sh.one.open(parks=True)
    topology = sh.one.broker.topology
    declared = sh.step(
        s,
        topology.declare_queue,
        s,
        "orders",
        durable=True,
        exclusive=False,
        auto_delete=False,
        arguments={"x-max-length": 10},
        now_ms=sh.one.now,
    )
    assert declared.name == "orders"
    assert sh.one.broker.state.vhosts["/"].queues["orders"].owner is None  # shard 1's own
    assert sh.zero.broker.state.vhosts["/"].queues["orders"].owner == 1  # copied on shard 0
    sh.step(s, sh.one.broker.exchanges.declare_exchange, s.vhost, "x", "topic",
            durable=True, auto_delete=False, internal=False, arguments={}, grant=s)  # fmt: skip
    sh.step(s, topology.bind_queue, s, "orders", "x", "eu.#", {})
    same_definitions(sh.zero.broker, sh.one.broker, 1)
    vh = sh.zero.broker.state.vhosts["/"]
    assert [q.name for q in vh.route(vh.exchanges["x"], "eu.paris", None)] == ["orders"]
    sh.step(s, topology.unbind_queue, s, "orders", "x", "eu.#", {})
    assert vh.route(vh.exchanges["x"], "eu.paris", None) == ()
    sh.step(s, topology.delete_for, s, "orders", if_unused=False, if_empty=False)
    assert "orders" not in vh.queues
    assert "orders" not in sh.one.broker.state.vhosts["/"].queues
    same_definitions(sh.zero.broker, sh.one.broker, 1)


def test_what_changes_nothing_or_is_the_connections_own_stays_local() -> None:
    sh = Shards()
    sh.zero.declare(sh.link, "shared", durable=True)
    sh.ship()
    s = sh.one.open(parks=True)
    topology = sh.one.broker.topology

    def local(fn: Any, *args: Any, **kw: Any) -> Any:
        with sh.one.broker.call(sh.one.now):
            return fn(*args, **kw)

    # an equivalent redeclare of a queue shard 0 made
    local(topology.declare_queue, s, "shared", durable=True, exclusive=False,
          auto_delete=False, arguments={}, now_ms=sh.one.now)  # fmt: skip
    # exclusive, auto-delete and server-named queues: the connection's (a gap: docs/dev)
    for name, exclusive, auto_delete in (("mine", True, False), ("gone", False, True)):
        local(topology.declare_queue, s, name, durable=False, exclusive=exclusive,
              auto_delete=auto_delete, arguments={}, now_ms=sh.one.now)  # fmt: skip
    named = local(topology.declare_queue, s, "", durable=False, exclusive=False,
                  auto_delete=False, arguments={}, now_ms=sh.one.now)  # fmt: skip
    local(topology.bind_queue, s, named.name, "amq.direct", "k", {})
    assert sh.one.broker.drain_definition_asks() == []
    # a connection whose adapter does not park makes its steps here (a gap: docs/dev)
    plain = sh.one.open()
    local(topology.declare_queue, plain, "here", durable=True, exclusive=False,
          auto_delete=False, arguments={}, now_ms=sh.one.now)  # fmt: skip
    assert sh.one.broker.drain_definition_asks() == []
    # a refused step is refused locally, before any ask
    with pytest.raises(BrokerError) as err:
        local(topology.declare_queue, s, "shared", durable=False, exclusive=False,
              auto_delete=False, arguments={}, now_ms=sh.one.now)  # fmt: skip
    assert err.value.condition is Condition.PRECONDITION_FAILED
    assert sh.one.broker.drain_definition_asks() == []


def test_shard_zeros_refusal_is_the_clients() -> None:
    sh = Shards()
    # made on shard 0 and not yet on shard 1: shard 1 finds nothing against it, shard 0 does
    sh.zero.declare(sh.link, "q", {"x-max-length": 5}, durable=True)
    s = sh.one.open(parks=True)
    with pytest.raises(BrokerError) as err:
        sh.step(s, sh.one.broker.topology.declare_queue, s, "q", durable=True,
                exclusive=False, auto_delete=False, arguments={}, now_ms=sh.one.now)  # fmt: skip
    assert err.value.condition is Condition.PRECONDITION_FAILED


def test_an_answer_for_a_closed_connection_goes_nowhere() -> None:
    sh = Shards()
    s = sh.one.open(parks=True)
    rid = sh.one.broker.ask_definition(s.conn_id, s.channel, DefinitionRequest("queue.bind", "/"))
    sh.one.broker.connection_closed(s.conn_id, sh.one.now)
    assert sh.one.broker.definition_answered(rid, None) == []
    with pytest.raises(ValueError, match="no such definition step"):
        sh.one.broker.ask_definition(s.conn_id, 1, DefinitionRequest("vhost.delete", "/"))


def test_shard_zero_keeps_the_queues_it_placed_elsewhere_across_a_restart() -> None:
    from ringmq.storage.memstore import MemoryStore

    store = MemoryStore()
    zero = Core(store=store)
    zero.broker.feed_definitions()
    link = zero.open()
    zero.broker.run_definition_request(
        link.conn_id,
        link.channel,
        DefinitionRequest("queue.declare", "/", {"name": "far", "durable": True,
                                                 "auto_delete": False, "arguments": {}}),
        origin=1,
        now_ms=zero.now,
    )  # fmt: skip
    zero.exchange(link, "x", "topic", durable=True)
    zero.bind(link, "far", "x", "a.#")
    zero.declare(link, "near", durable=True)
    zero.restart(store)
    vh = zero.broker.state.vhosts["/"]
    assert vh.queues["far"].owner == 1  # a copy again, routed to
    assert vh.queues["near"].owner is None
    assert [q.name for q in vh.route(vh.exchanges["x"], "a.b", None)] == ["far"]
    # a shard that follows shard 0 keeps no copy in its store: the feed brings them
    one_store = MemoryStore()
    one = Core(store=one_store)
    one.broker.defer_definitions()
    zero.broker.feed_definitions()
    snapshot = zero.broker.definitions_snapshot()
    one.broker.apply_definitions(snapshot, shard=1, now_ms=one.now, snapshot=True)
    assert one.broker.state.vhosts["/"].queues["far"].owner is None  # its own
    one.restart(one_store)
    assert "near" not in one.broker.state.vhosts["/"].queues
    assert one.broker.state.vhosts["/"].queues["far"].owner is None


def test_exchange_binds_unbinds_and_deletes_on_shard_one_are_made_by_shard_zero() -> None:
    sh = Shards()
    s = sh.one.open(parks=True)
    exchanges = sh.one.broker.exchanges
    for name in ("src", "dst"):
        sh.step(s, exchanges.declare_exchange, s.vhost, name, "topic",
                durable=True, auto_delete=False, internal=False, arguments={}, grant=s)  # fmt: skip
    sh.step(s, exchanges.bind_exchange, s.vhost, "src", "dst", "a.*", {}, grant=s)
    zero_vh = sh.zero.broker.state.vhosts["/"]
    assert zero_vh.exchanges["src"].has_binding(("x", "dst"), "a.*", {})
    same_definitions(sh.zero.broker, sh.one.broker, 1)
    sh.step(s, exchanges.unbind_exchange, s.vhost, "src", "dst", "a.*", {}, grant=s)
    assert not zero_vh.exchanges["src"].bindings
    sh.step(s, exchanges.delete_exchange, s.vhost, "dst", if_unused=False, grant=s)
    assert "dst" not in zero_vh.exchanges
    same_definitions(sh.zero.broker, sh.one.broker, 1)


def test_balanced_spreads_queues_over_every_shard_of_the_broker() -> None:
    sh = Shards()
    sh.zero.broker.set_shards(2)
    balanced = {"x-queue-leader-locator": "balanced"}
    for i in range(4):  # declared by shard 0's own client
        sh.zero.declare(sh.link, f"b{i}", dict(balanced), durable=True)
    shards = [q.shard for name, q in sh.zero.broker.state.vhosts["/"].queues.items()]
    assert sorted(shards) == [0, 0, 1, 1]
