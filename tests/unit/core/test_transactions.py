"""A session's own transaction (`Transactions.select`, commit, rollback) on the core's API:
commit and rollback, an atomic commit under limits, transactional against confirm mode,
settles and mandatory returns held until commit, the Artemis ring's rollback."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from ringmq.core.effects import Bounce, Effect
from ringmq.core.errors import BrokerError, Condition
from ringmq.core.session import Session, SettleKind
from tests.unit.core.corekit import Core


def _commit(core: Core, s: Session) -> list[Effect]:
    return core.run(core.broker.transactions.commit, s, core.now)


def _rollback(core: Core, s: Session) -> list[Effect]:
    return core.run(core.broker.transactions.rollback, s, core.now)


def _refused(core: Core, step: Callable[..., Any], *args: Any) -> Condition:
    with pytest.raises(BrokerError) as err:
        core.run(step, *args)
    return err.value.condition


def test_tx_commit_and_rollback() -> None:
    core = Core()
    s = core.open()
    core.declare(s, "q")
    core.publish(s, "q", b"pre")
    core.broker.transactions.select(s)
    core.publish(s, "q", b"t1")
    assert core.queue("q").ready_count == 1
    _commit(core, s)
    assert core.queue("q").ready_count == 2
    core.publish(s, "q", b"discarded")
    got = core.get(s, "q")
    assert got is not None
    core.settle(s, got.delivery_id, SettleKind.ACK)
    _rollback(core, s)
    assert core.ready("q") == [b"pre", b"t1"]


def test_tx_commit_is_atomic_under_reject_limits() -> None:
    core = Core()
    s = core.open()
    core.declare(s, "small", {"x-max-length": 2, "x-overflow": "reject-publish"})
    core.declare(s, "big")
    core.broker.transactions.select(s)
    for _ in range(3):
        core.publish(s, "small")
    core.publish(s, "big")
    transactions = core.broker.transactions
    assert _refused(core, transactions.commit, s, core.now) is Condition.PRECONDITION_FAILED
    assert core.queue("small").ready_count == 0
    assert core.queue("big").ready_count == 0


def test_tx_and_confirm_modes_exclude_each_other() -> None:
    core = Core()
    b = core.broker
    s = core.open()
    b.confirms.select(s)
    assert _refused(core, b.transactions.select, s) is Condition.PRECONDITION_FAILED
    s = core.open()
    b.transactions.select(s)
    assert _refused(core, b.confirms.select, s) is Condition.PRECONDITION_FAILED
    s = core.open()
    assert _refused(core, b.transactions.commit, s, core.now) is Condition.PRECONDITION_FAILED


def test_tx_rollback_returns_unacked_to_ring_head_artemis_style() -> None:
    core = Core()
    s = core.open()
    core.declare(s, "foo", {"x-ring-size": 3})
    core.broker.transactions.select(s)
    core.consume(s, "foo", "c")
    for body in (b"A", b"B", b"C", b"D"):
        core.publish(s, "foo", body)
        _commit(core, s)
    core.run(core.broker.delivery.cancel, s, "c", core.now)
    _rollback(core, s)
    assert core.ready("foo") == [b"B", b"C", b"D"]


def test_tx_buffers_acks_until_commit_and_returns_mandatory_at_commit() -> None:
    core = Core()
    s = core.open()
    core.declare(s, "q")
    core.publish(s, "q", b"m")
    core.broker.transactions.select(s)
    got = core.get(s, "q")
    assert got is not None
    core.settle(s, got.delivery_id, SettleKind.ACK)
    q = core.queue("q")
    assert q.unacked_count == 1
    assert core.publish(s, "nowhere", b"r", mandatory=True) == []
    out = _commit(core, s)
    assert q.unacked_count == 0
    assert [(type(e), e.message.body) for e in out if isinstance(e, Bounce)] == [(Bounce, b"r")]
