"""Paging through the broker: the paging switch, memory bound, resource alarms, Artemis FAIL."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from ringmq.amqp import spec
from ringmq.amqp.reply_codes import ReplyCode
from ringmq.core.config import BrokerConfig
from ringmq.core.effects import Block, Unblock
from ringmq.storage.bodystore import SpillDirectory
from tests.unit.core.kit import Kit, bodies, delivered, methods

# --- broker: paging switch, memory bound, resource alarms -----------------------------------


def test_broker_pages_every_queue_and_tightens_under_pressure(tmp_path: Path) -> None:
    kit = Kit()
    ch = kit.open()
    kit.declare(ch, "before")
    kit.broker.enable_paging(SpillDirectory(tmp_path / "paging"), 10, 1 << 20)
    kit.declare(ch, "after")
    for name in ("before", "after"):
        for i in range(30):
            kit.publish(ch, name, b"%d" % i)
    vh = kit.broker.vhosts["/"]
    assert [vh.queues[n].queue.counters.paged for n in ("before", "after")] == [20, 20]
    assert kit.broker.memory_held_bytes() == 2 * sum(len(b"%d" % i) for i in range(10))
    assert kit.broker.set_memory_bound(2, 1 << 20) == 16
    assert kit.broker.memory_bound == (2, 1 << 20)
    got = []
    for _ in range(31):
        got += [
            d.body
            for d in delivered(kit.call(ch, spec.BasicGet(queue="after", no_ack=True)))
            if isinstance(d.method, spec.BasicGetOk)
        ]
    assert got == [b"%d" % i for i in range(30)]


def test_memory_alarm_blocks_publishers_only_and_clears() -> None:
    kit = Kit()
    pub = kit.open()
    sub = kit.open()
    kit.declare(pub, "q")
    kit.consume(sub, "q", no_ack=True)
    assert kit.broker.set_alarm("memory", "memory alarm: 900 MiB used, watermark 800 MiB") == []
    effects = kit.publish(pub, "q", b"a")
    blocks = [e for e in effects if isinstance(e, Block)]
    assert blocks == [Block(pub[0], "memory alarm: 900 MiB used, watermark 800 MiB")]
    # the consumer got the message and is never blocked
    assert b"a" in bodies(effects)
    assert all(e.conn_id != sub[0] for e in effects if isinstance(e, Block))
    # a second publish (already read) does not block twice
    assert not [e for e in kit.publish(pub, "q", b"b") if isinstance(e, Block)]
    # a disk alarm on top, then clearing memory keeps the connection blocked
    kit.broker.set_alarm("disk", "disk alarm")
    kit.publish(pub, "q", b"c")
    assert kit.broker.set_alarm("memory", None) == []
    assert kit.broker.set_alarm("disk", None) == [Unblock(pub[0])]
    assert kit.broker.alarms == {}
    assert not [e for e in kit.publish(pub, "q", b"d") if isinstance(e, Block)]


def test_alarm_and_address_block_share_the_blocked_state() -> None:
    cfg = BrokerConfig(
        name_seed=7,
        address_settings={"full": {"max-size-messages": 1, "address-full-policy": "BLOCK"}},
    )
    kit = Kit(cfg)
    pub = kit.open()
    kit.declare(pub, "full")
    kit.broker.set_alarm("memory", "memory alarm")
    effects = kit.publish(pub, "full", b"a")
    assert len([e for e in effects if isinstance(e, Block)]) == 1
    assert kit.broker.set_alarm("memory", None) == []  # the full address still blocks


def test_artemis_fail_is_a_channel_error_without_confirms_and_a_nack_with() -> None:
    cfg = BrokerConfig(
        name_seed=7,
        address_settings={"f": {"max-size-messages": 1, "address-full-policy": "FAIL"}},
    )
    kit = Kit(cfg)
    ch = kit.open()
    kit.declare(ch, "f")
    kit.publish(ch, "f", b"1")
    err = kit.error(ch, spec.BasicPublish(routing_key="f"), _content(b"2"))
    assert err.code is ReplyCode.PRECONDITION_FAILED
    assert "address-full-policy FAIL" in err.explanation
    confirm = kit.open()
    kit.call(confirm, spec.ConfirmSelect())
    nacks = [m for m in methods(kit.publish(confirm, "f", b"3")) if isinstance(m, spec.BasicNack)]
    assert len(nacks) == 1


def _content(body: bytes) -> Any:
    from ringmq.amqp.frames import RawContent
    from ringmq.amqp.properties import BasicProperties, encode_properties

    return RawContent(60, len(body), encode_properties(BasicProperties()), body)


@pytest.mark.parametrize("policy", ["DROP", "PAGE"])
def test_artemis_drop_and_page(policy: str, tmp_path: Path) -> None:
    cfg = BrokerConfig(
        name_seed=7,
        address_settings={"a": {"max-size-messages": 2, "address-full-policy": policy}},
    )
    kit = Kit(cfg)
    kit.broker.enable_paging(SpillDirectory(tmp_path / "paging"))
    ch = kit.open()
    kit.declare(ch, "a")
    for i in range(5):
        kit.publish(ch, "a", b"%d" % i)
    q = kit.broker.vhosts["/"].queues["a"].queue
    if policy == "DROP":
        assert q.message_count == 2
        assert q.counters.overflow_dropped == 3
    else:
        assert q.message_count == 5
        assert q.counters.paged == 3  # bodies past the address size went to the body store
        assert [d.message.body for d in iter(lambda: q.fetch(0, False), None)] == [
            b"%d" % i for i in range(5)
        ]


def test_qpid_flow_to_disk_writes_bodies_to_disk_and_reads_them_back(tmp_path: Path) -> None:
    kit = Kit()
    spill = SpillDirectory(tmp_path / "paging")
    kit.broker.enable_paging(spill, 2048, 1 << 20, spill.body_store)
    ch = kit.open()
    kit.declare(ch, "ftd", arguments={"qpid.policy_type": "flow_to_disk", "qpid.max_count": 3})
    for i in range(10):
        kit.publish(ch, "ftd", b"body-%d" % i)
    q = kit.broker.vhosts["/"].queues["ftd"].queue
    assert q.message_count == 10
    assert q.counters.paged == 7
    assert q.counters.memory_bytes == 3 * len(b"body-0")
    body_dirs = [p for p in (tmp_path / "paging").iterdir() if p.name.startswith("b")]
    assert len(body_dirs) == 1
    assert [p for p in body_dirs[0].iterdir() if p.suffix == ".msg"], "spill files exist"
    got = [d.message.body for d in iter(lambda: q.fetch(0, False), None)]
    assert got == [b"body-%d" % i for i in range(10)]
    kit.call(ch, spec.QueueDelete(queue="ftd"))
    assert not [p for p in (tmp_path / "paging").iterdir() if p.name.startswith("b")]
