"""The one connection driver: a socket of any protocol driving that protocol's `Handler`.

Theory of operation: every protocol (AMQP 0-9-1, AMQP 1.0, STOMP, MQTT) is a sans-IO `Handler`
(`ringmq.adapters.handler`) made by that protocol's adapter for each accepted socket, from the
table of `HandlerFactory`s the composition root hands the server (`ringmq.node`). This module
is the server's side of that contract and imports no codec and no adapter:

* `HandlerConnection` is the asyncio protocol of one socket; it holds its `Handler` (built in
  `connection_made`, once both ends of the socket are known).
* `Handlers` owns what the server does for them: admission (the shared `Connections.admit`),
  building each handler from its protocol's `HandlerFactory` and a `HandlerContext` (its
  `emit` is `Connections.apply`, its `later` a loop timer run as a read, its `slow_login` the
  blocking login backends (LDAP) whose answer runs the same way, its `socket` the connection
  itself), feeding it the bytes read, the periodic `tick` (from `server/timers.py`),
  and the end of a connection (`Handler.connection_lost` once, for a connection that was ever
  opened).
* One read: `receive_data` -> its effects to `Connections.apply` (a handler may have emitted
  some already, in order with its own output); a handler that opened is logged, one that
  `closed` is flushed, closed and released at once; then the broker's `dispatch_pending` for
  the read (the driver sets `defer_dispatch`: a plain publish's dispatch waits for it), then
  publisher flow pauses the publishers it asked for (server/flow.py), then one flush. The batch
  of `Connections` is written out by hand on this path: it runs once per socket read.
* `AmqpPortSniffer` serves the AMQP port: it reads the 8-byte protocol header and hands the
  socket (with those bytes) to the "amqp10" handler's connection for `AMQP 0 1 0 0` /
  `AMQP 3 1 0 0` (SASL), by `transport.set_protocol`, and to the "amqp091" one otherwise (any
  other header goes to the 0-9-1 machine, which answers it with the 0-9-1 header and closes).

Errors: an exception escaping a handler is a defect: logged with its traceback, the handler is
told `close(INTERNAL_ERROR)`, its socket closed and its core state released; the broker keeps
serving every other connection. Owned by the loop thread; no locks.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import traceback
from collections.abc import Callable, Iterator, Mapping
from dataclasses import replace
from typing import TYPE_CHECKING, Any, Final, cast

from ringmq.adapters.handler import (
    HandlerContext,
    HandlerFactory,
    HandlerLimits,
    Peer,
    SlowAnswer,
    SlowLogin,
    make_login,
)
from ringmq.core.auth import Identity
from ringmq.core.errors import Condition
from ringmq.core.throttle import LoginGuard
from ringmq.server.clock import Clock
from ringmq.server.configspec import LimitsSpec
from ringmq.server.connections import Connections
from ringmq.server.flow import PublisherFlow
from ringmq.server.transport import ClientConnection

if TYPE_CHECKING:
    from ringmq.core.broker import Broker
    from ringmq.server.memory import MemoryMonitor

log = logging.getLogger(__name__)

AMQP10_HEADERS: Final = (b"AMQP\x00\x01\x00\x00", b"AMQP\x03\x01\x00\x00")
"""The protocol headers of AMQP 1.0 (plain, and SASL first)."""

PROTOCOL_NAMES: Final = {
    "amqp091": "AMQP",
    "amqp10": "AMQP 1.0",
    "stomp": "STOMP",
    "mqtt": "MQTT",
    "stream": "RabbitMQ Stream",
    "web-stomp": "Web STOMP",
    "web-mqtt": "Web MQTT",
    "web-amqp": "Web AMQP 1.0",
    "shard-link": "shard link",
}
"""How logs (and the failed-login log) name each protocol."""

SlowBackend = Callable[[str, str, Callable[[Identity | None, str], None]], bool]
"""A login backend that blocks (server/ldapauth.py): `take(user, password, answer)`, True when
it took the login; it calls `answer(who or None, why)` once, on the loop thread (`who.grant`
is the connection's)."""


class HandlerConnection(ClientConnection):
    """One client socket (see the module docstring)."""

    owner: Handlers

    def __init__(self, owner: Handlers, conn_id: int, protocol: str, *, tls: bool) -> None:
        super().__init__(conn_id, tls=tls)
        self.owner = owner
        self.protocol = protocol
        """The protocol's key in the table ("amqp091", "amqp10", "stomp", "mqtt")."""

    def output(self) -> bytes:
        h = self.handler
        return h.data_to_send() if h is not None else b""


class Handlers:
    """The server's side of every connection (see the module docstring).

    Args:
        broker: the core broker.
        factories: each wired protocol's `HandlerFactory`, by key.
        clock: the server's clock.
        limits: the connection limits of the configuration.
        conns: the live connections and their output.
        flow: publisher flow.
        login_guard: failed logins per source address.
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
        node: str,
    ) -> None:
        self.broker = broker
        self.factories = dict(factories)
        self.clock = clock
        self.conns = conns
        self.flow = flow
        self.login_guard = login_guard
        self.ids: Iterator[int] = itertools.count(1)
        """Connection ids (the core's `conn_id`s)."""
        self.node = node
        self.limits = limits
        self.handler_limits = HandlerLimits(
            max_message_size=limits.max_message_size,
            frame_max=limits.frame_max,
            channel_max=limits.channel_max,
            heartbeat_s=limits.heartbeat_s,
        )
        # the stream protocol has its own frame max (RabbitMQ's stream.frame_max, 1 MiB), not
        # AMQP's: its clients size their publish frames, hence their largest message, by it
        self.protocol_limits = {
            "stream": replace(self.handler_limits, frame_max=limits.stream_frame_max)
        }
        self.memory: MemoryMonitor | None = None
        """The memory monitor, once the server started it (large bodies are measured at once)."""
        self.loop: asyncio.AbstractEventLoop | None = None
        """Set by the server once it runs (handlers' timers need it)."""
        self.slow_login: SlowBackend | None = None
        """The login backends that block (LDAP, server/ldapauth.py), set by the server when
        configured: handlers reach them through `HandlerContext.slow_login`."""
        # one dispatch per read batch, bound once: the read path calls it per read
        broker.defer_dispatch = True
        self._dispatch_pending = broker.dispatch_pending

    def protocol_factory(self, protocol: str, *, tls: bool) -> Callable[[], asyncio.Protocol]:
        """What a listener of `protocol` calls for each accepted socket."""
        if protocol not in self.factories:
            raise LookupError(f"no adapter wired for protocol {protocol!r}")

        def make() -> asyncio.Protocol:
            return HandlerConnection(self, next(self.ids), protocol, tls=tls)

        return make

    def amqp_port_factory(self, *, tls: bool) -> Callable[[], asyncio.Protocol]:
        """The AMQP port's connections: 0-9-1 or 1.0 alone, or told apart by the protocol
        header (`AmqpPortSniffer`)."""
        amqp091 = self.protocol_factory("amqp091", tls=tls) if "amqp091" in self.factories else None
        amqp10 = self.protocol_factory("amqp10", tls=tls) if "amqp10" in self.factories else None
        if amqp10 is None or amqp091 is None:
            one = amqp091 or amqp10
            if one is None:
                raise LookupError("no AMQP protocol wired for the AMQP port")
            return one
        timeout_s = self.limits.handshake_timeout_ms / 1000

        def make() -> asyncio.Protocol:
            return AmqpPortSniffer(amqp091, amqp10, timeout_s)

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
            limits=self.protocol_limits.get(c.protocol, self.handler_limits),
            login=make_login(
                self.broker, self.login_guard, peer, PROTOCOL_NAMES.get(c.protocol, c.protocol)
            ),
            node=self.node,
            emit=self.conns.apply,
            later=lambda delay_ms, fn: self._later(c, delay_ms, fn),
            socket=c,
            login_guard=self.login_guard,
            check_in_flight=self._check_in_flight,
            slow_login=None if self.slow_login is None else self._slow_login(c),
            at_batch_end=lambda fn: self.conns.on_batch_end(c, fn),
        )
        try:
            h = c.handler = self.factories[c.protocol](context)
        except Exception:
            log.exception("could not start a %s connection from %s", c.protocol, c.name)
            self.conns.remove(c)
            c.abort()
            return
        c.in_flight = h if hasattr(h, "content_in_flight") else None  # type: ignore[assignment]

    def data_received(self, c: HandlerConnection, data: bytes) -> None:
        h = c.handler
        if h is None:
            return
        # `Connections.batch()` written out: this runs once per socket read, the generator
        # costs show.
        conns = self.conns
        conns.depth += 1
        try:
            now = self.clock.wall_ms()
            effects = h.receive_data(data, now)
            if effects:
                conns.apply(effects)
            self._after_read(c, now)
        except Exception:  # noqa: BLE001 - a bug must cost one connection, not the broker
            self.internal_error(c)
        finally:
            conns.depth -= 1
            if conns.depth == 0:
                conns.flush()

    def _after_read(self, c: HandlerConnection, now: int) -> None:
        # What follows every read of `c` (and a handler's timer, which runs as one): see the
        # module docstring for the order.
        h = c.handler
        assert h is not None
        if h.opened and not c.opened:
            c.opened = True
            _log_connection("opened", c)
        if h.closed and not c.closing:
            c.close_transport()  # its output first
            self.forget(c)
        effects = self._dispatch_pending(now)
        if effects:
            self.conns.apply(effects)
        if self.flow.requests:
            self.flow.pause()
        if not c.closing:
            self.conns.dirty.add(c)

    def _later(self, c: HandlerConnection, delay_ms: int, fn: Callable[[int], None]) -> None:
        # `HandlerContext.later`: `fn` runs as a read of `c`, unless `c` is gone by then
        if self.loop is None:
            fn(self._now_ms())  # no loop yet (a harness around `attach`): nothing to wait on
            return

        def fire() -> None:
            if c.closing or self.conns.table.get(c.conn_id) is not c:
                return  # the client gave up meanwhile
            with self.conns.batch():
                try:
                    now = self._now_ms()
                    fn(now)
                    self._after_read(c, now)
                except Exception:  # noqa: BLE001 - see data_received
                    self.internal_error(c)

        self.loop.call_later(delay_ms / 1000, fire)

    def _slow_login(self, c: HandlerConnection) -> SlowLogin:
        # `HandlerContext.slow_login` of `c`: the backend answers on the loop thread; the
        # handler's answer then runs as a read of `c` (its timer's way), unless `c` is gone
        def slow_login(user: str, password: str, answer: SlowAnswer) -> bool:
            backend = self.slow_login
            if backend is None:
                return False

            def answered(who: Identity | None, why: str) -> None:
                self._later(c, 0, lambda now_ms: answer(who, why, now_ms))

            return backend(user, password, answered)

        return slow_login

    def _check_in_flight(self) -> None:
        if self.memory is not None:
            self.memory.check_in_flight()

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
        if c.closing:  # the handler dropped a silent peer (`Socket.abort`)
            self.forget(c)
            return
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
        _log_connection("closed", c)
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


def _log_connection(what: str, c: ClientConnection) -> None:
    h = c.handler
    assert h is not None
    info = h.info()
    log.info(
        "connection %s: %s, protocol %s, user %r, vhost %r, name %r",
        what,
        c.name,
        info.protocol,
        info.user,
        info.vhost,
        _client_name(info.client_properties),
    )


def _client_name(props: dict[str, Any]) -> str | None:
    # the client-provided connection name (pika's client_properties["connection_name"])
    name = props.get("connection_name")
    if isinstance(name, bytes):
        return name.decode(errors="replace")
    return name if isinstance(name, str) else None


class AmqpPortSniffer(asyncio.Protocol):
    """The first bytes of an AMQP port's connection: which AMQP it speaks.

    Args:
        amqp091: makes the connection of the "amqp091" handler.
        amqp10: makes the connection of the "amqp10" one.
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
        self.forwarded_peer: tuple[str, int] | None = None
        """The client's address from a PROXY header, passed on to the connection."""

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
        if self.forwarded_peer is not None and isinstance(proto, ClientConnection):
            proto.forwarded_peer = self.forwarded_peer
        transport.set_protocol(proto)
        proto.connection_made(transport)
        proto.data_received(head)
