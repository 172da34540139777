"""Timers: queue TTLs, `x-expires`, scheduled messages and delayed exchanges.

Theory of operation: only queues that ever had timer work (`State.timed`: a TTL, an
`x-expires`, a scheduled or expiring message) and delayed exchanges holding messages
(`Publisher.holding`) are visited, so a broker with many plain queues ticks in O(timed).
`tick(now_ms)` runs each due queue's engine timers (expiry, release of scheduled messages),
deletes queues whose `x-expires` passed, and routes the delayed messages now due (their delay
consumed) through the publish pipeline; the broker flushes afterwards. `next_deadline_ms` is
the earliest time any of that is due, or "now" while a dispatch is pending (`State.dirty`,
`State.backlog`): the server arms one timer for it.

Consumer timeouts (RabbitMQ's `consumer_timeout`, `x-consumer-timeout`): every dispatch that
leaves a delivery waiting for its acknowledgement makes sure `State.consumer_check_ms` is no
later than that delivery's deadline (`State.arm_consumer_check`). When it is due,
`consumer_timeouts` visits each open session once and looks at its oldest outstanding delivery
only, as RabbitMQ's channel does: past its queue's timeout (else the broker's), the session is
consumer of that delivery is cancelled and its deliveries go back to their queue (counted as
failed deliveries; a `basic.get` delivery, which has no consumer, marks the session timed out
instead), and a `CloseChannel` effect tells the protocol (0-9-1: PRECONDITION_FAILED channel
close, whose Close-Ok returns the rest; AMQP 1.0: that link detached, the session stays). The next
check is the earliest deadline still ahead, or none.

Pure: no I/O, no clock.
"""

from __future__ import annotations

from ringmq.core.effects import CloseChannel
from ringmq.core.entities import QueueEntity
from ringmq.core.errors import Condition
from ringmq.core.message import Message, SeqId
from ringmq.core.publish import Publisher
from ringmq.core.session import SettleKind
from ringmq.core.state import State
from ringmq.core.topology import Topology


def undelayed(msg: Message) -> Message:
    """The message a delayed exchange routes when due: same content, delay consumed."""
    headers = dict(msg.headers or {})
    headers.pop("x-delay", None)
    return Message(
        msg.exchange,
        msg.routing_key,
        msg.properties_bin,
        msg.body,
        headers=headers or None,
        priority=msg.priority,
        expiration_ms=msg.expiration_ms,
        persistent=msg.persistent,
        message_id=msg.message_id,
        timestamp_ms=msg.timestamp_ms,
        form=msg.form,
    )


class Timers:
    """Runs the timer work of queues and delayed exchanges (see the module docstring)."""

    def __init__(self, state: State, topology: Topology, publisher: Publisher) -> None:
        self.state = state
        self.topology = topology
        self.publisher = publisher

    def tick(self, now_ms: int) -> None:
        """Run what is due at `now_ms` (the caller flushes)."""
        state = self.state
        if state.backlog:
            for q in state.backlog.values():
                state.mark(q)
            state.backlog.clear()
        for q in state.streams.values():  # retention by age (appends apply it too)
            assert q.stream is not None
            q.stream.enforce(now_ms)
        check = state.consumer_check_ms
        if check is not None and check <= now_ms:
            self.consumer_timeouts(now_ms)
        timed = state.timed
        for key, q in list(timed.items()):
            if q.deleted:
                del timed[key]
                continue
            deadline = q.queue.next_deadline_ms()
            if deadline is not None and deadline <= now_ms:
                q.queue.tick(now_ms)
                state.mark(q)
            expires = q.expires_at_ms()
            if expires is not None and expires <= now_ms:
                vh = state.vhosts.get(q.vhost)
                if vh is not None:
                    self.topology.delete_queue(vh, q, now_ms)
        holding = self.publisher.holding
        for key, (vh, x) in list(holding.items()):
            due = x.next_due_ms()
            if due is None or vh.exchanges.get(x.name) is not x:
                del holding[key]
                continue
            if due <= now_ms:
                released = x.take_due(now_ms)
                for _, msg in released:
                    self.publisher.route(undelayed(msg), vhost=vh, exchange=x, now_ms=now_ms)
                if state.durability is not None:
                    state.durability.released(vh.name, x, [n for n, _ in released])

    def consumer_timeouts(self, now_ms: int) -> None:
        """Close the sessions whose oldest delivery passed its consumer timeout (module doc)."""
        state = self.state
        default = state.config.consumer_timeout_ms
        delivery = self.publisher.delivery
        upcoming: int | None = None
        for conn in list(state.conns.values()):
            for s in list(conn.sessions.values()):
                if s.timed_out or not s.unacked:
                    continue
                oldest = next(iter(s.unacked.values()))
                timeout = oldest.queue.settings.consumer_timeout_ms or default
                if timeout is None:
                    continue
                due = oldest.delivered_at + timeout
                if due > now_ms:
                    upcoming = due if upcoming is None or due < upcoming else upcoming
                    continue
                consumer = oldest.consumer
                tag = consumer.tag if consumer is not None else None
                if consumer is None:
                    s.timed_out = True  # a basic.get: the channel's close returns it
                else:
                    # its deliveries leave the session, so the next check sees later ones
                    taken = [t for t, e in s.unacked.items() if e.consumer is consumer]
                    entries = [e for t in taken for e in s.take(t, False)]
                    delivery.cancel(s, consumer.tag, now_ms)
                    delivery.settle_entries(entries, SettleKind.REQUEUE, now_ms)
                state.out.append(
                    CloseChannel(
                        s.conn_id,
                        s.channel,
                        tag,
                        Condition.PRECONDITION_FAILED,
                        f"delivery acknowledgement on channel {s.channel} timed out. Timeout "
                        f"value used: {timeout} ms. This timeout value can be configured, see "
                        "consumers doc guide to learn more",
                    )
                )
        state.consumer_check_ms = upcoming

    def next_deadline_ms(self) -> int | None:
        """Earliest time `tick` has work (an immediate time when dispatch is pending)."""
        state = self.state
        if state.backlog or state.dirty:
            return state.now_ms
        best: int | None = state.consumer_check_ms
        for q in state.timed.values():
            for t in (q.queue.next_deadline_ms(), q.expires_at_ms()):
                if t is not None and (best is None or t < best):
                    best = t
        for q in state.streams.values():  # retention by age of idle streams
            assert q.stream is not None
            t = q.stream.index.next_expiry_ms()
            if t is not None and (best is None or t < best):
                best = t
        for _vh, x in self.publisher.holding.values():
            t = x.next_due_ms()
            if t is not None and (best is None or t < best):
                best = t
        return best

    def purge_scheduled(self, q: QueueEntity) -> int:
        """Drop every scheduled message of `q`; returns how many."""
        return int(q.queue.purge_scheduled())

    def deliver_scheduled_now(self, q: QueueEntity, seqs: list[SeqId] | None, now_ms: int) -> int:
        """Release scheduled messages of `q` (all when `seqs` is None) to its head now, under
        its limit; returns how many were released."""
        n = q.queue.deliver_scheduled_now(seqs, now_ms)
        self.state.mark(q)
        return int(n)
