"""AMQP 1.0 transactions on the handler, without sockets: a transaction lives in the core
session of its coordinator link's AMQP 1.0 session (no core session of its own); a link of
another session of the connection may name it; ending that session rolls it back."""

from __future__ import annotations

from typing import Any

from ringmq.amqp10 import performatives as p
from ringmq.amqp10.encoder import encode
from ringmq.amqp10.frames import encode_frame
from ringmq.amqp10.sections import AMQP_VALUE
from ringmq.amqp10.types import ULong
from ringmq.core.broker import Broker
from tests.unit.adapters.amqp10.test_handler import Client, body, login, route


def _control(value: p.Declare | p.Discharge) -> bytes:
    # a controller's message: one amqp-value section holding the Declare or Discharge
    return b"\x00" + encode(ULong(AMQP_VALUE)) + value.encode()


def _begin(c: Client, channel: int) -> None:
    begin = p.Begin(next_outgoing_id=0, incoming_window=1000, outgoing_window=9)
    c.send(encode_frame(channel, begin))
    c.read()


def _attach(c: Client, channel: int, handle: int, target: Any) -> None:
    c.send(encode_frame(channel, p.Attach(name=f"l{channel}-{handle}", handle=handle,
                                           role=p.ROLE_SENDER, target=target)))  # fmt: skip
    c.read()


def _send(c: Client, channel: int, handle: int, did: int, payload: bytes, state: Any = None) -> Any:
    t = p.Transfer(handle=handle, delivery_id=did, delivery_tag=b"%d" % did, state=state)
    route([c], c.send(encode_frame(channel, t, payload)))
    (outcome,) = [d.state for d in c.read() if isinstance(d, p.Disposition)]
    return outcome


def test_a_transaction_is_no_core_session_and_ends_with_its_session() -> None:
    b = Broker()
    c = Client(b, 1)
    login(c)
    _begin(c, 0)  # the controller's session
    _begin(c, 1)  # the producer's session
    _attach(c, 0, 0, p.Coordinator())
    _attach(c, 1, 0, p.Target("q"))
    q = b.vhosts["/"].queues["q"].queue

    declared = _send(c, 0, 0, 0, _control(p.Declare()))
    assert isinstance(declared, p.Declared)
    tid = declared.txn_id
    sent = _send(c, 1, 0, 0, body(b"t1"), p.TransactionalState(txn_id=tid))
    assert sent == p.TransactionalState(txn_id=tid, outcome=p.Accepted())
    assert sorted(b.conns[1].sessions) == [0, 1]  # the connection's two sessions, no more
    assert q.ready_count == 0
    assert _send(c, 0, 0, 1, _control(p.Discharge(txn_id=tid, fail=False))) == p.Accepted()
    assert q.ready_count == 1

    # A transaction whose session ends is rolled back: its id is unknown afterwards.
    tid = _send(c, 0, 0, 2, _control(p.Declare())).txn_id
    _send(c, 1, 0, 1, body(b"t2"), p.TransactionalState(txn_id=tid))
    route([c], c.send(encode_frame(0, p.End())))
    c.read()
    assert sorted(b.conns[1].sessions) == [1]
    _attach(c, 1, 1, p.Coordinator())
    refused = _send(c, 1, 1, 2, _control(p.Discharge(txn_id=tid, fail=False)))
    assert isinstance(refused, p.Rejected)
    assert refused.error is not None
    assert refused.error.condition == "amqp:transaction:unknown-id"
    assert q.ready_count == 1
