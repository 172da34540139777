"""One asyncio protocol per client connection: bytes in, events to the broker, bytes out.

Theory of operation:

* `data_received` hands the bytes to its owner (`Host`, the server's one connection driver
  `server.handlers.Handlers`), which feeds the connection's protocol `Handler` (sans-IO, made
  by the protocol's adapter), applies the core effects that come of it (possibly to *other*
  connections), then flushes: every connection that got output during the batch is written
  with exactly one `transport.write`. This module knows its owner only through that protocol
  (it imports no other server module).
* Flow control, both directions: reading stops on the broker's `Block` effect (an address
  full under Artemis' BLOCK policy, or a memory alarm; connection.blocked is sent first to
  clients that announced the capability) and resumes on `Unblock`. Delivering stops when the
  transport's write buffer crosses its high-water mark (`pause_writing`): the owner reports
  it to the broker with `set_writable(False)`, so messages stay queued instead of piling up in
  this process, and `resume_writing` lets them flow again.
* Publisher flow: the server also stops reading a publisher whose queue's consumers lag
  behind (`pause_reading("flow")`); each reason is lifted separately, so a flow resume never
  reopens a connection a `Block` closed.
* Timers live in server/timers.py; this object only records what they need (`opened`, the time of
  connection, the last time bytes arrived or left).
* Exceptions escaping a handler are bugs: the server logs them with the traceback and closes
  only this connection (541 INTERNAL_ERROR in AMQP 0-9-1's terms).

`ClientConnection` is what every protocol's connection shares (the socket, its two ends, the
pause reasons, the byte counters, one write per flush); `server.handlers.HandlerConnection` is
the one kind the server makes, a socket driving a `Handler`.

Owned by the loop thread; never touched from elsewhere.
"""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING, Any, Protocol, TypeVar, cast

if TYPE_CHECKING:
    from ringmq.adapters.handler import Handler, InFlight

log = logging.getLogger(__name__)


_C_contra = TypeVar("_C_contra", bound="ClientConnection", contravariant=True)


class Host(Protocol[_C_contra]):
    """What a connection calls on its owner (`server.handlers.Handlers`), with itself as
    `c`."""

    def connection_made(self, c: _C_contra) -> None: ...
    def data_received(self, c: _C_contra, data: bytes) -> None: ...
    def connection_lost(self, c: _C_contra, exc: Exception | None) -> None: ...
    def writable_changed(self, c: _C_contra, writable: bool) -> None: ...


class ClientConnection(asyncio.Protocol):
    """The server side of one client connection, whatever its protocol.

    Attributes:
        conn_id: broker-wide connection id (also the core's `conn_id`).
        peer: (host, port) of the client.
        sock_name: (host, port) of the local end.
        opened: True once the client logged in and the core knows the connection.
        closing: True once the transport is being closed; no more input is processed.
        handler: the protocol adapter's `Handler` (None until built, or when building failed).
        in_flight: the handler's `content_in_flight`, when it has one (memory accounting).
    """

    handler: Handler | None = None
    in_flight: InFlight | None = None
    forwarded_peer: tuple[str, int] | None = None
    """The client's address from a cluster relay's PROXY header (`server/proxyheader.py`)."""
    owner: Host[Any]
    """Whom the asyncio callbacks below report to (set by each subclass)."""

    def __init__(self, conn_id: int, *, tls: bool = False) -> None:
        self.conn_id = conn_id
        self.tls = tls
        self.transport: asyncio.Transport | None = None
        self.peer: tuple[str, int] = ("", 0)
        self.sock_name: tuple[str, int] = ("", 0)
        self.opened = False
        self.closing = False
        self.connected_at_ms = 0
        self.connected_mono = 0.0
        self.recv_oct = 0
        self.send_oct = 0
        self.blocked_reason: str | None = None
        self.closing_since: float | None = None
        self.read_resumed_mono = 0.0
        """When reading last resumed after a Block (heartbeat checks restart from there)."""
        self._reading_paused = False
        self._pause_reasons: set[str] = set()
        self._writable = True
        self.peer_cert: bytes | None = None
        """The client's certificate (DER) when TLS verified one (certificate logins)."""

    def _take_transport(self, transport: asyncio.BaseTransport) -> None:
        # uvloop's transports implement asyncio.Transport without subclassing it
        self.transport = cast("asyncio.Transport", transport)
        peer = self.forwarded_peer or transport.get_extra_info("peername") or ("", 0)
        sock = transport.get_extra_info("sockname") or ("", 0)
        self.peer = (str(peer[0]), int(peer[1]))
        self.sock_name = (str(sock[0]), int(sock[1]))
        tls = transport.get_extra_info("ssl_object")
        if tls is not None:
            # None unless the client sent one and the context verified it (CERT_REQUIRED or
            # CERT_OPTIONAL): an unverified certificate never names a user
            self.peer_cert = tls.getpeercert(binary_form=True)
        # a large high-water mark: deliveries are batched; pause only on real backlog
        self.transport.set_write_buffer_limits(high=4 * 1024 * 1024, low=1024 * 1024)

    # -- asyncio.Protocol -----------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._take_transport(transport)
        self.owner.connection_made(self)

    def data_received(self, data: bytes) -> None:
        if self.closing:
            return
        self.recv_oct += len(data)
        self.owner.data_received(self, data)

    def eof_received(self) -> bool | None:
        return False  # close our side too

    def connection_lost(self, exc: Exception | None) -> None:
        self.closing = True
        self.owner.connection_lost(self, exc)

    def pause_writing(self) -> None:
        self._writable = False
        self.owner.writable_changed(self, False)

    def resume_writing(self) -> None:
        self._writable = True
        self.owner.writable_changed(self, True)

    # -- used by the server -----------------------------------------------------------------------

    @property
    def name(self) -> str:
        """RabbitMQ's connection name: "peer_host:peer_port -> local_host:local_port"."""
        return f"{self.peer[0]}:{self.peer[1]} -> {self.sock_name[0]}:{self.sock_name[1]}"

    @property
    def peer_address(self) -> str:
        """The client's "host:port" (what the core records as the connection's peer)."""
        return f"{self.peer[0]}:{self.peer[1]}"

    @property
    def peer_loopback(self) -> bool:
        host = self.peer[0]
        return host.startswith("127.") or host in {"::1", "::ffff:127.0.0.1"}

    def output(self) -> bytes:
        """Everything the connection's protocol has queued for the client."""
        raise NotImplementedError

    def flush(self) -> None:
        """Write everything the protocol has queued, in one `transport.write`."""
        if self.transport is None or self.transport.is_closing():
            return
        data = self.output()
        if data:
            self.send_oct += len(data)
            self.transport.write(data)

    def close_transport(self) -> None:
        """Flush, then close the socket (asyncio writes the buffer out before closing)."""
        self.flush()
        self.closing = True
        if self.transport is not None and not self.transport.is_closing():
            self.transport.close()

    def abort(self) -> None:
        self.closing = True
        if self.transport is not None:
            self.transport.abort()

    def pause_reading(self, reason: str = "block") -> None:
        """Stop reading for `reason` ("block": alarms and BLOCK queues; "flow": publisher flow).

        Reading resumes only when every reason that paused it has been lifted.
        """
        if self.transport is None:
            return
        was = bool(self._pause_reasons)
        self._pause_reasons.add(reason)
        if not was:
            self._reading_paused = True
            self.transport.pause_reading()

    def resume_reading(self, now_mono: float = 0.0, reason: str = "block") -> None:
        if reason not in self._pause_reasons or self.transport is None:
            return
        self._pause_reasons.discard(reason)
        if not self._pause_reasons:
            self._reading_paused = False
            self.read_resumed_mono = now_mono
            if not self.transport.is_closing():
                self.transport.resume_reading()

    @property
    def reading_paused(self) -> bool:
        return self._reading_paused

    @property
    def pause_reasons(self) -> frozenset[str]:
        """Why reading is paused (empty while reading)."""
        return frozenset(self._pause_reasons)

    @property
    def writable(self) -> bool:
        return self._writable
