"""The management HTTP server: uvicorn's configuration and its request-head timeout.

Theory of operation: uvicorn's h11 protocol arms its keep-alive timer only after a response,
and any received byte cancels it, so a connection that never sends a request, or sends part
of one and stops (slowloris), is held forever, one descriptor each. `request_timeout_protocol`
returns a subclass that gives every connection `timeout_s` to deliver a complete request head:
the timer is armed when the connection is made and again after each response, and stopped
when a request begins (`cycle` changes). When it fires the connection is closed, as the AMQP
listener closes a handshake that does not finish in time. A request whose head arrived is not
limited by it (a slow upload or a long poll is the application's business).

`uvicorn_config` builds the `uvicorn.Config` the runtime serves the management app with: HTTPS
when `[tls] https = true` (the AMQPS certificate and key), so Basic credentials never cross in
clear. `ManagementServer` runs it on the broker's loop over the listener's bound socket, without
uvicorn's own signal capture (the broker handles SIGINT/SIGTERM), and stops it at shutdown.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import ssl
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any, TypeAlias

import uvicorn
from uvicorn.protocols.http.h11_impl import H11Protocol

from ringmq.server.configfile import TLSSpec
from ringmq.server.listener import Listener

log = logging.getLogger(__name__)

ASGIMessage: TypeAlias = MutableMapping[str, Any]
ASGIApp: TypeAlias = Callable[
    [
        MutableMapping[str, Any],
        Callable[[], Awaitable[ASGIMessage]],
        Callable[[ASGIMessage], Awaitable[None]],
    ],
    Awaitable[None],
]
"""An ASGI 3 application (scope, receive, send): what the management app is to the server."""
Wrap: TypeAlias = Callable[[Callable[[], asyncio.Protocol]], Callable[[], asyncio.Protocol]]
"""Wraps a listener's protocol factory (a cluster follower's relay gate)."""


class _RequestTimeoutH11(H11Protocol):
    timeout_s = 10.0
    timed_out = 0  # class-wide count, for logs and tests

    _head_timer: asyncio.TimerHandle | None = None

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._arm_head_timer()

    def data_received(self, data: bytes) -> None:
        cycle = self.cycle
        super().data_received(data)
        if self.cycle is not cycle:
            self._stop_head_timer()  # a request head arrived

    def on_response_complete(self) -> None:
        cycle = self.cycle
        super().on_response_complete()
        if self.cycle is cycle and not self.transport.is_closing():
            self._arm_head_timer()  # (a pipelined request would have started a new cycle)

    def connection_lost(self, exc: Exception | None) -> None:
        self._stop_head_timer()
        super().connection_lost(exc)

    def _arm_head_timer(self) -> None:
        self._stop_head_timer()
        self._head_timer = self.loop.call_later(self.timeout_s, self._head_timeout)

    def _stop_head_timer(self) -> None:
        if self._head_timer is not None:
            self._head_timer.cancel()
            self._head_timer = None

    def _head_timeout(self) -> None:
        self._head_timer = None
        if not self.transport.is_closing():
            type(self).timed_out += 1
            log.debug("HTTP connection from %s sent no complete request in time", self.client)
            self.transport.close()


def request_timeout_protocol(timeout_s: float) -> type[H11Protocol]:
    """uvicorn's h11 protocol with a `timeout_s` limit on receiving each request head."""
    return type("RequestTimeoutH11", (_RequestTimeoutH11,), {"timeout_s": timeout_s})


def uvicorn_config(
    app: ASGIApp,
    *,
    request_timeout_s: float,
    tls: TLSSpec | None = None,
    wrap: Wrap | None = None,
) -> uvicorn.Config:
    """The uvicorn configuration of the management server; HTTPS with `tls`'s certificate
    (and its CA and `verify_peer` for client certificates) when given. `wrap` chooses per
    connection between uvicorn's protocol and another (a cluster follower's relay)."""
    extra: dict[str, Any] = {}
    if tls is not None:
        extra = {
            "ssl_certfile": str(tls.cert_file),
            "ssl_keyfile": str(tls.key_file),
            "ssl_ca_certs": str(tls.ca_file) if tls.ca_file is not None else None,
            "ssl_cert_reqs": ssl.CERT_REQUIRED if tls.verify_peer else ssl.CERT_NONE,
        }
    return uvicorn.Config(
        app,
        log_level="warning",
        lifespan="off",
        access_log=False,
        http=_wrapped(request_timeout_protocol(request_timeout_s), wrap),
        **extra,
    )


def _wrapped(cls: type[H11Protocol], wrap: Wrap | None) -> Any:
    # uvicorn calls its `http` class with keyword arguments (config, server_state...); any
    # callable returning a protocol will do
    if wrap is None:
        return cls

    def make(**kwargs: Any) -> asyncio.Protocol:
        return wrap(lambda: cls(**kwargs))()

    return make


class ManagementServer:
    """The management app served by uvicorn on a bound listener (see the module docstring).

    Args:
        app: the management ASGI app.
        lst: the listener whose bound socket uvicorn serves.
        request_timeout_s: the request-head limit (`request_timeout_protocol`).
        tls: HTTPS with this certificate (None: plain HTTP).
        wrap: chooses per connection between uvicorn's protocol and another (`uvicorn_config`).
    """

    def __init__(
        self,
        app: ASGIApp,
        lst: Listener,
        *,
        request_timeout_s: float,
        tls: TLSSpec | None = None,
        wrap: Wrap | None = None,
    ) -> None:
        self.server = uvicorn.Server(
            uvicorn_config(app, request_timeout_s=request_timeout_s, tls=tls, wrap=wrap)
        )
        sock = lst.sock
        assert sock is not None
        self._task = asyncio.create_task(self._serve(sock))

    async def _serve(self, sock: Any) -> None:
        # `_serve` skips uvicorn's own signal capture, which would swallow SIGINT/SIGTERM meant
        # for the whole broker; the broker stops uvicorn itself (should_exit) on shutdown.
        serve = getattr(self.server, "_serve", None) or self.server.serve
        try:
            await serve(sockets=[sock])
        except Exception:
            log.exception("management server failed")

    async def stop(self) -> None:
        """Ask uvicorn to finish its requests and stop (bounded by 5 s)."""
        self.server.should_exit = True
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await asyncio.wait_for(self._task, timeout=5)


__all__ = ["ASGIApp", "ManagementServer", "request_timeout_protocol", "uvicorn_config"]
