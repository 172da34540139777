"""Artemis address-full policies through the broker: BLOCK blocks and unblocks the
publisher, FAIL is a channel error or a nack, DROP and PAGE."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from ringmq.amqp import spec
from ringmq.amqp.reply_codes import ReplyCode
from ringmq.core.config import BrokerConfig
from ringmq.core.effects import Block, Unblock
from ringmq.storage.bodystore import SpillDirectory
from tests.unit.adapters.amqp091.kit import Kit, delivered, methods


def test_address_full_block_blocks_and_unblocks_the_publisher() -> None:
    cfg = BrokerConfig(
        name_seed=1,
        address_settings={"full.#": {"address-full-policy": "BLOCK", "max-size-messages": 2}},
    )
    kit = Kit(cfg)
    ch = kit.open()
    kit.declare(ch, "full.q")
    assert not any(isinstance(e, Block) for e in kit.publish(ch, "full.q"))
    out = kit.publish(ch, "full.q")
    assert [e for e in out if isinstance(e, Block)] == [
        Block(ch[0], "queue 'full.q' in vhost '/' is full")
    ]
    consumer = kit.open()
    (got,) = delivered(kit.call(consumer, spec.BasicGet(queue="full.q")))
    out = kit.call(consumer, spec.BasicAck(delivery_tag=got.method.delivery_tag))
    assert [e for e in out if isinstance(e, Unblock)] == [Unblock(ch[0])]


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
