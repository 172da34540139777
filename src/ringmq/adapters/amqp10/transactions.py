"""AMQP 1.0 transactions (spec part 4) on the core's declared transactions.

Theory of operation
-------------------
A client's transaction controller attaches a link whose target is a `Coordinator`; on it, it
sends `Declare` and `Discharge` messages (an amqp-value section each). `Coordinator` answers:

* **declare**: a new transaction is declared on the core session of the coordinator link's
  AMQP 1.0 session (`Transactions.declare`: a transaction of its own beside the session's
  publish mode, named by the core's id on that session); the declare transfer is settled with
  `Declared(txn-id)`, a fresh number of the connection that maps to (core session, core id):
  a link of any session of the connection may name it;
* a **transactional transfer** (state `TransactionalState(txn-id)`) is published into that
  transaction (`Publisher.publish_in`), which buffers it; the transfer is settled at once
  with `TransactionalState(txn-id, accepted)` (the outcome takes effect at the commit);
* a **transactional disposition** of the broker's deliveries (state
  `TransactionalState(txn-id, outcome)`) takes the deliveries out of their own session and
  buffers their settle kind in the transaction (`Transactions.buffer_settles`);
* **discharge** with `fail` false commits (`Transactions.commit`: every buffered settle, then
  every publish, all or nothing, synced before the answer), with `fail` true rolls back
  (`Transactions.rollback`: the buffered settles' messages return to their queues' heads, the
  publishes are dropped); either way the transaction ends. A commit the core refuses (it
  rolls the transaction back) settles the discharge as `rejected` with
  `amqp:transaction:rollback`; an unknown txn-id as `rejected` with
  `amqp:transaction:unknown-id`. A transactional transfer or disposition naming an unknown
  txn-id is refused like any other (`amqp:not-found`).

So an AMQP 1.0 connection has exactly one core session per AMQP 1.0 session. The core rolls
back a session's transactions when it closes (the session ends, or the connection goes
away); the coordinator forgets them then (`forget`).
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
from ringmq.core.session import Session

if TYPE_CHECKING:
    from ringmq.amqp10.connection import Connection
    from ringmq.amqp10.events import MessageReceived
    from ringmq.core.broker import Broker

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

    def __init__(self, broker: Broker, conn: Connection) -> None:
        self.broker = broker
        self.conn = conn
        self.txns: dict[bytes, tuple[Session, int]] = {}
        """txn-id -> the core session that holds the transaction, and its id there."""
        self._next = 0

    def named(self, state: Any) -> tuple[Session, int] | None:
        """The transaction a delivery state names: (core session, core id); None when the
        state is not transactional.

        Raises:
            BrokerError: NOT_FOUND for an unknown txn-id.
        """
        if not isinstance(state, p.TransactionalState):
            return None
        txn = self.txns.get(state.txn_id)
        if txn is None:
            raise BrokerError(Condition.NOT_FOUND, f"no transaction {state.txn_id.hex()}")
        return txn

    def control(self, ev: MessageReceived, session: Session, now_ms: int) -> None:
        """A message on a coordinator link of core session `session`: declare or
        discharge."""
        try:
            msg = control(ev.payload)
        except DecodeError as exc:
            self._settle(ev, p.Rejected(error=error(c.DECODE_ERROR, str(exc))))
            return
        transactions = self.broker.transactions
        if isinstance(msg, p.Declare):
            self._next += 1
            txn_id = self._next.to_bytes(4, "big")
            self.txns[txn_id] = (session, transactions.declare(session))
            self._settle(ev, p.Declared(txn_id=txn_id))
            return
        txn = self.txns.pop(msg.txn_id, None)
        if txn is None:
            why = f"no transaction {msg.txn_id.hex()}"
            self._settle(ev, p.Rejected(error=error(c.TRANSACTION_UNKNOWN_ID, why)))
            return
        s, core_id = txn
        outcome: Any = p.Accepted()
        try:
            if msg.fail:
                transactions.rollback(s, now_ms, core_id)
            else:
                transactions.commit(s, now_ms, core_id)  # refused: rolled back
        except BrokerError as exc:
            outcome = p.Rejected(error=error(c.TRANSACTION_ROLLBACK, exc.text))
        self._settle(ev, outcome)

    def forget(self, session: Session) -> None:
        """`session` closes (the core rolls back its transactions): their txn-ids are
        unknown from now on."""
        for txn_id in [t for t, (s, _id) in self.txns.items() if s is session]:
            del self.txns[txn_id]

    def _settle(self, ev: MessageReceived, state: Any) -> None:
        if not ev.settled:
            self.conn.settle(ev.channel, ev.delivery_id, ev.delivery_id, state)
