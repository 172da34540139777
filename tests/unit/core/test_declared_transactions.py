"""Transactions declared on a session by id (`Transactions.declare`), beside its publish mode:
what AMQP 1.0's coordinator needs from the core, driven through the core's own API.

A session may hold any number of them; each buffers its publishes (`Publisher.publish_in`)
and settles (`Transactions.buffer_settles`) until its commit or rollback ends it; a refused
commit ends it rolled back; closing the session rolls back every one.
"""

from __future__ import annotations

import pytest

from ringmq.core.errors import BrokerError, Condition
from ringmq.core.published import BUFFERED
from ringmq.core.session import PublishMode, Session, SettleKind
from tests.unit.core.corekit import Core, message


def _publish_in(core: Core, s: Session, txn: int, body: bytes, rk: str = "q") -> str:
    publisher = core.broker.publisher
    with core.broker.call(core.now, publish=True):
        _vh, x = publisher.exchange_for(s, "")
        return publisher.publish_in(txn, message(rk, body), session=s, exchange=x).outcome


def _take(core: Core, s: Session, queue: str, n: int) -> list[int]:
    ids = []
    for _ in range(n):
        got = core.get(s, queue)
        assert got is not None
        ids.append(got.delivery_id)
    return ids


def test_a_declared_transaction_holds_its_publishes_until_its_commit() -> None:
    core = Core()
    s = core.open()
    core.declare(s, "q")
    tx = core.broker.transactions
    txn = tx.declare(s)
    assert _publish_in(core, s, txn, b"a") == BUFFERED
    assert _publish_in(core, s, txn, b"b") == BUFFERED
    assert core.ready("q") == []
    core.run(tx.commit, s, core.now, txn)
    assert core.ready("q") == [b"a", b"b"]
    assert s.txns == {}  # the commit ended it
    with pytest.raises(BrokerError) as err:
        core.run(tx.commit, s, core.now, txn)
    assert err.value.condition is Condition.NOT_FOUND


def test_transactions_of_one_session_are_independent_of_each_other_and_of_its_mode() -> None:
    core = Core()
    s = core.open()
    core.declare(s, "q")
    tx = core.broker.transactions
    core.broker.confirms.select(s)
    first, second = tx.declare(s), tx.declare(s)
    assert first != second
    _publish_in(core, s, first, b"one")
    _publish_in(core, s, second, b"two")
    core.publish(s, "q", b"plain")
    assert core.published is not None
    assert core.published.outcome == "accepted"  # not buffered: confirmed
    assert s.mode is PublishMode.CONFIRM
    core.run(tx.rollback, s, core.now, second)
    core.run(tx.commit, s, core.now, first)
    assert core.ready("q") == [b"plain", b"one"]


def test_settles_wait_for_the_end_and_a_rollback_returns_them_only() -> None:
    core = Core()
    conn = core.connect()
    owner, consumer = core.session(conn, 1), core.session(conn, 2)
    core.declare(owner, "q")
    for body in (b"m1", b"m2", b"m3", b"m4"):
        core.publish(owner, "q", body)
    tx = core.broker.transactions
    txn = tx.declare(owner)
    ids = _take(core, consumer, "q", 3)
    # two deliveries of another session of the connection settle in the transaction
    entries = [e for i in ids[:2] for e in consumer.take(i, False)]
    tx.buffer_settles(owner, txn, SettleKind.ACK, entries)
    assert core.queue("q").unacked_count == 3
    core.run(tx.rollback, owner, core.now, txn)
    # the two come back to the head; the third stays with its session
    assert core.ready("q") == [b"m1", b"m2", b"m4"]
    assert list(consumer.unacked) == [ids[2]]
    txn = tx.declare(owner)
    (again,) = _take(core, consumer, "q", 1)
    tx.buffer_settles(owner, txn, SettleKind.ACK, consumer.take(again, False))
    core.run(tx.commit, owner, core.now, txn)
    assert core.ready("q") == [b"m2", b"m4"]
    assert core.queue("q").unacked_count == 1


def test_a_refused_commit_ends_the_transaction_rolled_back() -> None:
    core = Core()
    s = core.open()
    core.declare(s, "small", {"x-max-length": 1, "x-overflow": "reject-publish"})
    core.declare(s, "q")
    core.publish(s, "q", b"held")
    tx = core.broker.transactions
    txn = tx.declare(s)
    (held,) = _take(core, s, "q", 1)
    tx.buffer_settles(s, txn, SettleKind.ACK, s.take(held, False))
    _publish_in(core, s, txn, b"1", "small")
    _publish_in(core, s, txn, b"2", "small")
    with pytest.raises(BrokerError) as err:
        core.run(tx.commit, s, core.now, txn)
    assert err.value.condition is Condition.PRECONDITION_FAILED
    assert s.txns == {}
    assert core.ready("small") == []
    assert core.ready("q") == [b"held"]  # its settle was rolled back


def test_closing_the_session_rolls_back_its_transactions() -> None:
    core = Core()
    conn = core.connect()
    s = core.session(conn)
    core.declare(s, "q")
    core.publish(s, "q", b"m")
    tx = core.broker.transactions
    txn = tx.declare(s)
    (got,) = _take(core, s, "q", 1)
    tx.buffer_settles(s, txn, SettleKind.ACK, s.take(got, False))
    _publish_in(core, s, txn, b"dropped")
    core.broker.channel_closed(conn, 1, core.now)
    assert core.ready("q") == [b"m"]
    assert s.txns == {}


def test_a_publish_into_an_unknown_transaction_is_refused() -> None:
    core = Core()
    s = core.open()
    core.declare(s, "q")
    with pytest.raises(BrokerError) as err:
        _publish_in(core, s, 7, b"x")
    assert err.value.condition is Condition.NOT_FOUND
    assert core.broker.stats["published"] == 0
