"""The core's no-local rule (`Delivery.consume(no_local=True)`): while a no-local consumer
consumes, its queue does not take what the consumer's own connection publishes."""

from __future__ import annotations

from ringmq.core.effects import Effect
from tests.unit.core.test_broker_kit import Kit, bodies


def _ready(k: Kit) -> int:
    return k.broker.vhosts["/"].queues["q"].queue.ready_count


def test_no_local_keeps_the_consumers_own_publishes_out() -> None:
    k = Kit()
    mine, other = k.open(), k.open()
    k.declare(mine, "q")
    b = k.broker
    s = b.session(*mine)
    assert s is not None
    out: list[Effect] = b.begin(k.now)
    b.delivery.consume(
        s, "q", "nl", no_ack=True, exclusive=False, arguments={}, now_ms=k.now, no_local=True
    )
    b.finish(k.now)
    assert out == []
    assert bodies(k.publish(mine, "q", b"mine")) == []  # not enqueued at all
    assert _ready(k) == 0
    assert bodies(k.publish(other, "q", b"theirs")) == [b"theirs"]
    out = b.begin(k.now)
    b.delivery.cancel(s, "nl", k.now)
    b.finish(k.now)
    k.publish(mine, "q", b"later")  # the consumer is gone: the rule with it
    assert _ready(k) == 1
