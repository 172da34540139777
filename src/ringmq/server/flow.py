"""Publisher flow: pause reading a publisher that fills a queue faster than its consumers drain it.

Theory of operation (RabbitMQ's credit flow, single-threaded): one thread both reads publishes
and writes deliveries, so a fast publisher can fill a consumed queue faster than the loop gets to
its consumers (their acks wait behind the publisher's reads) and the backlog grows until it
pages. After each read the server takes the broker's `take_flow()` requests and `pause`s
reading those publishers (`pause_reading("flow")`); after every batch (`release_settled`) a
paused publisher reads again as soon as `Broker.flow_settled(queue)`. A check every
`FLOW_CHECK_S` releases a publisher whose queue made no delivery for `FLOW_STALL_CHECKS` checks
(its consumers are stalled: pausing cannot help, and that queue asks for no flow again until it
delivers) or that waited `FLOW_MAX_PAUSE_S`, so a slow consumer throttles a publisher but never
stops it. No connection.blocked is sent (RabbitMQ's flow state is silent too).

Owns: which connections are held and why (`held`), the queues found stalled, the check timer and
the counts of how pauses ended (`stats`). Reads the connection table it is given; never closes or
writes a connection. Owned by the loop thread.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Final

from ringmq.server.clock import Clock

if TYPE_CHECKING:
    from ringmq.core.broker import Broker
    from ringmq.core.entities import QueueEntity
    from ringmq.server.transport import ClientConnection

FLOW_CHECK_S: Final = 0.02
"""How often paused publishers are checked for stalled consumers and the pause limit."""
FLOW_STALL_CHECKS: Final = 5
"""Consecutive checks without a delivery from the queue after which its consumers count as
stalled (100 ms: longer than a consumer process waits for a CPU on a busy machine)."""
FLOW_MAX_PAUSE_S: Final = 1.0
"""Longest one flow pause lasts, whatever the queue's consumers do."""


@dataclass(slots=True)
class FlowHold:
    """Why a publisher is paused: the queue it fills and that queue's progress marks."""

    queue: QueueEntity
    since: float
    deliver_mark: int
    idle_checks: int = 0


class PublisherFlow:
    """Publisher flow of one server (see the module docstring).

    Args:
        broker: the core broker (`flow_requests`, `take_flow`, `flow_settled`).
        clock: the server's clock (monotonic time of pauses).
        table: the server's live connections by id (read only).
    """

    def __init__(self, broker: Broker, clock: Clock, table: Mapping[int, ClientConnection]) -> None:
        self.broker = broker
        self.clock = clock
        self.table = table
        self.requests = broker.flow_requests
        """The broker's `flow_requests` (same dict); empty unless a publisher outruns consumers."""
        self.held: dict[ClientConnection, FlowHold] = {}
        self.stalled: dict[int, tuple[QueueEntity, int]] = {}
        """id(queue) -> (queue, its deliver count when its consumers were found stalled)."""
        self.stats: dict[str, int] = {"paused": 0, "settled": 0, "stalled": 0, "timeout": 0}
        """Publisher flow pauses and how each ended (logged at shutdown)."""
        self.loop: asyncio.AbstractEventLoop | None = None
        """Set by the server once it runs; without it no check timer is armed."""
        self.stopped = False
        self._handle: asyncio.TimerHandle | None = None

    def pause(self) -> None:
        """Pause reading the publishers the broker asked flow for (after a read)."""
        mono = self.clock.monotonic()
        stalled = self.stalled
        for conn_id, q in self.broker.take_flow():
            c = self.table.get(conn_id)
            if c is None or c.closing or c in self.held:
                continue
            mark = stalled.get(id(q))
            if mark is not None:
                if mark[0] is q and mark[1] == q.deliver:
                    continue  # its consumers were stalled and still are
                del stalled[id(q)]
            self.held[c] = FlowHold(q, mono, q.deliver)
            self.stats["paused"] += 1
            c.pause_reading("flow")
        if self.held and self._handle is None and self.loop is not None:
            self._handle = self.loop.call_later(FLOW_CHECK_S, self._check)

    def release_settled(self) -> None:
        """After every batch: reopen publishers whose queue drained (cheap: few are paused)."""
        settled = self.broker.flow_settled
        done = [c for c, hold in self.held.items() if settled(hold.queue)]
        if done:
            mono = self.clock.monotonic()
            self.stats["settled"] += len(done)
            for c in done:
                del self.held[c]
                c.resume_reading(mono, reason="flow")

    def release(self, c: ClientConnection) -> None:
        """Let `c` read again at once (the server closes it and must read its Close-Ok)."""
        if self.held.pop(c, None) is not None:
            c.resume_reading(self.clock.monotonic(), reason="flow")

    def forget(self, c: ClientConnection) -> None:
        """`c` is gone."""
        self.held.pop(c, None)

    def stop(self) -> None:
        self.stopped = True
        if self._handle is not None:
            self._handle.cancel()
            self._handle = None

    def _check(self) -> None:
        self._handle = None
        mono = self.clock.monotonic()
        for c, hold in list(self.held.items()):
            q = hold.queue
            if q.deliver == hold.deliver_mark:
                hold.idle_checks += 1
            else:
                hold.idle_checks = 0
            stalled = hold.idle_checks >= FLOW_STALL_CHECKS
            if stalled or mono - hold.since >= FLOW_MAX_PAUSE_S:
                self.stats["stalled" if stalled else "timeout"] += 1
                if stalled:
                    self.stalled[id(q)] = (q, q.deliver)
                del self.held[c]
                c.resume_reading(mono, reason="flow")
            else:
                hold.deliver_mark = q.deliver
        for key, (q, _) in list(self.stalled.items()):
            if q.deleted:
                del self.stalled[key]
        if self.held and not self.stopped and self.loop is not None:
            self._handle = self.loop.call_later(FLOW_CHECK_S, self._check)
