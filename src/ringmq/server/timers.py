"""The server's timers: the broker's deadline, and the sweep of heartbeats and timeouts.

Theory of operation: one `loop.call_at` for the broker's `next_deadline_ms()` (TTL expiry,
scheduled messages, delayed exchanges), re-armed after every batch (`arm_deadline`, the
`Connections.after_flush` hook) when the deadline changed; its firing runs `Broker.tick` as one
batch. One sweep per second (or per half heartbeat, whichever is shorter) for heartbeats,
missed heartbeats (2 intervals, as RabbitMQ), the 10 s handshake timeout, clients that never
answer our Connection.Close, the rate-limited logs of refused connections and failed logins, and
the group commit's periodic fsync.

Every connection, whatever its protocol, shares the handshake timeout and the close timeout;
heartbeats and keep-alive are its handler's (`Handlers.tick`: AMQP 0-9-1's heartbeats are the
0-9-1 adapter's).

Which connections a sweep visits: those in `every` (a connection enters it when admitted and
when the server starts closing it, through the `Connections.watch` hook; it stays while it is
not open, while it closes, and for good when its handler cannot say when its tick has work),
and those the timer wheel (`server/wheel.py`) hands out as due. An open connection whose
handler has `tick_idle_ms` (`adapters.handler.TickDeadline`: MQTT's keep-alive) leaves `every`
after its first tick as open and waits in the wheel until its handler's deadline; after each
tick there it is asked again. Bytes arriving only postpone such a deadline, so nothing is done
per read: the connection is looked at once its deadline comes, and put back for the later one
if packets moved it. A sweep costs what is due, not the number of connections; a visit comes
at the first sweep at or after the deadline, as when every sweep looked at every connection.

Owns the two timer handles, `every` and the wheel; reads the connections' table and closes
through `Handlers` (the broker learns of a dropped connection there). Owned by the loop thread.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Final

from ringmq.adapters.handler import ProtocolTick
from ringmq.core.throttle import LoginGuard
from ringmq.server.clock import Clock
from ringmq.server.configspec import LimitsSpec
from ringmq.server.connections import Connections
from ringmq.server.handlers import Handlers
from ringmq.server.listener import Listener
from ringmq.server.transport import ClientConnection
from ringmq.server.wheel import TimerWheel

if TYPE_CHECKING:
    from ringmq.core.broker import Broker

log = logging.getLogger(__name__)

CLOSE_OK_TIMEOUT_S: Final = 3.0
"""A client that does not answer our Connection.Close within this time is disconnected."""


@dataclass(slots=True)
class _Deadline:
    handle: asyncio.TimerHandle | None = None
    due_ms: int | None = None

    def cancel(self) -> None:
        if self.handle is not None:
            self.handle.cancel()
        self.handle = None
        self.due_ms = None


class Timers:
    """Deadline timer and periodic sweep of one server (see the module docstring).

    Args:
        broker: the core broker (`next_deadline_ms`, `tick`).
        clock: the server's clock.
        limits: the connection limits (heartbeat, handshake timeout).
        conns: the live connections.
        handlers: the connections' driver (their sweep, and dropping them).
        listeners: the server's listeners (their refusal logs are flushed by the sweep).
        login_guard: failed logins per address (its log is flushed by the sweep).
        protocol_ticks: the adapter protocols' own periodic work (run by each sweep).
    """

    def __init__(
        self,
        broker: Broker,
        clock: Clock,
        limits: LimitsSpec,
        conns: Connections,
        handlers: Handlers,
        listeners: Sequence[Listener],
        login_guard: LoginGuard,
        protocol_ticks: Sequence[ProtocolTick] = (),
    ) -> None:
        self.broker = broker
        self.clock = clock
        self.limits = limits
        self.conns = conns
        self.handlers = handlers
        self.listeners = listeners
        self.login_guard = login_guard
        self.protocol_ticks = tuple(protocol_ticks)
        self.loop: asyncio.AbstractEventLoop | None = None
        self.stopped = False
        self._deadline = _Deadline()
        self._sweep_handle: asyncio.TimerHandle | None = None
        self.every: dict[int, ClientConnection] = dict(conns.table)
        """The connections every sweep visits (see the module docstring)."""
        self.wheel: TimerWheel[ClientConnection] = TimerWheel(int(self._sweep_period_s() * 1000))
        """The open connections that wait for their handler's deadline (monotonic ms)."""
        conns.watch = self.watch
        conns.unwatch = self.unwatch

    def start(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self._arm_sweep()
        self.arm_deadline()

    def stop(self) -> None:
        self.stopped = True
        self.stop_sweep()
        self._deadline.cancel()

    def stop_sweep(self) -> None:
        """Cancel the periodic sweep (shutdown; tests that drive the group commit alone)."""
        if self._sweep_handle is not None:
            self._sweep_handle.cancel()
            self._sweep_handle = None

    # -- the broker's deadline ---------------------------------------------------------------------

    def arm_deadline(self) -> None:
        """Arm the timer for the broker's next deadline, if it changed (after every batch)."""
        if self.stopped or self.loop is None:
            return
        due = self.broker.next_deadline_ms()
        deadline = self._deadline
        if due == deadline.due_ms:
            return
        deadline.cancel()
        if due is None:
            return
        delay_s = max(0.0, (due - self.clock.wall_ms()) / 1000.0)
        deadline.due_ms = due
        deadline.handle = self.loop.call_at(self.loop.time() + delay_s, self._on_deadline)

    def _on_deadline(self) -> None:
        self._deadline.handle = None
        self._deadline.due_ms = None
        with self.conns.batch():
            try:
                self.conns.apply(self.broker.tick(self.clock.wall_ms()))
            except Exception:
                log.exception("broker tick failed")

    def forget(self, c: ClientConnection) -> None:
        """`c` is gone: drop it (and tell the broker, through its handler; inside a batch)."""
        self.handlers.forget(c)

    # -- the sweep ---------------------------------------------------------------------------------

    def watch(self, c: ClientConnection) -> None:
        """`c` needs every sweep (admitted, or closing: the `Connections.watch` hook)."""
        self.wheel.cancel(c)
        self.every[c.conn_id] = c

    def unwatch(self, c: ClientConnection) -> None:
        """`c` left the table (the `Connections.unwatch` hook)."""
        self.wheel.cancel(c)
        if self.every.get(c.conn_id) is c:
            del self.every[c.conn_id]

    def _sweep_period_s(self) -> float:
        # A client may negotiate heartbeats as short as 1 s; sending is due after half an
        # interval, so sweep twice a second whenever heartbeats can be on at all.
        return 0.5 if self.limits.heartbeat_s > 0 else 1.0

    def _arm_sweep(self) -> None:
        assert self.loop is not None
        self._sweep_handle = self.loop.call_later(self._sweep_period_s(), self._sweep)

    def _sweep(self) -> None:
        """Heartbeats, missed heartbeats and the handshake timeout."""
        mono = self.clock.monotonic()
        mono_ms = int(mono * 1000)
        handshake_s = self.limits.handshake_timeout_ms / 1000.0
        for lst in self.listeners:
            if lst.acceptor is not None:
                lst.acceptor.flush_log()  # what the refusal log's rate limit suppressed
        self.login_guard.flush_log(self.clock.wall_ms())
        with self.conns.batch():
            visit = list(self.every.values())
            visit += self.wheel.pop_due(mono_ms)
            for c in visit:
                if c.closing:
                    continue
                try:
                    if not c.opened and mono - c.connected_mono > handshake_s:
                        log.info("handshake timeout on %s", c.name)
                        c.abort()
                        self.forget(c)
                        continue
                    if c.closing_since is not None and mono - c.closing_since > CLOSE_OK_TIMEOUT_S:
                        c.abort()  # the client never answered our close
                        self.forget(c)
                        continue
                    self.handlers.tick(c, mono_ms)
                    if not c.closing:
                        self._place(c, mono_ms)
                except Exception:  # noqa: BLE001 - a bug must cost one connection
                    self.handlers.internal_error(c)
            wall_ms = self.clock.wall_ms()
            for tick in self.protocol_ticks:
                try:
                    self.conns.apply(tick(self.broker, wall_ms))
                except Exception:
                    log.exception("protocol tick failed")
        if self.conns.commit is not None:
            self.conns.commit.tick()
        if not self.stopped:
            self._arm_sweep()

    def _place(self, c: ClientConnection, mono_ms: int) -> None:
        # Where `c` waits for its next visit, after a tick: the wheel when it is open, not
        # closing and its handler says when it has work (see the module docstring).
        h = c.handler
        idle_ms = getattr(h, "tick_idle_ms", None) if c.opened else None
        if idle_ms is None or c.closing_since is not None:
            self.every[c.conn_id] = c
            return
        if self.every.get(c.conn_id) is c:
            del self.every[c.conn_id]
        idle = idle_ms(self.clock.wall_ms(), mono_ms)
        if idle is not None:
            self.wheel.schedule(c, mono_ms + idle)
