"""Dead lettering in the core: on reject, on expiry (a cycle is dropped), on
reject-publish-dlx, and the x-death headers counting each death."""

from __future__ import annotations

from ringmq.core.effects import Confirm, Deliver
from ringmq.core.session import SettleKind
from tests.unit.core.corekit import Core

REJECT = SettleKind.REJECT


def test_dead_letter_on_reject_with_x_death() -> None:
    kit = Core()
    ch = kit.open()
    kit.exchange(ch, "dlx", "fanout")
    kit.declare(ch, "dead")
    kit.bind(ch, "dead", "dlx")
    kit.declare(ch, "work", {"x-dead-letter-exchange": "dlx"})
    kit.publish(ch, "work", b"bad")
    kit.consume(ch, "work", "c")
    kit.settle(ch, 1, REJECT)
    (msg,) = kit.broker.vhosts["/"].queues["dead"].queue.ready_messages()
    headers = msg.headers or {}
    (death,) = headers["x-death"]
    assert death["reason"] == "rejected"
    assert death["queue"] == "work"
    assert death["count"] == 1
    assert death["routing-keys"] == ["work"]
    assert headers["x-first-death-reason"] == "rejected"


def test_expired_dead_letter_cycle_is_dropped() -> None:
    kit = Core()
    ch = kit.open()
    kit.declare(
        ch,
        "a",
        {
            "x-message-ttl": 10,
            "x-dead-letter-exchange": "",
            "x-dead-letter-routing-key": "b",
        },
    )
    kit.declare(
        ch,
        "b",
        {
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
    kit = Core()
    ch = kit.open()
    kit.declare(ch, "over")
    kit.declare(
        ch,
        "lim",
        {
            "x-max-length": 1,
            "x-overflow": "reject-publish-dlx",
            "x-dead-letter-exchange": "",
            "x-dead-letter-routing-key": "over",
        },
    )
    kit.broker.confirms.select(ch)
    assert [(e.seq, e.ok) for e in kit.publish(ch, "lim", b"1") if isinstance(e, Confirm)] == [
        (1, True)
    ]
    nacks = [(e.seq, e.ok) for e in kit.publish(ch, "lim", b"2") if isinstance(e, Confirm)]
    assert nacks == [(2, False)]
    (dead,) = kit.broker.vhosts["/"].queues["over"].queue.ready_messages()
    headers = dead.headers or {}
    assert headers["x-death"][0]["reason"] == "maxlen"
    assert dead.routing_key == "over"


def test_x_death_count_grows_on_repeated_rejects() -> None:
    kit = Core()
    ch = kit.open()
    kit.exchange(ch, "retry", "fanout")
    kit.declare(ch, "work", {"x-dead-letter-exchange": "retry"})
    kit.bind(ch, "work", "retry")
    kit.publish(ch, "work", b"again")
    out = kit.consume(ch, "work", "c")
    counts = []
    for _ in range(3):
        (d,) = [e for e in out if isinstance(e, Deliver)]
        headers = d.message.headers or {}
        counts.append(headers["x-death"][0]["count"] if "x-death" in headers else 0)
        out = kit.settle(ch, d.delivery_id, REJECT)
    assert counts == [0, 1, 2]
