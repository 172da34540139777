"""More broker rules: browse consumers, scheduled delivery, DLX variants, BLOCK, tx details."""

from __future__ import annotations

from ringmq.amqp import spec
from ringmq.amqp.frames import RawContent
from ringmq.amqp.properties import BasicProperties, decode_properties, encode_properties
from ringmq.amqp.reply_codes import ReplyCode
from ringmq.core.config import BrokerConfig
from ringmq.core.effects import Block, Confirm, Unblock
from ringmq.core.session import SettleKind
from tests.facade import admin_over
from tests.unit.core.test_broker_kit import Kit, bodies, delivered, of_type


def test_non_destructive_queue_gives_every_consumer_every_message() -> None:
    kit = Kit()
    ch = kit.open()
    kit.declare(ch, "nd", arguments={"x-non-destructive": True})
    kit.publish(ch, "nd", b"a")
    assert bodies(kit.consume(ch, "nd", "one", no_ack=True)) == [b"a"]
    other = kit.open()
    assert bodies(kit.consume(other, "nd", "two", no_ack=True)) == [b"a"]
    out = kit.publish(ch, "nd", b"b")
    assert sorted((d.method.consumer_tag, d.body) for d in delivered(out)) == [
        ("one", b"b"),
        ("two", b"b"),
    ]
    assert kit.broker.vhosts["/"].queues["nd"].queue.ready_count == 2


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


def test_reject_publish_dlx_nacks_and_dead_letters_maxlen() -> None:
    kit = Kit()
    ch = kit.open()
    kit.declare(ch, "over")
    kit.declare(
        ch,
        "lim",
        arguments={
            "x-max-length": 1,
            "x-overflow": "reject-publish-dlx",
            "x-dead-letter-exchange": "",
            "x-dead-letter-routing-key": "over",
        },
    )
    kit.call(ch, spec.ConfirmSelect())
    assert of_type(kit.publish(ch, "lim", b"1"), spec.BasicAck)
    assert of_type(kit.publish(ch, "lim", b"2"), spec.BasicNack) == [spec.BasicNack(delivery_tag=2)]
    (dead,) = kit.broker.vhosts["/"].queues["over"].queue.ready_messages()
    headers = decode_properties(dead.properties_bin).headers or {}
    assert headers["x-death"][0]["reason"] == "maxlen"
    assert dead.routing_key == "over"


def test_x_death_count_grows_on_repeated_rejects() -> None:
    kit = Kit()
    ch = kit.open()
    kit.call(ch, spec.ExchangeDeclare(exchange="retry", type="fanout"))
    kit.declare(ch, "work", arguments={"x-dead-letter-exchange": "retry"})
    kit.call(ch, spec.QueueBind(queue="work", exchange="retry"))
    kit.publish(ch, "work", b"again")
    out = kit.consume(ch, "work", "c")
    counts = []
    for _ in range(3):
        (d,) = delivered(out)
        headers = decode_properties(d.properties_bin).headers or {}
        counts.append(headers["x-death"][0]["count"] if "x-death" in headers else 0)
        reject = spec.BasicReject(delivery_tag=d.method.delivery_tag, requeue=False)
        out = kit.call(ch, reject)
    assert counts == [0, 1, 2]


def test_address_full_block_blocks_and_unblocks_the_publisher() -> None:
    cfg = BrokerConfig(
        name_seed=1,
        address_settings={"full.#": {"address-full-policy": "BLOCK", "max-size-messages": 2}},
    )
    kit = Kit(cfg)
    ch = kit.open()
    kit.declare(ch, "full.q")
    assert not any(isinstance(e, Block) for e in kit.publish(ch, "full.q"))
    out = kit.publish(ch, "full.q")
    assert [e for e in out if isinstance(e, Block)] == [
        Block(ch[0], "queue 'full.q' in vhost '/' is full")
    ]
    consumer = kit.open()
    (got,) = delivered(kit.call(consumer, spec.BasicGet(queue="full.q")))
    out = kit.call(consumer, spec.BasicAck(delivery_tag=got.method.delivery_tag))
    assert [e for e in out if isinstance(e, Unblock)] == [Unblock(ch[0])]


def test_tx_buffers_acks_until_commit_and_returns_mandatory_at_commit() -> None:
    kit = Kit()
    ch = kit.open()
    kit.declare(ch, "q")
    kit.publish(ch, "q", b"m")
    kit.call(ch, spec.TxSelect())
    (got,) = delivered(kit.call(ch, spec.BasicGet(queue="q")))
    kit.call(ch, spec.BasicAck(delivery_tag=got.method.delivery_tag))
    q = kit.broker.vhosts["/"].queues["q"].queue
    assert q.unacked_count == 1
    assert kit.publish(ch, "nowhere", b"r", mandatory=True) == []
    out = kit.call(ch, spec.TxCommit())
    assert q.unacked_count == 0
    assert [type(m) for m in [d.method for d in delivered(out)]] == [spec.BasicReturn]
    assert of_type(out, spec.TxCommitOk)


def test_global_prefetch_spans_queues() -> None:
    kit = Kit()
    ch = kit.open()
    for name in ("a", "b"):
        kit.declare(ch, name)
        for _ in range(3):
            kit.publish(ch, name)
    kit.call(ch, spec.BasicQos(prefetch_count=2, global_=True))
    out = kit.consume(ch, "a", "ca") + kit.consume(ch, "b", "cb")
    assert len(bodies(out)) == 2
    out = kit.call(ch, spec.BasicAck(delivery_tag=0, multiple=True))
    assert len(bodies(out)) == 2


def test_empty_queue_name_means_last_declared_on_the_channel() -> None:
    kit = Kit()
    ch = kit.open()
    (ok,) = of_type(kit.declare(ch, ""), spec.QueueDeclareOk)
    kit.call(ch, spec.QueueBind(queue="", exchange="amq.direct", routing_key="k"))
    kit.publish(ch, "k", b"via-last", exchange="amq.direct")
    assert kit.broker.vhosts["/"].queues[ok.queue].queue.ready_count == 1
    err = kit.error(kit.open(), spec.QueueBind(queue="", exchange="amq.direct"))
    assert err.code is ReplyCode.NOT_FOUND


def test_consumer_cancel_notification_only_for_capable_clients() -> None:
    kit = Kit()
    legacy = kit.channel(kit.connect(caps=False))
    kit.declare(legacy, "q")
    kit.consume(legacy, "q", "c")
    out = kit.call(kit.open(), spec.QueueDelete(queue="q"))
    assert of_type(out, spec.BasicCancel) == []
    assert kit.broker.conns[legacy[0]].sessions[1].consumers == {}


def test_unacked_from_a_deleted_queue_can_still_be_acked() -> None:
    kit = Kit()
    ch = kit.open()
    kit.declare(ch, "gone")
    kit.publish(ch, "gone")
    (got,) = delivered(kit.call(ch, spec.BasicGet(queue="gone")))
    kit.call(ch, spec.QueueDelete(queue="gone"))
    assert kit.call(ch, spec.BasicAck(delivery_tag=got.method.delivery_tag)) == []


def test_redeclare_ignores_arguments_without_semantics_like_rabbitmq() -> None:
    kit = Kit()
    ch = kit.open()
    kit.declare(ch, "q", arguments={"x-app-tag": "a"})
    kit.declare(ch, "q", arguments={"x-app-tag": "b", "x-queue-type": "classic"})
    err = kit.error(ch, spec.QueueDeclare(queue="q", arguments={"x-queue-type": "quorum"}))
    assert err.code is ReplyCode.PRECONDITION_FAILED
    assert "inequivalent arg 'x-queue-type'" in err.explanation


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


def test_single_active_consumer_prefers_the_highest_priority() -> None:
    kit = Kit()
    ch = kit.open()
    kit.declare(ch, "sac", arguments={"x-single-active-consumer": True})
    kit.consume(ch, "sac", "low", no_ack=True)
    kit.consume(ch, "sac", "high", no_ack=True, arguments={"x-priority": 5})
    assert delivered(kit.publish(ch, "sac"))[0].method.consumer_tag == "high"
    (cons,) = [c for c in admin_over(kit.broker).consumers() if c.active]
    assert cons.consumer_tag == "high"


def test_queue_types_ringmq_does_not_implement_are_refused_not_downgraded() -> None:
    kit = Kit()
    ch = kit.open()
    kit.declare(ch, "plain", arguments={"x-queue-type": "classic"})
    for kind in ("quorum", "stream"):
        err = kit.error(ch, spec.QueueDeclare(queue=kind, arguments={"x-queue-type": kind}))
        assert err.code is ReplyCode.PRECONDITION_FAILED
        assert f"queue type '{kind}' is not implemented" in err.explanation
        ch = kit.open()


def test_a_released_delivery_goes_back_without_counting_a_failed_delivery() -> None:
    # AMQP 1.0's released outcome (SettleKind.RELEASE) against modified (REQUEUE): with
    # x-delivery-limit 1, one failed delivery is allowed; releases are never failures.
    kit = Kit()
    ch = kit.open()
    kit.declare(ch, "q", arguments={"x-delivery-limit": 1})
    kit.publish(ch, "q", b"m")
    broker = kit.broker
    session = broker.session(*ch)
    assert session is not None
    q = broker.vhosts["/"].queues["q"]
    for _ in range(3):
        got = broker.delivery.get(session, "q", no_ack=False, now_ms=kit.now)
        assert got is not None
        broker.delivery.settle(session, got.delivery_tag, False, SettleKind.RELEASE, kit.now)
    assert q.queue.ready_count == 1  # three releases: still there
    for expected_ready in (1, 0):
        got = broker.delivery.get(session, "q", no_ack=False, now_ms=kit.now)
        assert got is not None
        broker.delivery.settle(session, got.delivery_tag, False, SettleKind.REQUEUE, kit.now)
        assert q.queue.ready_count == expected_ready  # the second failure is over the limit


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
            return publisher.publish(session, vh, x, msg, False, kit.now)

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
        with broker.call(kit.now):
            return publisher.enqueue(vh, x, tuple(vh.queues[n] for n in names), msg, None, kit.now)

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
    with broker.call(kit.now):
        assert broker.publisher.route(vh, vh.exchanges[""], msg, False, session, kit.now) == (
            None,
            True,  # no store: a persistent message on a durable queue counts as stored
        )
        unroutable = Message("", "nowhere", b"\x00\x00", b"x", timestamp_ms=kit.now)
        assert broker.publisher.route(vh, vh.exchanges[""], unroutable, False, None, kit.now) == (
            None,
            False,
        )
    assert vh.queues["q"].queue.message_count == 1
    assert broker.stats["published"] == published
    assert session.tx is not None
    assert session.tx.publishes == []
