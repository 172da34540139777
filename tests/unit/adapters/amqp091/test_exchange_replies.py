"""The 0-9-1 side of exchanges: refusals as channel errors with RabbitMQ's texts, and the
BCC header gone from the properties a message is re-sent with (the core's side is
tests/unit/core/test_exchange_rules.py)."""

from __future__ import annotations

from ringmq.amqp import spec
from ringmq.amqp.frames import RawContent
from ringmq.amqp.properties import BasicProperties, decode_properties
from ringmq.amqp.reply_codes import ReplyCode
from tests.unit.adapters.amqp091.kit import Kit


def test_exchange_refusals_are_channel_errors_with_rabbitmqs_text(kit: Kit) -> None:
    ch = kit.open()
    kit.call(ch, spec.ExchangeDeclare(exchange="x", type="direct"))
    err = kit.error(ch, spec.ExchangeDeclare(exchange="x", type="fanout"))
    assert err.code is ReplyCode.PRECONDITION_FAILED
    err = kit.error(kit.open(), spec.ExchangeDeclare(exchange="missing", passive=True))
    assert err.reply_text == "NOT_FOUND - no exchange 'missing' in vhost '/'"
    err = kit.error(kit.open(), spec.ExchangeDeclare(exchange="y", type="bogus"))
    assert err.code is ReplyCode.COMMAND_INVALID
    ch = kit.open()
    kit.call(ch, spec.ExchangeDeclare(exchange="int", type="fanout", internal=True))
    err = kit.error(ch, spec.BasicPublish(exchange="int"), RawContent(60, 1, b"\x00\x00", b"x"))
    assert err.code is ReplyCode.ACCESS_REFUSED


def test_bcc_is_gone_from_the_stored_0_9_1_properties(kit: Kit) -> None:
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
