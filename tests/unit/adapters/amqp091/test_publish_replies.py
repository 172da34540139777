"""The 0-9-1 side of publishing: basic.return's fields, the refusals only 0-9-1 has
(immediate) or reports with its method ids, confirms as basic.ack and basic.nack (counted for
0-9-1) and direct reply-to's reply_to property (the core's side is
tests/unit/core/test_publish.py)."""

from __future__ import annotations

from ringmq.amqp import spec
from ringmq.amqp.frames import RawContent
from ringmq.amqp.properties import BasicProperties, decode_properties, encode_properties
from ringmq.amqp.reply_codes import ReplyCode
from ringmq.core.config import BrokerConfig
from tests.unit.adapters.amqp091.kit import Kit, delivered, of_type


def _content(body: bytes = b"x", props: BasicProperties | None = None) -> RawContent:
    return RawContent(60, len(body), encode_properties(props or BasicProperties()), body)


def test_basic_return_immediate_oversize_and_missing_exchange() -> None:
    k = Kit(BrokerConfig(name_seed=1, max_message_size=10))
    ch = k.open()
    (ret,) = delivered(k.publish(ch, "nobody", b"r", mandatory=True))
    assert ret.method == spec.BasicReturn(
        reply_code=312, reply_text="NO_ROUTE", exchange="", routing_key="nobody"
    )
    err = k.error(ch, spec.BasicPublish(routing_key="q", immediate=True), _content())
    assert err.code is ReplyCode.NOT_IMPLEMENTED
    err = k.error(k.open(), spec.BasicPublish(routing_key="q"), _content(b"x" * 11))
    assert err.code is ReplyCode.PRECONDITION_FAILED
    assert "larger than configured max size 10" in err.explanation
    err = k.error(k.open(), spec.BasicPublish(exchange="nox", routing_key="q"), _content())
    assert err.reply_text == "NOT_FOUND - no exchange 'nox' in vhost '/'"
    assert (err.class_id, err.method_id) == (60, 40)


def test_confirms_are_basic_ack_and_nack_and_counted_for_amqp091() -> None:
    k = Kit(BrokerConfig(name_seed=1, delay_persistent_confirms=True))
    ch = k.open()
    k.call(ch, spec.ConfirmSelect())
    k.declare(ch, "d", durable=True)
    k.declare(ch, "full", arguments={"x-max-length": 1, "x-overflow": "reject-publish"})
    persistent = BasicProperties(delivery_mode=2)
    for _ in range(3):
        assert of_type(k.publish(ch, "d", props=persistent), spec.BasicAck) == []
    assert len(k.broker.drain_unconfirmed()) == 3
    out = k.broker.confirm_stored(ch[0], ch[1], [1, 2, 3])
    assert of_type(out, spec.BasicAck) == [spec.BasicAck(delivery_tag=3, multiple=True)]
    assert of_type(k.publish(ch, "d"), spec.BasicAck) == [spec.BasicAck(delivery_tag=4)]
    assert of_type(k.publish(ch, "full"), spec.BasicAck) == [spec.BasicAck(delivery_tag=5)]
    assert of_type(k.publish(ch, "full"), spec.BasicNack) == [spec.BasicNack(delivery_tag=6)]
    assert k.broker.counts_by_protocol()["amqp091"]["confirmed"] == 5


def test_direct_reply_to_rewrites_the_reply_to_property(kit: Kit) -> None:
    client = kit.open()
    server = kit.open()
    kit.declare(server, "rpc")
    kit.consume(server, "rpc", "srv", no_ack=True)
    asks = BasicProperties(reply_to="amq.rabbitmq.reply-to")
    err = kit.error(kit.open(), spec.BasicPublish(routing_key="rpc"), _content(props=asks))
    assert err.explanation == "fast reply consumer does not exist"
    kit.consume(client, "amq.rabbitmq.reply-to", "replies", no_ack=True)
    (req,) = delivered(kit.publish(client, "rpc", b"req", props=asks))
    reply_to = decode_properties(req.properties_bin).reply_to
    assert reply_to is not None
    assert reply_to.startswith("amq.rabbitmq.reply-to.")
    (resp,) = delivered(kit.publish(server, reply_to, b"resp"))
    assert (resp.conn_id, resp.channel, resp.body) == (*client, b"resp")
    assert resp.method.consumer_tag == "replies"
