"""Artemis address-full policies in the core: BLOCK blocks and unblocks the
publisher, FAIL refuses the publish (a BrokerError) or nacks it, DROP and PAGE."""

from __future__ import annotations

from pathlib import Path

import pytest

from ringmq.core.config import BrokerConfig
from ringmq.core.effects import Block, Confirm, Unblock
from ringmq.core.errors import BrokerError, Condition
from ringmq.core.session import SettleKind
from ringmq.storage.bodystore import SpillDirectory
from tests.unit.core.corekit import Core


def test_address_full_block_blocks_and_unblocks_the_publisher() -> None:
    cfg = BrokerConfig(
        name_seed=1,
        address_settings={"full.#": {"address-full-policy": "BLOCK", "max-size-messages": 2}},
    )
    kit = Core(cfg)
    ch = kit.open()
    kit.declare(ch, "full.q")
    assert not any(isinstance(e, Block) for e in kit.publish(ch, "full.q"))
    out = kit.publish(ch, "full.q")
    assert [e for e in out if isinstance(e, Block)] == [
        Block(ch.conn_id, "queue 'full.q' in vhost '/' is full")
    ]
    consumer = kit.open()
    got = kit.get(consumer, "full.q")
    assert got is not None
    out = kit.settle(consumer, got.delivery_id, SettleKind.ACK)
    assert [e for e in out if isinstance(e, Unblock)] == [Unblock(ch.conn_id)]


def test_artemis_fail_refuses_a_publish_without_confirms_and_nacks_one_with() -> None:
    cfg = BrokerConfig(
        name_seed=7,
        address_settings={"f": {"max-size-messages": 1, "address-full-policy": "FAIL"}},
    )
    kit = Core(cfg)
    ch = kit.open()
    kit.declare(ch, "f")
    kit.publish(ch, "f", b"1")
    with pytest.raises(BrokerError) as err:
        kit.publish(ch, "f", b"2")
    assert err.value.condition is Condition.PRECONDITION_FAILED
    assert "address-full-policy FAIL" in err.value.explanation
    confirm = kit.open()
    kit.broker.confirms.select(confirm)
    nacks = [e for e in kit.publish(confirm, "f", b"3") if isinstance(e, Confirm) and not e.ok]
    assert len(nacks) == 1


@pytest.mark.parametrize("policy", ["DROP", "PAGE"])
def test_artemis_drop_and_page(policy: str, tmp_path: Path) -> None:
    cfg = BrokerConfig(
        name_seed=7,
        address_settings={"a": {"max-size-messages": 2, "address-full-policy": policy}},
    )
    kit = Core(cfg)
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
