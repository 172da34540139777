"""The 0-9-1 replies of consuming: consume-ok before the deliveries, get-ok's fields and
get-empty, the channel error of an unknown delivery tag, recover-ok, the refusals only 0-9-1
has (recover without requeue, a prefetch by size) and basic.cancel only to capable clients
(the core's side is tests/unit/core/test_delivery.py)."""

from __future__ import annotations

from ringmq.amqp import spec
from ringmq.amqp.reply_codes import ReplyCode
from tests.unit.adapters.amqp091.kit import Kit, bodies, delivered, methods, of_type


def test_consume_ok_goes_before_the_deliveries(kit: Kit) -> None:
    ch = kit.open()
    kit.declare(ch, "q")
    for i in range(2):
        kit.publish(ch, "q", str(i).encode())
    out = kit.consume(ch, "q", "a", no_ack=True)
    assert isinstance(methods(out)[0], spec.BasicConsumeOk)
    assert bodies(out) == [b"0", b"1"]


def test_get_ok_carries_the_delivery_and_the_count_and_get_empty_nothing(kit: Kit) -> None:
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


def test_unknown_delivery_tag_is_a_406_naming_basic_ack(kit: Kit) -> None:
    err = kit.error(kit.open(), spec.BasicAck(delivery_tag=5))
    assert err.code is ReplyCode.PRECONDITION_FAILED
    assert err.reply_text == "PRECONDITION_FAILED - unknown delivery tag 5"
    assert (err.class_id, err.method_id) == (60, 80)


def test_recover_ok_goes_before_the_redeliveries_and_recover_without_requeue_is_540(
    kit: Kit,
) -> None:
    ch = kit.open()
    kit.declare(ch, "q")
    kit.publish(ch, "q", b"m")
    kit.consume(ch, "q", "c")
    out = kit.call(ch, spec.BasicRecover(requeue=True))
    assert isinstance(methods(out)[0], spec.BasicRecoverOk)
    assert bodies(out) == [b"m"]
    err = kit.error(ch, spec.BasicRecover(requeue=False))
    assert err.code is ReplyCode.NOT_IMPLEMENTED


def test_a_prefetch_by_size_is_540(kit: Kit) -> None:
    err = kit.error(kit.open(), spec.BasicQos(prefetch_size=10))
    assert err.code is ReplyCode.NOT_IMPLEMENTED


def test_basic_cancel_only_to_clients_that_said_they_take_it(kit: Kit) -> None:
    legacy = kit.channel(kit.connect(caps=False))
    kit.declare(legacy, "q")
    kit.consume(legacy, "q", "c")
    assert of_type(kit.call(kit.open(), spec.QueueDelete(queue="q")), spec.BasicCancel) == []
    capable = kit.open()
    kit.declare(capable, "q")
    kit.consume(capable, "q", "c")
    out = kit.call(kit.open(), spec.QueueDelete(queue="q"))
    assert of_type(out, spec.BasicCancel) == [spec.BasicCancel(consumer_tag="c", no_wait=True)]
