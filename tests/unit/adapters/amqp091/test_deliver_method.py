"""The delivery effect says exactly what a ReplyContent with a BasicDeliver says."""

from __future__ import annotations

from ringmq.adapters.amqp091 import deliver_method
from ringmq.amqp import spec
from ringmq.core.effects import Deliver
from ringmq.core.message import Message


def test_deliver_effect_carries_the_basic_deliver_of_its_message() -> None:
    msg = Message("ex", "rk", b"\x00\x00", b"body")
    effect = Deliver(3, 2, "ctag", 7, True, msg)
    method = deliver_method(effect)
    assert method == spec.BasicDeliver("ctag", 7, True, "ex", "rk")
    assert method.encode() == spec.BasicDeliver("ctag", 7, True, "ex", "rk").encode()
    assert (effect.conn_id, effect.channel, effect.message) == (3, 2, msg)
    assert effect == Deliver(3, 2, "ctag", 7, True, msg)
