"""The 0-9-1 replies of the queue methods: the core's answers (counts, names, refusals) carried
in declare-ok, purge-ok, delete-ok and the channel error (the core's side is
tests/unit/core/test_queue_lifecycle.py)."""

from __future__ import annotations

from ringmq.amqp import spec
from ringmq.amqp.reply_codes import ReplyCode
from ringmq.core.effects import Reply
from tests.unit.adapters.amqp091.kit import Kit, of_type


def test_declare_ok_carries_the_server_made_name(kit: Kit) -> None:
    (ok,) = of_type(kit.declare(kit.open(), ""), spec.QueueDeclareOk)
    assert ok.queue.startswith("amq.gen-")
    assert ok.queue in kit.broker.vhosts["/"].queues


def test_a_refused_declare_is_a_channel_error_with_rabbitmqs_text(kit: Kit) -> None:
    err = kit.error(kit.open(), spec.QueueDeclare(queue="nope", passive=True))
    assert err.code is ReplyCode.NOT_FOUND
    assert err.reply_text == "NOT_FOUND - no queue 'nope' in vhost '/'"
    err = kit.error(kit.open(), spec.QueueDeclare(queue="q", arguments={"x-max-length": -1}))
    assert err.code is ReplyCode.PRECONDITION_FAILED


def test_purge_ok_carries_the_purged_count(kit: Kit) -> None:
    ch = kit.open()
    kit.declare(ch, "q")
    for _ in range(3):
        kit.publish(ch, "q")
    assert of_type(kit.call(ch, spec.QueuePurge(queue="q")), spec.QueuePurgeOk) == [
        spec.QueuePurgeOk(message_count=3)
    ]


def test_delete_ok_carries_the_count_and_the_consumer_gets_a_basic_cancel(kit: Kit) -> None:
    consumer = kit.open()
    kit.declare(consumer, "q")
    kit.consume(consumer, "q", "c")
    out = kit.call(kit.open(), spec.QueueDelete(queue="q"))
    cancels = [e for e in out if isinstance(e, Reply) and isinstance(e.frame, spec.BasicCancel)]
    assert [(c.conn_id, c.channel, c.frame.consumer_tag) for c in cancels] == [(*consumer, "c")]
    assert of_type(out, spec.QueueDeleteOk) == [spec.QueueDeleteOk(message_count=0)]
