"""Consumers of one queue and the choice of who gets the next message.

Theory of operation: a `ConsumerSet` keeps a queue's consumers in registration order and, for
dispatch, grouped by `x-priority` (highest first) with a round-robin cursor per group. `pick()`
returns the next consumer that can take a message: the highest-priority group that has any
consumer with capacity wins (RabbitMQ consumer priorities), and within a group consumers take
turns. With single-active-consumer only one consumer is eligible: the earliest registered one
of the highest priority; when it goes, the next one takes over. A *browsing* consumer (AMQP 1.0
distribution mode `copy`) is in `all` and `browsers` but in no priority group: `pick()` never
returns it, dispatch serves it through its own cursor instead (dispatch.py,
`Dispatcher._dispatch_browse`).
A consumer with a JMS selector (also in `selective`) takes its turn like any other, in its
priority group and under single-active-consumer, as Artemis serves filtered consumers round
robin with the others: when `pick()` returns it, dispatch hands it the first message its
selector matches (`Dispatcher._dispatch`), and a consumer that finds none is passed
over (`skip`) for the rest of that round. `fetchers` are the consumers that take messages
(all but the browsers); `special` says whether there are browsers or selector consumers (the
one test in front of the hot path). Capacity = the connection is
writable and (no-ack, or below both the consumer's prefetch and the channel's global prefetch).
Pure: no I/O, no clock.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ringmq.core.message import SeqId

if TYPE_CHECKING:
    from ringmq.core.selector import Selector
    from ringmq.core.session import Session
    from ringmq.core.vhost import QueueEntity


@dataclass(slots=True, eq=False)
class Consumer:
    """A basic.consume subscription.

    Attributes:
        tag: consumer tag (client-chosen or `amq.ctag-*`).
        session: the channel it lives on.
        queue: the queue it consumes from.
        no_ack: deliveries need no ack (and take no prefetch credit).
        exclusive: exclusive consumer (no other consumer may join).
        priority: `x-priority` (default 0).
        prefetch: per-consumer prefetch limit at consume time (0: unlimited).
        unacked: deliveries outstanding to it.
        arguments: the consume arguments.
        cursor: for a browsing consumer, the last seq browsed (None: from the head).
        browse: it reads without consuming (AMQP 1.0 distribution mode `copy`); on a
            non-destructive queue every consumer browses, whatever this says.
        credit, drain: link credit and drain mode (AMQP 1.0), see below.
        selector: a JMS selector: it takes (or browses) only the messages it matches.
        no_local: its queue does not take the messages its connection publishes.
    """

    tag: str
    session: Session
    queue: QueueEntity
    no_ack: bool
    exclusive: bool = False
    priority: int = 0
    prefetch: int = 0
    unacked: int = 0
    arguments: dict[str, Any] = field(default_factory=dict)
    cursor: SeqId | None = None
    browse: bool = False
    selector: Selector | None = None
    no_local: bool = False
    credit: int | None = None
    """Link credit (AMQP 1.0 flow): deliveries it may still take; None: no credit, prefetch
    alone bounds it (AMQP 0-9-1)."""
    drain: bool = False
    """The receiver asked to drain: credit it cannot use now is given back (`Drained`)."""
    offset_header: bool = True
    """On a stream: each delivery carries its offset in an `x-stream-offset` header (the
    message re-encoded); False: the message as stored, the offset in `Deliver.offset` alone
    (the stream protocol, whose chunks carry offsets)."""
    chunks: bool = False
    """A stream-protocol consumer: each delivery is one stored chunk (its message's body, as
    stored; `Deliver.offset` its first offset), and credit counts chunks (RabbitMQ's)."""

    def has_capacity(self) -> bool:
        """True when a message may be delivered to it now."""
        session = self.session
        if not session.conn.writable:
            return False
        credit = self.credit
        if credit is not None and credit <= 0:
            return False
        if self.no_ack:
            return True
        if self.prefetch and self.unacked >= self.prefetch:
            return False
        g = session.global_prefetch
        return not (g and session.global_unacked >= g)


class ConsumerSet:
    """The consumers of one queue, with priority groups and round-robin dispatch."""

    def __init__(self, single_active: bool = False) -> None:
        self.single_active = single_active
        self.credited = False
        """Some consumer of the queue was ever given link credit (dispatch then counts it)."""
        self.all: list[Consumer] = []
        self.fetchers: list[Consumer] = []
        """The consumers that take messages (all but the browsers, selector consumers
        included), in registration order."""
        self.browsers: list[Consumer] = []
        """The browsing consumers (`Consumer.browse`), in registration order."""
        self.selective: list[Consumer] = []
        """The consumers with a selector that take messages (also in `fetchers`), in
        registration order."""
        self.special = False
        """There are browsers or selective consumers (dispatch serves them first)."""
        self._groups: list[tuple[int, list[Consumer]]] = []  # by priority, highest first
        self._rr: dict[int, int] = {}

    def __len__(self) -> int:
        return len(self.all)

    def __bool__(self) -> bool:
        return bool(self.all)

    @property
    def exclusive(self) -> bool:
        """True when an exclusive consumer holds the queue."""
        return any(c.exclusive for c in self.all)

    @property
    def active(self) -> Consumer | None:
        """With single-active-consumer, the consumer that receives messages: the earliest
        registered among those with the highest `x-priority` (RabbitMQ 3.12+)."""
        return self._groups[0][1][0] if self._groups else None

    def add(self, consumer: Consumer) -> None:
        """Register a consumer (it joins the end of its priority group's rotation; a browser
        joins no group)."""
        self.all.append(consumer)
        if consumer.browse:
            self.browsers.append(consumer)
            self.special = True
            return
        if consumer.selector is not None:
            self.selective.append(consumer)
            self.special = True
        self.fetchers.append(consumer)
        for prio, members in self._groups:
            if prio == consumer.priority:
                members.append(consumer)
                return
        self._groups.append((consumer.priority, [consumer]))
        self._groups.sort(key=lambda g: -g[0])

    def remove(self, consumer: Consumer) -> bool:
        """Unregister a consumer; False when it was not registered."""
        try:
            self.all.remove(consumer)
        except ValueError:
            return False
        if consumer.browse:
            self.browsers.remove(consumer)
            self.special = bool(self.browsers or self.selective)
            return True
        if consumer.selector is not None:
            self.selective.remove(consumer)
            self.special = bool(self.browsers or self.selective)
        self.fetchers.remove(consumer)
        for i, (prio, members) in enumerate(self._groups):
            if prio == consumer.priority:
                members.remove(consumer)
                if not members:
                    del self._groups[i]
                    self._rr.pop(prio, None)
                break
        return True

    def pick(self, skip: set[Consumer] | None = None) -> Consumer | None:
        """The consumer that should get the next message, or None when nobody can take one;
        consumers in `skip` (selector consumers that found nothing this round) are passed
        over, as those without capacity are."""
        if self.single_active:
            active = self.active
            if active is None or not active.has_capacity():
                return None
            return None if skip is not None and active in skip else active
        everyone = self.fetchers
        if len(everyone) == 1:
            only = everyone[0]
            if skip is not None and only in skip:
                return None
            return only if only.has_capacity() else None
        for prio, members in self._groups:
            n = len(members)
            if n == 1:
                only = members[0]
                if only.has_capacity() and (skip is None or only not in skip):
                    return only
                continue
            start = self._rr.get(prio, 0) % n
            for i in range(n):
                idx = (start + i) % n
                c = members[idx]
                if c.has_capacity() and (skip is None or c not in skip):
                    self._rr[prio] = idx + 1
                    return c
        return None
