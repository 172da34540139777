"""Dead lettering through the broker: on reject, on expiry (a cycle is dropped), on
reject-publish-dlx, and the x-death headers counting each death."""

from __future__ import annotations

from ringmq.amqp import spec
from ringmq.amqp.properties import decode_properties
from tests.unit.adapters.amqp091.kit import Kit, delivered, of_type


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
