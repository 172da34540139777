"""Resource alarms in the core: a memory or disk alarm blocks publishers only, until
every alarm and full address has cleared."""

from __future__ import annotations

from ringmq.core.config import BrokerConfig
from ringmq.core.effects import Block, Unblock
from tests.unit.core.corekit import Core, bodies


def test_memory_alarm_blocks_publishers_only_and_clears() -> None:
    kit = Core()
    pub = kit.open()
    sub = kit.open()
    kit.declare(pub, "q")
    kit.consume(sub, "q", "c", no_ack=True)
    assert kit.broker.set_alarm("memory", "memory alarm: 900 MiB used, watermark 800 MiB") == []
    effects = kit.publish(pub, "q", b"a")
    blocks = [e for e in effects if isinstance(e, Block)]
    assert blocks == [Block(pub.conn_id, "memory alarm: 900 MiB used, watermark 800 MiB")]
    # the consumer got the message and is never blocked
    assert b"a" in bodies(effects)
    assert all(e.conn_id != sub.conn_id for e in effects if isinstance(e, Block))
    # a second publish (already read) does not block twice
    assert not [e for e in kit.publish(pub, "q", b"b") if isinstance(e, Block)]
    # a disk alarm on top, then clearing memory keeps the connection blocked
    kit.broker.set_alarm("disk", "disk alarm")
    kit.publish(pub, "q", b"c")
    assert kit.broker.set_alarm("memory", None) == []
    assert kit.broker.set_alarm("disk", None) == [Unblock(pub.conn_id)]
    assert kit.broker.alarms == {}
    assert not [e for e in kit.publish(pub, "q", b"d") if isinstance(e, Block)]


def test_alarm_and_address_block_share_the_blocked_state() -> None:
    cfg = BrokerConfig(
        name_seed=7,
        address_settings={"full": {"max-size-messages": 1, "address-full-policy": "BLOCK"}},
    )
    kit = Core(cfg)
    pub = kit.open()
    kit.declare(pub, "full")
    kit.broker.set_alarm("memory", "memory alarm")
    effects = kit.publish(pub, "full", b"a")
    assert len([e for e in effects if isinstance(e, Block)]) == 1
    assert kit.broker.set_alarm("memory", None) == []  # the full address still blocks
