"""Publishing through the broker: mandatory returns, immediate, size and missing exchanges,
confirms (delayed and refused ones too), direct reply-to, x-delay, and the publish pipeline's
steps (publish, enqueue, route)."""

from __future__ import annotations

from ringmq.amqp import spec
from ringmq.amqp.frames import RawContent
from ringmq.amqp.properties import BasicProperties, decode_properties, encode_properties
from ringmq.amqp.reply_codes import ReplyCode
from ringmq.core.config import BrokerConfig
from ringmq.core.effects import Confirm
from ringmq.core.session import Session
from tests.unit.adapters.amqp091.kit import Kit, bodies, delivered, of_type


def _content(body: bytes = b"x") -> RawContent:
    return RawContent(60, len(body), b"\x00\x00", body)


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


def test_x_delay_header_on_a_plain_queue_is_scheduled_by_the_engine() -> None:
    kit = Kit()
    ch = kit.open()
    kit.declare(ch, "q")
    kit.consume(ch, "q", "c", no_ack=True)
    out = kit.publish(ch, "q", b"later", props=BasicProperties(headers={"x-delay": 100}))
    assert bodies(out) == []
    deadline = kit.broker.next_deadline_ms()
    assert deadline is not None
    assert deadline <= kit.now + 100
    assert bodies(kit.tick(100)) == [b"later"]


def test_a_refused_publish_is_confirmed_negatively_with_the_reason() -> None:
    address_settings = {"full.fail": {"address-full-policy": "FAIL", "max-size-messages": 1}}
    kit = Kit(BrokerConfig(name_seed=7, address_settings=address_settings))
    ch = kit.open()
    kit.declare(ch, "capped", arguments={"x-max-length": 1, "x-overflow": "reject-publish"})
    kit.declare(ch, "full.fail")
    kit.call(ch, spec.ConfirmSelect())
    reasons = []
    for queue in ("capped", "capped", "full.fail", "full.fail"):
        pb = encode_properties(BasicProperties())
        method = spec.BasicPublish(exchange="", routing_key=queue)
        effects = kit.amqp.handle(ch[0], ch[1], method, RawContent(60, 1, pb, b"x"), kit.now)
        reasons += [(e.ok, e.reason) for e in effects if isinstance(e, Confirm)]
    assert reasons == [(True, None), (False, "overflow"), (True, None), (False, "address-full")]


def test_the_publish_pipeline_answers_each_publish_with_its_outcome() -> None:
    from ringmq.core.message import Message

    kit = Kit()
    ch = kit.open()
    kit.declare(ch, "capped", arguments={"x-max-length": 1, "x-overflow": "reject-publish"})
    broker = kit.broker
    session = broker.session(*ch)
    assert session is not None
    publisher = broker.publisher

    def publish(exchange: str, rk: str) -> str:
        vh, x = publisher.exchange_for(session, exchange)
        msg = Message(exchange, rk, b"\x00\x00", b"x", timestamp_ms=kit.now)
        with broker.call(kit.now):
            return publisher.publish(
                msg, session=session, vhost=vh, exchange=x, now_ms=kit.now
            ).outcome

    assert publish("", "capped") == "accepted"
    assert publish("", "capped") == "overflow"
    assert publish("", "nowhere") == "unroutable"
    assert publish("amq.direct", "nowhere") == "unroutable"
    kit.call(ch, spec.TxSelect())
    assert publish("", "capped") == "buffered"


def test_enqueue_puts_a_message_into_the_queues_it_names_only() -> None:
    # The per-queue step alone (MQTT's retained messages): no routing, no counting.
    from ringmq.core.message import Message

    kit = Kit()
    ch = kit.open()
    kit.declare(ch, "named")
    kit.declare(ch, "bound")
    kit.call(ch, spec.QueueBind(queue="bound", exchange="amq.fanout"))
    kit.declare(ch, "capped", arguments={"x-max-length": 1, "x-overflow": "reject-publish"})
    broker = kit.broker
    vh = broker.vhosts["/"]
    x = vh.exchanges["amq.fanout"]
    publisher = broker.publisher

    def enqueue(*names: str) -> tuple[str | None, bool]:
        msg = Message("amq.fanout", "", b"\x00\x00", b"x", timestamp_ms=kit.now)
        queues = tuple(vh.queues[n] for n in names)
        with broker.call(kit.now):
            done = publisher.enqueue(msg, vhost=vh, exchange=x, queues=queues, now_ms=kit.now)
        return done.refused, done.stored

    published = broker.stats["published"]
    assert enqueue("named") == (None, False)
    assert enqueue("capped", "named") == (None, False)
    assert enqueue("capped") == ("overflow", False)
    assert enqueue() == (None, False)
    counts = {n: vh.queues[n].queue.message_count for n in ("named", "bound", "capped")}
    assert counts == {"named": 2, "bound": 0, "capped": 1}
    assert broker.stats["published"] == published


def test_route_runs_the_pipeline_without_classifying() -> None:
    # A transaction's commit, a batch, a due delayed message: routed and enqueued, not counted
    # again, not buffered by the tx session, persisted flag answered.
    from ringmq.core.message import Message

    kit = Kit()
    ch = kit.open()
    kit.declare(ch, "q", durable=True)
    kit.call(ch, spec.TxSelect())
    broker = kit.broker
    session = broker.session(*ch)
    assert session is not None
    vh = broker.vhosts["/"]
    published = broker.stats["published"]
    msg = Message("", "q", b"\x00\x00", b"x", persistent=True, timestamp_ms=kit.now)

    def route(msg: Message, session: Session | None) -> tuple[str | None, bool]:
        done = broker.publisher.route(
            msg, vhost=vh, exchange=vh.exchanges[""], now_ms=kit.now, session=session
        )
        return done.refused, done.stored

    with broker.call(kit.now):
        assert route(msg, session) == (
            None,
            True,  # no store: a persistent message on a durable queue counts as stored
        )
        unroutable = Message("", "nowhere", b"\x00\x00", b"x", timestamp_ms=kit.now)
        assert route(unroutable, None) == (None, False)
    assert vh.queues["q"].queue.message_count == 1
    assert broker.stats["published"] == published
    assert session.tx is not None
    assert session.tx.publishes == []


def test_publish_is_the_pipeline_with_keywords_only() -> None:
    # `Publisher.publish` is `Publisher.pipeline` at run time (one function: the core's
    # per-message callers pass its parameters by position); its keyword-only signature is a
    # stub for mypy in publish.py. The two must name the same parameters in the same order,
    # with the same annotations, defaults and result.
    import ast
    import inspect

    from ringmq.core import publish as module
    from ringmq.core.publish import Publisher

    assert Publisher.publish is Publisher.pipeline
    tree = ast.parse(inspect.getsource(module))
    (cls,) = [n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "Publisher"]
    defs = {n.name: n for n in ast.walk(cls) if isinstance(n, ast.FunctionDef)}

    def shape(f: ast.FunctionDef) -> tuple[list[str], list[str], list[str], str]:
        a = f.args
        params = [*a.args, *a.kwonlyargs]
        defaults = [*a.defaults, *[d for d in a.kw_defaults if d is not None]]
        return (
            [p.arg for p in params],
            [ast.unparse(p.annotation) if p.annotation else "" for p in params],
            [ast.unparse(d) for d in defaults],
            ast.unparse(f.returns) if f.returns else "",
        )

    stub = defs["publish"]
    assert shape(stub) == shape(defs["pipeline"])
    assert [p.arg for p in stub.args.args] == ["self", "msg"]  # the rest by keyword only
