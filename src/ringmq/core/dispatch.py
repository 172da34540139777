"""Dispatch: the dirty queues of a call handed out to their consumers.

Theory of operation
-------------------
`Dispatcher` owns the path of messages from a queue to the consumers that have room for them,
run at the end of a call by the call protocol (`Calls.end`: `flush`) and by the delivery owner
when a get must see what the call published (`Delivery.get`):

* **flush**: each queue the call marked dirty (`State.dirty`) is dispatched to its consumers
  with capacity: browsers first, each by its cursor (`_dispatch_browse`), then the consumers
  that take messages, in the queue's rotation (priority groups, round robin,
  single-active-consumer: `ConsumerSet.pick`), by fetch in one loop (`_dispatch`, the hot
  path, which a queue without browsers or selector consumers reaches after one test); a
  selector consumer's turn takes the first message it matches (at most `SELECTOR_SCAN`
  selector evaluations per message taken or browsed). A stream queue's consumers each read
  its log from their own offset (`streamread.stream_read`), up to the end the store shows
  (`StreamLog.end`: committed chunks only, in a cluster); a stream queue dispatched while its
  log held more waits in `State.unshown` for the next release (`Broker.stored`).
* Bounded by prefetch credit and by `DISPATCH_BATCH` per call; a queue that still has work
  goes to `State.backlog` and the broker asks for an immediate tick. Then its expired heads
  are dropped, its dead letters routed (`DeadLetters`) and the publishers it blocked released
  (`Resources.maybe_unblock`). Dead-lettering may dirty more queues: the flush runs until
  nothing is dirty (bounded).
* **drain** (AMQP 1.0 flow with drain): the consumers the delivery owner asked to drain
  (`watch_drain`) that have nothing more to take by the end of the flush give their unused
  credit back (`Drained`).

Each delivery is one `effects.Deliver` appended to the call's effects, its session's delivery
id allocated and, unless the consumer takes no acknowledgements, the delivery tracked for its
settlement (`Session.track`, with the time it was delivered: the consumer timeout counts from
it). Replies precede the deliveries they enable: an adapter appends its reply to the call's
effects before the call ends and flushes.

Pure: no I/O, no clock.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Final

from ringmq.core import queuetypes
from ringmq.core.deadletter import DeadLetters
from ringmq.core.effects import Deliver, Drained
from ringmq.core.entities import Consumer, QueueEntity, Unacked
from ringmq.core.groups import Groups, closes_group, marked_first, matcher
from ringmq.core.message import Message, SeqId
from ringmq.core.queue import Delivery as Handed
from ringmq.core.remotes import Remotes
from ringmq.core.resources import Resources
from ringmq.core.session import SettleKind
from ringmq.core.state import State
from ringmq.core.streamread import stream_read

DISPATCH_BATCH: Final = 4096
"""Most deliveries one queue makes per call; the rest waits for the next tick (fairness)."""

SELECTOR_SCAN: Final = 1000
"""Most messages a selector looks at per message it takes or browses (queue/select.py): a
queue of messages it does not match costs a dispatch round at most this many evaluations per
selector consumer, never a stall."""


class Dispatcher:
    """The dispatch of dirty queues (see the module docstring)."""

    def __init__(
        self, state: State, resources: Resources, dead: DeadLetters, remotes: Remotes
    ) -> None:
        self.state = state
        self.resources = resources
        self.dead = dead
        self.remotes = remotes
        """Subscriptions of copies of other shards' queues (remotes.py): a no-ack delivery
        from a copy settles its owner's message as it goes out."""
        self.draining: dict[int, Consumer] = {}
        """Consumers asked to drain their credit (by id): checked after each flush."""

    def watch_drain(self, consumer: Consumer) -> None:
        """Check `consumer` after each flush while it drains (`Consumer.drain`), else not."""
        if consumer.drain:
            self.draining[id(consumer)] = consumer
        else:
            self.draining.pop(id(consumer), None)

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
        remote: list[SeqId] | None = [] if q.owner is not None else None  # a copy's no-acks
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
                match = _wanted(c, groups)
                assert match is not None
                d = engine.fetch_matching(match, SELECTOR_SCAN, now_ms, not no_ack)
                if d is None:
                    missed.add(c)
                    continue
                if groups is not None:
                    first = groups.taken(c, d.message.headers, now_ms)
                    if missed and closes_group(d.message.headers):
                        # the group lost its owner: a consumer that sat out this round
                        # (finding only messages of groups it did not own) may take its rest
                        missed.clear()
            s = c.session
            if no_ack:
                tag = s.next_delivery_id
                s.next_delivery_id = tag + 1
                no_ack_count += 1
                s.counts.delivered_auto += 1
                if remote is not None:
                    remote.append(d.seq)
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
            append(
                Deliver(
                    s.conn_id, s.channel, c.tag, tag, d.redelivered, msg, None, d.delivery_count
                )
            )
            budget -= 1
            if credited and c.credit is not None:
                c.credit -= 1
        if remote:
            self.remotes.settled(q, remote, SettleKind.ACK)
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
                deliver = Deliver(
                    s.conn_id, s.channel, c.tag, tag, d.redelivered, d.message, offset,
                    d.delivery_count,
                )  # fmt: skip
                out.append(deliver)
                budget -= 1
                if c.credit is not None:
                    c.credit -= 1
            if not budget:
                break
        if not budget:
            self.state.backlog[id(q)] = q
        elif (log := q.stream) is not None and log.end < log.index.next_offset:
            self.state.unshown[id(q)] = q  # more to read once the store shows it

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
        match = _wanted(c, q.queue.groups)
        if match is not None:
            return q.queue.has_matching(match, SELECTOR_SCAN, now_ms)
        return bool(q.queue.ready_count)


def _wanted(c: Consumer, groups: Groups | None) -> Callable[[Message], bool] | None:
    # The one rule for which ready messages consumer `c` may take, for dispatch and for a
    # drain's look ahead: what its selector matches and, on a grouped queue, what `matcher`
    # admits it (groups it owns or that have no owner). None: any message, the head.
    also = None if c.selector is None else c.selector.matches_message
    return also if groups is None else matcher(groups, c, also)


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
