"""Exchanges on the core's API: declare and bind rules, internal exchanges, routing through
every exchange type, exchange-to-exchange bindings, alternate exchanges, the delayed-message
exchange and sender-selected distribution (CC, BCC)."""

from __future__ import annotations

from ringmq.core.config import BrokerConfig, PolicyConfig
from ringmq.core.effects import Bounce
from ringmq.core.errors import Condition
from tests.unit.core.corekit import Core, bodies


def test_exchange_declare_rules() -> None:
    core = Core()
    xs = core.broker.exchanges
    s = core.open()
    core.exchange(s, "x", "direct")
    err = core.refused(core.exchange, s, "x", "fanout")
    assert err.condition is Condition.PRECONDITION_FAILED
    assert err.explanation == (
        "inequivalent arg 'type' for exchange 'x' in vhost '/': received 'fanout' but current "
        "is 'direct'"
    )
    err = core.refused(core.exchange, core.open(), "missing", passive=True)
    assert err.text == "NOT_FOUND - no exchange 'missing' in vhost '/'"
    assert core.refused(core.exchange, core.open(), "amq.new").condition is Condition.ACCESS_REFUSED
    s = core.open()
    core.exchange(s, "amq.direct", "direct", durable=True)
    err = core.refused(xs.delete_exchange, s.vhost, "", if_unused=False, grant=s)
    assert err.condition is Condition.ACCESS_REFUSED
    s = core.open()
    err = core.refused(xs.delete_exchange, s.vhost, "amq.direct", if_unused=False, grant=s)
    assert err.condition is Condition.ACCESS_REFUSED
    err = core.refused(core.exchange, core.open(), "y", "bogus")
    assert err.condition is Condition.COMMAND_INVALID
    err = core.refused(core.bind, core.open(), "q", "")
    assert err.condition is Condition.ACCESS_REFUSED


def test_bind_to_what_is_missing_is_not_found_and_delete_if_unused_is_refused() -> None:
    core = Core()
    s = core.open()
    core.exchange(s, "x", "direct")
    assert core.refused(core.bind, s, "nope", "x").condition is Condition.NOT_FOUND
    s = core.open()
    core.declare(s, "q")
    assert core.refused(core.bind, s, "q", "nox").condition is Condition.NOT_FOUND
    s = core.open()
    core.bind(s, "q", "x", "k")
    xs = core.broker.exchanges
    err = core.refused(xs.delete_exchange, s.vhost, "x", if_unused=True, grant=s)
    assert err.explanation == "exchange 'x' in vhost '/' in use"


def test_internal_exchange_refuses_publish_and_auto_delete_on_last_unbind() -> None:
    core = Core()
    s = core.open()
    core.exchange(s, "int", "fanout", internal=True)
    err = core.refused(core.publish, s, "", exchange="int")
    assert err.condition is Condition.ACCESS_REFUSED
    assert err.explanation == "cannot publish to internal exchange 'int' in vhost '/'"
    s = core.open()
    core.exchange(s, "ad", "fanout", auto_delete=True)
    core.declare(s, "q")
    core.bind(s, "q", "ad")
    core.unbind(s, "q", "ad")
    assert "ad" not in core.broker.vhosts["/"].exchanges


def test_routing_through_every_exchange_type() -> None:
    core = Core()
    s = core.open()
    for name in ("d", "f", "t", "h"):
        core.declare(s, name)
    core.bind(s, "d", "amq.direct", "k")
    core.bind(s, "f", "amq.fanout")
    core.bind(s, "t", "amq.topic", "a.*.c.#")
    core.bind(s, "h", "amq.headers", "", {"x-match": "any", "a": 1, "b": 2})
    core.publish(s, "k", b"1", exchange="amq.direct")
    core.publish(s, "zzz", b"2", exchange="amq.fanout")
    core.publish(s, "a.b.c", b"3", exchange="amq.topic")
    core.publish(s, "a.b.c.d.e", b"4", exchange="amq.topic")
    core.publish(s, "a.c", b"5", exchange="amq.topic")
    core.publish(s, "", b"6", exchange="amq.headers", headers={"b": 2})
    core.publish(s, "", b"7", exchange="amq.headers", headers={"b": 3})
    assert core.ready("d") == [b"1"]
    assert core.ready("f") == [b"2"]
    assert core.ready("t") == [b"3", b"4"]
    assert core.ready("h") == [b"6"]


def test_exchange_to_exchange_cycles_and_alternate_exchange() -> None:
    core = Core()
    s = core.open()
    core.exchange(s, "a", "fanout")
    core.exchange(s, "b", "fanout")
    core.bind_exchange(s, "a", "b")
    core.bind_exchange(s, "b", "a")
    core.declare(s, "qb")
    core.bind(s, "qb", "b")
    core.publish(s, "", b"loop", exchange="a")
    assert core.queue("qb").ready_count == 1
    core.exchange(s, "ae", "fanout")
    core.declare(s, "unrouted")
    core.bind(s, "unrouted", "ae")
    core.exchange(s, "main", "direct", arguments={"alternate-exchange": "ae"})
    out = core.publish(s, "nowhere", b"alt", exchange="main", mandatory=True)
    assert [e for e in out if isinstance(e, Bounce)] == []
    assert core.queue("unrouted").ready_count == 1


def test_alternate_exchange_from_policy() -> None:
    cfg = BrokerConfig(
        name_seed=1,
        policies=[PolicyConfig("ae", "^main$", {"alternate-exchange": "amq.fanout"})],
    )
    core = Core(cfg)
    s = core.open()
    core.declare(s, "caught")
    core.bind(s, "caught", "amq.fanout")
    core.exchange(s, "main", "direct")
    core.publish(s, "x", exchange="main")
    assert core.queue("caught").ready_count == 1


def test_delayed_message_exchange_holds_until_due() -> None:
    core = Core()
    s = core.open()
    core.exchange(s, "later", "x-delayed-message", arguments={"x-delayed-type": "direct"})
    core.declare(s, "q")
    core.bind(s, "q", "later", "k")
    core.consume(s, "q", "c", no_ack=True)
    out = core.publish(s, "k", b"soon", exchange="later", headers={"x-delay": 500})
    assert bodies(out) == []
    assert core.broker.next_deadline_ms() == core.now + 500
    assert bodies(core.tick(499)) == []
    assert bodies(core.tick(1)) == [b"soon"]
    err = core.refused(core.exchange, core.open(), "bad", "x-delayed-message", arguments={})
    assert err.condition is Condition.PRECONDITION_FAILED


def test_sender_selected_distribution_cc_and_bcc() -> None:
    core = Core()
    s = core.open()
    for name in ("main", "cc", "bcc"):
        core.declare(s, name)
    core.publish(s, "main", b"m", headers={"CC": ["cc"], "BCC": ["bcc"], "k": 1})
    for name in ("main", "cc", "bcc"):
        (msg,) = core.queue(name).ready_messages()
        headers = msg.headers or {}
        assert "BCC" not in headers
        assert headers["CC"] == ["cc"]
