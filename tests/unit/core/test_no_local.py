"""The core's no-local rule (`Delivery.consume(no_local=True)`): while a no-local consumer
consumes, its queue does not take what the consumer's own connection publishes; keyed by an
owner identity (`owner`, AMQP 1.0's container id), by what any connection of that owner
publishes, and after the consumer goes."""

from __future__ import annotations

from typing import Any

from ringmq.core.effects import Effect
from ringmq.core.entities import OWNER_PROPERTY
from ringmq.core.session import Session
from tests.unit.core.corekit import Core, bodies


def _ready(k: Core) -> int:
    return k.broker.vhosts["/"].queues["q"].queue.ready_count


def test_no_local_keeps_the_consumers_own_publishes_out() -> None:
    k = Core()
    mine, other = k.open(), k.open()
    k.declare(mine, "q")
    b = k.broker
    s = mine
    out: list[Effect]
    with b.call(k.now) as out:
        b.delivery.consume(
            s, "q", "nl", no_ack=True, exclusive=False, arguments={}, now_ms=k.now, no_local=True
        )
    assert out == []
    assert bodies(k.publish(mine, "q", b"mine")) == []  # not enqueued at all
    assert _ready(k) == 0
    assert bodies(k.publish(other, "q", b"theirs")) == [b"theirs"]
    with b.call(k.now):
        b.delivery.cancel(s, "nl", k.now)
    k.publish(mine, "q", b"later")  # the consumer is gone: the rule with it
    assert _ready(k) == 1


def _conn(k: Core, container_id: str) -> Session:
    # a connection whose adapter names its owner (AMQP 1.0: the container id)
    conn_id = k.connect()
    conn = k.broker.state.conns[conn_id]
    conn.client_properties[OWNER_PROPERTY] = container_id
    return k.session(conn_id)


def _consume(k: Core, s: Session, tag: str, **kw: Any) -> Session:
    b = k.broker
    with b.call(k.now):
        b.delivery.consume(
            s, "q", tag, no_ack=True, exclusive=False, arguments={}, now_ms=k.now, **kw
        )
    return s


def _cancel(k: Core, s: Session, tag: str) -> None:
    with k.broker.call(k.now):
        k.broker.delivery.cancel(s, tag, k.now)


def test_an_owners_rule_covers_all_its_connections_and_outlives_its_consumer() -> None:
    k = Core()
    sub, mine, other = _conn(k, "c1"), _conn(k, "c1"), _conn(k, "c2")
    plain = k.open()  # no owner identity: only its connection is itself
    k.declare(sub, "q")
    s = _consume(k, sub, "nl", no_local=True, owner="c1")
    _cancel(k, s, "nl")  # detached: the rule stays with the queue
    k.publish(sub, "q", b"a")
    k.publish(mine, "q", b"b")  # another connection of the same container
    assert _ready(k) == 0
    k.publish(other, "q", b"c")
    k.publish(plain, "q", b"d")
    assert _ready(k) == 2
    _consume(k, sub, "again", owner="c1")  # the owner subscribes without no-local
    assert _ready(k) == 0  # c and d went to it
    assert bodies(k.publish(mine, "q", b"e")) == [b"e"]  # the rule is gone


def test_a_connections_rule_is_not_an_owners() -> None:
    # without an owner the rule is the connection's, even between connections of one container
    k = Core()
    sub, mine = _conn(k, "c1"), _conn(k, "c1")
    k.declare(sub, "q")
    _consume(k, sub, "nl", no_local=True)
    assert bodies(k.publish(sub, "q", b"a")) == []
    assert bodies(k.publish(mine, "q", b"b")) == [b"b"]
