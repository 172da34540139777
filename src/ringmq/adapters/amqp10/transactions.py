"""AMQP 1.0 transactions (spec part 4) on the core's AMQP transactions.

Theory of operation
-------------------
A client's transaction controller attaches a link whose target is a `Coordinator`; on it, it
sends `Declare` and `Discharge` messages (an amqp-value section each). `Coordinator` answers:

* **declare**: a new transaction, named by a fresh `txn-id`, is a core session of its own in
  transactional mode (`Transactions.select`) on a channel number no AMQP 1.0 session uses
  (`TX_CHANNEL_BASE` + n): the declare transfer is settled with `Declared(txn-id)`;
* a **transactional transfer** (state `TransactionalState(txn-id)`) is published on that core
  session, which buffers it; the transfer is settled at once with
  `TransactionalState(txn-id, accepted)` (the outcome takes effect at the commit);
* a **transactional disposition** of the broker's deliveries (state
  `TransactionalState(txn-id, outcome)`) takes the deliveries out of their own session and
  buffers their settle kind in the transaction (the core session's `tx.settles`, as a
  transactional 0-9-1 channel's own acks are buffered);
* **discharge** with `fail` false commits (`Transactions.commit`: every buffered settle, then
  every publish, all or nothing, synced before the answer), with `fail` true rolls back
  (`Transactions.rollback`: the buffered settles' messages return to their queues' heads, the
  publishes are dropped); either way the core session closes. A commit the core refuses
  settles the discharge as `rejected` with `amqp:transaction:rollback`; an unknown txn-id as
  `rejected` with `amqp:transaction:unknown-id`. A transactional transfer or disposition
  naming an unknown txn-id is refused like any other (`amqp:not-found`).

Transactions of a connection that goes away are rolled back by the core's connection close.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Final

from ringmq.amqp10 import conditions as c
from ringmq.amqp10 import performatives as p
from ringmq.amqp10.codec import decode
from ringmq.amqp10.composite import decode_composite
from ringmq.amqp10.connection import error
from ringmq.amqp10.types import DecodeError
from ringmq.core.errors import BrokerError, Condition
from ringmq.core.session import Session, SettleKind, Unacked

if TYPE_CHECKING:
    from ringmq.amqp10.connection import Connection
    from ringmq.amqp10.events import MessageReceived
    from ringmq.core.broker import Broker

TX_CHANNEL_BASE: Final = 1 << 17
"""Core session numbers of transactions: above every AMQP 1.0 channel."""
_AMQP_VALUE: Final = 0x77


def control(payload: bytes) -> Any:
    """The `Declare` or `Discharge` a controller's message carries in its amqp-value section
    (the sections before it, a header or properties, are skipped).

    Raises:
        DecodeError: no such section.
    """
    off = 0
    while off < len(payload):
        if payload[off] != 0:
            raise DecodeError("a message section must be a described type")
        descriptor, off = decode(payload, off + 1)
        if descriptor == _AMQP_VALUE or descriptor == "amqp:amqp-value:*":
            value, _ = decode_composite(payload, off)
            if not isinstance(value, p.Declare | p.Discharge):
                raise DecodeError(f"{type(value).__name__} on a coordinator link")
            return value
        _, off = decode(payload, off)
    raise DecodeError("a transaction control message needs an amqp-value section")


class Coordinator:
    """The transactions of one connection (see the module docstring)."""

    def __init__(self, broker: Broker, conn: Connection, conn_id: int) -> None:
        self.broker = broker
        self.conn = conn
        self.conn_id = conn_id
        self.txns: dict[bytes, Session] = {}
        self.ended: list[int] = []
        """Core sessions of discharged transactions, to close after the call."""
        self._next = 0

    def session(self, state: Any) -> Session | None:
        """The transaction a delivery state names (None: not transactional).

        Raises:
            BrokerError: NOT_FOUND for an unknown txn-id.
        """
        if not isinstance(state, p.TransactionalState):
            return None
        s = self.txns.get(state.txn_id)
        if s is None:
            raise BrokerError(Condition.NOT_FOUND, f"no transaction {state.txn_id.hex()}")
        return s

    def control(self, ev: MessageReceived, now_ms: int) -> None:
        """A message on a coordinator link: declare or discharge."""
        try:
            msg = control(ev.payload)
        except DecodeError as exc:
            self._settle(ev, p.Rejected(error=error(c.DECODE_ERROR, str(exc))))
            return
        if isinstance(msg, p.Declare):
            self._next += 1
            txn_id = self._next.to_bytes(4, "big")
            channel = TX_CHANNEL_BASE + self._next
            b = self.broker
            b.channel_opened(self.conn_id, channel, now_ms, part_of=ev.channel)
            s = b.session(self.conn_id, channel)
            assert s is not None
            b.transactions.select(s)
            self.txns[txn_id] = s
            self._settle(ev, p.Declared(txn_id=txn_id))
            return
        s = self.txns.pop(msg.txn_id, None)
        if s is None:
            why = f"no transaction {msg.txn_id.hex()}"
            self._settle(ev, p.Rejected(error=error(c.TRANSACTION_UNKNOWN_ID, why)))
            return
        outcome: Any = p.Accepted()
        try:
            if msg.fail:
                self.broker.transactions.rollback(s, now_ms)
            else:
                self.broker.transactions.commit(s, now_ms)
        except BrokerError as exc:
            self.broker.transactions.rollback(s, now_ms)
            outcome = p.Rejected(error=error(c.TRANSACTION_ROLLBACK, exc.text))
        self.ended.append(s.channel)
        self._settle(ev, outcome)

    def _settle(self, ev: MessageReceived, state: Any) -> None:
        if not ev.settled:
            self.conn.settle(ev.channel, ev.delivery_id, ev.delivery_id, state)

    @staticmethod
    def buffer_settles(txn: Session, kind: SettleKind, entries: list[Unacked]) -> None:
        """Buffer settles of deliveries (taken from their own session) in transaction `txn`."""
        assert txn.tx is not None
        txn.tx.settles.append((kind, entries))
