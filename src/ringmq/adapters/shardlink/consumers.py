"""Remote consumers of one shard link: core consumers with link credit, their deliveries and
settlements.

Theory of operation: each `SubscribeAsked` gets a core session of its own in the named vhost
(so that closing it requeues exactly that consumer's unsettled deliveries, and its delivery ids
are that consumer's; the link's connection opens sessions in any vhost) and a core consumer on
the named queue with link credit (`Delivery.consume`, then `Delivery.flow`: the AMQP 1.0
adapter's credit, which the dispatcher counts down per delivery), no-ack when the origin asked
for pre-settled deliveries, exclusive and with the arguments (`x-priority`...) the origin's
client gave, as a local consumer's. Whatever the core refuses there (an unknown vhost or queue,
an invalid argument, a queue in exclusive use) is the `SubscribeRefused` answer, with the
core's code and text; the link goes on. The origin's credit arrives as
increments (`CreditAdded`); the core's is absolute, so the consumer's remaining core credit
plus the increment is given. The core never delivers more than that, and the session counts
the same deliveries down as they are handed to it (`OwnerSession.deliver`), so the core's
credit is never above the link's.

A core `Deliver` becomes one link delivery, with the redelivered flag and the delivery count
the core gives it; `tags` maps its link tag to the core delivery id
until the origin settles it (ACK -> ack, REQUEUE -> requeue, counted as a failed delivery,
REJECT -> reject: dead-lettered where the queue says so). A cancel ends the core consumer and
keeps the session, so unsettled deliveries stay settleable (0-9-1's basic.cancel); once the
last is settled the session closes. A deleted queue (`CancelConsumer`) or a consumer timeout
(`CloseChannel`) ends the consumer on the link (`OwnerSession.gone`) and its session.

Strays: the session reads every frame of a read before the handler runs the events, so a
consumer may be cancelled on the link while the core still dispatches to it within that
read. Such a delivery is not sent; it is released back to its queue (not counted as a failed
delivery) by `housekeeping`, which the handler runs as a read of the connection, with the
sessions to close.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Final

from ringmq.core.effects import CloseConnection
from ringmq.core.errors import BrokerError
from ringmq.core.session import SettleKind
from ringmq.shardlink import codes
from ringmq.shardlink.codec import Outcome

if TYPE_CHECKING:
    from ringmq.core.broker import Broker
    from ringmq.core.effects import Deliver, Effect
    from ringmq.core.entities import Unacked
    from ringmq.core.session import Session
    from ringmq.shardlink.owner import (
        CancelAsked,
        CreditAdded,
        OwnerSession,
        Settled,
        SubscribeAsked,
    )

log = logging.getLogger(__name__)

_KINDS: Final = {
    Outcome.ACK: SettleKind.ACK,
    Outcome.REQUEUE: SettleKind.REQUEUE,
    Outcome.REJECT: SettleKind.REJECT,
}


@dataclass(slots=True)
class LinkConsumer:
    """One consumer of the link: its core session and unsettled deliveries."""

    cid: int
    channel: int
    vhost: str
    queue: str
    settled: bool
    tag: str
    tags: dict[int, int] = field(default_factory=dict)
    """Link tag -> core delivery id, for deliveries not settled yet."""
    cancelled: bool = False


class Consumers:
    """The remote consumers of one link (see the module docstring).

    Args:
        broker: the core.
        owner: the link's session.
        conn_id: the link's core connection.
        first_channel: the first core session number for consumers.
    """

    def __init__(self, broker: Broker, owner: OwnerSession, conn_id: int, first_channel: int):
        self.broker = broker
        self.owner = owner
        self.conn_id = conn_id
        self._next_channel = first_channel
        self.by_cid: dict[int, LinkConsumer] = {}
        self.by_channel: dict[int, LinkConsumer] = {}
        self.strays: list[tuple[int, int]] = []
        """(core session, delivery id) of deliveries the link could not take."""
        self.closing: list[int] = []
        """Core sessions to close (their consumer ended)."""

    @property
    def pending(self) -> bool:
        """Whether `housekeeping` has work."""
        return bool(self.strays or self.closing)

    # ------------------------------------------------------------------ link events
    def subscribe(self, ev: SubscribeAsked, now_ms: int) -> None:
        """Attach a core consumer for the origin's (inside a core call)."""
        broker = self.broker
        channel = self._next_channel
        self._next_channel += 1
        tag = f"shard-link-{ev.cid}"
        delivery = broker.delivery
        try:
            for e in broker.channel_opened(self.conn_id, channel, now_ms, vhost=ev.vhost):
                if isinstance(e, CloseConnection):  # the user's channel limit
                    self.owner.refuse(ev.cid, codes.of_condition(e.condition), e.text)
                    return
            s = self._session(channel)
            delivery.consume(
                s, ev.queue, tag, no_ack=ev.settled, exclusive=ev.exclusive,
                arguments=dict(ev.arguments), now_ms=now_ms, credit_flow=True,
            )  # fmt: skip
            delivery.flow(s, tag, credit=ev.credit, drain=False)
        except BrokerError as exc:
            self.owner.refuse(ev.cid, codes.of_condition(exc.condition), exc.text)
            if broker.session(self.conn_id, channel) is not None:
                self.closing.append(channel)
            return
        c = LinkConsumer(ev.cid, channel, ev.vhost, ev.queue, ev.settled, tag)
        self.by_cid[ev.cid] = c
        self.by_channel[channel] = c
        self.owner.subscribed(ev.cid)

    def credit(self, ev: CreditAdded) -> None:
        """More credit from the origin (inside a core call)."""
        c = self.by_cid.get(ev.cid)
        if c is None or c.cancelled:
            return
        s = self._session(c.channel)
        consumer = s.consumers.get(c.tag)
        if consumer is None:
            return  # its queue went: `gone` is on the way
        self.broker.delivery.flow(s, c.tag, credit=(consumer.credit or 0) + ev.add, drain=False)

    def settled(self, ev: Settled, now_ms: int) -> None:
        """The origin's settlement of deliveries (inside a core call)."""
        c = self.by_cid.get(ev.cid)
        if c is None:
            return
        s = self._session(c.channel)
        entries: list[Unacked] = []
        for tag in ev.tags:
            did = c.tags.pop(tag, None)
            if did is not None and did in s.unacked:
                entries += s.take(did, False)
        self.broker.delivery.settle_entries(entries, _KINDS[ev.outcome], now_ms, s)
        if c.cancelled and not c.tags:
            self._end(c)

    def cancel(self, ev: CancelAsked, now_ms: int) -> None:
        """The origin cancelled: no more deliveries; unsettled ones stay settleable."""
        c = self.by_cid.get(ev.cid)
        if c is None or c.cancelled:
            return
        c.cancelled = True
        self.broker.delivery.cancel(self._session(c.channel), c.tag, now_ms)
        if not c.tags:
            self._end(c)

    # ------------------------------------------------------------------ core effects
    def deliver(self, d: Deliver) -> None:
        """A core delivery to a link consumer: sent while the link takes it."""
        c = self.by_channel.get(d.channel)
        if c is None:
            return  # its session is closing: the close requeues it
        owner = self.owner
        if owner.credit(c.cid) <= 0:  # cancelled on the link within this read (a stray)
            if not c.settled:
                self.strays.append((c.channel, d.delivery_id))
            else:
                log.debug("shard link consumer %d: a pre-settled delivery after cancel", c.cid)
            return
        tag = owner.deliver(c.cid, d.redelivered, d.delivery_count, d.message)
        if not c.settled:
            c.tags[tag] = d.delivery_id

    def gone(self, channel: int, reason: str) -> None:
        """The core ended a consumer (its queue was deleted, or it timed out)."""
        c = self.by_channel.get(channel)
        if c is None:
            return
        self.owner.gone(c.cid, reason)
        self._end(c)

    def housekeeping(self, now_ms: int) -> list[Effect]:
        """Release the strays and close the sessions of ended consumers (a core call)."""
        broker = self.broker
        out: list[Effect] = []
        if self.strays:
            strays, self.strays = self.strays, []
            with broker.call(now_ms) as effects:
                for channel, did in strays:
                    s = broker.session(self.conn_id, channel)
                    if s is not None and did in s.unacked:
                        entries = s.take(did, False)
                        broker.delivery.settle_entries(entries, SettleKind.RELEASE, now_ms, s)
            out += effects
        while self.closing:
            out += broker.channel_closed(self.conn_id, self.closing.pop(0), now_ms)
        return out

    def _end(self, c: LinkConsumer) -> None:
        # the consumer is over on both sides: its session closes (what it still holds goes
        # back to its queue)
        self.by_cid.pop(c.cid, None)
        self.by_channel.pop(c.channel, None)
        self.closing.append(c.channel)

    def _session(self, channel: int) -> Session:
        s = self.broker.session(self.conn_id, channel)
        assert s is not None, f"shard link: no core session {channel}"
        return s
