"""Artemis undelivered-message settings in the core: the dead-letter and expiry
addresses (with auto-created queues), max-delivery-attempts and delayed redelivery, applied by
the address-settings' wildcard matcher."""

from __future__ import annotations

from typing import Any

import pytest

from ringmq.core.config import BrokerConfig
from ringmq.core.effects import Deliver, Effect
from ringmq.core.policies import AddressSettings, PolicyError
from ringmq.core.session import Session, SettleKind
from ringmq.core.settings import Redelivery
from tests.unit.core.corekit import Core, bodies

REQUEUE, REJECT = SettleKind.REQUEUE, SettleKind.REJECT


def _kit(settings: dict[str, dict[str, Any]]) -> Core:
    return Core(BrokerConfig(name_seed=7, address_settings=settings))


def _ready(kit: Core, name: str) -> list[bytes]:
    return kit.ready(name)


def _fail(kit: Core, ch: Session, delivery_id: int) -> list[Effect]:
    return kit.settle(ch, delivery_id, REQUEUE)


def _delivered(effects: list[Effect]) -> list[Deliver]:
    return [e for e in effects if isinstance(e, Deliver)]


def test_max_delivery_attempts_sends_to_the_dead_letter_address() -> None:
    kit = _kit({"orders.#": {"dead-letter-address": "DLQ", "max-delivery-attempts": 2}})
    ch = kit.open()
    kit.declare(ch, "DLQ")
    kit.declare(ch, "orders.eu")
    kit.publish(ch, "orders.eu", b"poison")
    got = _delivered(kit.consume(ch, "orders.eu", "c"))
    assert [d.message.body for d in got] == [b"poison"]
    again = _delivered(_fail(kit, ch, 1))
    assert [(d.message.body, d.redelivered) for d in again] == [(b"poison", True)]
    # the second failed delivery is the last one allowed: the message goes to the DLA
    assert _delivered(_fail(kit, ch, 2)) == []
    assert _ready(kit, "DLQ") == [b"poison"]
    (msg,) = kit.broker.vhosts["/"].queues["DLQ"].queue.ready_messages()
    headers = msg.headers or {}
    assert headers["_AMQ_ORIG_QUEUE"] == "orders.eu"
    assert headers["x-death"][0]["reason"] == "delivery_limit"


def test_rejected_message_goes_to_the_dla_and_its_auto_created_queue() -> None:
    kit = _kit(
        {
            "#": {
                "dead-letter-address": "DLA",
                "auto-create-dead-letter-resources": True,
                "dead-letter-queue-suffix": ".dead",
            }
        }
    )
    ch = kit.open()
    kit.declare(ch, "work")
    kit.publish(ch, "work", b"bad")
    kit.consume(ch, "work", "c")
    kit.settle(ch, 1, REJECT)
    queues = kit.broker.vhosts["/"].queues
    # no DLA queue exists: only the auto-created one (prefix DLQ., this suffix) receives it
    assert "DLA" not in queues
    assert queues["DLQ.work.dead"].durable
    assert _ready(kit, "DLQ.work.dead") == [b"bad"]


def test_expired_message_goes_to_the_expiry_address_not_the_dla() -> None:
    kit = _kit(
        {
            "#": {
                "dead-letter-address": "DLQ",
                "expiry-address": "ExpiryQueue",
                "auto-create-expiry-resources": True,
            }
        }
    )
    ch = kit.open()
    kit.declare(ch, "DLQ")
    kit.declare(ch, "ExpiryQueue")
    kit.declare(ch, "short")
    kit.publish(ch, "short", b"old", expiration_ms=10)
    kit.tick(50)
    assert _ready(kit, "ExpiryQueue") == [b"old"]
    assert _ready(kit, "EXP.short") == [b"old"]
    assert _ready(kit, "DLQ") == []


def test_rabbitmq_dead_letter_exchange_wins_over_the_artemis_address() -> None:
    kit = _kit({"#": {"dead-letter-address": "DLQ"}})
    ch = kit.open()
    kit.declare(ch, "DLQ")
    kit.declare(ch, "rabbit-dead")
    kit.declare(
        ch,
        "work",
        {"x-dead-letter-exchange": "", "x-dead-letter-routing-key": "rabbit-dead"},
    )
    kit.publish(ch, "work", b"m")
    kit.consume(ch, "work", "c")
    kit.settle(ch, 1, REJECT)
    assert _ready(kit, "rabbit-dead") == [b"m"]
    assert _ready(kit, "DLQ") == []


def test_redelivery_delay_holds_a_failed_message_then_returns_it() -> None:
    kit = _kit(
        {"slow.#": {"redelivery-delay": 100, "redelivery-delay-multiplier": 2.0}},
    )
    ch = kit.open()
    kit.declare(ch, "slow.q")
    kit.publish(ch, "slow.q", b"m")
    kit.consume(ch, "slow.q", "c")
    assert _delivered(_fail(kit, ch, 1)) == []
    q = kit.broker.vhosts["/"].queues["slow.q"].queue
    assert q.counters.scheduled == 1
    assert bodies(kit.tick(99)) == []
    assert bodies(kit.tick(1)) == [b"m"]
    # second failure: 100 * 2 ms
    _fail(kit, ch, 2)
    assert bodies(kit.tick(199)) == []
    assert bodies(kit.tick(1)) == [b"m"]


def test_redelivered_message_into_a_full_ring_is_dropped_when_due() -> None:
    # The seed's rule for scheduled messages: due, it goes to the head; a full ring drops it.
    kit = _kit({"ring.#": {"default-ring-size": 2, "redelivery-delay": 50}})
    ch = kit.open()
    kit.declare(ch, "ring.q")
    kit.publish(ch, "ring.q", b"A")
    kit.consume(ch, "ring.q", "c", arguments={})
    kit.run(kit.broker.delivery.cancel, ch, "c", kit.now)
    _fail(kit, ch, 1)
    kit.publish(ch, "ring.q", b"B")
    kit.publish(ch, "ring.q", b"C")
    kit.tick(60)
    assert _ready(kit, "ring.q") == [b"B", b"C"]


def test_max_delivery_attempts_minus_one_is_unlimited_over_a_wider_match() -> None:
    kit = _kit({"#": {"max-delivery-attempts": 1}, "keep.#": {"max-delivery-attempts": -1}})
    ch = kit.open()
    kit.declare(ch, "keep.q")
    kit.declare(ch, "drop.q")
    assert kit.broker.vhosts["/"].queues["keep.q"].settings.delivery_limit is None
    assert kit.broker.vhosts["/"].queues["drop.q"].settings.delivery_limit == 0


def test_redelivery_delay_grows_to_its_maximum() -> None:
    r = Redelivery(100, 3.0, 500)
    assert [r.delay_after(n) for n in (1, 2, 3, 4)] == [100, 300, 500, 500]
    assert Redelivery(100).delay_after(5) == 100
    assert Redelivery(100, 2.0).delay_after(10) == 1000  # default max: ten times the delay


@pytest.mark.parametrize(
    ("values", "text"),
    [
        ({"auto-delete-queues": True}, "auto-delete-queues"),
        ({"redelivery-delay-multiplier": 0.5}, "redelivery-delay-multiplier"),
        ({"default-address-routing-type": "BOTH"}, "ANYCAST or MULTICAST"),
        (
            {"default-address-routing-type": "ANYCAST", "default-queue-routing-type": "MULTICAST"},
            "differ",
        ),
    ],
)
def test_unsupported_values_are_refused(values: dict[str, Any], text: str) -> None:
    with pytest.raises(PolicyError, match=text):
        AddressSettings.from_dict(values)
