"""Delivery: subscriptions, gets, settlement, and the dispatch of dirty queues.

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
* **flush**: after every call, each queue the call marked dirty (`State.dirty`) is dispatched to
  its consumers with capacity: browsers first, each by its cursor (`_dispatch_browse`), then
  the consumers that take messages, in the queue's rotation (priority groups, round robin,
  single-active-consumer: `ConsumerSet.pick`), by fetch in one loop (`_dispatch`, the hot
  path, which a queue without browsers or selector consumers reaches after one test); a
  selector consumer's turn takes the first message it matches (at most `SELECTOR_SCAN`
  selector evaluations per message taken or browsed).
  Bounded by prefetch credit and by `DISPATCH_BATCH` per call; a queue that still has work
  goes to `State.backlog` and the broker asks for an immediate tick. Then its expired heads
  are dropped, its dead letters routed (`DeadLetters`) and the publishers it blocked released
  (`Resources.maybe_unblock`). Dead-lettering may dirty more queues: the flush runs until
  nothing is dirty (bounded).

Replies precede the deliveries they enable: an adapter appends its reply to `State.out`
before the broker flushes. Deliveries are `effects.Deliver`, one per message (the hot path).

Pure: no I/O, no clock.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Final

from ringmq.core import queuetypes
from ringmq.core.auth import Access
from ringmq.core.consumers import Consumer
from ringmq.core.deadletter import DeadLetters
from ringmq.core.effects import Deliver, DeliverReply, Drained
from ringmq.core.errors import BrokerError, Condition
from ringmq.core.groups import marked_first, matcher
from ringmq.core.message import Message, SeqId
from ringmq.core.queue import Delivery as Handed
from ringmq.core.resources import Resources
from ringmq.core.selector import Selector
from ringmq.core.session import PublishMode, Session, SettleKind, Unacked
from ringmq.core.state import State
from ringmq.core.streamread import stream_cursor, stream_read
from ringmq.core.topology import Topology
from ringmq.core.vhost import NoLocal, QueueEntity

DISPATCH_BATCH: Final = 4096
"""Most deliveries one queue makes per call; the rest waits for the next tick (fairness)."""

SELECTOR_SCAN: Final = 1000
"""Most messages a selector looks at per message it takes or browses (queue/select.py): a
queue of messages it does not match costs a dispatch round at most this many evaluations per
selector consumer, never a stall."""

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
    """Consume, get, settle and dispatch (see the module docstring)."""

    def __init__(
        self, state: State, topology: Topology, resources: Resources, dead: DeadLetters
    ) -> None:
        self.state = state
        self.topology = topology
        self.resources = resources
        self.dead = dead
        self.replies: dict[str, tuple[Session, str]] = {}
        """Direct reply-to consumers: token -> (session, consumer tag)."""
        self.draining: dict[int, Consumer] = {}
        """Consumers asked to drain their credit (by id): checked after each flush."""

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
        if consumer.drain:
            self.draining[id(consumer)] = consumer
        else:
            self.draining.pop(id(consumer), None)
        self.state.mark(consumer.queue)

    def _drain(self, now_ms: int) -> None:
        # After a flush: draining consumers whose queue has nothing more for them give their
        # unused credit back.
        out = self.state.out
        for key, c in list(self.draining.items()):
            q = c.queue
            left = c.credit or 0
            if q.deleted or c.session.consumers.get(c.tag) is not c:
                del self.draining[key]
            elif left <= 0 or not self._has_more(c, now_ms):
                del self.draining[key]
                c.drain = False
                c.credit = 0
                s = c.session
                out.append(Drained(s.conn_id, s.channel, c.tag, left))

    @staticmethod
    def _has_more(c: Consumer, now_ms: int) -> bool:
        # Whether a consumer could take another message now: a ready one, or for a browser one
        # past its cursor.
        q = c.queue
        if c.browse or q.settings.non_destructive:
            cursor = c.cursor
            more = bool(_browsed(c, 1, now_ms))
            c.cursor = cursor  # a look, not a browse
            return more
        groups = q.queue.groups
        if groups is not None:
            also = c.selector.matches_message if c.selector is not None else None
            return q.queue.has_matching(matcher(groups, c, also), SELECTOR_SCAN, now_ms)
        if c.selector is not None:
            return q.queue.has_matching(c.selector.matches_message, SELECTOR_SCAN, now_ms)
        return bool(q.queue.ready_count)

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
        queuetypes.check_consume(q.settings.queue_type, q.vhost, queue, s.global_prefetch)
        if q.consumers and (exclusive or q.consumers.exclusive):
            raise BrokerError(
                Condition.ACCESS_REFUSED,
                f"queue '{queue}' in vhost '{s.conn.vhost}' in exclusive use",
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
        if q.auto_delete and not q.consumers and q.had_consumer and not q.deleted:
            vh = self.state.vhosts.get(q.vhost)
            if vh is not None:
                self.topology.delete_queue(vh, q, now_ms)
                return
        self.state.mark(q)

    def close_session(self, s: Session, now_ms: int) -> None:
        """A session ends: its transaction's settles and its unacked deliveries go back
        (in consumption order), its consumers and reply-to registration go."""
        entries: list[Unacked] = []
        if s.tx is not None:
            for _kind, settled in s.tx.settles:
                entries.extend(settled)
            s.tx = None
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
        q = self.topology.queue_for(s, queue)
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
            self.flush(now_ms)
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

    # ------------------------------------------------------------------ dispatch
    def flush(self, now_ms: int) -> None:
        """Dispatch and drain dead letters of dirty queues until nothing changes (bounded)."""
        state = self.state
        dirty = state.dirty
        blocked_by = self.resources.blocked_by
        rounds = 0
        while dirty and rounds < 10_000:
            rounds += 1
            _, q = dirty.popitem()
            if q.deleted:
                continue
            if q.stream is not None:  # a stream: each consumer reads the log at its offset
                if q.consumers.all:
                    self._dispatch_browse(q, q.consumers.all, now_ms)
                continue
            st = q.settings
            if (
                st.message_ttl_ms is not None
                or st.expires_ms is not None
                or st.redelivery is not None  # delayed redeliveries wait in the schedule
            ):
                state.timed[id(q)] = q
            consumers = q.consumers
            if consumers.all:
                if st.non_destructive:
                    self._dispatch_browse(q, consumers.all, now_ms)
                else:
                    if consumers.special:  # browsers first: they see what the others take
                        if consumers.browsers:
                            self._dispatch_browse(q, consumers.browsers, now_ms)
                        selective = bool(consumers.selective) or q.queue.groups is not None
                        self._dispatch(q, now_ms, selective)
                    else:
                        # a grouped queue (core/groups.py) takes each consumer's turn by
                        # `fetch_matching`, as selector consumers do
                        self._dispatch(q, now_ms, q.queue.groups is not None)
            # What no consumer took at once and has reached its expiry leaves now, as RabbitMQ
            # drops expired heads after an enqueue (a TTL 0 message never waits for the timer).
            q.queue.drop_expired(now_ms)
            if st.dead_lettering:  # the engine dead-letters only with a DLX, DLA or expiry
                self.dead.drain(q, now_ms)
            if blocked_by and id(q) in blocked_by:
                self.resources.maybe_unblock(q)
        if self.draining:
            self._drain(now_ms)

    def _dispatch(self, q: QueueEntity, now_ms: int, selective: bool = False) -> None:
        # Hot path: locals only; one fetch + one tracked delivery + one effect per message.
        # A queue with selector consumers (`selective`): every consumer that takes messages
        # gets its turn in the queue's rotation (`pick`: priorities, round robin,
        # single-active), as Artemis serves filtered consumers with the others. A plain
        # consumer's turn takes the head; a selector consumer's the first ready message it
        # matches (`Queue.fetch_matching`: at most SELECTOR_SCAN evaluations), and one that
        # finds none sits out this round (`missed`). A grouped queue (core/groups.py) is
        # served the same way, each consumer's predicate also admitting only the messages of
        # groups it owns or that have no owner (`matcher`); the group binds when taken.
        engine = q.queue
        groups = engine.groups if selective else None
        consumers = q.consumers
        pick = consumers.pick
        fetch = engine.fetch
        state = self.state
        append = state.out.append
        budget = DISPATCH_BATCH
        no_ack_count = 0
        dur = state.durability
        persisted = dur.persisted(q) if dur is not None else None
        counters = engine.counters  # ready_count = ready + paged, without the property call
        credited = consumers.credited  # link credit is counted only where some was given
        missed: set[Consumer] | None = set() if selective else None
        while counters.ready or counters.paged:
            if not budget:
                state.backlog[id(q)] = q
                break
            c = pick() if missed is None else pick(missed)
            if c is None:
                break
            no_ack = c.no_ack
            first = False
            if missed is None or (c.selector is None and groups is None):
                d = fetch(now_ms, not no_ack)
                if d is None:
                    break
            else:
                also = None if c.selector is None else c.selector.matches_message
                match = also if groups is None else matcher(groups, c, also)
                assert match is not None
                d = engine.fetch_matching(match, SELECTOR_SCAN, now_ms, not no_ack)
                if d is None:
                    missed.add(c)
                    continue
                if groups is not None:
                    first = groups.taken(c, d.message.headers, now_ms)
            s = c.session
            if no_ack:
                tag = s.next_delivery_id
                s.next_delivery_id = tag + 1
                no_ack_count += 1
                s.counts.delivered_auto += 1
            else:
                tag = s.track(Unacked(q, d.seq, c, False, 0, now_ms))
                s.counts.delivered_manual += 1
                if persisted and d.seq in persisted:
                    assert dur is not None
                    dur.delivered(q, d.seq, d.delivery_count)
            msg = d.message
            if d.redelivered:
                s.counts.redelivered += 1
                if q.settings.queue_type == queuetypes.QUORUM:
                    msg = queuetypes.counted(msg, d.delivery_count)
            if first and groups is not None and groups.first_key:
                msg = marked_first(msg, groups.first_key)
            append(Deliver(s.conn_id, s.channel, c.tag, tag, d.redelivered, msg))
            budget -= 1
            if credited and c.credit is not None:
                c.credit -= 1
        delivered = DISPATCH_BATCH - budget
        if delivered:
            state.stats["delivered"] += delivered
            q.deliver += delivered - no_ack_count
            if delivered > no_ack_count:
                state.arm_consumer_check(q, now_ms)
            q.deliver_no_ack += no_ack_count

    def _dispatch_browse(self, q: QueueEntity, browsers: list[Consumer], now_ms: int) -> None:
        # The one browsing rule: each of `browsers` (every consumer of a non-destructive queue,
        # the browsing consumers of any other) reads the queue through its own cursor, and
        # sees only what its selector matches (`_browsed`).
        out = self.state.out
        budget = DISPATCH_BATCH
        stream = q.stream is not None
        for c in list(browsers):
            s = c.session
            # What `has_capacity` allows, counted once: each tracked delivery below raises the
            # consumer's and the channel's unacked count by one, as a check per message would.
            want = budget if c.has_capacity() else 0
            if want and c.credit is not None:
                want = min(want, c.credit)
            if want and not c.no_ack:
                if c.prefetch:
                    want = min(want, c.prefetch - c.unacked)
                if s.global_prefetch:
                    want = min(want, s.global_prefetch - s.global_unacked)
            if want <= 0:
                continue
            for d in _browsed(c, want, now_ms):
                offset = d.seq if stream else None
                if c.no_ack:
                    tag = s.next_untracked_id()
                else:
                    tag = s.track(Unacked(q, d.seq, c, True, 0, now_ms))
                    self.state.arm_consumer_check(q, now_ms)
                out.append(
                    Deliver(s.conn_id, s.channel, c.tag, tag, d.redelivered, d.message, offset)
                )
                budget -= 1
                if c.credit is not None:
                    c.credit -= 1
            if not budget:
                break
        if not budget:
            self.state.backlog[id(q)] = q


def _browsed(c: Consumer, want: int, now_ms: int) -> list[Handed]:
    """Up to `want` messages past browser `c`'s cursor that its selector (if any) matches; the
    cursor moves past every message looked at (at most SELECTOR_SCAN per one browsed)."""
    log = c.queue.stream
    if log is not None:
        return stream_read(c, log, want)
    engine = c.queue.queue
    selector = c.selector
    if selector is None:
        got = engine.browse_many(c.cursor, want, now_ms)
        if got:
            c.cursor = got[-1].seq
        return got
    out: list[Handed] = []
    looked = 0
    limit = want * SELECTOR_SCAN
    while len(out) < want and looked < limit:
        batch = engine.browse_many(c.cursor, min(want, limit - looked), now_ms)
        if not batch:
            break
        looked += len(batch)
        for d in batch:
            c.cursor = d.seq
            if selector.matches_message(d.message):
                out.append(d)
                if len(out) == want:
                    break
    return out
