"""A server's listening ports: bound before its core opens, opened once it has, closed at stop.

Theory of operation: `ServerPorts` owns the server's `Listener` table (the one list timers,
management and the announcement read). `bind()` binds every configured port first (AMQP, the
protocols with a port of their own, the management port), before the data directory's store
is opened, so that a start which fails on a port writes nothing. `open()` then starts an
acceptor on each bound socket, and on the TLS ports of `[tls]`, with the protocol factory the
server hands it for a listener (`FactoryFor`: the label, the handler key, and whether TLS ends
here); the management port's socket stays bound for uvicorn (`http`). Nothing here knows a
protocol: the handlers' factories come from the server.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Collection
from typing import Final

from ringmq.server.configspec import TLSSpec
from ringmq.server.listener import (
    Listener,
    bind_http_socket,
    bind_socket,
    open_amqp_listener,
    tls_context,
)
from ringmq.server.options import ServerOptions

__all__ = ["OWN_PORT_LISTENERS", "FactoryFor", "ServerPorts"]

log = logging.getLogger(__name__)

OWN_PORT_LISTENERS: Final = ("stomp", "mqtt", "stream", "web-stomp", "web-mqtt", "web-amqp")
"""The protocols with a port of their own (the AMQP port is shared and sniffed): each key's
port is the `<key>_port` field of `ServerOptions` and of `[tls]`, its flag `--<key>-port`."""

LOOPBACK_LISTENERS: Final = ("shard-link",)
"""Listeners of a port of their own bound to 127.0.0.1 whatever `--host` says, and never
over TLS: the shard link joins the shard processes of one machine (its HMAC proves the
broker's secret). Each key's port is the `<key>_port` field of `ServerOptions`."""

FactoryFor = Callable[[str, str, bool], Callable[[], asyncio.Protocol]]
"""`(label, key, tls) -> protocol factory` of a listener: `label` as listed ("amqp/ssl"),
`key` the handler's ("amqp" for the AMQP port's sniffing factory, else the protocol's)."""


def _port_of(settings: object, key: str) -> int | None:
    # `OWN_PORT_LISTENERS`' rule: "web-stomp" -> `settings.web_stomp_port`
    port: int | None = getattr(settings, f"{key.replace('-', '_')}_port")
    return port


class ServerPorts:
    """Every listener of one server (see the module docstring).

    Args:
        options: the server's ports, hosts and `[tls]`.
        keys: the protocols wired in (a protocol not wired gets no port).
        now_ms: the clock the acceptors time handshakes with.
    """

    def __init__(
        self, options: ServerOptions, keys: Collection[str], now_ms: Callable[[], int]
    ) -> None:
        self.options = options
        self.keys = keys
        self.now_ms = now_ms
        self.listeners: list[Listener] = []
        self.http: Listener | None = None
        """The management port, bound (uvicorn serves its socket)."""
        self._amqp: Listener | None = None
        self._own: list[Listener] = []

    def bind(self) -> None:
        """Bind every configured port (raises OSError naming the option of one in use)."""
        opts = self.options
        if opts.amqp_port is not None:
            self._amqp = bind_socket(
                opts.amqp_bind or opts.host,
                opts.amqp_port,
                "amqp",
                backlog=1024,
                option="--amqp-port",
                reuse_port=opts.reuse_port,
            )
            self.listeners.append(self._amqp)
        for key in OWN_PORT_LISTENERS + LOOPBACK_LISTENERS:
            port = _port_of(opts, key)
            if port is not None and key in self.keys:
                host = "127.0.0.1" if key in LOOPBACK_LISTENERS else opts.host
                pre = bind_socket(host, port, key, backlog=1024, option=f"--{key}-port")
                self.listeners.append(pre)
                self._own.append(pre)
        if opts.http_port is not None:
            self.http = bind_http_socket(opts.http_bind or opts.host, opts.http_port)
            self.listeners.append(self.http)

    async def open(self, factory_for: FactoryFor) -> None:
        """Accept connections on every bound client port and on `[tls]`'s ports."""
        opts = self.options
        tls = opts.config.tls
        if self._amqp is not None:
            await self._accept(self._amqp, factory_for("amqp", "amqp", False))
            log.info("AMQP listening on %s:%d", self._amqp.host, self._amqp.port)
        else:
            log.info("plain AMQP listener off (TLS only)")
        if tls is not None:
            amqps = await open_amqp_listener(
                factory_for("amqp/ssl", "amqp", True),
                opts.amqps_bind or opts.host,
                tls.port,
                tls=tls_context(tls),
                now_ms=self.now_ms,
            )
            self.listeners.append(amqps)
            log.info("AMQPS listening on %s:%d", amqps.host, amqps.port)
        for pre in self._own:
            lst = await self._accept(pre, factory_for(pre.protocol, pre.protocol, False))
            log.info("%s listening on %s:%d", pre.protocol.upper(), lst.host, lst.port)
        if tls is not None:
            await self._open_tls(tls, factory_for)

    async def _accept(self, pre: Listener, factory: Callable[[], asyncio.Protocol]) -> Listener:
        lst = await open_amqp_listener(
            factory,
            pre.host,
            pre.port,
            sock=pre.sock,
            now_ms=self.now_ms,
            protocol=pre.protocol,
        )
        pre.sock = None  # the acceptor owns it now
        self.listeners[self.listeners.index(pre)] = lst
        return lst

    async def _open_tls(self, spec: TLSSpec, factory_for: FactoryFor) -> None:
        # STOMP and MQTT over TLS, where [tls] names their ports (RabbitMQ's ssl listeners)
        ctx = tls_context(spec)
        for key in OWN_PORT_LISTENERS:
            port = _port_of(spec, key)
            if port is None or key not in self.keys:
                continue
            lst = await open_amqp_listener(
                factory_for(f"{key}/ssl", key, True),
                self.options.host,
                port,
                tls=ctx,
                now_ms=self.now_ms,
                protocol=f"{key}/ssl",
            )
            self.listeners.append(lst)
            log.info("%s/SSL listening on %s:%d", key.upper(), lst.host, lst.port)

    def port_of(self, protocol: str) -> int:
        """The port of the listener of `protocol`; LookupError when there is none."""
        for lst in self.listeners:
            if lst.protocol == protocol:
                return lst.port
        raise LookupError(f"no {protocol} listener")

    def stop_accepting(self) -> None:
        """Close the acceptors (the management socket stays for uvicorn's own stop)."""
        for lst in self.listeners:
            if lst.acceptor is not None:
                lst.close()

    def close(self) -> None:
        for lst in self.listeners:
            lst.close()
