"""Followers relay client connections to the leader: the leader's addresses and the TCP relay.

Theory of operation: in a cluster one node (the leader) serves clients; a client may connect to
any node. Where the leader is comes from a `LeaderProvider` (the etcd control plane's, or the
`StaticLeader` of a configuration file's `[cluster.leader]`, which tests use to run two nodes
on loopback without etcd). Each listener's protocol factory is wrapped by `ProxyGate`: while the
provider names a leader other than this node, an accepted connection gets a `Relay` instead of
the node's own protocol (or, with `[cluster] proxy = false`, a refusal from `server/refusal.py`).
A connection keeps the choice made when it was accepted; a change of leader closes every relay
(its clients reconnect, and reach the new leader through whichever node they pick).

A `Relay` connects to the leader's port of the same protocol and writes, before any client byte,
a PROXY protocol v1 header (HAProxy's text form: `PROXY TCP4 client follower cport fport`), so
the leader records the client's address, not the follower's (`server/proxyheader.py` reads it,
from trusted peers only). TLS is terminated on the follower (the listener's acceptor did the
handshake): the relay sees plain bytes and speaks plain TCP to the leader's plain port, so the
leader's internal network must be trusted (document it). Bytes are relayed unchanged.

Buffers are bounded both ways with asyncio's own flow control: each side's transport has a
write-buffer high-water mark (`RELAY_HIGH_WATER`); when the side written to crosses it, asyncio
calls `pause_writing` on that side's protocol, which pauses reading on the other side; when it
drains, reading resumes. Client bytes that arrive before the leader's connection is up are held
(at most `RELAY_HIGH_WATER`, then the client is paused). When either side closes (or the
connection to the leader fails), the other side is closed after its pending writes.
"""

from __future__ import annotations

import asyncio
import ipaddress
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Final, Protocol, cast

from ringmq.server.configspec import NodeSpec, ProxySpec

log = logging.getLogger(__name__)

RELAY_HIGH_WATER: Final = 256 * 1024
"""Bytes a relay side may hold unwritten before the other side stops being read."""
RELAY_LOW_WATER: Final = 64 * 1024

PROTOCOLS: Final = (
    "amqp",
    "stomp",
    "mqtt",
    "http",
    "stream",
    "web-stomp",
    "web-mqtt",
    "web-amqp",
)
"""The leader's client-facing ports a follower relays to (AMQP serves 0-9-1 and 1.0; the
WebSocket ports carry STOMP, MQTT and AMQP 1.0; "stream" is the stream protocol's)."""


@dataclass(frozen=True, slots=True)
class LeaderAddresses:
    """Where a node serves clients: its advertised host and one port per protocol.

    Attributes:
        node: the node's name.
        host: the host clients (and relays) use to reach it.
        amqp_port / stomp_port / mqtt_port / http_port / stream_port / web_stomp_port /
            web_mqtt_port / web_amqp_port: its plain listeners (None: none).
    """

    node: str
    host: str
    amqp_port: int | None = None
    stomp_port: int | None = None
    mqtt_port: int | None = None
    http_port: int | None = None
    stream_port: int | None = None
    web_stomp_port: int | None = None
    web_mqtt_port: int | None = None
    web_amqp_port: int | None = None

    def port_of(self, protocol: str) -> int | None:
        """The port of `protocol` (one of `PROTOCOLS`, and their "/ssl" or "https" forms: TLS
        ends at the follower, the leader's plain port serves)."""
        base = protocol.split("/", 1)[0]
        if base == "https":
            base = "http"
        if base not in PROTOCOLS:
            return None
        port: int | None = getattr(self, f"{base.replace('-', '_')}_port", None)
        return port


LeaderListener = Callable[["LeaderAddresses | None"], None]


class LeaderProvider(Protocol):
    """Who leads, for the client-facing side (the contract in docs/dev/contracts.md).

    `leader()` is None while this node is the leader, or while no leader is known (then the
    node serves its clients itself, as a single node does). The callbacks given to
    `subscribe` run on the broker's event loop each time the answer changes.
    """

    def leader(self) -> LeaderAddresses | None:
        """The leader's addresses, when another node leads."""
        ...

    def nodes(self) -> Sequence[LeaderAddresses]:
        """Every node of the cluster, this one included (empty: not a cluster)."""
        ...

    def subscribe(self, callback: LeaderListener) -> Callable[[], None]:
        """Call `callback(leader())` on every change; returns the unsubscribe function."""
        ...


class StaticLeader:
    """A `LeaderProvider` whose answer is set by hand: `[cluster.leader]` in the configuration
    file (two nodes on loopback, for tests), or `set()` from code that knows better."""

    def __init__(
        self, leader: LeaderAddresses | None = None, nodes: Sequence[LeaderAddresses] = ()
    ) -> None:
        self._leader = leader
        self._nodes = tuple(nodes)
        self._listeners: list[LeaderListener] = []

    def leader(self) -> LeaderAddresses | None:
        return self._leader

    def nodes(self) -> Sequence[LeaderAddresses]:
        return self._nodes

    def subscribe(self, callback: LeaderListener) -> Callable[[], None]:
        self._listeners.append(callback)
        return lambda: self._listeners.remove(callback)

    def set(self, leader: LeaderAddresses | None) -> None:
        """A new leader (None: this node leads); tells every subscriber."""
        if leader == self._leader:
            return
        self._leader = leader
        for callback in list(self._listeners):
            callback(leader)


def proxy_v1_header(client: tuple[str, int], local: tuple[str, int]) -> bytes:
    """HAProxy's PROXY protocol v1 line for a TCP connection from `client` to `local`."""
    try:
        src = ipaddress.ip_address(client[0])
        dst = ipaddress.ip_address(local[0])
    except ValueError:
        return b"PROXY UNKNOWN\r\n"
    if src.version != dst.version:
        return b"PROXY UNKNOWN\r\n"
    family = "TCP4" if src.version == 4 else "TCP6"
    return f"PROXY {family} {src} {dst} {client[1]} {local[1]}\r\n".encode("ascii")


class _Side(asyncio.Protocol):
    """One end of a relay (the client's or the leader's); reports to the `Relay`."""

    def __init__(self, relay: Relay, upstream: bool) -> None:
        self.relay = relay
        self.upstream = upstream
        self.transport: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast("asyncio.Transport", transport)
        self.transport.set_write_buffer_limits(high=RELAY_HIGH_WATER, low=RELAY_LOW_WATER)
        self.relay.side_made(self)

    def data_received(self, data: bytes) -> None:
        self.relay.received(self, data)

    def eof_received(self) -> bool | None:
        return False  # closes this side; connection_lost closes the other

    def connection_lost(self, exc: Exception | None) -> None:
        self.relay.side_lost(self)

    def pause_writing(self) -> None:
        self.relay.other(self).pause_reading()

    def resume_writing(self) -> None:
        self.relay.other(self).resume_reading()

    def pause_reading(self) -> None:
        if self.transport is not None and not self.transport.is_closing():
            self.transport.pause_reading()

    def resume_reading(self) -> None:
        if self.transport is not None and not self.transport.is_closing():
            self.transport.resume_reading()

    def close(self) -> None:
        if self.transport is not None and not self.transport.is_closing():
            self.transport.close()  # after what is pending is written


class Relay:
    """One client connection relayed to the leader (see the module docstring).

    Args:
        target: the leader's (host, port) for this connection's protocol.
        registry: the set of open relays (a leader change closes them all).
        header: write a PROXY v1 header first (False only where the leader's port reads none).
    """

    def __init__(self, target: tuple[str, int], registry: set[Relay], *, header: bool) -> None:
        self.target = target
        self.registry = registry
        self.header = header
        self.client = _Side(self, upstream=False)
        self.leader = _Side(self, upstream=True)
        self._held: list[bytes] = []
        self._held_bytes = 0
        self._closed = False
        self._task: asyncio.Task[object] | None = None

    def other(self, side: _Side) -> _Side:
        return self.client if side is self.leader else self.leader

    def side_made(self, side: _Side) -> None:
        if side is self.client:
            self.registry.add(self)
            self._task = asyncio.get_running_loop().create_task(self._connect())
            return
        transport = side.transport
        client = self.client.transport
        if transport is None or client is None or self._closed:
            side.close()
            return
        if self.header:
            peer = client.get_extra_info("peername") or ("", 0)
            local = client.get_extra_info("sockname") or ("", 0)
            transport.write(proxy_v1_header((str(peer[0]), int(peer[1])), local[:2]))
        for chunk in self._held:
            transport.write(chunk)
        self._held.clear()
        self._held_bytes = 0
        self.client.resume_reading()

    async def _connect(self) -> object:
        loop = asyncio.get_running_loop()
        try:
            await loop.create_connection(lambda: self.leader, *self.target)
        except OSError as exc:
            log.info("cannot reach the leader at %s:%d: %s", *self.target, exc)
            self.close()
        return None

    def received(self, side: _Side, data: bytes) -> None:
        if self._closed:
            return
        dest = self.other(side)
        if dest.transport is None:  # the leader's connection is not up yet
            self._held.append(data)
            self._held_bytes += len(data)
            if self._held_bytes >= RELAY_HIGH_WATER:
                side.pause_reading()
            return
        dest.transport.write(data)

    def side_lost(self, side: _Side) -> None:
        self.close()

    def close(self) -> None:
        """Close both sides (each after its pending writes)."""
        if self._closed:
            return
        self._closed = True
        self.registry.discard(self)
        self.client.close()
        self.leader.close()
        if self._task is not None and not self._task.done():
            self._task.cancel()


ProtocolFactory = Callable[[], asyncio.Protocol]
Refuse = Callable[[str, LeaderAddresses], "asyncio.Protocol | None"]
"""`(protocol, leader) -> a protocol that refuses the client, naming the leader` (None: this
protocol has no refusal: serve the client locally)."""


class ProxyGate:
    """Chooses, per accepted connection, between the node's own protocol and the leader.

    Args:
        provider: who leads.
        refuse: with `[cluster] proxy = false`, builds the refusal of a protocol; None: relay.
        serve_unled: while nobody else leads, serve the client here (a node that may lead);
            False: close it at once (a follower on etcd, whose broker is an empty stand-in:
            the client retries, and reaches the leader once one is known).
    """

    def __init__(
        self, provider: LeaderProvider, refuse: Refuse | None = None, *, serve_unled: bool = True
    ) -> None:
        self.provider = provider
        self.refuse = refuse
        self.serve_unled = serve_unled
        self.relays: set[Relay] = set()
        self._unsubscribe = provider.subscribe(self._leader_changed)

    def wrap(self, protocol: str, factory: ProtocolFactory) -> ProtocolFactory:
        """`factory` for a listener of `protocol`, or a relay/refusal while another leads."""

        def make() -> asyncio.Protocol:
            leader = self.provider.leader()
            if leader is None:
                return factory() if self.serve_unled else _Closer()
            if self.refuse is not None:
                refusal = self.refuse(protocol, leader)
                if refusal is not None:
                    return refusal
                # no refusal in this protocol's words: serve here, or close on a stand-in
                return factory() if self.serve_unled else _Closer()
            port = leader.port_of(protocol)
            if port is None:
                # serving here would write beside the leader: the client must go elsewhere
                log.info("the leader %s has no %s port: closing the client", leader.node, protocol)
                return _Closer()
            # the management port's leader reads no PROXY header (uvicorn does not parse one)
            relay = Relay((leader.host, port), self.relays, header=protocol not in _NO_HEADER)
            return relay.client

        return make

    def _leader_changed(self, leader: LeaderAddresses | None) -> None:
        if self.relays:
            log.info(
                "leader changed (%s): closing %d relayed connection(s)",
                leader.node if leader else "this node",
                len(self.relays),
            )
        for relay in list(self.relays):
            relay.close()

    def close(self) -> None:
        """Stop following the provider and close every relay."""
        self._unsubscribe()
        for relay in list(self.relays):
            relay.close()


_NO_HEADER: Final = frozenset({"http", "https"})


class _Closer(asyncio.Protocol):
    """Closes the connection at once (a protocol the leader does not serve)."""

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        transport.close()


def addresses(node: NodeSpec) -> LeaderAddresses:
    """A configured node's addresses."""
    return LeaderAddresses(
        node.name, node.host, node.amqp_port, node.stomp_port, node.mqtt_port, node.http_port
    )


def static_provider(spec: ProxySpec) -> StaticLeader | None:
    """The provider `[cluster.leader]` / `[[cluster.nodes]]` describe (None: neither is set)."""
    if spec.leader is None and not spec.nodes:
        return None
    leader = addresses(spec.leader) if spec.leader is not None else None
    return StaticLeader(leader, [addresses(n) for n in spec.nodes])
