"""Publishing on the core's API: mandatory bounces, size and missing exchanges, confirms
(delayed and refused ones too), direct reply-to, x-delay, and the publish pipeline's steps
(publish, enqueue, route)."""

from __future__ import annotations

from ringmq.core.config import BrokerConfig
from ringmq.core.delivery import REPLY_TO_PREFIX, REPLY_TO_QUEUE
from ringmq.core.effects import Bounce, Confirm, DeliverReply, Effect
from ringmq.core.errors import Condition
from ringmq.core.session import Session
from tests.unit.core.corekit import Core, bodies


def _confirms(effects: list[Effect]) -> list[tuple[int, bool, bool]]:
    """(seq, multiple, ok) of the `Confirm` effects, in order."""
    return [(e.seq, e.multiple, e.ok) for e in effects if isinstance(e, Confirm)]


def test_mandatory_bounce_oversize_and_missing_exchange() -> None:
    core = Core(BrokerConfig(name_seed=1, max_message_size=10))
    s = core.open()
    out = core.publish(s, "nobody", b"r", mandatory=True)
    (bounce,) = [e for e in out if isinstance(e, Bounce)]
    assert bounce.reason == "NO_ROUTE"
    assert (bounce.message.exchange, bounce.message.routing_key) == ("", "nobody")
    assert core.publish(s, "nobody", b"silent") == []
    err = core.refused(core.broker.publisher.check_size, 11)
    assert err.condition is Condition.PRECONDITION_FAILED
    assert "larger than configured max size 10" in err.explanation
    err = core.refused(core.publish, core.open(), "q", exchange="nox")
    assert err.text == "NOT_FOUND - no exchange 'nox' in vhost '/'"


def test_confirms_ack_nack_and_multi_queue_rule() -> None:
    core = Core()
    s = core.open()
    core.broker.confirms.select(s)
    core.declare(s, "open")
    core.declare(s, "full", {"x-max-length": 1, "x-overflow": "reject-publish"})
    core.exchange(s, "fan", "fanout")
    core.bind(s, "open", "fan")
    core.bind(s, "full", "fan")
    assert _confirms(core.publish(s, "", exchange="fan")) == [(1, False, True)]
    assert _confirms(core.publish(s, "", exchange="fan")) == [(2, False, False)]
    assert core.queue("open").ready_count == 2  # the copy is kept where accepted
    assert core.queue("full").ready_count == 1
    assert _confirms(core.publish(s, "unroutable")) == [(3, False, True)]


def test_delayed_confirms_coalesce_when_storage_catches_up() -> None:
    core = Core(BrokerConfig(name_seed=1, delay_persistent_confirms=True))
    b = core.broker
    s = core.open()
    b.confirms.select(s)
    core.declare(s, "d", durable=True)
    for _ in range(3):
        assert _confirms(core.publish(s, "d", persistent=True)) == []
    chan = (s.conn_id, s.channel)
    assert b.drain_unconfirmed() == [(*chan, 1), (*chan, 2), (*chan, 3)]
    assert b.drain_unconfirmed() == []
    assert _confirms(b.confirm_stored(*chan, [1, 2, 3])) == [(3, True, True)]
    assert _confirms(core.publish(s, "d")) == [(4, False, True)]
    # messages confirmed, as RabbitMQ counts them: the one multiple ack counts three
    assert b.stats["confirmed"] == 4


def test_direct_reply_to_reaches_the_reply_consumer_of_the_named_session() -> None:
    core = Core()
    client = core.open()
    server = core.open()
    core.declare(server, "rpc")
    core.consume(server, "rpc", "srv", no_ack=True)
    core.consume(client, REPLY_TO_QUEUE, "replies", no_ack=True)
    assert client.reply_to_token is not None
    reply_to = REPLY_TO_PREFIX + client.reply_to_token
    assert bodies(core.publish(client, "rpc", b"req")) == [b"req"]
    (resp,) = [e for e in core.publish(server, reply_to, b"resp") if isinstance(e, DeliverReply)]
    assert (resp.conn_id, resp.channel, resp.message.body) == (
        client.conn_id,
        client.channel,
        b"resp",
    )
    assert resp.consumer_tag == "replies"
    assert core.publish(server, REPLY_TO_PREFIX + "nobody", b"lost") == []


def test_x_delay_header_on_a_plain_queue_is_scheduled_by_the_engine() -> None:
    core = Core()
    s = core.open()
    core.declare(s, "q")
    core.consume(s, "q", "c", no_ack=True)
    assert bodies(core.publish(s, "q", b"later", headers={"x-delay": 100})) == []
    deadline = core.broker.next_deadline_ms()
    assert deadline is not None
    assert deadline <= core.now + 100
    assert bodies(core.tick(100)) == [b"later"]


def test_a_refused_publish_is_confirmed_negatively_with_the_reason() -> None:
    address_settings = {"full.fail": {"address-full-policy": "FAIL", "max-size-messages": 1}}
    core = Core(BrokerConfig(name_seed=7, address_settings=address_settings))
    s = core.open()
    core.declare(s, "capped", {"x-max-length": 1, "x-overflow": "reject-publish"})
    core.declare(s, "full.fail")
    core.broker.confirms.select(s)
    reasons = []
    for queue in ("capped", "capped", "full.fail", "full.fail"):
        reasons += [(e.ok, e.reason) for e in core.publish(s, queue) if isinstance(e, Confirm)]
    assert reasons == [(True, None), (False, "overflow"), (True, None), (False, "address-full")]


def test_the_publish_pipeline_answers_each_publish_with_its_outcome() -> None:
    from ringmq.core.message import Message

    core = Core()
    session = core.open()
    core.declare(session, "capped", {"x-max-length": 1, "x-overflow": "reject-publish"})
    broker = core.broker
    publisher = broker.publisher

    def publish(exchange: str, rk: str) -> str:
        vh, x = publisher.exchange_for(session, exchange)
        msg = Message(exchange, rk, b"\x00\x00", b"x", timestamp_ms=core.now)
        with broker.call(core.now):
            return publisher.publish(
                msg, session=session, vhost=vh, exchange=x, now_ms=core.now
            ).outcome

    assert publish("", "capped") == "accepted"
    assert publish("", "capped") == "overflow"
    assert publish("", "nowhere") == "unroutable"
    assert publish("amq.direct", "nowhere") == "unroutable"
    broker.transactions.select(session)
    assert publish("", "capped") == "buffered"


def test_enqueue_puts_a_message_into_the_queues_it_names_only() -> None:
    # The per-queue step alone (MQTT's retained messages): no routing, no counting.
    from ringmq.core.message import Message

    core = Core()
    s = core.open()
    core.declare(s, "named")
    core.declare(s, "bound")
    core.bind(s, "bound", "amq.fanout")
    core.declare(s, "capped", {"x-max-length": 1, "x-overflow": "reject-publish"})
    broker = core.broker
    vh = broker.vhosts["/"]
    x = vh.exchanges["amq.fanout"]
    publisher = broker.publisher

    def enqueue(*names: str) -> tuple[str | None, bool]:
        msg = Message("amq.fanout", "", b"\x00\x00", b"x", timestamp_ms=core.now)
        queues = tuple(vh.queues[n] for n in names)
        with broker.call(core.now):
            done = publisher.enqueue(msg, vhost=vh, exchange=x, queues=queues, now_ms=core.now)
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

    core = Core()
    session = core.open()
    core.declare(session, "q", durable=True)
    broker = core.broker
    broker.transactions.select(session)
    vh = broker.vhosts["/"]
    published = broker.stats["published"]
    msg = Message("", "q", b"\x00\x00", b"x", persistent=True, timestamp_ms=core.now)

    def route(msg: Message, session: Session | None) -> tuple[str | None, bool]:
        done = broker.publisher.route(
            msg, vhost=vh, exchange=vh.exchanges[""], now_ms=core.now, session=session
        )
        return done.refused, done.stored

    with broker.call(core.now):
        assert route(msg, session) == (
            None,
            True,  # no store: a persistent message on a durable queue counts as stored
        )
        unroutable = Message("", "nowhere", b"\x00\x00", b"x", timestamp_ms=core.now)
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
