"""RabbitMQ's exact replies where they are easy to get subtly wrong (issue 16, section 2)."""

from __future__ import annotations

import pytest

from ringmq.amqp import spec
from ringmq.amqp.reply_codes import ReplyCode
from tests.unit.core.test_broker_kit import Kit, methods


@pytest.fixture
def kit() -> Kit:
    return Kit()


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
