"""Listening sockets: plain AMQP, AMQPS (TLS) and the management HTTP socket.

Theory of operation: a `Listener` is one bound, listening socket with the protocol it serves and
the port actually chosen (port 0 asks the kernel for a free one). AMQP listeners accept with an
`Acceptor` (below); the HTTP socket is bound here and handed to uvicorn, so the chosen port is
known before uvicorn starts. Closing a listener stops accepting; it never touches established
connections (the runtime closes those with 320).

`Acceptor` is the accept loop of an AMQP listener: a reader callback on the listening socket
accepts what is pending and hands each socket to `loop.connect_accepted_socket` (TLS handshake
included). It exists for the descriptor limit: when `accept` fails with EMFILE/ENFILE (or
ENOBUFS/ENOMEM) the pending connections cannot be served, so it closes its reserve descriptor,
accepts each pending connection and closes it at once (the client sees the connection closed
instead of waiting in the backlog; the listener does not spin on a socket that stays
readable), reopens the reserve, and logs the refusals, rate-limited (`core.throttle.LogLimiter`:
one line per period with the count; `flush_log` from a timer says what a burst suppressed).
If even that fails it stops accepting for `ACCEPT_RETRY_S`. uvloop's and asyncio's own servers
drop or defer such connections without a word.
"""

from __future__ import annotations

import asyncio
import errno
import logging
import os
import resource
import socket
import ssl
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Final

from ringmq.core.throttle import LogLimiter
from ringmq.server.configfile import TLSSpec

log = logging.getLogger(__name__)

ACCEPT_RETRY_S: Final = 1.0
"""How long accepting pauses when even the reserve descriptor cannot free a slot."""
REFUSAL_LOG_PERIOD_MS: Final = 10_000
_ACCEPT_BATCH: Final = 64
_OUT_OF_RESOURCES: Final = frozenset({errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM})


def _reserve() -> int:
    try:
        return os.open(os.devnull, os.O_RDONLY)
    except OSError:
        return -1


def descriptor_limit() -> int:
    """The soft RLIMIT_NOFILE of this process."""
    return resource.getrlimit(resource.RLIMIT_NOFILE)[0]


class Acceptor:
    """The accept loop of one AMQP listener (see the module docstring)."""

    def __init__(
        self,
        loop: asyncio.AbstractEventLoop,
        sock: socket.socket,
        factory: Callable[[], asyncio.Protocol],
        name: str,
        tls: ssl.SSLContext | None,
        now_ms: Callable[[], int],
    ) -> None:
        self.loop = loop
        self.sock = sock
        self.factory = factory
        self.name = name
        self.tls = tls
        self.now_ms = now_ms
        self.refused = 0
        """Connections refused for want of a descriptor (or buffer memory) since start."""
        self.log_limit = LogLimiter(REFUSAL_LOG_PERIOD_MS)
        self._reserve = _reserve()
        self._retry: asyncio.TimerHandle | None = None
        self._tasks: set[asyncio.Task[object]] = set()
        self._closed = False

    def start(self) -> None:
        self._retry = None
        if not self._closed:
            self.loop.add_reader(self.sock.fileno(), self._on_readable)

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        if self._retry is not None:
            self._retry.cancel()
        self.loop.remove_reader(self.sock.fileno())
        self.sock.close()
        if self._reserve >= 0:
            os.close(self._reserve)
            self._reserve = -1

    def _on_readable(self) -> None:
        for _ in range(_ACCEPT_BATCH):
            try:
                conn, _addr = self.sock.accept()
            except (BlockingIOError, InterruptedError):
                return
            except ConnectionAbortedError:
                continue
            except OSError as exc:
                if exc.errno in _OUT_OF_RESOURCES:
                    self._refuse_pending(exc)
                else:
                    log.error("accept failed on %s: %s", self.name, exc)
                return
            conn.setblocking(False)
            task: asyncio.Task[object] = self.loop.create_task(self._serve(conn))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    async def _serve(self, conn: socket.socket) -> object:
        try:
            return await self.loop.connect_accepted_socket(
                self.factory,
                conn,
                ssl=self.tls,
                ssl_handshake_timeout=10.0 if self.tls is not None else None,
            )
        except (TimeoutError, OSError, ssl.SSLError) as exc:
            log.debug("connection on %s failed before it was served: %s", self.name, exc)
            conn.close()
            return None

    def _refuse_pending(self, exc: OSError) -> None:
        # close the reserve to get one descriptor, refuse (accept + close) what is pending
        n = 0
        if self._reserve >= 0:
            os.close(self._reserve)
            self._reserve = -1
            while True:
                try:
                    conn, _addr = self.sock.accept()
                except OSError:
                    break
                conn.close()
                n += 1
            self._reserve = _reserve()
        self.refused += max(n, 1)
        suppressed = self.log_limit.admit(self.now_ms())
        if suppressed is not None:
            log.error(
                "refused %d connection(s) on %s: %s (descriptor limit %d)%s",
                max(n, 1),
                self.name,
                exc.strerror or exc,
                descriptor_limit(),
                f"; {suppressed} more refusal reports suppressed" if suppressed else "",
            )
        if n == 0 or self._reserve < 0:
            # nothing could be freed: stop accepting for a moment instead of spinning
            self.loop.remove_reader(self.sock.fileno())
            self._retry = self.loop.call_later(ACCEPT_RETRY_S, self.start)

    def flush_log(self) -> None:
        """Say what the rate limit suppressed, once its period has passed (timer)."""
        n = self.log_limit.due(self.now_ms())
        if n:
            log.error("%d more connection refusals on %s (out of descriptors)", n, self.name)


@dataclass(slots=True)
class Listener:
    """One listening socket.

    Attributes:
        protocol: "amqp", "amqp/ssl" or "http" (RabbitMQ's names in the management API).
        host: the address bound.
        port: the port bound (the real one when 0 was asked for).
        acceptor: the accept loop of an AMQP listener (None for HTTP).
        sock: the raw socket handed to uvicorn (None for AMQP).
    """

    protocol: str
    host: str
    port: int
    acceptor: Acceptor | None = field(default=None, repr=False)
    sock: socket.socket | None = None

    def close(self) -> None:
        """Stop accepting new connections."""
        if self.acceptor is not None:
            self.acceptor.close()
        if self.sock is not None:
            self.sock.close()


def tls_context(spec: TLSSpec) -> ssl.SSLContext:
    """Server-side TLS context from the configured certificate and key.

    Raises:
        OSError / ssl.SSLError: the files are missing or do not match.
    """
    ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    ctx.load_cert_chain(certfile=str(spec.cert_file), keyfile=str(spec.key_file))
    if spec.ca_file is not None:
        ctx.load_verify_locations(cafile=str(spec.ca_file))
    ctx.verify_mode = ssl.CERT_REQUIRED if spec.verify_peer else ssl.CERT_NONE
    return ctx


async def open_amqp_listener(
    factory: Callable[[], asyncio.Protocol],
    host: str,
    port: int,
    *,
    tls: ssl.SSLContext | None = None,
    sock: socket.socket | None = None,
    now_ms: Callable[[], int] | None = None,
    protocol: str | None = None,
) -> Listener:
    """Start accepting AMQP (or AMQPS when `tls` is given) connections, or those of
    `protocol` ("stomp", "mqtt": the listener's name in management, as RabbitMQ's).

    With `sock` (bound by `bind_socket` before the store was opened), serve on it; otherwise
    bind `host:port` now.
    """
    loop = asyncio.get_running_loop()
    if protocol is None:
        protocol = "amqp/ssl" if tls is not None else "amqp"
    if sock is None:
        lst = bind_socket(host, port, protocol, backlog=1024)
    else:
        bound = sock.getsockname()
        lst = Listener(protocol=protocol, host=str(bound[0]), port=int(bound[1]), sock=sock)
    assert lst.sock is not None
    clock = now_ms or (lambda: int(loop.time() * 1000))
    name = f"{protocol} {lst.host}:{lst.port}"
    lst.acceptor = Acceptor(loop, lst.sock, factory, name, tls, clock)
    lst.sock = None  # the acceptor owns it now
    lst.acceptor.start()
    return lst


class PortInUseError(OSError):
    """A listener's port is taken; the message names the option that changes it."""


def bind_socket(
    host: str,
    port: int,
    protocol: str,
    *,
    backlog: int = 128,
    option: str | None = None,
    reuse_port: bool = False,
) -> Listener:
    """Bind and listen on `host:port` now (port 0 resolves here), not yet accepting;
    `reuse_port`: with SO_REUSEPORT, beside the other shards of one broker listening on the
    same port (the kernel spreads new connections over them).

    Raises:
        PortInUseError: the port is taken (the message names `option`, e.g. "--amqp-port").
        OSError: any other bind failure.
    """
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        if reuse_port:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        sock.bind((host, port))
        sock.listen(backlog)
        sock.setblocking(False)
    except OSError as exc:
        sock.close()
        if exc.errno == errno.EADDRINUSE and option is not None:
            raise PortInUseError(
                f"{protocol} port {port} on {host} is already in use (another broker?); "
                f"choose another with {option}"
            ) from None
        raise
    bound = sock.getsockname()
    return Listener(protocol=protocol, host=str(bound[0]), port=int(bound[1]), sock=sock)


def bind_http_socket(host: str, port: int) -> Listener:
    """Bind the management HTTP socket now, so port 0 resolves before uvicorn starts."""
    return bind_socket(host, port, "http", option="--http-port")
