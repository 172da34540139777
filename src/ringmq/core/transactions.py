"""Publisher confirms and transactions.

Theory of operation
-------------------
**Confirms.** A session in confirm mode numbers its publishes (`Session.next_publish_seq`).
`confirm_publish` settles one: refused by some queue -> a negative `Confirm`; persisted to a
durable queue under `BrokerConfig.delay_persistent_confirms` -> held until the storage layer
calls `confirm_stored` after the group-commit fsync covering it (`drain_unconfirmed` tells the
server which are held; `fail_unconfirmed` refuses them when the write failed); a publish that
reached only stream queues under `BrokerConfig.stream_confirm` `written` is held instead until
the server has handed the batch's writes to the OS (`drain_unwritten`, then `confirm_stored` as
well); otherwise confirmed at once. A publish that also reached other shards' queues
(core/forwarding.py) is held until each of their owners has answered too (`confirm_joined`,
`forwards_resolved`: the last answer due confirms it, any refusal nacks it). Consecutive
confirms are coalesced into one `multiple` confirm when the session's confirmed floor moves
past several, never over a nacked or held publish (`Session.confirm_acks`,
`Session.confirm_nack`: the one place of that rule).

**Transactions** (AMQP tx, Artemis' rollback rule). Publishes and settles are buffered on the
session. `commit` first routes every buffered publish and checks each reject-type limit for
the whole batch (a queue that would refuse any message fails the commit with 406 and nothing
is applied), then applies settles and publishes in order, as one store transaction synced
before the commit is answered. `rollback` discards the buffer and returns every delivered
unacked message of the session to its queue head in consumption order (Artemis: the ring keeps
its tail); their old delivery ids become unknown.

A session holds either kind of transaction (`session.py`): its own, in transactional mode
(`select`: every publish and settle of the session is buffered, and a commit or rollback
starts the next one), or any number **declared** by id beside its publish mode (`declare`:
AMQP 1.0's transactions, which each transfer or disposition names; one publishes with
`Publisher.publish_in`, settles with `buffer_settles`). A declared transaction ends with its
commit or rollback (`txn=` its id); a commit the core refuses rolls it back. Rolling one back
returns the deliveries its settles took, not the session's other unacked deliveries, which
are not part of it. Closing the session rolls back every transaction it holds.

Pure: no I/O, no clock.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Final, Protocol

from ringmq.core.effects import Confirm
from ringmq.core.entities import QueueEntity, Unacked
from ringmq.core.errors import BrokerError, Condition
from ringmq.core.exchange import Exchange
from ringmq.core.routing import ExchangeType
from ringmq.core.session import PublishMode, Session, SettleKind, TxPublish, TxState
from ringmq.core.state import State
from ringmq.core.vhost import VHost

if TYPE_CHECKING:
    from ringmq.core.delivery import Delivery
    from ringmq.core.message import Message


STORE_FAILED: Final = "store-failed"
"""The store could not make a persisted publish durable (a write or fsync failed)."""


class Confirms:
    """Publisher confirms (see the module docstring)."""

    def __init__(self, state: State) -> None:
        self.state = state
        self._unconfirmed: list[tuple[int, int, int]] = []
        self._unwritten: list[tuple[int, int, int]] = []

    def select(self, s: Session) -> None:
        """Put `s` in confirm mode."""
        if s.mode is PublishMode.TX:
            raise BrokerError(
                Condition.PRECONDITION_FAILED, "cannot switch from tx to confirm mode"
            )
        s.mode = PublishMode.CONFIRM

    def confirm_publish(
        self,
        s: Session,
        seq: int,
        refused: str | None,
        stored: bool,
        released: list[int] | None = None,
        written: bool = False,
    ) -> None:
        """Settle publish `seq` of `s`: refused (why), held for the fsync (`stored`), held
        until written to the OS (`written`: it reached only streams under the `written`
        confirm rule), or confirmed now; in a batch (`released`: the batch's acks, sent by its
        caller at its end) the ack joins them, and a refusal sends them first, so that the
        session's order is kept."""
        if refused:
            if released:
                self.send(s, released)
                released.clear()
            self.refuse(s, seq, refused)
        elif stored and self.state.config.delay_persistent_confirms:
            self.hold(s, seq)
        elif written and self.state.config.delay_persistent_confirms:
            s.confirm_held.add(seq)
            self._unwritten.append((s.conn_id, s.channel, seq))
        elif released is not None:
            released.append(seq)
        else:
            self.send(s, [seq])

    def confirm_joined(
        self,
        s: Session,
        seq: int,
        refused: str | None,
        stored: bool,
        written: bool,
        owners: int,
        released: list[int] | None = None,
    ) -> None:
        """`confirm_publish` for a publish that also went to `owners` other shards' queues
        (core/forwarding.py): held until each owner has answered (`forwards_resolved`) and,
        where it was held for the local fsync or write, until the store has released it too;
        a local refusal nacks it at once."""
        if refused or not owners:
            self.confirm_publish(s, seq, refused, stored, released, written)
            return
        answers = owners
        if self.state.config.delay_persistent_confirms:
            if stored:
                answers += 1
                self._unconfirmed.append((s.conn_id, s.channel, seq))
            elif written:
                answers += 1
                self._unwritten.append((s.conn_id, s.channel, seq))
        s.confirm_held.add(seq)
        s.confirm_waits[seq] = answers

    def forwards_resolved(self, answers: Iterable[tuple[int, int, int, str | None]]) -> None:
        """Owners answered for publishes (conn_id, channel, publish seq, why refused or None
        when stored): the last answer due confirms a publish, a refusal nacks it at once; an
        unknown or already settled seq is ignored. The confirms of one session go out
        together (coalesced into multiple acks where they can)."""
        stored: dict[tuple[int, int], list[int]] = {}
        for conn_id, channel, seq, refused in answers:
            s = self._session(conn_id, channel)
            if s is None or seq not in s.confirm_waits:  # settled, or never forwarded
                continue
            if refused:
                self.refuse(s, seq, refused)
            else:
                stored.setdefault((conn_id, channel), []).append(seq)
        for (conn_id, channel), seqs in stored.items():
            s = self._session(conn_id, channel)
            assert s is not None
            released = self._last_answers(s, [q for q in seqs if q in s.confirm_waits])
            if released:
                self.send(s, released)

    @staticmethod
    def _last_answers(s: Session, seqs: list[int]) -> list[int]:
        # The seqs whose answer now is the last one due (`confirm_joined`); the others count one
        # answer down and stay held.
        waits = s.confirm_waits
        if not waits:
            return seqs
        out = []
        for q in seqs:
            due = waits.get(q)
            if due is None:
                out.append(q)
            elif due > 1:
                waits[q] = due - 1
            else:
                del waits[q]
                out.append(q)
        return out

    def hold(self, s: Session, seq: int) -> None:
        """Hold the confirm of publish `seq` until the store says it is durable."""
        s.confirm_held.add(seq)
        self._unconfirmed.append((s.conn_id, s.channel, seq))

    def send(self, s: Session, released: list[int]) -> None:
        """Confirm the publishes `released` (coalesced by `Session.confirm_acks`)."""
        out = self.state.out
        # messages confirmed, however the acks coalesce (RabbitMQ's `confirm` counts messages)
        self.state.stats["confirmed"] += len(released)
        s.counts.confirmed += len(released)
        for tag, multiple in s.confirm_acks(released):
            out.append(Confirm(s.conn_id, s.channel, tag, multiple, True))

    def refuse(self, s: Session, seq: int, reason: str) -> None:
        """Refuse publish `seq` (`reason`): a negative confirm, which later multiple acks
        do not cover."""
        self.state.stats["nacked"] += 1
        s.confirm_nack(seq)
        self.state.out.append(Confirm(s.conn_id, s.channel, seq, False, False, reason))

    def drain_unconfirmed(self) -> list[tuple[int, int, int]]:
        """(conn_id, channel, publish seq) of confirms held since the last call."""
        out, self._unconfirmed = self._unconfirmed, []
        return out

    def drain_unwritten(self) -> list[tuple[int, int, int]]:
        """(conn_id, channel, publish seq) of confirms held until written, since the last
        call."""
        out, self._unwritten = self._unwritten, []
        return out

    def _session(self, conn_id: int, channel: int) -> Session | None:
        conn = self.state.conns.get(conn_id)
        return conn.sessions.get(channel) if conn is not None else None

    def confirm_stored(self, conn_id: int, channel: int, seqs: Iterable[int]) -> None:
        """The publishes `seqs` of a confirm session are durable: confirm them (unknown seqs
        are ignored)."""
        s = self._session(conn_id, channel)
        if s is None:
            return
        released = self._last_answers(s, [q for q in seqs if q in s.confirm_held])
        if released:
            self.send(s, released)

    def fail_unconfirmed(self, conn_id: int, channel: int, seqs: Iterable[int]) -> None:
        """The store could not make publishes `seqs` durable: refuse each (unknown seqs are
        ignored) so the publisher may retry."""
        s = self._session(conn_id, channel)
        if s is None:
            return
        held = s.confirm_held
        failed = sorted(q for q in seqs if q in held)
        out = self.state.out
        for q in failed:
            s.confirm_nack(q)
            out.append(Confirm(conn_id, channel, q, False, False, STORE_FAILED))
        if failed:
            self.state.stats["nacked"] += len(failed)


class Router(Protocol):
    """What a commit replays of the publish pipeline: its routing and enqueue steps
    (`Publisher.route`; `publish.py` imports this module for `Confirms`, so it is named here
    by what it provides rather than imported)."""

    def route(
        self,
        msg: Message,
        *,
        vhost: VHost,
        exchange: Exchange,
        now_ms: int,
        session: Session | None = None,
        mandatory: bool = False,
    ) -> object: ...


class Transactions:
    """AMQP transactions with Artemis' rollback rule (see the module docstring)."""

    def __init__(self, state: State, publisher: Router, delivery: Delivery) -> None:
        self.state = state
        self.publisher = publisher
        self.delivery = delivery

    @staticmethod
    def select(s: Session) -> None:
        """Put `s` in transactional mode."""
        if s.mode is PublishMode.CONFIRM:
            raise BrokerError(
                Condition.PRECONDITION_FAILED, "cannot switch from confirm to tx mode"
            )
        if s.tx is None:
            s.tx = TxState()
        s.mode = PublishMode.TX

    @staticmethod
    def declare(s: Session) -> int:
        """Declare a transaction on `s` (its publish mode unchanged); returns its id, new on
        the session (1, 2, ...)."""
        s.txn_seq += 1
        s.txns[s.txn_seq] = TxState()
        return s.txn_seq

    @staticmethod
    def declared(s: Session, txn: int) -> TxState:
        """Transaction `txn` declared on `s`.

        Raises:
            BrokerError: NOT_FOUND when `s` has no such open transaction.
        """
        tx = s.txns.get(txn)
        if tx is None:
            raise BrokerError(Condition.NOT_FOUND, f"no transaction {txn} on the session")
        return tx

    def buffer_settles(
        self, s: Session, txn: int, kind: SettleKind, entries: list[Unacked]
    ) -> None:
        """Hold the settle (`kind`) of deliveries in transaction `txn` of `s` until it ends:
        the caller took them from their own session (`Session.take`), which may be another
        session of the connection."""
        self.declared(s, txn).settles.append((kind, entries))

    @staticmethod
    def _require_tx(s: Session) -> TxState:
        if s.mode is not PublishMode.TX or s.tx is None:
            raise BrokerError(Condition.PRECONDITION_FAILED, "channel is not transactional")
        return s.tx

    def commit(self, s: Session, now_ms: int, txn: int | None = None) -> None:
        """Apply the buffered settles then publishes of the session's own transaction, or of
        the one declared as `txn`, all or nothing (see above). A declared transaction ends:
        refused (BrokerError), it is rolled back first."""
        if txn is None:
            self._commit(s, self._require_tx(s), now_ms)
            return
        tx = self.declared(s, txn)
        try:
            self._commit(s, tx, now_ms)
        except BrokerError:
            self.rollback(s, now_ms, txn)
            raise
        del s.txns[txn]

    def _commit(self, s: Session, tx: TxState, now_ms: int) -> None:
        vh = s.vhost
        # 1. Route everything first and check reject-type limits for the whole batch.
        routed: list[tuple[TxPublish, Exchange]] = []
        adds: dict[int, tuple[QueueEntity, int, int]] = {}
        for p in tx.publishes:
            x = vh.exchanges.get(p.exchange)
            if x is None:
                raise BrokerError(
                    Condition.NOT_FOUND, f"no exchange '{p.exchange}' in vhost '{vh.name}'"
                )
            routed.append((p, x))
            if x.type is ExchangeType.DELAYED:
                continue
            for q in vh.route(x, p.routing_key, p.message.headers):
                _, n, nbytes = adds.get(id(q), (q, 0, 0))
                adds[id(q)] = (q, n + 1, nbytes + p.message.size)
        for q, n, nbytes in adds.values():
            if q.owner is not None:  # its owner would store it after our commit-ok
                raise BrokerError(
                    Condition.NOT_IMPLEMENTED,
                    f"tx.commit refused: queue '{q.name}' in vhost '{vh.name}' is owned by "
                    f"shard {q.owner}, and a transaction that publishes to another shard's "
                    "queue is not available yet; nothing was committed",
                )
            reason = q.queue.would_refuse(n, nbytes)
            if reason is not None:
                raise BrokerError(
                    Condition.PRECONDITION_FAILED,
                    f"tx.commit refused: queue '{q.name}' in vhost '{vh.name}' {reason}; "
                    "nothing was committed",
                )
        dur = self.state.durability
        if dur is not None:
            failure = getattr(dur.store, "failure", None)
            if failure is not None:  # a disk write failed: commit-ok could not mean durable
                # (the buffer stays whole: a rollback or the session's close returns its
                # settled deliveries)
                raise BrokerError(
                    Condition.PRECONDITION_FAILED,
                    f"tx.commit refused: the message store cannot write to disk ({failure}); "
                    "nothing was committed",
                )
        # 2. Apply settles in order, then publishes in order.
        settles, tx.settles = tx.settles, []
        tx.publishes = []
        if dur is not None:
            dur.store.tx_begin()  # replayed whole or not at all
        for kind, entries in settles:
            self.delivery.settle_entries(entries, kind, now_ms, s)
        for p, x in routed:
            self.publisher.route(
                p.message, vhost=vh, exchange=x, now_ms=now_ms, session=s, mandatory=p.mandatory
            )
        if dur is not None:
            dur.store.tx_commit()
            try:
                durable = dur.store.sync()  # commit-ok means durable (AMQP tx semantics)
            except OSError as exc:
                raise BrokerError(
                    Condition.PRECONDITION_FAILED,
                    f"tx.commit failed: the message store could not write to disk ({exc}); "
                    "the transaction may be partly applied and is not durable",
                ) from exc
            for q in dur.stored(durable):  # what the sync covered may be handed out
                self.state.mark(q)
        for consumer in s.consumers.values():
            self.state.mark(consumer.queue)

    def rollback(self, s: Session, now_ms: int, txn: int | None = None) -> None:
        """Discard the buffer of the session's own transaction, whose settled and still
        unacked deliveries of `s` return to their queues' heads in consumption order; or end
        the one declared as `txn`, whose settled deliveries return so."""
        if txn is None:
            entries = self._require_tx(s).discard()
            entries.extend(s.take_all())
        else:
            entries = self.declared(s, txn).discard()
            del s.txns[txn]
        entries.sort(key=lambda e: e.delivery_id)
        self.delivery.settle_entries(entries, SettleKind.REQUEUE, now_ms)
        for consumer in s.consumers.values():
            self.state.mark(consumer.queue)
