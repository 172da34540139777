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

Owns: the table of live connections (`table`, conn_id -> AMQPConnection), the dirty set, the
batch depth, whether the server is stopping (`stopped`, `drained`), and the server-initiated
Connection.Close (`close`). Makes no call into the broker: the effects arrive from the callers.
Owned by the loop thread; no locks.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Iterable, Iterator
from typing import TYPE_CHECKING, assert_never

from ringmq.adapters.amqp091 import frame_of, reply_code
from ringmq.amqp.reply_codes import ReplyCode
from ringmq.core.effects import (
    Block,
    CancelConsumer,
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
from ringmq.server.clock import Clock
from ringmq.server.flow import PublisherFlow

if TYPE_CHECKING:
    from ringmq.server.commit import GroupCommit
    from ringmq.server.transport import AMQPConnection

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

    def __init__(self, clock: Clock, flow: PublisherFlow, table: dict[int, AMQPConnection]) -> None:
        self.clock = clock
        self.flow = flow
        self.table = table
        self.dirty: set[AMQPConnection] = set()
        self.depth = 0
        """Batches open (nested); the outermost one flushes when it ends."""
        self.commit: GroupCommit | None = None
        """Group-commit fsync of the broker's store (None without a store)."""
        self.after_flush: Callable[[], None] = _nothing
        """Run after every flush (the server re-arms the broker's deadline timer)."""
        self.stopped = False
        self.drained = asyncio.Event()
        """Set once the server is stopping and the last connection is gone."""

    def apply(self, effects: Iterable[Effect]) -> None:
        """Queue the output of `effects` on their target connections (flushed at batch end)."""
        conns = self.table
        dirty = self.dirty
        last_id = -1
        c: AMQPConnection | None = None
        for e in effects:
            if e.conn_id != last_id:  # runs of effects for one connection look it up once
                last_id = e.conn_id
                c = conns.get(last_id)
                if c is not None:
                    dirty.add(c)
            if c is None or c.closing:
                continue  # the target went away meanwhile; the broker learns it separately
            if type(e) is Deliver:
                # hot path: pre-encoded deliver header, no generic method encoding
                msg = e.message
                c.proto.send_deliver(
                    e.channel,
                    e.consumer_tag,
                    e.delivery_tag,
                    e.redelivered,
                    msg.exchange,
                    msg.routing_key,
                    msg.properties_bin,
                    msg.body,
                )
                continue
            match e:
                case SendContent(channel=ch, method=method, message=msg):
                    c.proto.send_content(ch, method, msg.properties_bin, msg.body)
                case Deliver():
                    raise AssertionError("handled above")
                case SendMethod(channel=ch, method=method):
                    c.proto.send_method(ch, method)
                case Confirm() | Return() | CancelConsumer() | DeliverReply():
                    # the core's neutral effects, as this connection's protocol frames
                    frame = frame_of(e)
                    if type(frame) is SendMethod:
                        c.proto.send_method(frame.channel, frame.method)
                    elif type(frame) is SendContent:
                        fm = frame.message
                        c.proto.send_content(
                            frame.channel, frame.method, fm.properties_bin, fm.body
                        )
                case Drained():
                    pass  # link credit is AMQP 1.0's: no 0-9-1 consumer has any to give back
                case CloseConnection(condition=condition, text=text):
                    code = reply_code(condition)
                    self.close(c, code, _explanation(code, text))
                case Block(reason=reason):
                    c.blocked_reason = reason
                    c.proto.send_blocked(reason)
                    c.pause_reading("block")
                case Unblock():
                    c.blocked_reason = None
                    c.proto.send_unblocked()
                    c.resume_reading(self.clock.monotonic(), reason="block")
                case _:
                    assert_never(e)
            dirty.add(c)

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
            except Exception:
                log.exception("write to %s failed", c.name)
                c.abort()
        self.after_flush()

    def close(self, c: AMQPConnection, code: int, text: str) -> None:
        """Server-initiated Connection.Close; `text` is the explanation (no code prefix)."""
        if c.closing:
            return
        self.flow.release(c)  # read its Close-Ok
        c.proto.close(code, text)
        if c.closing_since is None:
            c.closing_since = self.clock.monotonic()
        self.dirty.add(c)

    def remove(self, c: AMQPConnection) -> bool:
        """Drop `c` from the table; False when it was not there (already removed)."""
        self.flow.forget(c)
        if self.table.pop(c.conn_id, None) is None:
            return False
        if self.stopped and not self.table:
            self.drained.set()
        self.dirty.discard(c)
        return True

    def named(self, name: str) -> AMQPConnection | None:
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
        )


def _explanation(code: int, text: str) -> str:
    # effects may carry a full RabbitMQ reply text; the protocol adds the "CODE_NAME - " prefix
    prefix = f"{ReplyCode(code).name} - "
    return text[len(prefix) :] if text.startswith(prefix) else text
