"""Connections of the adapter protocols (AMQP 1.0, STOMP, MQTT): sockets driving a `Handler`.

Theory of operation: every protocol other than AMQP 0-9-1 is a sans-IO `Handler`
(`ringmq.adapters.handler`) made by that protocol's adapter for each accepted socket. This
module is the server's side of that contract, as `server/inbound.py` is for AMQP 0-9-1:

* `HandlerConnection` is the asyncio protocol of one such socket; it holds its `Handler`
  (built in `connection_made`, once both ends of the socket are known).
* `Handlers` owns what the server does for them: admission (the shared `Connections.admit`),
  building each handler from its protocol's `HandlerFactory` and a `HandlerContext`, feeding it
  the bytes read (`receive_data` -> effects -> `Connections.apply`, then the broker's
  `dispatch_pending` for the read, then one flush), the periodic `tick` (from `server/timers.py`),
  and the end of a connection (`Handler.connection_lost` once, for a connection that was ever
  opened).
* `AmqpPortSniffer` serves the AMQP port: it reads the 8-byte protocol header and hands the
  socket (with those bytes) to an AMQP 0-9-1 connection, or to an AMQP 1.0 handler for
  `AMQP 0 1 0 0` / `AMQP 3 1 0 0` (SASL), by `transport.set_protocol`. Any other header goes to
  the 0-9-1 machine, which answers it with the 0-9-1 header and closes, as before.

Errors: an exception escaping a handler is a defect: logged with its traceback, the handler is
told `close(INTERNAL_ERROR)`, its socket closed and its core state released; the broker keeps
serving every other connection. Owned by the loop thread; no locks.
"""

from __future__ import annotations

import asyncio
import logging
import traceback
from collections.abc import Callable, Iterator, Mapping
from typing import TYPE_CHECKING, Final, cast

from ringmq.adapters.handler import (
    HandlerContext,
    HandlerFactory,
    HandlerLimits,
    Peer,
    make_login,
)
from ringmq.core.errors import Condition
from ringmq.core.throttle import LoginGuard
from ringmq.server.clock import Clock
from ringmq.server.configspec import LimitsSpec
from ringmq.server.connections import Connections
from ringmq.server.flow import PublisherFlow
from ringmq.server.transport import ClientConnection

if TYPE_CHECKING:
    from ringmq.core.broker import Broker

log = logging.getLogger(__name__)

AMQP10_HEADERS: Final = (b"AMQP\x00\x01\x00\x00", b"AMQP\x03\x01\x00\x00")
"""The protocol headers of AMQP 1.0 (plain, and SASL first)."""

PROTOCOL_NAMES: Final = {"amqp10": "AMQP 1.0", "stomp": "STOMP", "mqtt": "MQTT"}
"""How logs name each adapter protocol."""


class HandlerConnection(ClientConnection):
    """One socket of an adapter protocol (see the module docstring)."""

    owner: Handlers

    def __init__(self, owner: Handlers, conn_id: int, protocol: str, *, tls: bool) -> None:
        super().__init__(conn_id, tls=tls)
        self.owner = owner
        self.protocol = protocol
        """The adapter protocol's key ("amqp10", "stomp", "mqtt")."""

    def output(self) -> bytes:
        h = self.handler
        return h.data_to_send() if h is not None else b""


class Handlers:
    """The server's side of the adapter protocols' connections (see the module docstring).

    Args:
        broker: the core broker.
        factories: each wired adapter protocol's `HandlerFactory`, by key.
        clock: the server's clock.
        limits: the connection limits of the configuration.
        conns: the live connections and their output.
        flow: publisher flow.
        login_guard: failed logins per source address.
        ids: connection ids (shared with AMQP 0-9-1 connections).
        node: the node name.
    """

    def __init__(
        self,
        broker: Broker,
        factories: Mapping[str, HandlerFactory],
        clock: Clock,
        limits: LimitsSpec,
        conns: Connections,
        flow: PublisherFlow,
        login_guard: LoginGuard,
        ids: Iterator[int],
        node: str,
    ) -> None:
        self.broker = broker
        self.factories = dict(factories)
        self.clock = clock
        self.conns = conns
        self.flow = flow
        self.login_guard = login_guard
        self.ids = ids
        self.node = node
        self.limits = limits
        self.handler_limits = HandlerLimits(
            max_message_size=limits.max_message_size,
            frame_max=limits.frame_max,
            channel_max=limits.channel_max,
            heartbeat_s=limits.heartbeat_s,
        )

    def protocol_factory(self, protocol: str, *, tls: bool) -> Callable[[], asyncio.Protocol]:
        """What a listener of `protocol` calls for each accepted socket."""
        if protocol not in self.factories:
            raise LookupError(f"no adapter wired for protocol {protocol!r}")

        def make() -> asyncio.Protocol:
            return HandlerConnection(self, next(self.ids), protocol, tls=tls)

        return make

    def _now_ms(self) -> int:
        return self.clock.wall_ms()

    # -- HandlerConnection callbacks ---------------------------------------------------------------

    def connection_made(self, c: HandlerConnection) -> None:
        if not self.conns.admit(c, self.limits):
            return
        peer = Peer(
            c.peer[0], c.peer[1], c.sock_name[0], c.sock_name[1], tls=c.tls, cert=c.peer_cert
        )
        context = HandlerContext(
            broker=self.broker,
            conn_id=c.conn_id,
            peer=peer,
            limits=self.handler_limits,
            login=make_login(
                self.broker, self.login_guard, peer, PROTOCOL_NAMES.get(c.protocol, c.protocol)
            ),
            node=self.node,
        )
        try:
            c.handler = self.factories[c.protocol](context)
        except Exception:
            log.exception("could not start a %s connection from %s", c.protocol, c.name)
            self.conns.remove(c)
            c.abort()

    def data_received(self, c: HandlerConnection, data: bytes) -> None:
        h = c.handler
        if h is None:
            return
        conns = self.conns
        with conns.batch():
            try:
                now = self._now_ms()
                effects = h.receive_data(data, now)
                if h.opened:
                    c.opened = True
                if effects:
                    conns.apply(effects)
                if self.flow.requests:
                    self.flow.pause()
                effects = self.broker.dispatch_pending(now)
                if effects:
                    conns.apply(effects)
                conns.dirty.add(c)
            except Exception:  # noqa: BLE001 - a bug must cost one connection, not the broker
                self.internal_error(c)

    def connection_lost(self, c: HandlerConnection, exc: Exception | None) -> None:
        if exc is not None:
            log.debug("connection %s lost: %s", c.name, exc)
        with self.conns.batch():
            self.forget(c)

    def writable_changed(self, c: HandlerConnection, writable: bool) -> None:
        if not c.opened or c.closing:
            return
        with self.conns.batch():
            try:
                self.conns.apply(self.broker.set_writable(c.conn_id, writable, self._now_ms()))
            except Exception:  # noqa: BLE001 - see data_received
                self.internal_error(c)

    # -- the sweep (server/timers.py) --------------------------------------------------------------

    def tick(self, c: ClientConnection, mono_ms: int) -> None:
        """The periodic sweep's turn of `c` (inside the sweep's batch)."""
        h = c.handler
        if h is None:
            return
        effects = h.tick(self._now_ms(), mono_ms)
        if effects:
            self.conns.apply(effects)
        self.conns.dirty.add(c)

    # -- the end of a connection -------------------------------------------------------------------

    def forget(self, c: ClientConnection) -> None:
        """`c` is gone: drop it and let its handler release its core state (inside a batch)."""
        if not self.conns.remove(c):
            return
        h = c.handler
        if h is None or not c.opened:
            return
        c.opened = False
        info = h.info()
        log.info(
            "connection closed: %s, protocol %s, user %r, vhost %r",
            c.name,
            info.protocol,
            info.user,
            info.vhost,
        )
        try:
            self.conns.apply(h.connection_lost(self._now_ms()))
        except Exception:
            log.exception("failed to clean up connection %s", c.name)

    def internal_error(self, c: ClientConnection) -> None:
        """A bug while handling `c`: log it, close `c` alone."""
        log.error("internal error on connection %s\n%s", c.name, traceback.format_exc())
        try:
            self.conns.close(c, Condition.INTERNAL_ERROR, "internal error")
            c.close_transport()
        except Exception:
            log.exception("could not close %s cleanly", c.name)
            c.abort()
        self.forget(c)


class AmqpPortSniffer(asyncio.Protocol):
    """The first bytes of an AMQP port's connection: which AMQP it speaks.

    Args:
        amqp091: makes the AMQP 0-9-1 connection protocol.
        amqp10: makes the AMQP 1.0 one.
        timeout_s: a client that has not sent its protocol header by then is disconnected (the
            handshake timeout; the connection is in no table yet).
    """

    def __init__(
        self,
        amqp091: Callable[[], asyncio.Protocol],
        amqp10: Callable[[], asyncio.Protocol],
        timeout_s: float,
    ) -> None:
        self._amqp091 = amqp091
        self._amqp10 = amqp10
        self._timeout_s = timeout_s
        self._transport: asyncio.BaseTransport | None = None
        self._timer: asyncio.TimerHandle | None = None
        self._head = b""

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = transport
        self._timer = asyncio.get_running_loop().call_later(self._timeout_s, self._expire)

    def data_received(self, data: bytes) -> None:
        head = self._head = self._head + data
        if len(head) < 8 and any(h.startswith(head) for h in AMQP10_HEADERS):
            return  # still possibly AMQP 1.0: wait for the whole header
        self._hand_over(head)

    def eof_received(self) -> bool | None:
        return False

    def connection_lost(self, exc: Exception | None) -> None:
        self._stop_timer()
        self._transport = None

    def _expire(self) -> None:
        self._timer = None
        if self._transport is not None:
            log.info("handshake timeout: no protocol header")
            cast("asyncio.Transport", self._transport).abort()

    def _stop_timer(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def _hand_over(self, head: bytes) -> None:
        transport = self._transport
        if transport is None:
            return
        self._stop_timer()
        self._transport = None
        make = self._amqp10 if head[:8] in AMQP10_HEADERS else self._amqp091
        proto = make()
        transport.set_protocol(proto)
        proto.connection_made(transport)
        proto.data_received(head)
