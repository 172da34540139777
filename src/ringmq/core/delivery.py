"""Delivery: subscriptions, gets and settlement.

Theory of operation
-------------------
`Delivery` owns the path of messages out of queues:

* **subscribe** (`consume`): a consumer on a queue, with its no-ack mode, exclusivity,
  `x-priority` and the session's prefetch as its window; `cancel` ends it; `set_prefetch`
  changes the window (per consumer, or for the whole session: RabbitMQ's basic.qos global
  flag); a *browsing* consumer (`browse=True`, AMQP 1.0 distribution mode `copy`) reads the
  queue through its own cursor without taking anything (every consumer of a non-destructive
  queue browses); `flow` gives a consumer link credit (AMQP 1.0: each delivery spends one;
  with drain, credit no message can use is given back at the end of the call, `Drained`).
  Direct reply-to (`amq.rabbitmq.reply-to`) consumers are registered here too (`replies`:
  token -> session and tag) and served by `deliver_reply`.
* **get** one message (`get`), acknowledged later or not.
* **settle** deliveries (`settle`, `settle_entries`): accepted (ack), modified (requeue: back
  to its original position, redelivered, counted as a failed delivery), released (back, not
  counted) or rejected (dropped or dead-lettered), grouped per queue in delivery order;
  `recover` requeues everything outstanding on a session.

The dispatch of the queues a call touched to these subscriptions is `Dispatcher`'s
(dispatch.py), at the end of every call; a get flushes it first when the queue has publishes
waiting for it, and a drain registers with it.

Pure: no I/O, no clock.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Final

from ringmq.core import queuetypes
from ringmq.core.auth import Access
from ringmq.core.dispatch import Dispatcher
from ringmq.core.effects import DeliverReply
from ringmq.core.entities import Consumer, NoLocal, QueueEntity, Unacked
from ringmq.core.errors import BrokerError, Condition
from ringmq.core.message import Message, SeqId
from ringmq.core.remotes import Remotes
from ringmq.core.selector import Selector
from ringmq.core.session import PublishMode, Session, SettleKind
from ringmq.core.state import State
from ringmq.core.streamread import stream_cursor
from ringmq.core.topology import Topology

REPLY_TO_QUEUE: Final = "amq.rabbitmq.reply-to"
REPLY_TO_PREFIX: Final = REPLY_TO_QUEUE + "."


@dataclass(frozen=True, slots=True)
class Got:
    """One message taken by `Delivery.get`.

    Attributes:
        delivery_id: its id on the session (settle it with this unless taken no-ack).
        redelivered: it was delivered before.
        message: the message.
        message_count: ready messages left in the queue.
    """

    delivery_id: int
    redelivered: bool
    message: Message
    message_count: int


@dataclass(frozen=True, slots=True)
class Taken:
    """One message taken by `Delivery.take` (no session owns it).

    Attributes:
        seq: its seq in the queue (settle it with `ack_seqs` or `requeue_seqs`).
        redelivered: it was delivered before.
        message: the message.
        message_count: ready messages left in the queue.
    """

    seq: SeqId
    redelivered: bool
    message: Message
    message_count: int


class Delivery:
    """Consume, get and settle (see the module docstring)."""

    def __init__(
        self, state: State, topology: Topology, dispatcher: Dispatcher, remotes: Remotes
    ) -> None:
        self.state = state
        self.topology = topology
        self.dispatcher = dispatcher
        self.remotes = remotes
        """Subscriptions of copies of other shards' queues (remotes.py)."""
        """The dispatch of dirty queues (dispatch.py): a get flushes first, drains register."""
        self.replies: dict[str, tuple[Session, str]] = {}
        """Direct reply-to consumers: token -> (session, consumer tag)."""

    # ------------------------------------------------------------------ subscriptions
    def set_prefetch(self, s: Session, count: int, *, session_wide: bool) -> None:
        """Credit for new consumers of `s` (`session_wide`: a cap on all of its deliveries)."""
        if session_wide:
            s.global_prefetch = count
        else:
            s.prefetch_count = count
        for consumer in s.consumers.values():
            self.state.mark(consumer.queue)

    def flow(self, s: Session, tag: str, *, credit: int | None, drain: bool) -> None:
        """Set the link credit of consumer `tag` of `s` (AMQP 1.0 flow; None: back to prefetch
        alone). With `drain`, credit that no ready message can use by the end of this call is
        given back with a `Drained` effect."""
        consumer = s.consumers.get(tag)
        if consumer is None:
            raise BrokerError(Condition.NOT_FOUND, f"no consumer '{tag}' on this session")
        if credit is not None and credit < 0:
            raise BrokerError(Condition.PRECONDITION_FAILED, f"invalid credit {credit}")
        consumer.credit = credit
        if credit is not None:
            consumer.queue.consumers.credited = True
        consumer.drain = drain and credit is not None
        self.dispatcher.watch_drain(consumer)
        self.state.mark(consumer.queue)

    def consume(
        self,
        s: Session,
        queue: str,
        tag: str,
        *,
        no_ack: bool,
        exclusive: bool,
        arguments: dict[str, Any],
        now_ms: int,
        browse: bool = False,
        selector: Selector | None = None,
        no_local: bool = False,
        owner: str | None = None,
        credit_flow: bool = False,
        offset_header: bool = True,
        chunks: bool = False,
    ) -> None:
        """Subscribe `tag` to `queue` on `s` (read permission; exclusive use respected; an
        empty name is the session's last declared queue). With `browse`, the consumer reads
        the queue's messages in seq order and leaves them there (settling a browsed delivery
        does nothing); others still get them. With a `selector` (JMS), the consumer takes or
        browses only the messages it matches and leaves the others for other consumers.

        With `no_local`, the consumer does not get the messages its own connection publishes
        (the no-local rule of AMQP 0-9-1 basic.consume and of the AMQP 1.0 / JMS no-local
        filter): while it consumes, its queue does not take them, as Qpid and Artemis apply
        it to a subscription queue, so it is for a queue the consumer has to itself (other
        consumers of the queue would not get them either). An adapter that knows its client
        by an `owner` identity (AMQP 1.0: the container id, which it also puts in the
        connection's `OWNER_PROPERTY`) keys the rule by it: messages from any connection of
        that owner are kept out, and the rule stays with the queue after the consumer goes,
        until the queue goes or the owner consumes it again without `no_local` (`NoLocal`).

        On a stream queue every consumer reads the log from its own offset (`x-stream-offset`
        in `arguments`: `_stream_start`), and settling a delivery only gives its credit back.
        RabbitMQ's rules apply: a prefetch (or, `credit_flow`, link credit that the adapter
        gives with `flow`: AMQP 1.0) and acknowledgements are required; without
        `offset_header`, deliveries are the messages as stored, their offsets in
        `Deliver.offset` only; with `chunks` too, each delivery is one stored chunk in the
        stream protocol's format (the stream protocol: `streamread.stream_read`)."""
        if tag in s.consumers or (s.reply_to_token is not None and s.reply_tag == tag):
            raise BrokerError(Condition.NOT_ALLOWED, f"attempt to reuse consumer tag '{tag}'")
        if queue == REPLY_TO_QUEUE:
            self._consume_reply_to(s, tag, no_ack)
            return
        queue = self.topology.queue_name(s, queue)
        s.check(self.state.auth, Access.READ, "queue", queue)
        q = self.topology.queue_for(s, queue)
        if q.owner is not None and (browse or selector is not None):
            raise BrokerError(
                Condition.NOT_IMPLEMENTED,
                f"queue '{queue}' in vhost '{q.vhost}' is owned by shard {q.owner}: browsing "
                "or selecting from another shard's queue is not available yet",
            )
        queuetypes.check_consume(q.settings.queue_type, q.vhost, queue, s.global_prefetch)
        if q.consumers and (exclusive or q.consumers.exclusive):
            raise BrokerError(
                Condition.ACCESS_REFUSED,
                f"queue '{queue}' in vhost '{s.vhost.name}' in exclusive use",
            )
        prio = arguments.get("x-priority", 0)
        if isinstance(prio, bool) or not isinstance(prio, int):
            raise BrokerError(
                Condition.PRECONDITION_FAILED, f"invalid x-priority {prio!r}: must be an integer"
            )
        cursor: SeqId | None = None
        if q.stream is not None:
            cursor = stream_cursor(s, q, no_ack, credit_flow, arguments, now_ms)
            browse = True
        consumer = Consumer(
            tag=tag,
            session=s,
            queue=q,
            no_ack=no_ack,
            exclusive=exclusive,
            priority=prio,
            prefetch=s.prefetch_count,
            arguments=arguments,
            browse=browse,
            selector=selector,
            no_local=no_local,
        )
        consumer.cursor = cursor
        consumer.offset_header = offset_header
        consumer.chunks = chunks and q.stream is not None
        if no_local:
            q.no_local = NoLocal(s.conn_id, owner, self.state.conns)
        elif owner is not None and q.no_local is not None and q.no_local.owner == owner:
            q.no_local = None  # its owner subscribes again, without no-local
        s.consumers[tag] = consumer
        q.consumers.add(consumer)
        if q.queue.groups is not None and not browse:
            q.queue.groups.joined()  # group-rebalance (core/groups.py)
        q.had_consumer = True
        q.last_used_ms = now_ms
        if q.owner is not None:  # a copy: its owner's messages come through a subscription
            self.remotes.consumer_added(q)
        self.state.mark(q)

    def _consume_reply_to(self, s: Session, tag: str, no_ack: bool) -> None:
        if not no_ack:
            raise BrokerError(Condition.PRECONDITION_FAILED, "reply consumer cannot acknowledge")
        if s.reply_to_token is not None:
            raise BrokerError(Condition.PRECONDITION_FAILED, "reply consumer already set")
        token = self.state.gen_name("")
        s.reply_to_token = token
        s.reply_tag = tag
        self.replies[token] = (s, tag)

    def cancel(self, s: Session, tag: str, now_ms: int) -> None:
        """End subscription `tag` of `s` (an unknown tag is no error)."""
        consumer = s.consumers.pop(tag, None)
        if consumer is not None:
            self.remove_consumer(consumer, now_ms)
        elif s.reply_to_token is not None and s.reply_tag == tag:
            self.replies.pop(s.reply_to_token, None)
            s.reply_to_token = None

    def remove_consumer(self, consumer: Consumer, now_ms: int) -> None:
        """Take `consumer` off its queue (an auto-delete queue losing its last one goes)."""
        q = consumer.queue
        if not q.consumers.remove(consumer):
            return
        if q.queue.groups is not None:
            q.queue.groups.left(consumer)  # its groups go to whoever takes them next
        rule = q.no_local  # a connection's rule goes with its consumer (an owner's stays)
        if consumer.no_local and rule is not None and rule.owner is None:
            q.no_local = None if rule.conn_id == consumer.session.conn_id else rule
        q.last_used_ms = now_ms
        if q.owner is not None:  # a copy: the last consumer gone ends its subscription
            self.remotes.consumer_removed(q, now_ms)
            self.state.mark(q)
            return
        if q.auto_delete and not q.consumers and q.had_consumer and not q.deleted:
            vh = self.state.vhosts.get(q.vhost)
            if vh is not None:
                self.topology.delete_queue(vh, q, now_ms)
                return
        self.state.mark(q)

    def close_session(self, s: Session, now_ms: int) -> None:
        """A session ends: its transactions' settles and its unacked deliveries go back
        (in consumption order), its consumers and reply-to registration go."""
        entries: list[Unacked] = []
        if s.tx is not None:
            entries.extend(s.tx.discard())
            s.tx = None
        for tx in s.txns.values():
            entries.extend(tx.discard())
        s.txns.clear()
        entries.extend(s.take_all())
        entries.sort(key=lambda e: e.delivery_id)  # consumption order
        self.settle_entries(entries, SettleKind.REQUEUE, now_ms)
        for consumer in list(s.consumers.values()):
            self.remove_consumer(consumer, now_ms)
        s.consumers.clear()
        if s.reply_to_token is not None:
            self.replies.pop(s.reply_to_token, None)
            s.reply_to_token = None

    def deliver_reply(self, routing_key: str, msg: Message) -> bool:
        """Deliver a publish to `amq.rabbitmq.reply-to.<token>` to its reply consumer;
        False when no such consumer exists (the publish is then unroutable)."""
        entry = self.replies.get(routing_key[len(REPLY_TO_PREFIX) :])
        if entry is None:
            return False
        session, tag = entry
        self.state.out.append(
            DeliverReply(
                session.conn_id,
                session.channel,
                tag,
                session.next_untracked_id(),
                routing_key,
                msg,
            )
        )
        self.state.stats["delivered"] += 1
        session.counts.delivered_auto += 1
        return True

    # ------------------------------------------------------------------ get
    def get(self, s: Session, queue: str, *, no_ack: bool, now_ms: int) -> Got | None:
        """Take the next message of `queue` (None when none is ready)."""
        state = self.state
        queue = self.topology.queue_name(s, queue)
        s.check(state.auth, Access.READ, "queue", queue)
        q = self.topology.local_queue_for(s, queue)
        if q.stream is not None:
            raise BrokerError(
                Condition.NOT_IMPLEMENTED,
                f"basic.get not supported by stream queues queue '{q.name}' in vhost '{q.vhost}'",
            )
        q.last_used_ms = now_ms
        if id(q) in state.dirty:
            # Publishes earlier in this read batch wait for `dispatch_pending`; RabbitMQ's queue
            # handles them before this get: their consumers are served and, what nobody took,
            # expired (a TTL 0 message) first.
            self.dispatcher.flush(now_ms)
        d = q.queue.fetch(now_ms, ack_required=not no_ack)
        # RabbitMQ drops the expired heads the fetch exposed before it counts what is left
        q.queue.drop_expired(now_ms)
        state.mark(q)
        counts = s.counts
        if d is None:
            q.get_empty += 1
            counts.get_empty += 1
            return None
        if no_ack:
            q.get_no_ack += 1
            counts.get_auto += 1
        else:
            q.get += 1
            counts.get_manual += 1
        if d.redelivered:
            counts.redelivered += 1
        durability = state.durability
        if not no_ack and q.durable and durability is not None:
            persisted = durability.persisted(q)
            if persisted and d.seq in persisted:
                durability.delivered(q, d.seq, d.delivery_count)
        if no_ack:
            tag = s.next_untracked_id()
        else:
            tag = s.track(Unacked(q, d.seq, None, False, 0, now_ms))
            state.arm_consumer_check(q, now_ms)
        state.stats["delivered"] += 1
        msg = d.message
        if d.redelivered and q.settings.queue_type == queuetypes.QUORUM:
            msg = queuetypes.counted(msg, d.delivery_count)
        return Got(tag, d.redelivered, msg, q.queue.ready_count)

    def take(self, q: QueueEntity, now_ms: int) -> Taken | None:
        """Take the next ready message of `q` for a caller with no session (the management
        API's /get, which authorised its user): it stays unacknowledged, owned by no session,
        until `ack_seqs` or `requeue_seqs` settles it. None when none is ready."""
        d = q.queue.fetch(now_ms, ack_required=True)
        self.state.mark(q)
        if d is None:
            return None
        return Taken(d.seq, d.redelivered, d.message, q.queue.ready_count)

    def requeue_seqs(self, q: QueueEntity, seqs: list[SeqId], now_ms: int) -> None:
        """Put messages `take` took back in their places (redelivered; not counted as a failed
        delivery)."""
        q.queue.requeue(seqs, now_ms, count_failure=False)
        self.state.mark(q)

    # ------------------------------------------------------------------ settle
    def settle(self, s: Session, tag: int, multiple: bool, kind: SettleKind, now_ms: int) -> None:
        """Settle delivery `tag` of `s` (and every earlier one when `multiple`; tag 0 with
        `multiple` is all). In a transaction the settle waits for the commit."""
        entries = s.take(tag, multiple)
        if kind is SettleKind.REQUEUE or kind is SettleKind.REJECT:
            for e in entries:
                q = e.queue
                if q.stream is not None:
                    raise BrokerError(
                        Condition.NOT_IMPLEMENTED,
                        "basic.nack and basic.reject not supported by stream queues "
                        f"queue '{q.name}' in vhost '{q.vhost}'",
                    )
        if s.mode is PublishMode.TX:
            assert s.tx is not None
            s.tx.settles.append((kind, entries))
            return
        self.settle_entries(entries, kind, now_ms, s)
        if s.global_prefetch:
            for consumer in s.consumers.values():
                self.state.mark(consumer.queue)

    def recover(self, s: Session, now_ms: int) -> None:
        """Requeue every outstanding delivery of `s` (basic.recover requeue=true)."""
        self.settle_entries(s.take_all(), SettleKind.REQUEUE, now_ms)
        for consumer in s.consumers.values():
            self.state.mark(consumer.queue)

    def settle_entries(
        self, entries: list[Unacked], kind: SettleKind, now_ms: int, s: Session | None = None
    ) -> None:
        """Apply ack/requeue/reject to deliveries, grouped per queue, in delivery order; the
        acks are counted for `s`'s protocol when the caller's session is given."""
        if not entries:
            return
        if s is not None and kind is SettleKind.ACK:
            s.counts.acknowledged += len(entries)
        state = self.state
        groups: dict[int, tuple[QueueEntity, list[SeqId]]] = {}
        for e in entries:
            q = e.queue
            if e.browse or q.deleted:
                if e.consumer is not None:
                    state.mark(q)
                continue
            g = groups.get(id(q))
            if g is None:
                groups[id(q)] = (q, [e.seq])
            else:
                g[1].append(e.seq)
        for q, seqs in groups.values():
            if q.owner is not None:  # a copy: its owner settles the message
                self.remotes.settled(q, seqs, kind)
                state.dirty[id(q)] = q  # credit freed: what waits may go out
                continue
            engine = q.queue
            match kind:
                case SettleKind.ACK:
                    self.ack_seqs(q, seqs)
                case SettleKind.REQUEUE:
                    engine.requeue(seqs, now_ms)
                case SettleKind.RELEASE:
                    engine.requeue(seqs, now_ms, count_failure=False)
                case SettleKind.REJECT:
                    engine.reject(seqs, now_ms)
            state.dirty[id(q)] = q

    def ack_seqs(self, q: QueueEntity, seqs: list[SeqId]) -> None:
        """Delete delivered-unacked messages of `q` and journal the persisted ones' ACKs.

        The one ack path: every protocol's accept and the streams API's settle end here; the
        ACK records reach the OS at the end of the batch and are durable after the next group
        fsync (server/commit.py).
        """
        q.queue.ack(seqs)
        durability = self.state.durability
        if q.durable and durability is not None:
            durability.acked(q, seqs)
