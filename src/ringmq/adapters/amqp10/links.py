"""AMQP 1.0 links as core calls: attach and detach, publish, credit, settlement.

Theory of operation
-------------------
Each begun AMQP 1.0 session is one core `Session` (same channel number) in confirm mode, so
every publish on it is numbered and settled by the core's `Confirm` effects, after the fsync
for persistent messages reaching durable queues (the 0-9-1 confirms' rule). `Links` keeps,
per session (`LinkSession`):

* links the broker **receives** on (`InLink`, the peer's senders): the node their target
  names, or none (anonymous relay: each message's `to`); each message is built by the 1.0
  message form (`message.build`) and published through `Publisher.publish`; an unsettled
  transfer's publish number maps to its delivery id (`confirms`) until its `Confirm` comes back
  and becomes a disposition: `accepted`, `released` when no queue took it, `rejected` with a
  condition when a queue refused it (overflow, address full, store failure) or the publish
  itself was refused (`BrokerError`). Pre-settled transfers are at most once: their confirms
  are dropped.
* links the broker **sends** on (`OutLink`, the peer's receivers): each is a core consumer
  (`Delivery.consume`) whose link credit is the core's (`Delivery.flow`; drain comes back as
  `Drained`); each unsettled delivery's id maps to its core delivery id (`unsettled`) until
  the peer's disposition settles it: accepted -> ACK, released -> RELEASE, rejected -> REJECT
  (dead-letter), modified with undeliverable-here -> REJECT, other modified -> REQUEUE
  (counted as a failed delivery). A detached link returns its unsettled deliveries to their
  queue (REQUEUE, in delivery order, one batch, as a closing channel does) and cancels its
  consumer; a dynamic node's temporary queue goes with it (exclusive, auto-delete) and a
  durable subscription's queue when the peer closes the link (unsubscribe).

Attaching a link (resolving its address, creating or subscribing queues, permissions, source
filters) is `attach.py`'s (`Attacher`); the records of links are `linkstate.py`'s. A dynamic
target's temporary queue is deleted here when its link detaches.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any, Final

from ringmq.adapters.amqp10 import message as m10
from ringmq.adapters.amqp10.attach import Attacher
from ringmq.adapters.amqp10.errors import REFUSAL_TEXTS, REFUSALS, condition_of
from ringmq.adapters.amqp10.linkstate import LinkSession, RefusalError
from ringmq.adapters.amqp10.runs import publish_run
from ringmq.adapters.amqp10.transactions import Coordinator
from ringmq.amqp10 import conditions as c
from ringmq.amqp10 import performatives as p
from ringmq.amqp10 import sections
from ringmq.amqp10.connection import error
from ringmq.amqp10.events import MessagesReceived
from ringmq.amqp10.types import DecodeError
from ringmq.core.effects import CloseConnection
from ringmq.core.errors import BrokerError
from ringmq.core.published import UNROUTABLE
from ringmq.core.session import PublishMode, SettleKind

if TYPE_CHECKING:
    from ringmq.amqp10.connection import Connection
    from ringmq.amqp10.events import CreditGranted, LinkAttaching, MessageReceived, Settled
    from ringmq.core.broker import Broker
    from ringmq.core.effects import Deliver

log = logging.getLogger(__name__)

_ACCEPTED: Final = p.Accepted()
_OUTCOMES: Final = PublishMode.CONFIRM
"""A session's resting mode: its unsettled transfers' outcomes are their confirms."""
_AT_MOST_ONCE: Final = PublishMode.NORMAL
"""The mode a pre-settled transfer publishes in: no outcome (no publish number)."""
_RELEASED: Final = p.Released()


def _outcome(state: Any) -> SettleKind | None:
    # A receiver's delivery state as the core's settle kind (None: not terminal).
    match state:
        case p.Accepted():
            return SettleKind.ACK
        case p.Released():
            return SettleKind.RELEASE
        case p.Rejected():
            return SettleKind.REJECT
        case p.Modified():
            if state.undeliverable_here:
                return SettleKind.REJECT
            return SettleKind.REQUEUE if state.delivery_failed else SettleKind.RELEASE
    return None


class Links:
    """The links of one AMQP 1.0 connection on the core (see the module docstring)."""

    def __init__(self, broker: Broker, conn: Connection, conn_id: int) -> None:
        self.broker = broker
        self.conn = conn
        self.conn_id = conn_id
        self.sessions: dict[int, LinkSession] = {}
        self.txn = Coordinator(broker, conn)
        self._attacher = Attacher(broker, conn, self.sessions)

    @property
    def container_id(self) -> str:
        """The client's container id (its open), which names its subscriptions."""
        return self._attacher.container_id

    @container_id.setter
    def container_id(self, value: str) -> None:
        self._attacher.container_id = value

    # ------------------------------------------------------------------ sessions
    def session_begun(self, channel: int, now_ms: int) -> None:
        """A session began: its core session, under the same number. It rests in confirm mode
        (an unsettled transfer's outcome is its confirm); a pre-settled transfer publishes in
        normal mode (`_at_most_once`), as AMQP 1.0 chooses the settle mode per transfer."""
        b = self.broker
        for refusal in b.channel_opened(self.conn_id, channel, now_ms):
            if isinstance(refusal, CloseConnection):  # the user's max-channels
                self.conn.close(c.NOT_ALLOWED, refusal.text)
                return
        s = b.session(self.conn_id, channel)
        assert s is not None
        b.confirms.select(s)
        self.sessions[channel] = LinkSession(s)

    def session_ended(self, channel: int, now_ms: int) -> None:
        """Forget a session's links (a dynamic target's queue goes with its link, as on a
        detach) and its transactions; the caller closes its core session (the core's
        channel close returns what was unsettled and rolls its transactions back)."""
        ls = self.sessions.pop(channel, None)
        if ls is not None:
            for link in ls.ins.values():
                if link.temporary is not None:
                    self.broker.topology.delete_named(ls.core, link.temporary, now_ms)
            self.txn.forget(ls.core)

    # ------------------------------------------------------------------ attach
    def attach(self, ev: LinkAttaching, now_ms: int) -> None:
        """Resolve and create the link the peer attaches, or refuse it (`attach.py`)."""
        self._attacher.attach(ev, now_ms)

    # ------------------------------------------------------------------ detach
    def detached(self, channel: int, handle: int, closed: bool, now_ms: int) -> None:
        """A link went away: a consumer's unsettled deliveries go back, its consumer ends."""
        ls = self.sessions.get(channel)
        if ls is None:
            return
        sender = ls.ins.pop(handle, None)
        if sender is not None:
            if sender.temporary is not None:  # a dynamic target's queue goes with its link
                self.broker.topology.delete_named(ls.core, sender.temporary, now_ms)
            return
        link = ls.outs.pop(handle, None)
        if link is None:
            return
        ls.by_tag.pop(link.tag, None)
        for d in [d for d, (_t, lk) in ls.unsettled.items() if lk is link]:
            del ls.unsettled[d]
        s = ls.core
        b = self.broker
        # Every delivery of its consumer still unsettled goes back, those sent and those the
        # server has not applied yet (a flow and a detach in one read).
        consumer = s.consumers.get(link.tag)
        tags = [t for t, e in s.unacked.items() if e.consumer is consumer and consumer]
        entries = [e for t in tags for e in s.take(t, False)]
        b.delivery.cancel(s, link.tag, now_ms)
        b.delivery.settle_entries(entries, SettleKind.REQUEUE, now_ms)
        if closed and link.delete_on_close:  # unsubscribe (configure permission checked)
            try:
                name, _n = b.topology.delete_for(s, link.queue, if_unused=False, if_empty=False)
            except BrokerError as exc:  # the detach is answered already: the queue stays
                log.info("AMQP 1.0 unsubscribe of %r refused: %s", link.queue, exc.text)
                return
            if name:
                b.topology.delete_named(s, name, now_ms)

    # ------------------------------------------------------------------ publish
    def messages(self, batch: list[MessageReceived | MessagesReceived], now_ms: int) -> None:
        """Publish the messages of one read, in order (`message` each; a run of them:
        `runs.publish_run`)."""
        message = self.message
        for ev in batch:
            if type(ev) is MessagesReceived:
                publish_run(self, ev, now_ms)
            else:
                message(ev, now_ms)  # type: ignore[arg-type]

    def message(self, ev: MessageReceived, now_ms: int) -> None:
        """Publish a message the peer sent; its outcome comes with the confirm (or now)."""
        ls = self.sessions.get(ev.channel)
        if ls is None:
            return
        link = ls.ins.get(ev.handle)
        if link is None:
            return
        if link.coordinator:
            self.txn.control(ev, ls.core, now_ms)
            return
        s = ls.core
        b = self.broker
        publisher = b.publisher
        try:
            txn = None if ev.state is None else self.txn.named(ev.state)
            if txn is None and ev.settled:
                s.mode = _AT_MOST_ONCE  # this publish wants no outcome (restored below)
            node = link.node
            if node is None:
                to = m10.address_of(ev.payload)
                if to is None:
                    raise RefusalError(c.PRECONDITION_FAILED, "anonymous relay: no 'to' address")
                node = self._attacher.relay_node(s, to, now_ms)
                exchange, rk = node.exchange, node.routing_key
            else:
                exchange, rk = link.exchange, link.routing_key
            if rk is None:  # /exchanges/:x: the message's subject is its routing key
                props = sections.scan(ev.payload).properties
                rk = (props.subject if props is not None else None) or ""
            vh, x = publisher.exchange_for(s, exchange, rk)
            publisher.check_size(len(ev.payload))
            msg = m10.build(ev.payload, exchange=exchange, routing_key=rk, now_ms=now_ms)
            if txn is None:
                outcome = publisher.publish(
                    msg, session=s, vhost=vh, exchange=x, now_ms=now_ms
                ).outcome
            else:  # buffered: the outcome takes effect at the commit
                publisher.publish_in(txn[1], msg, session=txn[0], exchange=x)
                if not ev.settled:
                    done = p.TransactionalState(txn_id=ev.state.txn_id, outcome=_ACCEPTED)
                    self.conn.settle(ev.channel, ev.delivery_id, ev.delivery_id, done)
                return
        except RefusalError as exc:
            self._refused(ev, exc.condition, exc.description)
            return
        except BrokerError as exc:
            self._refused(ev, condition_of(exc.condition), exc.text)
            return
        except DecodeError as exc:
            self._refused(ev, c.DECODE_ERROR, str(exc))
            return
        finally:
            s.mode = _OUTCOMES
        if ev.settled:
            return  # at most once: no outcome to send
        seq = s.publish_seq
        if outcome == UNROUTABLE:
            ls.unroutable.add(seq)
        ls.confirms[seq] = ev.delivery_id

    def _refused(self, ev: MessageReceived, condition: str, description: str) -> None:
        self.refuse(ev.channel, ev.delivery_id, ev.settled, condition, description)

    def refuse(
        self, channel: int, delivery_id: int, settled: bool, condition: str, description: str
    ) -> None:
        """A publish refused: an unsettled one is settled `rejected` with the condition."""
        if not settled:
            rejected = p.Rejected(error=error(condition, description))
            self.conn.settle(channel, delivery_id, delivery_id, rejected)

    def confirmed(
        self, channel: int, seq: int, multiple: bool, ok: bool, reason: str | None
    ) -> None:
        """A `Confirm` for session `channel`: settle the publishes it names with their
        outcome."""
        ls = self.sessions.get(channel)
        if ls is None:
            return
        confirms = ls.confirms
        if multiple:
            seqs = []
            for q in confirms:  # in publish order
                if q > seq:
                    break
                seqs.append(q)
        else:
            seqs = [seq] if seq in confirms else []
        run_first = run_last = -1
        run_state: Any = None
        conn = self.conn
        for q in seqs:
            did = confirms.pop(q)
            released = q in ls.unroutable
            if released:
                ls.unroutable.discard(q)
            if not ok:
                why = reason or "overflow"
                state: Any = p.Rejected(
                    error=error(REFUSALS.get(why, c.INTERNAL_ERROR), REFUSAL_TEXTS.get(why, why))
                )
            else:
                state = _RELEASED if released else _ACCEPTED
            if state is run_state and did == run_last + 1:
                run_last = did
                continue
            if run_state is not None:
                conn.settle(channel, run_first, run_last, run_state)
            run_first = run_last = did
            run_state = state
        if run_state is not None:
            conn.settle(channel, run_first, run_last, run_state)

    # ------------------------------------------------------------------ deliveries
    def deliver(self, d: Deliver) -> None:
        """Send a core delivery on its link."""
        channel = d.channel
        ls = self.sessions.get(channel)
        if ls is None:
            return
        link = ls.by_tag.get(d.consumer_tag)
        if link is None:
            return
        msg = d.message
        redelivered = d.redelivered
        if msg.form == m10.FORM_AMQP10 and not redelivered:  # the sections as received
            payload, body = msg.properties_bin, msg.body
        else:
            # the header's delivery-count: earlier attempts, as the queue counted them
            tries = max(d.delivery_count - 1, 1 if redelivered else 0)
            payload = m10.payload_for_amqp10(
                msg, first_acquirer=not redelivered, delivery_count=tries
            )
            body = b""
        tag = d.delivery_id
        settled = link.settled
        did = self.conn.sessions[channel].send_transfer(
            link.handle, tag.to_bytes(8, "big"), payload, settled, body
        )
        if not settled:
            ls.unsettled[did] = (tag, link)

    def credit(self, ev: CreditGranted) -> None:
        """The peer's flow on a consumer link: the core consumer's credit."""
        ls = self.sessions.get(ev.channel)
        link = ls.outs.get(ev.handle) if ls is not None else None
        if ls is None or link is None or link.tag not in ls.core.consumers:
            return  # a consumer the broker ended (its queue went): its detach is on the way
        self.broker.delivery.flow(ls.core, link.tag, credit=ev.credit, drain=ev.drain)

    def drained(self, channel: int, tag: str) -> None:
        """A `Drained`: the consumer's unused credit is spent (the machine counts it on the
        wire: the core's count is the same once the deliveries before it are sent)."""
        ls = self.sessions.get(channel)
        link = ls.by_tag.get(tag) if ls is not None else None
        if link is not None:
            self.conn.drained(channel, link.handle)

    def cancelled(
        self, channel: int, tag: str, condition: str | None = None, text: str | None = None
    ) -> None:
        """A `CancelConsumer`: its queue was deleted; the link is detached (with `condition`
        and `text`: the consumer timed out; the core has returned its deliveries)."""
        ls = self.sessions.get(channel)
        link = ls.by_tag.pop(tag, None) if ls is not None else None
        if ls is None or link is None:
            return
        ls.outs.pop(link.handle, None)
        for d in [d for d, (_t, lk) in ls.unsettled.items() if lk is link]:
            del ls.unsettled[d]
        self.conn.detach(
            channel,
            link.handle,
            condition or c.RESOURCE_DELETED,
            text or f"queue '{link.queue}' was deleted",
        )

    def settled(self, ev: Settled, now_ms: int) -> None:
        """The peer's disposition of the broker's deliveries."""
        ls = self.sessions.get(ev.channel)
        if ls is None:
            return
        if isinstance(ev.state, p.TransactionalState):
            self._settled_in(ls, ev)
            return
        kind = _outcome(ev.state)
        if kind is None:
            if not ev.settled:
                return  # a non-terminal state (received): nothing to do
            kind = SettleKind.ACK  # settled without an outcome: RabbitMQ takes it as accepted
        unsettled = ls.unsettled
        first, last = ev.first, ev.last
        ids = self._ids(ls, first, last)
        s = ls.core
        # One settle of the whole range, grouped per queue (a 0-9-1 ack with multiple=true).
        entries = []
        take = s.take
        held = s.unacked
        for d in ids:
            tag, _link = unsettled.pop(d)
            if tag in held:
                entries += take(tag, False)
        self.broker.delivery.settle_entries(entries, kind, now_ms, s)
        if not ev.settled:
            self.conn.settle(ev.channel, first, last, ev.state, receiving=False)

    def _settled_in(self, ls: LinkSession, ev: Settled) -> None:
        # A transactional disposition: the deliveries leave their session now and their
        # outcome waits in the transaction (a rollback returns them to their queues).
        txn = self.txn.named(ev.state)
        assert txn is not None
        kind = _outcome(ev.state.outcome) or SettleKind.ACK
        s = ls.core
        entries = []
        for d in self._ids(ls, ev.first, ev.last):
            tag, _link = ls.unsettled.pop(d)
            if tag in s.unacked:
                entries.extend(s.take(tag, False))
        self.broker.transactions.buffer_settles(txn[0], txn[1], kind, entries)
        if not ev.settled:
            self.conn.settle(ev.channel, ev.first, ev.last, ev.state, receiving=False)

    @staticmethod
    def _ids(ls: LinkSession, first: int, last: int) -> list[int]:
        # the broker's unsettled delivery ids in first..last
        unsettled = ls.unsettled
        if last - first < len(unsettled):
            return [d for d in range(first, last + 1) if d in unsettled]
        return sorted(d for d in unsettled if first <= d <= last)
