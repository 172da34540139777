"""Consumer timeouts in the core: a delivery unacknowledged past its queue's (or the broker's)
timeout ends its consumer, returns its messages and asks the protocol to close the session."""

from __future__ import annotations

from ringmq.core.config import BrokerConfig
from ringmq.core.effects import CloseChannel, Effect
from ringmq.core.errors import Condition
from ringmq.core.session import SettleKind
from tests.unit.core.corekit import Core, bodies


def closes(effects: list[Effect]) -> list[CloseChannel]:
    return [e for e in effects if isinstance(e, CloseChannel)]


TEXT = (
    "delivery acknowledgement on channel 1 timed out. Timeout value used: {} ms. "
    "This timeout value can be configured, see consumers doc guide to learn more"
)


def test_queue_argument_timeout_closes_the_channel_and_requeues() -> None:
    kit = Core()
    ch = kit.open()
    kit.declare(ch, "q", {"x-consumer-timeout": 100})
    kit.publish(ch, "q", b"m")
    assert len(bodies(kit.consume(ch, "q", "c"))) == 1
    assert closes(kit.tick(99)) == []
    (close,) = closes(kit.tick(1))
    assert close == CloseChannel(1, 1, "c", Condition.PRECONDITION_FAILED, TEXT.format(100))
    q = kit.broker.vhosts["/"].queues["q"]
    assert q.queue.ready_count == 1
    assert not q.consumers.all


def test_broker_default_and_the_lower_of_argument_and_policy() -> None:
    kit = Core(BrokerConfig(name_seed=7, consumer_timeout_ms=1000))
    kit.broker.policies.set("short", "^p", {"consumer-timeout": 50})
    ch = kit.open()
    kit.declare(ch, "other")
    kit.declare(ch, "p", {"x-consumer-timeout": 500})
    queues = kit.broker.vhosts["/"].queues
    assert queues["other"].settings.consumer_timeout_ms is None
    assert queues["p"].settings.consumer_timeout_ms == 50
    kit.publish(ch, "other", b"m")
    kit.get(ch, "other")
    assert closes(kit.tick(999)) == []
    (close,) = closes(kit.tick(1))
    assert close.consumer_tag is None
    assert close.text == TEXT.format(1000)


def test_acknowledged_in_time_closes_nothing() -> None:
    kit = Core(BrokerConfig(name_seed=7, consumer_timeout_ms=100))
    ch = kit.open()
    kit.declare(ch, "q")
    kit.publish(ch, "q", b"m")
    kit.consume(ch, "q", "c")
    kit.tick(50)
    kit.settle(ch, 1, SettleKind.ACK)
    assert closes(kit.tick(500)) == []
    assert kit.broker.timers.next_deadline_ms() is None
