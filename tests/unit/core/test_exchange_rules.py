"""Exchanges through the broker: declare and bind rules, internal exchanges, routing through
every exchange type, exchange-to-exchange bindings, alternate exchanges, the delayed-message
exchange and sender-selected distribution (CC, BCC)."""

from __future__ import annotations

from ringmq.amqp import spec
from ringmq.amqp.frames import RawContent
from ringmq.amqp.properties import BasicProperties, decode_properties
from ringmq.amqp.reply_codes import ReplyCode
from ringmq.core.config import BrokerConfig, PolicyConfig
from tests.unit.adapters.amqp091.kit import Kit, bodies, of_type


def test_exchange_declare_rules(kit: Kit) -> None:
    ch = kit.open()
    kit.call(ch, spec.ExchangeDeclare(exchange="x", type="direct"))
    err = kit.error(ch, spec.ExchangeDeclare(exchange="x", type="fanout"))
    assert err.code is ReplyCode.PRECONDITION_FAILED
    assert err.explanation == (
        "inequivalent arg 'type' for exchange 'x' in vhost '/': received 'fanout' but current "
        "is 'direct'"
    )
    ch = kit.open()
    err = kit.error(ch, spec.ExchangeDeclare(exchange="missing", passive=True))
    assert err.reply_text == "NOT_FOUND - no exchange 'missing' in vhost '/'"
    ch = kit.open()
    assert kit.error(ch, spec.ExchangeDeclare(exchange="amq.new")).code is ReplyCode.ACCESS_REFUSED
    ch = kit.open()
    kit.call(ch, spec.ExchangeDeclare(exchange="amq.direct", type="direct", durable=True))
    assert kit.error(ch, spec.ExchangeDelete(exchange="")).code is ReplyCode.ACCESS_REFUSED
    ch = kit.open()
    err = kit.error(ch, spec.ExchangeDelete(exchange="amq.direct"))
    assert err.code is ReplyCode.ACCESS_REFUSED
    ch = kit.open()
    err = kit.error(ch, spec.ExchangeDeclare(exchange="y", type="bogus"))
    assert err.code is ReplyCode.COMMAND_INVALID
    ch = kit.open()
    err = kit.error(ch, spec.QueueBind(queue="q", exchange=""))
    assert err.code is ReplyCode.ACCESS_REFUSED


def test_bind_404s_and_if_unused(kit: Kit) -> None:
    ch = kit.open()
    kit.call(ch, spec.ExchangeDeclare(exchange="x", type="direct"))
    assert kit.error(ch, spec.QueueBind(queue="nope", exchange="x")).code is ReplyCode.NOT_FOUND
    ch = kit.open()
    kit.declare(ch, "q")
    assert kit.error(ch, spec.QueueBind(queue="q", exchange="nox")).code is ReplyCode.NOT_FOUND
    ch = kit.open()
    kit.call(ch, spec.QueueBind(queue="q", exchange="x", routing_key="k"))
    err = kit.error(ch, spec.ExchangeDelete(exchange="x", if_unused=True))
    assert err.explanation == "exchange 'x' in vhost '/' in use"


def test_internal_exchange_refuses_publish_and_auto_delete_on_last_unbind(kit: Kit) -> None:
    ch = kit.open()
    kit.call(ch, spec.ExchangeDeclare(exchange="int", type="fanout", internal=True))
    err = kit.error(ch, spec.BasicPublish(exchange="int"), _content())
    assert err.code is ReplyCode.ACCESS_REFUSED
    assert err.explanation == "cannot publish to internal exchange 'int' in vhost '/'"
    ch = kit.open()
    kit.call(ch, spec.ExchangeDeclare(exchange="ad", type="fanout", auto_delete=True))
    kit.declare(ch, "q")
    kit.call(ch, spec.QueueBind(queue="q", exchange="ad"))
    kit.call(ch, spec.QueueUnbind(queue="q", exchange="ad"))
    assert "ad" not in kit.broker.vhosts["/"].exchanges


def _content(body: bytes = b"x") -> RawContent:
    return RawContent(60, len(body), b"\x00\x00", body)


def test_routing_through_every_exchange_type(kit: Kit) -> None:
    ch = kit.open()
    for name in ("d", "f", "t", "h"):
        kit.declare(ch, name)
    kit.call(ch, spec.QueueBind(queue="d", exchange="amq.direct", routing_key="k"))
    kit.call(ch, spec.QueueBind(queue="f", exchange="amq.fanout"))
    kit.call(ch, spec.QueueBind(queue="t", exchange="amq.topic", routing_key="a.*.c.#"))
    kit.call(
        ch,
        spec.QueueBind(
            queue="h", exchange="amq.headers", arguments={"x-match": "any", "a": 1, "b": 2}
        ),
    )
    kit.publish(ch, "k", b"1", exchange="amq.direct")
    kit.publish(ch, "zzz", b"2", exchange="amq.fanout")
    kit.publish(ch, "a.b.c", b"3", exchange="amq.topic")
    kit.publish(ch, "a.b.c.d.e", b"4", exchange="amq.topic")
    kit.publish(ch, "a.c", b"5", exchange="amq.topic")
    kit.publish(ch, "", b"6", exchange="amq.headers", props=BasicProperties(headers={"b": 2}))
    kit.publish(ch, "", b"7", exchange="amq.headers", props=BasicProperties(headers={"b": 3}))
    q = kit.broker.vhosts["/"].queues
    assert [m.body for m in q["d"].queue.ready_messages()] == [b"1"]
    assert [m.body for m in q["f"].queue.ready_messages()] == [b"2"]
    assert [m.body for m in q["t"].queue.ready_messages()] == [b"3", b"4"]
    assert [m.body for m in q["h"].queue.ready_messages()] == [b"6"]


def test_exchange_to_exchange_cycles_and_alternate_exchange(kit: Kit) -> None:
    ch = kit.open()
    kit.call(ch, spec.ExchangeDeclare(exchange="a", type="fanout"))
    kit.call(ch, spec.ExchangeDeclare(exchange="b", type="fanout"))
    kit.call(ch, spec.ExchangeBind(destination="b", source="a"))
    kit.call(ch, spec.ExchangeBind(destination="a", source="b"))
    kit.declare(ch, "qb")
    kit.call(ch, spec.QueueBind(queue="qb", exchange="b"))
    kit.publish(ch, "", b"loop", exchange="a")
    assert kit.broker.vhosts["/"].queues["qb"].queue.ready_count == 1
    kit.call(ch, spec.ExchangeDeclare(exchange="ae", type="fanout"))
    kit.declare(ch, "unrouted")
    kit.call(ch, spec.QueueBind(queue="unrouted", exchange="ae"))
    kit.call(
        ch,
        spec.ExchangeDeclare(
            exchange="main", type="direct", arguments={"alternate-exchange": "ae"}
        ),
    )
    out = kit.publish(ch, "nowhere", b"alt", exchange="main", mandatory=True)
    assert of_type(out, spec.BasicReturn) == []
    assert kit.broker.vhosts["/"].queues["unrouted"].queue.ready_count == 1


def test_alternate_exchange_from_policy() -> None:
    cfg = BrokerConfig(
        name_seed=1,
        policies=[PolicyConfig("ae", "^main$", {"alternate-exchange": "amq.fanout"})],
    )
    k = Kit(cfg)
    ch = k.open()
    k.declare(ch, "caught")
    k.call(ch, spec.QueueBind(queue="caught", exchange="amq.fanout"))
    k.call(ch, spec.ExchangeDeclare(exchange="main", type="direct"))
    k.publish(ch, "x", exchange="main")
    assert k.broker.vhosts["/"].queues["caught"].queue.ready_count == 1


def test_delayed_message_exchange_holds_until_due(kit: Kit) -> None:
    ch = kit.open()
    kit.call(
        ch,
        spec.ExchangeDeclare(
            exchange="later", type="x-delayed-message", arguments={"x-delayed-type": "direct"}
        ),
    )
    kit.declare(ch, "q")
    kit.call(ch, spec.QueueBind(queue="q", exchange="later", routing_key="k"))
    kit.consume(ch, "q", "c", no_ack=True)
    out = kit.publish(
        ch, "k", b"soon", exchange="later", props=BasicProperties(headers={"x-delay": 500})
    )
    assert bodies(out) == []
    assert kit.broker.next_deadline_ms() == kit.now + 500
    assert bodies(kit.tick(499)) == []
    assert bodies(kit.tick(1)) == [b"soon"]
    ch2 = kit.open()
    err = kit.error(
        ch2, spec.ExchangeDeclare(exchange="bad", type="x-delayed-message", arguments={})
    )
    assert err.code is ReplyCode.PRECONDITION_FAILED


def test_sender_selected_distribution_cc_and_bcc() -> None:
    kit = Kit()
    ch = kit.open()
    for name in ("main", "cc", "bcc"):
        kit.declare(ch, name)
    props = BasicProperties(headers={"CC": ["cc"], "BCC": ["bcc"], "k": 1})
    kit.publish(ch, "main", b"m", props=props)
    queues = kit.broker.vhosts["/"].queues
    for name in ("main", "cc", "bcc"):
        (msg,) = queues[name].queue.ready_messages()
        headers = decode_properties(msg.properties_bin).headers or {}
        assert "BCC" not in headers
        assert headers["CC"] == ["cc"]
