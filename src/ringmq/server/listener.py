"""Listening sockets: plain AMQP, AMQPS (TLS) and the management HTTP socket.

Theory of operation: a `Listener` is one bound, listening socket with the protocol it serves and
the port actually chosen (port 0 asks the kernel for a free one). AMQP listeners wrap an
`asyncio.Server` created from a protocol factory; the HTTP socket is bound here and handed to
uvicorn, so the chosen port is known before uvicorn starts. Closing a listener stops accepting;
it never touches established connections (the runtime closes those with 320).
"""

from __future__ import annotations

import asyncio
import errno
import socket
import ssl
from collections.abc import Callable
from dataclasses import dataclass

from ringmq.server.configfile import TLSSpec


@dataclass(slots=True)
class Listener:
    """One listening socket.

    Attributes:
        protocol: "amqp", "amqp/ssl" or "http" (RabbitMQ's names in the management API).
        host: the address bound.
        port: the port bound (the real one when 0 was asked for).
        server: the asyncio server accepting AMQP connections (None for HTTP).
        sock: the raw socket handed to uvicorn (None for AMQP).
    """

    protocol: str
    host: str
    port: int
    server: asyncio.Server | None = None
    sock: socket.socket | None = None

    def close(self) -> None:
        """Stop accepting new connections."""
        if self.server is not None:
            self.server.close()
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
) -> Listener:
    """Bind and start accepting AMQP (or AMQPS when `tls` is given) connections.

    With `sock` (bound by `bind_tcp_socket` before the store was opened), serve on it.
    """
    loop = asyncio.get_running_loop()
    if sock is not None:
        server = await loop.create_server(
            factory,
            sock=sock,
            ssl=tls,
            backlog=1024,
            ssl_handshake_timeout=10.0 if tls is not None else None,
        )
    else:
        server = await loop.create_server(
            factory,
            host=host,
            port=port,
            ssl=tls,
            reuse_address=True,
            backlog=1024,
            ssl_handshake_timeout=10.0 if tls is not None else None,
        )
    bound = server.sockets[0].getsockname()
    return Listener(
        protocol="amqp/ssl" if tls is not None else "amqp",
        host=str(bound[0]),
        port=int(bound[1]),
        server=server,
    )


class PortInUseError(OSError):
    """A listener's port is taken; the message names the option that changes it."""


def bind_tcp_socket(protocol: str, host: str, port: int, *, option: str) -> Listener:
    """Bind and listen on `host:port` now (port 0 resolves here), not yet accepting.

    Raises:
        PortInUseError: the port is taken (the message names `option`, e.g. "--amqp-port").
        OSError: any other bind failure.
    """
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
        sock.listen(1024)
        sock.setblocking(False)
    except OSError as exc:
        sock.close()
        if exc.errno == errno.EADDRINUSE:
            raise PortInUseError(
                f"{protocol} port {port} on {host} is already in use (another broker?); "
                f"choose another with {option}"
            ) from None
        raise
    bound = sock.getsockname()
    return Listener(protocol=protocol, host=str(bound[0]), port=int(bound[1]), sock=sock)


def bind_http_socket(host: str, port: int) -> Listener:
    """Bind the management HTTP socket now, so port 0 resolves before uvicorn starts."""
    return bind_tcp_socket("http", host, port, option="--http-port")
