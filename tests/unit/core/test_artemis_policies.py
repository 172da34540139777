"""Artemis' undelivered-message settings set live by a RabbitMQ-style policy (issue 28,
item 1: "live policies can set the same through the management API")."""

from __future__ import annotations

from typing import Any

import pytest

from ringmq.core.effects import Deliver, Effect
from ringmq.core.policies import PolicyError, validate_definition
from ringmq.core.session import Session, SettleKind
from tests.unit.core.corekit import Core

REQUEUE = SettleKind.REQUEUE
"""A failed delivery back to its place (0-9-1's reject with requeue): counted as an attempt."""


def _ids(effects: list[Effect]) -> list[int]:
    return [e.delivery_id for e in effects if isinstance(e, Deliver)]


def _kit(definition: dict[str, Any]) -> tuple[Core, Session]:
    kit = Core()
    ch = kit.open()
    kit.declare(ch, "q")
    kit.declare(ch, "DLQ")
    kit.broker.policies.set("artemis", "^q$", definition, apply_to="queues")
    kit.broker.topology.reapply_settings(kit.broker.vhosts["/"], kit.now)
    return kit, ch


def test_max_delivery_attempts_and_dead_letter_address_from_a_policy() -> None:
    kit, ch = _kit({"dead-letter-address": "DLQ", "max-delivery-attempts": 2})
    st = kit.broker.vhosts["/"].queues["q"].settings
    assert (st.dead_letter_address, st.delivery_limit) == ("DLQ", 1)
    assert st.sources["dead_letter_address"] == "policy"
    kit.publish(ch, "q", b"poison")
    ids = _ids(kit.consume(ch, "q", "c"))
    for _ in range(2):
        (delivery_id,) = ids
        ids = _ids(kit.settle(ch, delivery_id, REQUEUE))
    assert ids == []
    assert kit.queue("DLQ").ready_count == 1
    assert kit.queue("q").message_count == 0


def test_redelivery_delay_from_a_policy() -> None:
    kit, ch = _kit({"redelivery-delay": 100, "redelivery-delay-multiplier": 2})
    kit.publish(ch, "q", b"m")
    (delivery_id,) = _ids(kit.consume(ch, "q", "c"))
    assert _ids(kit.settle(ch, delivery_id, REQUEUE)) == []
    assert kit.queue("q").counters.scheduled == 1
    assert _ids(kit.tick(50)) == []
    assert len(_ids(kit.tick(60))) == 1  # back after 100 ms


def test_removing_the_policy_removes_the_settings_live() -> None:
    kit, _ = _kit({"redelivery-delay": 100, "dead-letter-address": "DLQ"})
    assert kit.broker.vhosts["/"].queues["q"].settings.redelivery is not None
    kit.broker.policies.clear("artemis")
    kit.broker.topology.reapply_settings(kit.broker.vhosts["/"], kit.now)
    st = kit.broker.vhosts["/"].queues["q"].settings
    assert st.redelivery is None
    assert st.dead_letter_address is None


@pytest.mark.parametrize(
    ("definition", "message"),
    [
        ({"redelivery-delay-multiplier": 0.5}, "'redelivery-delay-multiplier' must be a number"),
        ({"max-delivery-attempts": "ten"}, "'max-delivery-attempts' must be an integer"),
        ({"dead-letter-address": 3}, "'dead-letter-address' must be a string"),
    ],
)
def test_bad_artemis_policy_values_are_refused(definition: dict[str, Any], message: str) -> None:
    with pytest.raises(PolicyError, match=message):
        validate_definition(definition)
