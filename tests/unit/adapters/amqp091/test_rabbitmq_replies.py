"""RabbitMQ's exact replies where they are easy to get subtly wrong (issue 16, section 2)."""

from __future__ import annotations

import pytest

from ringmq.amqp import spec
from ringmq.amqp.frames import RawContent
from ringmq.amqp.properties import BasicProperties, decode_properties, encode_properties
from ringmq.amqp.reply_codes import AMQPError, ReplyCode
from tests.unit.adapters.amqp091.kit import Kit, bodies, delivered, methods, of_type


# ---------------------------------------------------------------- unbind of what is gone
def test_queue_unbind_of_a_missing_queue_or_exchange_is_unbind_ok(kit: Kit) -> None:
    ch = kit.open()
    kit.call(ch, spec.ExchangeDeclare(exchange="x", type="direct"))
    kit.declare(ch, "q")
    kit.call(ch, spec.QueueBind(queue="q", exchange="x", routing_key="k"))
    kit.call(ch, spec.QueueDelete(queue="q"))
    # the queue is gone (and its binding with it): RabbitMQ still answers unbind-ok
    got = kit.call(ch, spec.QueueUnbind(queue="q", exchange="x", routing_key="k"))
    assert methods(got) == [spec.QueueUnbindOk()]
    kit.declare(ch, "q2")
    # the source exchange is missing: unbind-ok too (rabbit_binding:remove)
    got = kit.call(ch, spec.QueueUnbind(queue="q2", exchange="nope", routing_key="k"))
    assert methods(got) == [spec.QueueUnbindOk()]
    # both missing
    got = kit.call(ch, spec.QueueUnbind(queue="gone", exchange="nope", routing_key="k"))
    assert methods(got) == [spec.QueueUnbindOk()]


def test_exchange_unbind_of_a_missing_source_or_destination_is_unbind_ok(kit: Kit) -> None:
    ch = kit.open()
    kit.call(ch, spec.ExchangeDeclare(exchange="src", type="fanout"))
    kit.call(ch, spec.ExchangeDeclare(exchange="dst", type="fanout"))
    kit.call(ch, spec.ExchangeBind(destination="dst", source="src"))
    kit.call(ch, spec.ExchangeDelete(exchange="dst"))
    got = kit.call(ch, spec.ExchangeUnbind(destination="dst", source="src"))
    assert methods(got) == [spec.ExchangeUnbindOk()]
    got = kit.call(ch, spec.ExchangeUnbind(destination="src", source="missing"))
    assert methods(got) == [spec.ExchangeUnbindOk()]


def test_unbind_keeps_the_default_exchange_and_exclusive_rules(kit: Kit) -> None:
    owner = kit.open()
    kit.declare(owner, "mine", exclusive=True)
    kit.call(owner, spec.QueueBind(queue="mine", exchange="amq.direct", routing_key="k"))
    other = kit.open()
    err = kit.error(other, spec.QueueUnbind(queue="mine", exchange="amq.direct", routing_key="k"))
    assert err.code is ReplyCode.RESOURCE_LOCKED
    other = kit.channel(other[0], 2)
    # no such binding: nothing to check exclusivity against, as in RabbitMQ
    got = kit.call(other, spec.QueueUnbind(queue="mine", exchange="amq.direct", routing_key="z"))
    assert methods(got) == [spec.QueueUnbindOk()]
    err = kit.error(other, spec.QueueUnbind(queue="gone", exchange="", routing_key="gone"))
    assert err.code is ReplyCode.ACCESS_REFUSED


# ---------------------------------------------------------------- default exchange
def test_passive_declare_of_the_default_exchange_is_access_refused(kit: Kit) -> None:
    ch = kit.open()
    err = kit.error(ch, spec.ExchangeDeclare(exchange="", passive=True))
    assert err.code is ReplyCode.ACCESS_REFUSED
    assert err.reply_text == "ACCESS_REFUSED - operation not permitted on the default exchange"
    ch = kit.channel(ch[0], 2)
    got = kit.call(ch, spec.ExchangeDeclare(exchange="amq.direct", passive=True))
    assert methods(got) == [spec.ExchangeDeclareOk()]


# ---------------------------------------------------------------- delete of a consumed queue
def test_delete_ok_goes_before_the_cancel_of_the_same_channels_consumer(kit: Kit) -> None:
    ch = kit.open()
    kit.declare(ch, "q")
    kit.consume(ch, "q", tag="c1")
    other = kit.open()
    kit.consume(other, "q", tag="c2")
    got = methods(kit.call(ch, spec.QueueDelete(queue="q")))
    assert got[0] == spec.QueueDeleteOk(message_count=0)
    assert sorted(m.consumer_tag for m in got[1:]) == ["c1", "c2"]
    assert all(isinstance(m, spec.BasicCancel) for m in got[1:])
    # no-wait: only the cancel
    kit.declare(ch, "q")
    kit.consume(ch, "q", tag="c3")
    got = methods(kit.call(ch, spec.QueueDelete(queue="q", no_wait=True)))
    assert got == [spec.BasicCancel(consumer_tag="c3", no_wait=True)]


# ---------------------------------------------------------------- expiry as RabbitMQ times it
def _expiring(ttl: str) -> BasicProperties:
    return BasicProperties(expiration=ttl)


def test_ttl_zero_message_on_an_idle_queue_is_gone_at_once(kit: Kit) -> None:
    ch = kit.open()
    kit.call(ch, spec.ConfirmSelect())
    kit.declare(ch, "idle")
    got = kit.publish(ch, "idle", b"m", props=_expiring("0"))
    assert of_type(got, spec.BasicAck)  # confirmed, and already expired: no timer needed
    [ok] = methods(kit.call(ch, spec.QueueDeclare(queue="idle", passive=True)))
    assert ok.message_count == 0
    kit.publish(ch, "idle", b"m", props=_expiring("0"))
    assert methods(kit.call(ch, spec.BasicGet(queue="idle"))) == [spec.BasicGetEmpty()]
    # the queue's own x-message-ttl = 0 (the inline publish path) behaves the same
    kit.declare(ch, "qttl0", arguments={"x-message-ttl": 0})
    kit.publish(ch, "qttl0", b"m")
    assert methods(kit.call(ch, spec.BasicGet(queue="qttl0"))) == [spec.BasicGetEmpty()]


def test_ttl_zero_message_reaches_a_consumer_ready_at_once(kit: Kit) -> None:
    ch = kit.open()
    kit.declare(ch, "live")
    kit.consume(ch, "live", tag="c")
    got = kit.publish(ch, "live", b"m", props=_expiring("0"))
    assert bodies(got) == [b"m"]


def test_get_ok_message_count_leaves_out_the_expired_heads_the_get_exposed(kit: Kit) -> None:
    ch = kit.open()
    kit.declare(ch, "q")
    kit.publish(ch, "q", b"a")
    kit.publish(ch, "q", b"b", props=_expiring("0"))
    [ok] = of_type(kit.call(ch, spec.BasicGet(queue="q", no_ack=True)), spec.BasicGetOk)
    assert ok.message_count == 0
    [decl] = methods(kit.call(ch, spec.QueueDeclare(queue="q", passive=True)))
    assert decl.message_count == 0


def test_priority_queue_keeps_a_lower_expired_message_until_the_head_leaves(kit: Kit) -> None:
    ch = kit.open()
    kit.declare(ch, "dlq")
    args = {"x-max-priority": 2, "x-dead-letter-exchange": "", "x-dead-letter-routing-key": "dlq"}
    kit.declare(ch, "prio", arguments=args)
    kit.publish(ch, "prio", b"a", props=BasicProperties(priority=2))
    kit.publish(ch, "prio", b"b", props=_expiring("200"))
    kit.tick(1_000)
    [decl] = methods(kit.call(ch, spec.QueueDeclare(queue="prio", passive=True)))
    assert decl.message_count == 2  # RabbitMQ keeps both until `a` is fetched
    [ok] = of_type(kit.call(ch, spec.BasicGet(queue="prio", no_ack=True)), spec.BasicGetOk)
    assert ok.message_count == 0
    got = kit.call(ch, spec.BasicGet(queue="dlq", no_ack=True))
    assert [d.body for d in delivered(got)] == [b"b"]


def test_dead_letters_carry_the_last_death_headers(kit: Kit) -> None:
    # deliberate (docs/semantics.md §13): newer RabbitMQ sets them, 3.10 does not
    ch = kit.open()
    kit.declare(ch, "dlq")
    kit.declare(
        ch, "work", arguments={"x-dead-letter-exchange": "", "x-dead-letter-routing-key": "dlq"}
    )
    kit.publish(ch, "work", b"m")
    [got] = delivered(kit.call(ch, spec.BasicGet(queue="work")))
    kit.call(ch, spec.BasicReject(delivery_tag=got.method.delivery_tag, requeue=False))
    [dead] = delivered(kit.call(ch, spec.BasicGet(queue="dlq", no_ack=True)))
    headers = decode_properties(dead.properties_bin).headers or {}
    assert {k: v for k, v in headers.items() if k.startswith("x-last-death")} == {
        "x-last-death-reason": "rejected",
        "x-last-death-queue": "work",
        "x-last-death-exchange": "",
    }


# ---------------------------------------------------------------- headers RabbitMQ refuses
@pytest.mark.parametrize(
    "pb",
    [b"\x00\x01", b"\x00\x01\x00\x00", b"\x80\x01\x0atext/plain", b"\x10\x01\x02", b"\x00\x02"],
)
def test_a_content_header_with_the_low_flag_bits_is_refused_on_every_path(
    kit: Kit, pb: bytes
) -> None:
    ch = kit.open()
    kit.declare(ch, "q")
    err = kit.error(ch, spec.BasicPublish(routing_key="q"), RawContent(60, 1, pb, b"x"))
    assert err.code is ReplyCode.FRAME_ERROR
    ch = kit.open()  # the batch path (the protocol layer's publish batches)
    done = kit.amqp.publish_batch(ch[0], ch[1], "", [("q", pb, b"x")], 0, 1, kit.now)
    assert done.published == 0
    assert isinstance(done.error, AMQPError)
    assert done.error.code is ReplyCode.FRAME_ERROR
    [decl] = methods(kit.call(ch, spec.QueueDeclare(queue="q", passive=True)))
    assert decl.message_count == 0  # nothing stored that a later read could not decode


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ("\u0665", "no_integer"),  # ARABIC-INDIC DIGIT FIVE: str.isdigit and int() take it
        ("\uff15", "no_integer"),  # FULLWIDTH DIGIT FIVE
        (" 5", "no_integer"),
        ("", "no_integer"),
        ("1_000", '{leftover_string,"_000"}'),
        ("5 ", '{leftover_string," "}'),
        ("-5", "{value_negative,-5}"),
        ("4294967296", "{value_too_big,4294967296}"),
    ],
)
def test_expiration_is_read_as_rabbitmq_reads_it(kit: Kit, text: str, reason: str) -> None:
    ch = kit.open()
    kit.declare(ch, "q")
    err = kit.error(ch, spec.BasicPublish(routing_key="q"), _content(_expiring(text)))
    assert err.code is ReplyCode.PRECONDITION_FAILED
    assert err.reply_text == f"PRECONDITION_FAILED - invalid expiration '{text}': {reason}"


def test_expiration_accepts_a_sign_and_the_largest_timer(kit: Kit) -> None:
    ch = kit.open()
    kit.declare(ch, "q")
    for text in ("-0", "+5", "4294967295", "007"):
        kit.call(ch, spec.BasicPublish(routing_key="q"), _content(_expiring(text)))
    [decl] = methods(kit.call(ch, spec.QueueDeclare(queue="q", passive=True)))
    assert decl.message_count == 3  # "-0" is a TTL of 0 on an idle queue: gone at once


def _content(props: BasicProperties) -> RawContent:
    return RawContent(60, 1, encode_properties(props), b"x")


def test_a_get_pipelined_after_a_ttl_zero_publish_finds_nothing(kit: Kit) -> None:
    # the server defers dispatch to the end of a read batch: the get runs before that flush
    kit.broker.defer_dispatch = True
    ch = kit.open()
    kit.declare(ch, "q")
    kit.publish(ch, "q", b"m", props=_expiring("0"))
    assert methods(kit.call(ch, spec.BasicGet(queue="q"))) == [spec.BasicGetEmpty()]
    # and a consumer ready at once is served before the pipelined get, as RabbitMQ's queue is
    kit.consume(ch, "q", tag="c")
    kit.publish(ch, "q", b"n", props=_expiring("0"))
    got = kit.call(ch, spec.BasicGet(queue="q"))
    assert [type(m) for m in methods(got)] == [spec.BasicDeliver, spec.BasicGetEmpty]
    assert bodies(got) == [b"n"]
