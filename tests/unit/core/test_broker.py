"""Broker semantics through `Broker.handle` with spec method objects (reply codes and texts)."""

from __future__ import annotations

import pytest

from ringmq.adapters.amqp091 import check_login
from ringmq.amqp import spec
from ringmq.amqp.frames import RawContent
from ringmq.amqp.properties import BasicProperties, decode_properties, encode_properties
from ringmq.amqp.reply_codes import AMQPError, ReplyCode
from ringmq.amqp.tables import encode_table
from ringmq.core.broker import Broker
from ringmq.core.config import BrokerConfig, PermissionConfig, PolicyConfig, UserConfig
from ringmq.core.effects import CloseConnection, Deliver, SendContent, SendMethod
from ringmq.core.errors import BrokerError, Condition
from tests.unit.core.kit import Kit, bodies, delivered, methods, of_type


@pytest.fixture
def kit() -> Kit:
    return Kit()


# ---------------------------------------------------------------- login and vhost access
def test_plain_and_amqplain_login() -> None:
    b = Broker()
    assert check_login(b, "PLAIN", b"\x00guest\x00guest", True) == "guest"
    amqplain = encode_table({"LOGIN": "guest", "PASSWORD": "guest"})[4:]
    assert check_login(b, "AMQPLAIN", amqplain, True) == "guest"


def test_bad_password_and_remote_guest_are_refused() -> None:
    b = Broker()
    with pytest.raises(AMQPError) as bad:
        check_login(b, "PLAIN", b"\x00guest\x00nope", True)
    assert bad.value.code is ReplyCode.ACCESS_REFUSED
    assert "Login was refused using authentication mechanism PLAIN" in bad.value.reply_text
    with pytest.raises(AMQPError) as remote:
        check_login(b, "PLAIN", b"\x00guest\x00guest", False)
    assert remote.value.code is ReplyCode.ACCESS_REFUSED
    with pytest.raises(AMQPError) as mech:
        check_login(b, "EXTERNAL", b"", True)
    assert mech.value.code is ReplyCode.COMMAND_INVALID


def test_configured_user_logs_in_remotely_and_vhost_access_is_checked() -> None:
    cfg = BrokerConfig(
        users=[UserConfig("app", password="s3cret")],
        vhosts=["/", "prod"],
        permissions=[PermissionConfig("app", "prod")],
    )
    b = Broker(cfg)
    assert check_login(b, "PLAIN", b"\x00app\x00s3cret", False) == "app"
    b.connection_opened(1, "app", "prod", "10.0.0.1:5", {}, 0)
    with pytest.raises(BrokerError) as denied:
        b.connection_opened(2, "app", "/", "10.0.0.1:6", {}, 0)
    assert denied.value.condition is Condition.NOT_ALLOWED
    assert denied.value.explanation == "access to vhost '/' refused for user 'app'"
    with pytest.raises(BrokerError) as missing:
        b.connection_opened(3, "app", "nope", "10.0.0.1:7", {}, 0)
    assert missing.value.condition is Condition.NOT_ALLOWED


def test_permission_regexes_refuse_with_rabbitmq_text() -> None:
    cfg = BrokerConfig(
        users=[UserConfig("u", password="p")],
        permissions=[PermissionConfig("u", "/", configure="^own-", write=".*", read="^own-")],
    )
    k = Kit(cfg)
    ch = k.channel(k.connect("u"))
    k.declare(ch, "own-q")
    err = k.error(ch, spec.QueueDeclare(queue="other"))
    assert err.code is ReplyCode.ACCESS_REFUSED
    assert err.explanation == "configure access to queue 'other' in vhost '/' refused for user 'u'"
    assert (err.class_id, err.method_id) == (50, 10)


def _perm_kit(write: str, read: str) -> tuple[Kit, tuple[int, int]]:
    cfg = BrokerConfig(
        users=[UserConfig("u", password="p")],
        permissions=[PermissionConfig("u", "/", configure=".*", write=write, read=read)],
    )
    k = Kit(cfg)
    return k, k.channel(k.connect("u"))


def test_dead_letter_exchange_on_declare_needs_write_on_it_and_read_on_the_queue() -> None:
    k, ch = _perm_kit(write="^dlx-ok$", read="^q-")
    k.declare(ch, "q-1", arguments={"x-dead-letter-exchange": "dlx-ok"})
    err = k.error(ch, spec.QueueDeclare(queue="q-2", arguments={"x-dead-letter-exchange": "dlx"}))
    assert err.code is ReplyCode.ACCESS_REFUSED
    assert err.explanation == "write access to exchange 'dlx' in vhost '/' refused for user 'u'"
    ch = k.channel(k.connect("u"))
    args = {"x-dead-letter-exchange": "dlx-ok"}
    err = k.error(ch, spec.QueueDeclare(queue="other", arguments=args))
    assert err.code is ReplyCode.ACCESS_REFUSED
    assert err.explanation == "read access to queue 'other' in vhost '/' refused for user 'u'"
    # the default exchange as DLX is checked as amq.default
    ch = k.channel(k.connect("u"))
    err = k.error(ch, spec.QueueDeclare(queue="q-3", arguments={"x-dead-letter-exchange": ""}))
    assert "exchange 'amq.default'" in err.explanation
    ch = k.channel(k.connect("u"))
    err = k.error(ch, spec.QueueDeclare(queue="q-4", arguments={"x-dead-letter-exchange": 5}))
    assert err.code is ReplyCode.PRECONDITION_FAILED
    assert err.explanation == "invalid type 'signedint' for arg 'x-dead-letter-exchange'"
    assert "q-2" not in k.broker.vhosts["/"].queues


def test_alternate_exchange_on_declare_needs_write_on_it_and_read_on_the_exchange() -> None:
    k, ch = _perm_kit(write="^ae-ok$", read="^x-")
    k.call(ch, spec.ExchangeDeclare(exchange="x-1", arguments={"alternate-exchange": "ae-ok"}))
    decl = spec.ExchangeDeclare(exchange="x-2", arguments={"alternate-exchange": "ae"})
    err = k.error(ch, decl)
    assert err.code is ReplyCode.ACCESS_REFUSED
    assert err.explanation == "write access to exchange 'ae' in vhost '/' refused for user 'u'"
    assert (err.class_id, err.method_id) == (40, 10)
    ch = k.channel(k.connect("u"))
    decl = spec.ExchangeDeclare(exchange="y", arguments={"alternate-exchange": "ae-ok"})
    err = k.error(ch, decl)
    assert err.explanation == "read access to exchange 'y' in vhost '/' refused for user 'u'"
    assert "x-2" not in k.broker.vhosts["/"].exchanges
    # without the argument no read or write is needed
    ch = k.channel(k.connect("u"))
    k.call(ch, spec.ExchangeDeclare(exchange="plain"))


# ---------------------------------------------------------------- queues
def test_queue_declare_passive_and_reserved_names(kit: Kit) -> None:
    ch = kit.open()
    err = kit.error(ch, spec.QueueDeclare(queue="nope", passive=True))
    assert err.code is ReplyCode.NOT_FOUND
    assert err.reply_text == "NOT_FOUND - no queue 'nope' in vhost '/'"
    ch2 = kit.open()
    err = kit.error(ch2, spec.QueueDeclare(queue="amq.mine"))
    assert err.code is ReplyCode.ACCESS_REFUSED
    assert "reserved prefix 'amq.*'" in err.explanation


def test_server_named_queues_are_deterministic_with_a_seed() -> None:
    def names() -> list[str]:
        k = Kit(BrokerConfig(name_seed=42))
        ch = k.open()
        return [of_type(k.declare(ch, ""), spec.QueueDeclareOk)[0].queue for _ in range(3)]

    first = names()
    assert first == names()
    assert all(n.startswith("amq.gen-") for n in first)
    assert len(set(first)) == 3


def test_redeclare_with_different_arguments_is_406(kit: Kit) -> None:
    ch = kit.open()
    kit.declare(ch, "q", arguments={"x-max-length": 10})
    kit.declare(ch, "q", arguments={"x-max-length": 10})  # equivalent: fine
    err = kit.error(ch, spec.QueueDeclare(queue="q", arguments={"x-max-length": 20}))
    assert err.code is ReplyCode.PRECONDITION_FAILED
    assert err.explanation == (
        "inequivalent arg 'x-max-length' for queue 'q' in vhost '/': received the value '20' "
        "of type 'signedint' but current is the value '10' of type 'signedint'"
    )
    ch = kit.open()
    err = kit.error(ch, spec.QueueDeclare(queue="q", durable=True, arguments={"x-max-length": 10}))
    assert "inequivalent arg 'durable'" in err.explanation
    ch = kit.open()
    err = kit.error(ch, spec.QueueDeclare(queue="q"))
    assert "received none but current is the value '10'" in err.explanation


def test_invalid_queue_argument_is_406(kit: Kit) -> None:
    ch = kit.open()
    err = kit.error(ch, spec.QueueDeclare(queue="q", arguments={"x-max-length": -1}))
    assert err.code is ReplyCode.PRECONDITION_FAILED


def test_exclusive_queue_is_locked_for_other_connections_and_goes_with_its_owner(kit: Kit) -> None:
    owner = kit.open()
    kit.declare(owner, "ex", exclusive=True)
    other = kit.open()
    for method in (
        spec.QueueDeclare(queue="ex", exclusive=True),
        spec.QueueDeclare(queue="ex", passive=True),
        spec.BasicConsume(queue="ex"),
        spec.BasicGet(queue="ex"),
        spec.QueuePurge(queue="ex"),
    ):
        err = kit.error(other, method)
        assert err.code is ReplyCode.RESOURCE_LOCKED
        other = kit.open()
    kit.broker.connection_closed(owner[0], kit.now)
    err = kit.error(other, spec.QueueDeclare(queue="ex", passive=True))
    assert err.code is ReplyCode.NOT_FOUND


def test_auto_delete_queue_goes_when_its_last_consumer_cancels(kit: Kit) -> None:
    ch = kit.open()
    kit.declare(ch, "ad", auto_delete=True)
    kit.consume(ch, "ad", "c1")
    kit.consume(ch, "ad", "c2")
    kit.call(ch, spec.BasicCancel(consumer_tag="c1"))
    assert "ad" in kit.broker.vhosts["/"].queues
    kit.call(ch, spec.BasicCancel(consumer_tag="c2"))
    assert "ad" not in kit.broker.vhosts["/"].queues


def test_x_expires_deletes_an_unused_queue_on_tick(kit: Kit) -> None:
    ch = kit.open()
    kit.declare(ch, "tmp", arguments={"x-expires": 1000})
    assert kit.broker.next_deadline_ms() == kit.now + 1000
    kit.tick(999)
    assert "tmp" in kit.broker.vhosts["/"].queues
    kit.tick(1)
    assert "tmp" not in kit.broker.vhosts["/"].queues


def test_delete_if_unused_if_empty_and_cancel_notification(kit: Kit) -> None:
    ch = kit.open()
    kit.declare(ch, "q")
    kit.consume(ch, "q", "c")
    err = kit.error(ch, spec.QueueDelete(queue="q", if_unused=True))
    assert err.code is ReplyCode.PRECONDITION_FAILED
    assert err.explanation == "queue 'q' in vhost '/' in use"
    ch = kit.open()
    kit.declare(ch, "full")
    kit.publish(ch, "full")
    err = kit.error(ch, spec.QueueDelete(queue="full", if_empty=True))
    assert err.explanation == "queue 'full' in vhost '/' not empty"
    ch = kit.open()
    consumer_chan = (1, 1)
    out = kit.call(ch, spec.QueueDelete(queue="q"))
    cancels = [
        e for e in out if isinstance(e, SendMethod) and isinstance(e.method, spec.BasicCancel)
    ]
    assert [(c.conn_id, c.channel, c.method.consumer_tag) for c in cancels] == [
        (*consumer_chan, "c")
    ]
    assert of_type(out, spec.QueueDeleteOk) == [spec.QueueDeleteOk(message_count=0)]


def test_purge_reports_count(kit: Kit) -> None:
    ch = kit.open()
    kit.declare(ch, "q")
    for _ in range(3):
        kit.publish(ch, "q")
    assert of_type(kit.call(ch, spec.QueuePurge(queue="q")), spec.QueuePurgeOk) == [
        spec.QueuePurgeOk(message_count=3)
    ]


# ---------------------------------------------------------------- exchanges
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


# ---------------------------------------------------------------- publishing
def test_mandatory_return_immediate_oversize_and_missing_exchange() -> None:
    k = Kit(BrokerConfig(name_seed=1, max_message_size=10))
    ch = k.open()
    out = k.publish(ch, "nobody", b"r", mandatory=True)
    ret = delivered(out)
    assert len(ret) == 1
    assert ret[0].method == spec.BasicReturn(
        reply_code=312, reply_text="NO_ROUTE", exchange="", routing_key="nobody"
    )
    assert k.publish(ch, "nobody", b"silent") == []
    err = k.error(ch, spec.BasicPublish(routing_key="q", immediate=True), _content())
    assert err.code is ReplyCode.NOT_IMPLEMENTED
    ch = k.open()
    err = k.error(ch, spec.BasicPublish(routing_key="q"), _content(b"x" * 11))
    assert err.code is ReplyCode.PRECONDITION_FAILED
    assert "larger than configured max size 10" in err.explanation
    ch = k.open()
    err = k.error(ch, spec.BasicPublish(exchange="nox", routing_key="q"), _content())
    assert err.reply_text == "NOT_FOUND - no exchange 'nox' in vhost '/'"
    assert (err.class_id, err.method_id) == (60, 40)


def test_confirms_ack_nack_and_multi_queue_rule(kit: Kit) -> None:
    ch = kit.open()
    kit.call(ch, spec.ConfirmSelect())
    kit.declare(ch, "open")
    kit.declare(ch, "full", arguments={"x-max-length": 1, "x-overflow": "reject-publish"})
    kit.call(ch, spec.ExchangeDeclare(exchange="fan", type="fanout"))
    kit.call(ch, spec.QueueBind(queue="open", exchange="fan"))
    kit.call(ch, spec.QueueBind(queue="full", exchange="fan"))
    assert of_type(kit.publish(ch, "", exchange="fan"), spec.BasicAck) == [
        spec.BasicAck(delivery_tag=1)
    ]
    out = kit.publish(ch, "", exchange="fan")
    assert of_type(out, spec.BasicNack) == [spec.BasicNack(delivery_tag=2)]
    queues = kit.broker.vhosts["/"].queues
    assert queues["open"].queue.ready_count == 2  # the copy is kept where accepted
    assert queues["full"].queue.ready_count == 1
    assert of_type(kit.publish(ch, "unroutable"), spec.BasicAck) == [spec.BasicAck(delivery_tag=3)]


def test_delayed_confirms_coalesce_when_storage_catches_up() -> None:
    k = Kit(BrokerConfig(name_seed=1, delay_persistent_confirms=True))
    ch = k.open()
    k.call(ch, spec.ConfirmSelect())
    k.declare(ch, "d", durable=True)
    persistent = BasicProperties(delivery_mode=2)
    for _ in range(3):
        assert of_type(k.publish(ch, "d", props=persistent), spec.BasicAck) == []
    assert k.broker.drain_unconfirmed() == [(*ch, 1), (*ch, 2), (*ch, 3)]
    assert k.broker.drain_unconfirmed() == []
    out = k.broker.confirm_stored(ch[0], ch[1], [1, 2, 3])
    assert of_type(out, spec.BasicAck) == [spec.BasicAck(delivery_tag=3, multiple=True)]
    assert of_type(k.publish(ch, "d"), spec.BasicAck) == [spec.BasicAck(delivery_tag=4)]
    # messages confirmed, as RabbitMQ counts them: the one multiple ack counts three
    assert k.broker.stats["confirmed"] == 4
    assert k.broker.counts_by_protocol()["amqp091"]["confirmed"] == 4


def test_direct_reply_to(kit: Kit) -> None:
    client = kit.open()
    server = kit.open()
    kit.declare(server, "rpc")
    kit.consume(server, "rpc", "srv", no_ack=True)
    err = kit.error(
        kit.open(),
        spec.BasicPublish(routing_key="rpc"),
        _props_content(BasicProperties(reply_to="amq.rabbitmq.reply-to")),
    )
    assert err.explanation == "fast reply consumer does not exist"
    kit.consume(client, "amq.rabbitmq.reply-to", "replies", no_ack=True)
    out = kit.publish(
        client, "rpc", b"req", props=BasicProperties(reply_to="amq.rabbitmq.reply-to")
    )
    (req,) = delivered(out)
    reply_to = decode_properties(req.properties_bin).reply_to
    assert reply_to is not None
    assert reply_to.startswith("amq.rabbitmq.reply-to.")
    out = kit.publish(server, reply_to, b"resp")
    (resp,) = delivered(out)
    assert (resp.conn_id, resp.channel, resp.body) == (*client, b"resp")
    assert resp.method.consumer_tag == "replies"


def _props_content(props: BasicProperties, body: bytes = b"x") -> RawContent:
    return RawContent(60, len(body), encode_properties(props), body)


# ---------------------------------------------------------------- consuming
def test_consume_replies_before_deliveries_and_round_robin(kit: Kit) -> None:
    ch = kit.open()
    kit.declare(ch, "q")
    for i in range(4):
        kit.publish(ch, "q", str(i).encode())
    out = kit.consume(ch, "q", "a", no_ack=True)
    assert isinstance(methods(out)[0], spec.BasicConsumeOk)
    assert bodies(out) == [b"0", b"1", b"2", b"3"]
    kit.consume(ch, "q", "b", no_ack=True)
    tags = []
    for i in range(4):
        (d,) = delivered(kit.publish(ch, "q", str(i).encode()))
        tags.append(d.method.consumer_tag)
    assert tags == ["a", "b", "a", "b"]


def test_exclusive_consumer_and_duplicate_tag(kit: Kit) -> None:
    ch = kit.open()
    kit.declare(ch, "q")
    kit.consume(ch, "q", "c1")
    err = kit.error(kit.open(), spec.BasicConsume(queue="q", exclusive=True))
    assert err.code is ReplyCode.ACCESS_REFUSED
    assert err.explanation == "queue 'q' in vhost '/' in exclusive use"
    err = kit.error(ch, spec.BasicConsume(queue="q", consumer_tag="c1"))
    assert err.code is ReplyCode.NOT_ALLOWED
    assert err.explanation == "attempt to reuse consumer tag 'c1'"
    ch2 = kit.open()
    kit.declare(ch2, "solo")
    kit.consume(ch2, "solo", "only", exclusive=True)
    err = kit.error(kit.open(), spec.BasicConsume(queue="solo"))
    assert err.code is ReplyCode.ACCESS_REFUSED


def test_consumer_priorities(kit: Kit) -> None:
    ch = kit.open()
    kit.declare(ch, "q")
    kit.call(ch, spec.BasicQos(prefetch_count=1))
    kit.consume(ch, "q", "low", arguments={"x-priority": 1})
    kit.consume(ch, "q", "high", arguments={"x-priority": 10})
    first = delivered(kit.publish(ch, "q"))
    second = delivered(kit.publish(ch, "q"))
    assert [d.method.consumer_tag for d in first + second] == ["high", "low"]


def test_single_active_consumer(kit: Kit) -> None:
    ch = kit.open()
    kit.declare(ch, "sac", arguments={"x-single-active-consumer": True})
    kit.consume(ch, "sac", "one", no_ack=True)
    kit.consume(ch, "sac", "two", no_ack=True)
    tags = [delivered(kit.publish(ch, "sac"))[0].method.consumer_tag for _ in range(3)]
    assert tags == ["one", "one", "one"]
    kit.call(ch, spec.BasicCancel(consumer_tag="one"))
    assert delivered(kit.publish(ch, "sac"))[0].method.consumer_tag == "two"


def test_basic_get_and_message_count(kit: Kit) -> None:
    ch = kit.open()
    kit.declare(ch, "q")
    assert of_type(kit.call(ch, spec.BasicGet(queue="q")), spec.BasicGetEmpty)
    kit.publish(ch, "q", b"a")
    kit.publish(ch, "q", b"b")
    (got,) = delivered(kit.call(ch, spec.BasicGet(queue="q")))
    assert got.method == spec.BasicGetOk(
        delivery_tag=1, redelivered=False, exchange="", routing_key="q", message_count=1
    )
    assert got.body == b"a"


def test_unknown_delivery_tag_is_406(kit: Kit) -> None:
    ch = kit.open()
    err = kit.error(ch, spec.BasicAck(delivery_tag=5))
    assert err.code is ReplyCode.PRECONDITION_FAILED
    assert err.reply_text == "PRECONDITION_FAILED - unknown delivery tag 5"
    assert (err.class_id, err.method_id) == (60, 80)


def test_multiple_ack_nack_requeue_and_recover(kit: Kit) -> None:
    ch = kit.open()
    kit.declare(ch, "q")
    for i in range(5):
        kit.publish(ch, "q", str(i).encode())
    out = kit.consume(ch, "q", "c")
    assert bodies(out) == [b"0", b"1", b"2", b"3", b"4"]
    kit.call(ch, spec.BasicAck(delivery_tag=2, multiple=True))
    out = kit.call(ch, spec.BasicNack(delivery_tag=3, requeue=True))
    (again,) = delivered(out)
    assert (again.body, again.method.redelivered, again.method.delivery_tag) == (b"2", True, 6)
    out = kit.call(ch, spec.BasicRecover(requeue=True))
    assert isinstance(methods(out)[0], spec.BasicRecoverOk)
    assert sorted(bodies(out)) == [b"2", b"3", b"4"]
    err = kit.error(ch, spec.BasicRecover(requeue=False))
    assert err.code is ReplyCode.NOT_IMPLEMENTED


def test_prefetch_per_consumer_and_global(kit: Kit) -> None:
    ch = kit.open()
    kit.declare(ch, "q")
    for _ in range(10):
        kit.publish(ch, "q")
    kit.call(ch, spec.BasicQos(prefetch_count=2))
    out = kit.consume(ch, "q", "c")
    assert len(bodies(out)) == 2
    out = kit.call(ch, spec.BasicAck(delivery_tag=1))
    assert len(bodies(out)) == 1
    ch2 = kit.open()
    kit.call(ch2, spec.BasicQos(prefetch_count=3, global_=True))
    out = kit.consume(ch2, "q", "g1") + kit.consume(ch2, "q", "g2")
    assert len(bodies(out)) == 3
    err = kit.error(ch2, spec.BasicQos(prefetch_size=10))
    assert err.code is ReplyCode.NOT_IMPLEMENTED


def test_channel_close_requeues_and_set_writable_pauses(kit: Kit) -> None:
    ch = kit.open()
    kit.declare(ch, "q")
    kit.publish(ch, "q", b"m")
    assert bodies(kit.consume(ch, "q", "c")) == [b"m"]
    other = kit.open()
    kit.consume(other, "q", "d")
    out = kit.broker.channel_closed(ch[0], ch[1], kit.now)
    (d,) = delivered(out)
    assert (d.conn_id, d.method.consumer_tag, d.method.redelivered) == (other[0], "d", True)
    kit.broker.set_writable(other[0], False, kit.now)
    assert bodies(kit.publish(kit.open(), "q", b"held")) == []
    assert bodies(kit.broker.set_writable(other[0], True, kit.now)) == [b"held"]


def test_dead_letter_on_reject_with_x_death(kit: Kit) -> None:
    ch = kit.open()
    kit.call(ch, spec.ExchangeDeclare(exchange="dlx", type="fanout"))
    kit.declare(ch, "dead")
    kit.call(ch, spec.QueueBind(queue="dead", exchange="dlx"))
    kit.declare(ch, "work", arguments={"x-dead-letter-exchange": "dlx"})
    kit.publish(ch, "work", b"bad")
    kit.consume(ch, "work", "c")
    kit.call(ch, spec.BasicReject(delivery_tag=1, requeue=False))
    (msg,) = kit.broker.vhosts["/"].queues["dead"].queue.ready_messages()
    headers = decode_properties(msg.properties_bin).headers or {}
    (death,) = headers["x-death"]
    assert death["reason"] == "rejected"
    assert death["queue"] == "work"
    assert death["count"] == 1
    assert death["routing-keys"] == ["work"]
    assert headers["x-first-death-reason"] == "rejected"


def test_expired_dead_letter_cycle_is_dropped(kit: Kit) -> None:
    ch = kit.open()
    kit.declare(
        ch,
        "a",
        arguments={
            "x-message-ttl": 10,
            "x-dead-letter-exchange": "",
            "x-dead-letter-routing-key": "b",
        },
    )
    kit.declare(
        ch,
        "b",
        arguments={
            "x-message-ttl": 10,
            "x-dead-letter-exchange": "",
            "x-dead-letter-routing-key": "a",
        },
    )
    kit.publish(ch, "a", b"ttl")
    queues = kit.broker.vhosts["/"].queues
    for _ in range(6):
        kit.tick(20)
    assert queues["a"].queue.ready_count + queues["b"].queue.ready_count == 0


# ---------------------------------------------------------------- transactions
def test_tx_commit_and_rollback(kit: Kit) -> None:
    ch = kit.open()
    kit.declare(ch, "q")
    kit.publish(ch, "q", b"pre")
    kit.call(ch, spec.TxSelect())
    kit.publish(ch, "q", b"t1")
    assert kit.broker.vhosts["/"].queues["q"].queue.ready_count == 1
    assert of_type(kit.call(ch, spec.TxCommit()), spec.TxCommitOk)
    assert kit.broker.vhosts["/"].queues["q"].queue.ready_count == 2
    kit.publish(ch, "q", b"discarded")
    (got,) = delivered(kit.call(ch, spec.BasicGet(queue="q")))
    kit.call(ch, spec.BasicAck(delivery_tag=got.method.delivery_tag))
    assert of_type(kit.call(ch, spec.TxRollback()), spec.TxRollbackOk)
    q = kit.broker.vhosts["/"].queues["q"].queue
    assert [m.body for m in q.ready_messages()] == [b"pre", b"t1"]


def test_tx_commit_is_atomic_under_reject_limits(kit: Kit) -> None:
    ch = kit.open()
    kit.declare(ch, "small", arguments={"x-max-length": 2, "x-overflow": "reject-publish"})
    kit.declare(ch, "big")
    kit.call(ch, spec.TxSelect())
    for _ in range(3):
        kit.publish(ch, "small")
    kit.publish(ch, "big")
    err = kit.error(ch, spec.TxCommit())
    assert err.code is ReplyCode.PRECONDITION_FAILED
    queues = kit.broker.vhosts["/"].queues
    assert queues["small"].queue.ready_count == 0
    assert queues["big"].queue.ready_count == 0


def test_tx_and_confirm_modes_exclude_each_other(kit: Kit) -> None:
    ch = kit.open()
    kit.call(ch, spec.ConfirmSelect())
    assert kit.error(ch, spec.TxSelect()).code is ReplyCode.PRECONDITION_FAILED
    ch = kit.open()
    kit.call(ch, spec.TxSelect())
    assert kit.error(ch, spec.ConfirmSelect()).code is ReplyCode.PRECONDITION_FAILED
    ch = kit.open()
    assert kit.error(ch, spec.TxCommit()).code is ReplyCode.PRECONDITION_FAILED


def test_tx_rollback_returns_unacked_to_ring_head_artemis_style(kit: Kit) -> None:
    ch = kit.open()
    kit.declare(ch, "foo", arguments={"x-ring-size": 3})
    kit.call(ch, spec.TxSelect())
    kit.consume(ch, "foo", "c")
    for body in (b"A", b"B", b"C", b"D"):
        kit.publish(ch, "foo", body)
        kit.call(ch, spec.TxCommit())
    kit.call(ch, spec.BasicCancel(consumer_tag="c"))
    kit.call(ch, spec.TxRollback())
    q = kit.broker.vhosts["/"].queues["foo"].queue
    assert [m.body for m in q.ready_messages()] == [b"B", b"C", b"D"]


def test_connection_closed_filters_its_own_effects(kit: Kit) -> None:
    ch = kit.open()
    kit.declare(ch, "q")
    out = kit.broker.connection_closed(ch[0], kit.now)
    assert all(e.conn_id != ch[0] for e in out)
    assert not any(isinstance(e, CloseConnection | SendContent | Deliver) for e in out)
