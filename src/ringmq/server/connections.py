"""The live connections: the table, the core's effects applied to them, one write per batch.

Theory of operation: output is *collected*. Applying an effect (`apply`) only queues frames in
the target connection's sans-IO state machine and marks it dirty. At the end of each batch (one
read, one timer firing, one management call) `flush` runs once: the store first (its writes
reach the OS before any reply that depends on them, and the group fsync for held confirms starts,
server/commit.py), then publisher flow releases the publishers whose queues drained, then every
dirty connection is written with exactly one `transport.write`, then the `after_flush` hook
re-arms the broker's deadline timer. So a publish fanned out to 100 consumers on 20 connections
costs 20 writes, not 100. Batches nest (`batch()`, or `depth` on the read path); only the
outermost one flushes.

Connections of every protocol share the table. An AMQP 0-9-1 connection's effects become frames
here, through the 0-9-1 adapter; the connection of an adapter protocol (AMQP 1.0, STOMP, MQTT:
`ClientConnection.handler` set) gets each effect through its `Handler.apply`, after the server's
own part (`Block`/`Unblock` pause and resume reading, `CloseConnection` closes). A handler that
has finished (`Handler.closed`) has its socket closed once its output is written.

Owns: the table of live connections (`table`, conn_id -> ClientConnection), the dirty set, the
batch depth, whether the server is stopping (`stopped`, `drained`), admission (`admit`) and the
server-initiated close (`close`). Makes no call into the broker: the effects arrive from the
callers.
Owned by the loop thread; no locks.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Iterable, Iterator
from typing import TYPE_CHECKING, assert_never

from ringmq.adapters.amqp091 import frame_of, reply_code
from ringmq.adapters.handler import Handler
from ringmq.amqp.reply_codes import AMQPError, ReplyCode
from ringmq.core.effects import (
    Block,
    CancelConsumer,
    CloseChannel,
    CloseConnection,
    Confirm,
    Deliver,
    DeliverReply,
    Drained,
    Effect,
    Return,
    SendContent,
    SendMethod,
    Unblock,
)
from ringmq.core.errors import Condition
from ringmq.core.message import amqp091_content
from ringmq.core.throttle import LogLimiter
from ringmq.server.clock import Clock
from ringmq.server.configspec import LimitsSpec
from ringmq.server.flow import PublisherFlow
from ringmq.server.transport import AMQPConnection, ClientConnection

if TYPE_CHECKING:
    from ringmq.server.commit import GroupCommit

log = logging.getLogger(__name__)


def _nothing() -> None:
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
        self.after_flush: Callable[[], None] = _nothing
        """Run after every flush (the server re-arms the broker's deadline timer)."""
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
        return True

    def apply(self, effects: Iterable[Effect]) -> None:
        """Queue the output of `effects` on their target connections (flushed at batch end)."""
        conns = self.table
        dirty = self.dirty
        last_id = -1
        c: ClientConnection | None = None
        a: AMQPConnection | None = None  # c, when it speaks AMQP 0-9-1
        h: Handler | None = None  # c's handler, when it speaks another protocol
        for e in effects:
            if e.conn_id != last_id:  # runs of effects for one connection look it up once
                last_id = e.conn_id
                c = conns.get(last_id)
                a = h = None
                if c is not None:
                    dirty.add(c)
                    if type(c) is AMQPConnection:
                        a = c
                    else:
                        h = c.handler
            if c is None or c.closing:
                continue  # the target went away meanwhile; the broker learns it separately
            if a is None:
                if h is not None:
                    self._to_handler(c, h, e)
                continue
            if type(e) is Deliver:
                # hot path: pre-encoded deliver header, no generic method encoding
                msg = e.message
                pb, body = msg.properties_bin, msg.body
                if msg.form:  # another protocol's message: its 0-9-1 content, made once
                    pb, body = amqp091_content(msg)
                a.proto.send_deliver(
                    e.channel,
                    e.consumer_tag,
                    e.delivery_tag,
                    e.redelivered,
                    msg.exchange,
                    msg.routing_key,
                    pb,
                    body,
                )
                continue
            match e:
                case SendContent(channel=ch, method=method, message=msg):
                    a.proto.send_content(ch, method, *amqp091_content(msg))
                case Deliver():
                    raise AssertionError("handled above")
                case SendMethod(channel=ch, method=method):
                    a.proto.send_method(ch, method)
                case Confirm() | Return() | CancelConsumer() | DeliverReply():
                    # the core's neutral effects, as this connection's protocol frames
                    frame = frame_of(e)
                    if type(frame) is SendMethod:
                        a.proto.send_method(frame.channel, frame.method)
                    elif type(frame) is SendContent:
                        a.proto.send_content(
                            frame.channel, frame.method, *amqp091_content(frame.message)
                        )
                case Drained():
                    pass  # link credit is AMQP 1.0's: no 0-9-1 consumer has any to give back
                case CloseConnection(condition=condition, text=text):
                    self.close(c, condition, text)
                case CloseChannel(channel=ch, condition=condition, text=text):
                    # a consumer timeout: Channel.Close; its Close-Ok returns the rest
                    a.proto.send_error(ch, AMQPError(reply_code(condition), text))
                case Block(reason=reason):
                    a.proto.send_blocked(reason)
                    self._block(c, reason)
                case Unblock():
                    a.proto.send_unblocked()
                    self._unblock(c)
                case _:
                    assert_never(e)
            dirty.add(c)

    def _to_handler(self, c: ClientConnection, h: Handler, e: Effect) -> None:
        # An effect for an adapter protocol's connection: the server's part, then the handler's.
        match e:
            case CloseConnection(condition=condition, text=text):
                self.close(c, condition, text)
                return
            case Block(reason=reason):
                self._block(c, reason)
            case Unblock():
                self._unblock(c)
            case _:
                pass
        h.apply(e)

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
        """Server-initiated close (AMQP 0-9-1 Connection.Close with the condition's reply code;
        the handler's own close otherwise); `text` is the explanation."""
        if c.closing:
            return
        self.flow.release(c)  # read its Close-Ok
        if type(c) is AMQPConnection:
            code = reply_code(condition)
            c.proto.close(code, _explanation(code, text))
        elif c.handler is not None:
            c.handler.close(condition, text)
        if c.closing_since is None:
            c.closing_since = self.clock.monotonic()
        self.dirty.add(c)

    def remove(self, c: ClientConnection) -> bool:
        """Drop `c` from the table; False when it was not there (already removed)."""
        self.flow.forget(c)
        if self.table.pop(c.conn_id, None) is None:
            return False
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
            c.proto.content_received if c.reading_paused else c.proto.content_in_flight
            for c in self.table.values()
            if type(c) is AMQPConnection
        )


def _explanation(code: int, text: str) -> str:
    # effects may carry a full RabbitMQ reply text; the protocol adds the "CODE_NAME - " prefix
    prefix = f"{ReplyCode(code).name} - "
    return text[len(prefix) :] if text.startswith(prefix) else text
