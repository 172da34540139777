"""Link credit (AMQP 1.0 flow) on the core's delivery API, against a small model: a consumer
with credit n gets at most n deliveries until given more; drain gives back what no ready
message can use (`Drained`), and None returns it to prefetch alone."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from ringmq.core.effects import Deliver, Drained, Effect
from ringmq.core.session import Session
from tests.unit.core.corekit import Core

_step = st.one_of(
    st.tuples(st.just("publish"), st.integers(1, 4)),
    st.tuples(st.just("flow"), st.integers(0, 5), st.booleans()),
)


def _flow(kit: Core, session: Session, credit: int | None, drain: bool) -> list[Effect]:
    return kit.run(kit.broker.delivery.flow, session, "c", credit=credit, drain=drain)


def _deliveries(effects: list[Effect]) -> int:
    return sum(1 for e in effects if isinstance(e, Deliver))


@settings(max_examples=150, deadline=None)
@given(st.lists(_step, max_size=25))
def test_credit_bounds_deliveries_and_drain_gives_the_rest_back(steps: list) -> None:
    kit = Core()
    ch = kit.open()
    kit.declare(ch, "q")
    kit.consume(ch, "q", "c", no_ack=True)
    assert _deliveries(_flow(kit, ch, 0, False)) == 0
    ready = credit = delivered = 0  # the model
    for step in steps:
        if step[0] == "publish":
            effects: list[Effect] = []
            for _ in range(step[1]):
                effects += kit.publish(ch, "q")
            ready += step[1]
            drained: list[Drained] = []
        else:
            _, credit, drain = step
            effects = _flow(kit, ch, credit, drain)
            drained = [e for e in effects if isinstance(e, Drained)]
        took = min(ready, credit)
        ready -= took
        credit -= took
        delivered += took
        assert _deliveries(effects) == took
        if step[0] == "flow" and step[2]:
            assert [e.credit for e in drained] == [credit]  # what is left is given back
            credit = 0
        else:
            assert drained == []
        assert kit.broker.vhosts["/"].queues["q"].queue.ready_count == ready
    # Back to prefetch alone: everything left flows.
    assert _deliveries(_flow(kit, ch, None, False)) == ready


def test_flow_names_a_known_consumer_and_a_non_negative_credit() -> None:
    import pytest

    from ringmq.core.errors import BrokerError, Condition

    kit = Core()
    session = kit.open()
    kit.declare(session, "q")
    with pytest.raises(BrokerError) as missing:
        kit.broker.delivery.flow(session, "nope", credit=1, drain=False)
    assert missing.value.condition is Condition.NOT_FOUND
    kit.consume(session, "q", "c")
    with pytest.raises(BrokerError) as bad:
        kit.broker.delivery.flow(session, "c", credit=-1, drain=False)
    assert bad.value.condition is Condition.PRECONDITION_FAILED
