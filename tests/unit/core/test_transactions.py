"""Transactions through the broker: commit and rollback, an atomic commit under limits,
tx against confirm mode, acks and mandatory returns held until commit, the Artemis ring's
rollback."""

from __future__ import annotations

from ringmq.amqp import spec
from ringmq.amqp.reply_codes import ReplyCode
from tests.unit.core.kit import Kit, delivered, of_type


def test_tx_commit_and_rollback(kit: Kit) -> None:
    ch = kit.open()
    kit.declare(ch, "q")
    kit.publish(ch, "q", b"pre")
    kit.call(ch, spec.TxSelect())
    kit.publish(ch, "q", b"t1")
    assert kit.broker.vhosts["/"].queues["q"].queue.ready_count == 1
    assert of_type(kit.call(ch, spec.TxCommit()), spec.TxCommitOk)
    assert kit.broker.vhosts["/"].queues["q"].queue.ready_count == 2
    kit.publish(ch, "q", b"discarded")
    (got,) = delivered(kit.call(ch, spec.BasicGet(queue="q")))
    kit.call(ch, spec.BasicAck(delivery_tag=got.method.delivery_tag))
    assert of_type(kit.call(ch, spec.TxRollback()), spec.TxRollbackOk)
    q = kit.broker.vhosts["/"].queues["q"].queue
    assert [m.body for m in q.ready_messages()] == [b"pre", b"t1"]


def test_tx_commit_is_atomic_under_reject_limits(kit: Kit) -> None:
    ch = kit.open()
    kit.declare(ch, "small", arguments={"x-max-length": 2, "x-overflow": "reject-publish"})
    kit.declare(ch, "big")
    kit.call(ch, spec.TxSelect())
    for _ in range(3):
        kit.publish(ch, "small")
    kit.publish(ch, "big")
    err = kit.error(ch, spec.TxCommit())
    assert err.code is ReplyCode.PRECONDITION_FAILED
    queues = kit.broker.vhosts["/"].queues
    assert queues["small"].queue.ready_count == 0
    assert queues["big"].queue.ready_count == 0


def test_tx_and_confirm_modes_exclude_each_other(kit: Kit) -> None:
    ch = kit.open()
    kit.call(ch, spec.ConfirmSelect())
    assert kit.error(ch, spec.TxSelect()).code is ReplyCode.PRECONDITION_FAILED
    ch = kit.open()
    kit.call(ch, spec.TxSelect())
    assert kit.error(ch, spec.ConfirmSelect()).code is ReplyCode.PRECONDITION_FAILED
    ch = kit.open()
    assert kit.error(ch, spec.TxCommit()).code is ReplyCode.PRECONDITION_FAILED


def test_tx_rollback_returns_unacked_to_ring_head_artemis_style(kit: Kit) -> None:
    ch = kit.open()
    kit.declare(ch, "foo", arguments={"x-ring-size": 3})
    kit.call(ch, spec.TxSelect())
    kit.consume(ch, "foo", "c")
    for body in (b"A", b"B", b"C", b"D"):
        kit.publish(ch, "foo", body)
        kit.call(ch, spec.TxCommit())
    kit.call(ch, spec.BasicCancel(consumer_tag="c"))
    kit.call(ch, spec.TxRollback())
    q = kit.broker.vhosts["/"].queues["foo"].queue
    assert [m.body for m in q.ready_messages()] == [b"B", b"C", b"D"]


def test_tx_buffers_acks_until_commit_and_returns_mandatory_at_commit() -> None:
    kit = Kit()
    ch = kit.open()
    kit.declare(ch, "q")
    kit.publish(ch, "q", b"m")
    kit.call(ch, spec.TxSelect())
    (got,) = delivered(kit.call(ch, spec.BasicGet(queue="q")))
    kit.call(ch, spec.BasicAck(delivery_tag=got.method.delivery_tag))
    q = kit.broker.vhosts["/"].queues["q"].queue
    assert q.unacked_count == 1
    assert kit.publish(ch, "nowhere", b"r", mandatory=True) == []
    out = kit.call(ch, spec.TxCommit())
    assert q.unacked_count == 0
    assert [type(m) for m in [d.method for d in delivered(out)]] == [spec.BasicReturn]
    assert of_type(out, spec.TxCommitOk)
