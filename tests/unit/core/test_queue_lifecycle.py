"""Queues through the broker: declare (passive, reserved and server-made names, the last
declared name, equivalence, arguments, queue types), exclusive and auto-delete queues, x-expires,
delete and purge."""

from __future__ import annotations

from ringmq.amqp import spec
from ringmq.amqp.reply_codes import ReplyCode
from ringmq.core.config import BrokerConfig
from ringmq.core.effects import Reply
from tests.unit.adapters.amqp091.kit import Kit, of_type


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
    cancels = [e for e in out if isinstance(e, Reply) and isinstance(e.frame, spec.BasicCancel)]
    assert [(c.conn_id, c.channel, c.frame.consumer_tag) for c in cancels] == [
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


def test_empty_queue_name_means_last_declared_on_the_channel() -> None:
    kit = Kit()
    ch = kit.open()
    (ok,) = of_type(kit.declare(ch, ""), spec.QueueDeclareOk)
    kit.call(ch, spec.QueueBind(queue="", exchange="amq.direct", routing_key="k"))
    kit.publish(ch, "k", b"via-last", exchange="amq.direct")
    assert kit.broker.vhosts["/"].queues[ok.queue].queue.ready_count == 1
    err = kit.error(kit.open(), spec.QueueBind(queue="", exchange="amq.direct"))
    assert err.code is ReplyCode.NOT_FOUND


def test_redeclare_ignores_arguments_without_semantics_like_rabbitmq() -> None:
    kit = Kit()
    ch = kit.open()
    kit.declare(ch, "q", arguments={"x-app-tag": "a"})
    kit.declare(ch, "q", arguments={"x-app-tag": "b", "x-queue-type": "classic"})
    err = kit.error(ch, spec.QueueDeclare(queue="q", arguments={"x-queue-type": "quorum"}))
    assert err.code is ReplyCode.PRECONDITION_FAILED
    assert "inequivalent arg 'x-queue-type'" in err.explanation


def test_queue_types_ringmq_does_not_implement_are_refused_not_downgraded() -> None:
    kit = Kit()
    ch = kit.open()
    kit.declare(ch, "plain", arguments={"x-queue-type": "classic"})
    kit.declare(ch, "qq", durable=True, arguments={"x-queue-type": "quorum"})
    for kind in ("mixed",):
        err = kit.error(ch, spec.QueueDeclare(queue=kind, arguments={"x-queue-type": kind}))
        assert err.code is ReplyCode.PRECONDITION_FAILED
        assert f"queue type '{kind}' is not implemented" in err.explanation
        ch = kit.open()
