"""The live connections: the table, the core's effects applied to them, one write per batch.

Theory of operation: output is *collected*. Applying an effect (`apply`) only queues frames in
the target connection's sans-IO state machine and marks it dirty. At the end of each batch (one
read, one timer firing, one management call) `flush` runs once: the store first (its writes
reach the OS before any reply that depends on them, and the group fsync for held confirms starts,
server/commit.py; before it, what reached other shards' queues goes onto the links to their
owners, server/shardlinks.py), then publisher flow releases the publishers whose queues
drained, then every dirty connection is written with exactly one `transport.write`, then the
`after_flush` hook re-arms the broker's deadline timer. So a publish fanned out to 100
consumers on 20 connections costs 20 writes, not 100. Batches nest (`batch()`, or `depth` on
the read path); only the outermost one flushes.

Connections of every protocol share the table, and every connection is driven by its
protocol's `Handler` (`ClientConnection.handler`): each effect goes to its `Handler.apply`
(a run of one connection's effects in one `apply_run`, for a handler that has it), which
queues that protocol's frames (AMQP 0-9-1 included: the 0-9-1 adapter turns core effects
into 0-9-1 frames), after the server's own part (`Block`/`Unblock` pause and resume reading,
`CloseConnection` closes instead). A handler that has finished (`Handler.closed`) has its
socket closed once its output is written. This module imports no codec and no adapter.

Owns: the table of live connections (`table`, conn_id -> ClientConnection; its `watch` and
`unwatch` hooks tell the timers who enters, starts closing and leaves), the dirty set, the
batch depth, whether the server is stopping (`stopped`, `drained`), admission (`admit`) and
the server-initiated close (`close`). Makes no call into the broker: the effects arrive from
the callers.
Owned by the loop thread; no locks.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Iterable, Iterator
from typing import TYPE_CHECKING

from ringmq.adapters.handler import SERVER_PART
from ringmq.core.effects import Block, CloseConnection, Effect, Unblock
from ringmq.core.errors import Condition
from ringmq.core.throttle import LogLimiter
from ringmq.server.clock import Clock
from ringmq.server.configspec import LimitsSpec
from ringmq.server.flow import PublisherFlow
from ringmq.server.transport import ClientConnection

if TYPE_CHECKING:
    from ringmq.server.commit import GroupCommit
    from ringmq.server.shardlinks import ShardLinks

log = logging.getLogger(__name__)


def _nothing() -> None:
    pass


def _not_watched(c: ClientConnection) -> None:
    pass


class Connections:
    """The live connections and their output (see the module docstring).

    Args:
        clock: the server's clock.
        flow: publisher flow (released on close and after each batch).
        table: the connection table, shared with `flow` (empty at start).
    """

    def __init__(
        self, clock: Clock, flow: PublisherFlow, table: dict[int, ClientConnection]
    ) -> None:
        self.clock = clock
        self.flow = flow
        self.table = table
        self.dirty: set[ClientConnection] = set()
        self.depth = 0
        """Batches open (nested); the outermost one flushes when it ends."""
        self.commit: GroupCommit | None = None
        """Group-commit fsync of the broker's store (None without a store)."""
        self.shard_links: ShardLinks | None = None
        """The links to other shards (server/shardlinks.py; None with one shard)."""
        self.after_flush: Callable[[], None] = _nothing
        self.at_batch_end: dict[ClientConnection, Callable[[], bool]] = {}
        """Handlers' hooks run first at every batch end (`HandlerContext.at_batch_end`); a
        True answer makes their connection dirty."""
        """Run after every flush (the server re-arms the broker's deadline timer)."""
        self.watch: Callable[[ClientConnection], None] = _not_watched
        """Run when a connection enters the table and when the server starts closing it: both
        need the sweep's every turn (the handshake and close timeouts, server/timers.py)."""
        self.unwatch: Callable[[ClientConnection], None] = _not_watched
        """Run when a connection leaves the table."""
        self.stopped = False
        self.drained = asyncio.Event()
        """Set once the server is stopping and the last connection is gone."""
        self._max_conn_log = LogLimiter(10_000)

    def admit(self, c: ClientConnection, limits: LimitsSpec) -> bool:
        """Enter a new connection in the table, or abort it (stopping, `max_connections`)."""
        if self.stopped or (
            limits.max_connections is not None and len(self.table) >= limits.max_connections
        ):
            if not self.stopped and self._max_conn_log.admit(self.clock.wall_ms()) is not None:
                log.warning(
                    "refused connection from %s:%d: max_connections (%d) reached",
                    c.peer[0],
                    c.peer[1],
                    limits.max_connections,
                )
            c.abort()
            return False
        self.table[c.conn_id] = c
        c.connected_at_ms = self.clock.wall_ms()
        c.connected_mono = self.clock.monotonic()
        self.watch(c)
        return True

    def on_batch_end(self, c: ClientConnection, fn: Callable[[], bool]) -> None:
        """Run `fn` at the end of every batch while `c` lives; True: write `c` then."""
        self.at_batch_end[c] = fn

    def apply(self, effects: Iterable[Effect]) -> None:
        """Queue the output of `effects` on their target connections (flushed at batch end).

        Effects come in runs per connection (a dispatch hands out a queue's deliveries to one
        consumer after another): each run goes to its handler in one `apply_run` when the
        handler has it (`adapters/handler.AppliesRuns`: the handler finds where the run ends),
        else effect by effect. An effect the server acts on itself (`SERVER_PART`: `Block`,
        `Unblock`, `CloseConnection`) goes alone, after the server's part."""
        if type(effects) is not list:
            effects = list(effects)
        conns = self.table
        dirty = self.dirty
        n = len(effects)
        i = 0
        while i < n:
            e = effects[i]
            conn_id = e.conn_id
            c = conns.get(conn_id)
            j = i + 1
            if c is not None:
                dirty.add(c)
                h = c.handler
                if h is not None and not c.closing:
                    if type(e) in SERVER_PART:
                        if self._server_part(c, e):
                            dirty.add(c)
                            h.apply(e)
                        i = j
                        continue
                    # the run of this connection's effects the server has no part in
                    run = getattr(h, "apply_run", None)
                    if run is not None:
                        i = run(effects, i)
                        continue
                    while j < n:
                        f = effects[j]
                        if f.conn_id != conn_id or type(f) in SERVER_PART:
                            break
                        j += 1
                    put = h.apply
                    for k in range(i, j):
                        put(effects[k])
                    i = j
                    continue
            # the target went away meanwhile (the broker learns it separately): its run goes
            while j < n and effects[j].conn_id == conn_id:
                j += 1
            i = j

    def _server_part(self, c: ClientConnection, e: Effect) -> bool:
        # The server's part of an effect; False when the handler is not to see it (a close:
        # the server asks the handler to close instead).
        match e:
            case CloseConnection(condition=condition, text=text):
                self.close(c, condition, text)
                return False
            case Block(reason=reason):
                self._block(c, reason)
            case Unblock():
                self._unblock(c)
            case _:
                pass
        return True

    def _block(self, c: ClientConnection, reason: str) -> None:
        c.blocked_reason = reason
        c.pause_reading("block")

    def _unblock(self, c: ClientConnection) -> None:
        c.blocked_reason = None
        c.resume_reading(self.clock.monotonic(), reason="block")

    @contextlib.contextmanager
    def batch(self) -> Iterator[None]:
        """One batch: what is applied inside is written once, when the outermost one ends."""
        self.depth += 1
        try:
            yield
        finally:
            self.depth -= 1
            if self.depth == 0:
                self.flush()

    def flush(self) -> None:
        """End of the outermost batch (see the module docstring for the order)."""
        if self.at_batch_end:
            for c, fn in list(self.at_batch_end.items()):
                if fn():
                    self.dirty.add(c)
        if self.shard_links is not None:
            self.shard_links.after_batch()
        if self.commit is not None:
            self.commit.after_batch()
        if self.flow.held:
            self.flow.release_settled()
        dirty, self.dirty = self.dirty, set()
        for c in dirty:
            try:
                c.flush()
                h = c.handler
                if h is not None and h.closed:
                    c.close_transport()  # its connection_lost tells the broker
            except Exception:
                log.exception("write to %s failed", c.name)
                c.abort()
        self.after_flush()

    def close(self, c: ClientConnection, condition: Condition, text: str) -> None:
        """Server-initiated close: the handler's close in its protocol's terms (AMQP 0-9-1:
        Connection.Close with the condition's reply code); `text` is the explanation."""
        if c.closing:
            return
        self.flow.release(c)  # read its Close-Ok
        if c.handler is not None:
            c.handler.close(condition, text)
        if c.closing_since is None:
            c.closing_since = self.clock.monotonic()
            self.watch(c)
        self.dirty.add(c)

    def remove(self, c: ClientConnection) -> bool:
        """Drop `c` from the table; False when it was not there (already removed)."""
        self.flow.forget(c)
        self.at_batch_end.pop(c, None)
        if self.table.pop(c.conn_id, None) is None:
            return False
        self.unwatch(c)
        if self.stopped and not self.table:
            self.drained.set()
        self.dirty.discard(c)
        return True

    def named(self, name: str) -> ClientConnection | None:
        """The connection RabbitMQ would call `name` ("peer -> local")."""
        for c in self.table.values():
            if c.name == name:
                return c
        return None

    def content_in_flight(self) -> int:
        """Body bytes of the contents being received, for the memory watermark.

        A connection that reads counts the declared sizes (what it is about to make the broker
        hold); a paused one (blocked, flow) only the bytes it sent so far, since no more arrive
        until it reads again. Otherwise an alarm raised by declared sizes alone would hold its
        own cause blocked forever.
        """
        return sum(
            f.content_in_flight(c.reading_paused)
            for c in self.table.values()
            if (f := c.in_flight) is not None
        )
