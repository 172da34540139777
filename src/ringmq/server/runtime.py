"""The running server: lifecycle, listeners, the management HTTP server, the `Runtime` port.

Theory of operation:

`BrokerServer` owns one pure `Broker` and every connection to it, all on one event loop thread
(so the core needs no locks). It does not build the broker: the composition root
(`ringmq.node`) hands it an `OpenCore` function, called once the data directory is locked and
the ports are bound (so a start that fails on either writes nothing into the directory), which
returns the `Core` (the broker, its store and its paging directory), and an `AppFactory` for
the management app, if any. The opener runs on a worker thread: its journal replay must not
stall the loop's other tasks (a cluster node's lease renewals run there). `server/` imports
nothing of `management/`.

Around the core, `attach` builds the server's parts, each in its own module and each owning one
thing: `Connections` (the table, effects applied to connections, one write per batch),
`Handlers` (the one connection driver: every protocol's connection, AMQP 0-9-1, AMQP 1.0, STOMP
and MQTT, is a sans-IO `Handler` built by its adapter's factory, from the table the composition
root hands over in `handlers`; `server/` imports no codec and no adapter),
`PublisherFlow` (pausing publishers that outrun their consumers), `Timers` (the broker's
deadline; heartbeats and timeouts), `ConfigReload` (the config file's refresh), `GroupCommit`
(the store's group fsync, server/commit.py) and `MemoryMonitor` (memory and disk alarms,
server/memory.py). The listening ports are `ServerPorts`' (server/ports.py: bound before the
core opens, accepting after), the management HTTP server `ManagementServer`'s
(server/httpserve.py); this module chooses each listener's protocol factory (PROXY headers
from trusted peers, and the cluster's relay gate, server/proxy.py).

Management calls come in through the `Runtime` port methods below (`connections()`,
`listeners()`, `close_connection()`, `run_batch()`, `apply_effects()`): each runs as one batch,
so the effects it causes reach clients at once. The records they return are the server's own
(`ringmq.status`: `ConnectionInfo`, `ListenerInfo`, the records management shows as they are).

Services (`Service`, e.g. the cluster node the composition root wires with `--cluster-etcd`)
start once every listener is open and stop first at shutdown, before any connection closes
(a leader steps down while it can still hand over).

Shutdown: stop the services, stop accepting, send Connection.Close 320 CONNECTION_FORCED to
every client, give them a moment to answer, close the sockets, then stop the management
server, wait for the last fsync and close the broker.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import threading
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Final, Protocol, TypeAlias, TypeVar

import uvicorn

from ringmq import announce
from ringmq.adapters.handler import HandlerFactory, ProtocolTick
from ringmq.core.effects import Effect
from ringmq.core.errors import Condition
from ringmq.core.throttle import LoginGuard
from ringmq.server.clock import Clock, SystemClock
from ringmq.server.commit import GroupCommit, ReplicaGate
from ringmq.server.connections import Connections
from ringmq.server.datadir import DataDirLock
from ringmq.server.flow import PublisherFlow
from ringmq.server.handlers import Handlers
from ringmq.server.httpforward import ForwardedFor
from ringmq.server.httpserve import ASGIApp, ManagementServer
from ringmq.server.jwks import JwksFetcher, start_jwks
from ringmq.server.listener import Listener
from ringmq.server.loop import GC_THRESHOLDS, new_event_loop, tune_gc
from ringmq.server.memory import MemoryMonitor, start_memory_monitor
from ringmq.server.options import (
    DEFAULT_AMQP_PORT,
    DEFAULT_DATA_DIR,
    DEFAULT_HOST,
    DEFAULT_HTTP_PORT,
    ServerOptions,
    options_from,
)
from ringmq.server.ports import ServerPorts
from ringmq.server.proxy import ProxyGate, static_provider
from ringmq.server.proxyheader import TrustedPeers, reading_headers
from ringmq.server.records import connection_info
from ringmq.server.refusal import Refusals, RefuserFactory
from ringmq.server.reload import ConfigReload
from ringmq.server.replication_leader import ReplicationLeader
from ringmq.server.shardlinks import ShardLinks
from ringmq.server.timers import CLOSE_OK_TIMEOUT_S, Timers
from ringmq.server.transport import ClientConnection
from ringmq.status import ConnectionInfo, ListenerInfo

if TYPE_CHECKING:
    from ringmq.core.broker import Broker
    from ringmq.server.ldapauth import LdapLogins
    from ringmq.storage.bodystore import SpillDirectory
    from ringmq.storage.store import FileStore

__all__ = [
    "CLOSE_OK_TIMEOUT_S",
    "DEFAULT_AMQP_PORT",
    "DEFAULT_DATA_DIR",
    "DEFAULT_HOST",
    "DEFAULT_HTTP_PORT",
    "GC_THRESHOLDS",
    "SHUTDOWN_GRACE_S",
    "AppFactory",
    "BrokerServer",
    "Core",
    "OpenCore",
    "ServerOptions",
    "Service",
    "new_event_loop",
    "options_from",
    "tune_gc",
]

log = logging.getLogger(__name__)

_T = TypeVar("_T")

SHUTDOWN_GRACE_S: Final = 1.0
"""How long clients get to answer Connection.Close(320) before their sockets are closed."""


@dataclass(frozen=True, slots=True)
class Core:
    """What the composition root hands the server once the data directory is locked.

    Attributes:
        broker: the core broker, recovered and configured.
        store: its file store, whose writes the group commit makes durable (None: no store).
        spill: the one paging directory (and its disk-health source); None: no paging.
    """

    broker: Broker
    store: FileStore | None = None
    spill: SpillDirectory | None = None


Emit: TypeAlias = Callable[[list[Effect]], None]
OpenCore: TypeAlias = Callable[[Emit, int], Core]
"""`(emit, now_ms) -> Core`: builds the core; `emit` applies effects of admin calls as a batch."""


class Service(Protocol):
    """Something that runs beside the listeners on the server's loop (see the docstring)."""

    async def start(self) -> None: ...

    async def stop(self) -> None: ...


AppFactory: TypeAlias = Callable[["BrokerServer"], ASGIApp]
"""Builds the management app over a started server (its broker and its `Runtime` port)."""


class BrokerServer:
    """The asyncio server around the pure broker (see the module docstring).

    Typical use: built by `ringmq.node` (`node.server(options)`), then
    `await server.serve_forever()`; tests use `ringmq.node.BrokerThread`.

    Args:
        options: where and how to run.
        open_core: builds the core once the data directory is locked (see `OpenCore`).
        clock: the time source (tests pass a `FakeClock`).
        app_factory: builds the management app; None: no management server.
        handlers: the protocols wired in, by key ("amqp091", "amqp10", "stomp", "mqtt"): each
            one's `HandlerFactory` (the composition root's table, `ringmq.node`). A protocol
            missing here gets no listener (the AMQP port serves whichever of "amqp091" and
            "amqp10" are wired, told apart by the protocol header).
        ticks: the protocols' own periodic work, by the same keys (`ProtocolTick`).
        refusers: how each listener's protocol ("amqp", "stomp", "mqtt") refuses a client
            while another node leads and `[cluster] proxy = false` (server/refusal.py).
    """

    broker: Broker
    """The core broker (set by `attach`, at `start()`)."""
    conns: Connections
    handlers: Handlers
    flow: PublisherFlow
    timers: Timers
    reloader: ConfigReload
    _core: Core

    def __init__(
        self,
        options: ServerOptions,
        open_core: OpenCore,
        *,
        clock: Clock | None = None,
        app_factory: AppFactory | None = None,
        handlers: Mapping[str, HandlerFactory] | None = None,
        ticks: Mapping[str, ProtocolTick] | None = None,
        refusers: Mapping[str, RefuserFactory] | None = None,
    ) -> None:
        self.options = options
        self.handler_factories: dict[str, HandlerFactory] = dict(handlers or {})
        self.refusers: dict[str, RefuserFactory] = dict(refusers or {})
        self.protocol_ticks = [t for k, t in (ticks or {}).items() if k in self.handler_factories]
        self.clock: Clock = clock or SystemClock()
        self.node = options.node
        self.started_at_ms = 0
        self._open_core = open_core
        self._app_factory = app_factory
        self._attached = False
        self._held_effects: list[list[Effect]] = []
        self._loop: asyncio.AbstractEventLoop | None = None
        self.ports = ServerPorts(options, self.handler_factories, self.clock.wall_ms)
        self._listeners = self.ports.listeners
        self.management: ManagementServer | None = None
        """The management HTTP server (server/httpserve.py), while it runs."""
        self._stopping: asyncio.Event | None = None
        self._stopped = False
        self.commit: GroupCommit | None = None
        """Group-commit fsync of the broker's store (None without a store)."""
        self.replication: ReplicationLeader | None = None
        """The cluster-port listener streaming the store's log to followers (`--cluster-port`)."""
        self.gate_for: Callable[[ReplicationLeader, GroupCommit], ReplicaGate] | None = None
        """Set (a cluster on etcd): the gate confirms pass, built over the replication listener
        before any client can connect (default: the listener itself, every follower counts)."""
        self.ready = threading.Event()
        """Set once every listener accepts connections (for threads waiting on start-up)."""
        self._data_lock: DataDirLock | None = None
        self.login_guard = LoginGuard()
        """Failed logins per source address (AMQP and management HTTP share it)."""
        self.memory: MemoryMonitor | None = None
        """Memory/disk monitor (watermark, alarms, paging bounds); set by `start()`."""
        self.jwks: JwksFetcher | None = None
        """Keeps the OAuth 2 backend's JWKS keys fresh (when `jwks_url` is set)."""
        self.ldap: LdapLogins | None = None
        """Checks logins against LDAP off the loop (when `ldap` is a backend)."""
        self.services: list[Service] = []
        """Started after the listeners, stopped first (the composition root adds them)."""
        self.gate: ProxyGate | None = None
        """Relays (or refuses) clients while another node leads (server/proxy.py); built at
        `start()` from `options.leader` unless set before."""
        self.relay_http = True
        """The gate relays the management port too (False: its app forwards per request,
        a follower on etcd, server/httpforward.py)."""
        self.trusted = TrustedPeers(options.config.proxy.proxy_protocol_from)
        """Whose PROXY headers are read (a leader on etcd adds the cluster's nodes)."""

    def attach(self, core: Core) -> None:
        """Build the server's parts around `core.broker` (`start()` does; benchmarks too)."""
        broker = core.broker
        self.broker = broker
        table: dict[int, ClientConnection] = {}
        self.flow = PublisherFlow(broker, self.clock, table)
        self.conns = Connections(self.clock, self.flow, table)
        limits = self.options.config.limits
        self.handlers = Handlers(
            broker,
            self.handler_factories,
            self.clock,
            limits,
            self.conns,
            self.flow,
            self.login_guard,
            self.options.node,
        )
        self.timers = Timers(
            broker,
            self.clock,
            limits,
            self.conns,
            self.handlers,
            self._listeners,
            self.login_guard,
            self.protocol_ticks,
        )
        self.conns.after_flush = self.timers.arm_deadline
        self.reloader = ConfigReload(broker, self.options.config, self.conns)
        self._core = core
        self._attached = True

    # -- lifecycle ---------------------------------------------------------------------------------

    @property
    def amqp_port(self) -> int:
        return self.port_of("amqp")

    @property
    def amqps_port(self) -> int:
        return self.port_of("amqp/ssl")

    @property
    def http_port(self) -> int:
        """The management port (HTTP or HTTPS)."""
        for lst in self._listeners:
            if lst.protocol in ("http", "https"):
                return lst.port
        raise LookupError("no http listener")

    def port_of(self, protocol: str) -> int:
        """The port of the listener of `protocol` ("amqp", "amqp/ssl", "stomp", "mqtt",
        "http"); LookupError when there is none."""
        return self.ports.port_of(protocol)

    @property
    def flow_stats(self) -> dict[str, int]:
        """Publisher flow pauses and how each ended (logged at shutdown)."""
        return self.flow.stats

    async def start(self) -> None:
        """Open the core, open listeners and timers, start management."""
        loop = asyncio.get_running_loop()
        self._loop = loop
        if self._stopping is None:
            self._stopping = asyncio.Event()
        opts = self.options
        cfg = opts.config
        self.started_at_ms = self.clock.wall_ms()
        # lock the data directory and bind the ports before the store is opened, so a start
        # that fails on either writes nothing into the directory
        self.ports.bind()
        self._data_lock = DataDirLock.acquire(opts.data_dir)
        if not self._attached:
            self.attach(await self._open_off_loop())
        core = self._core
        for effects in self._held_effects:
            self.emit(effects)
        self._held_effects = []
        release = lambda fn: self.run_batch(lambda: self.apply_effects(fn()))  # noqa: E731
        if core.store is not None and self.commit is None:
            self.commit = GroupCommit(self.broker, core.store, loop, release)
        self.conns.commit = self.commit
        if opts.shard_peers and opts.shard_link_secret:  # forwards to other shards' queues
            links = self.conns.shard_links = ShardLinks(
                self.broker, loop, release, opts.shard_index, opts.shard_link_secret,
                opts.shard_peers, self.clock.wall_ms,
            )  # fmt: skip
            self.broker.set_shards(max(max(opts.shard_peers), opts.shard_index) + 1)
            if opts.shard_index != 0 and 0 in opts.shard_peers:
                links.follow()  # shard 0 owns the definitions (docs/dev/shards.md)
        replication = opts.replication
        if (
            replication is not None
            and replication.port is not None
            and core.store is not None
            and self.replication is None
        ):
            self.replication = ReplicationLeader(core.store, replication, opts.host)
            await self.replication.start()
            if replication.confirm_replicated and self.commit is not None:
                gate = self.replication
                self.commit.replica_gate = (
                    gate if self.gate_for is None else self.gate_for(gate, self.commit)
                )
                core.store.streams.hide()  # stream readers see committed chunks only
                self.replication.on_progress = self.commit.replicated
        self.flow.loop = loop
        self.handlers.loop = loop
        provider = opts.leader or static_provider(cfg.proxy)
        if provider is not None and self.gate is None:
            refuse = None if cfg.proxy.proxy else Refusals(self.refusers)
            self.gate = ProxyGate(provider, refuse)
        if self.memory is None:
            self.memory = start_memory_monitor(
                self.broker,
                self.options.memory,
                self.options.data_dir,
                self.emit,
                core.spill,
                self.conns.content_in_flight,
                loop,
            )
            self.handlers.memory = self.memory
        self.jwks = await start_jwks(self.broker, cfg.auth)
        if "ldap" in cfg.auth.backends and cfg.auth.ldap is not None:
            # imported here: ldap3 costs MiBs of RSS, paid only by brokers with the LDAP backend
            from ringmq.server.ldapauth import LdapLogins

            self.ldap = LdapLogins(cfg.auth.ldap, self.broker)
            self.ldap.loop = loop
            self.handlers.slow_login = self.ldap.take

        await self.ports.open(self._factory_for)
        if self.ports.http is not None:
            self._start_management(self.ports.http)

        self.timers.start(loop)
        self.reloader.start(loop)
        self._announce()
        for service in self.services:
            await service.start()
        self.ready.set()

    async def _open_off_loop(self) -> Core:
        # Opening a store replays its journal: seconds for a large one, and on a cluster node
        # promoted to leader the lease renewals and etcd's watch run on this loop, so a replay
        # on the loop could hold a renewal past the election's fence (the new leader fences
        # itself, another election follows). The opener touches no loop state (the core and
        # storage are synchronous and import no asyncio), so it runs on a worker thread; the
        # loop waits for it and keeps its tasks going. Effects it emits meanwhile (none today:
        # admin effects come from management, which is not up yet) are kept and applied on the
        # loop once the server's parts exist, in order.
        held: list[list[Effect]] = []
        opened = False

        def emit(effects: list[Effect]) -> None:
            if opened:
                self.emit(effects)
            else:
                held.append(effects)

        core = await asyncio.to_thread(self._open_core, emit, self.clock.wall_ms())
        opened = True
        self._held_effects = held
        return core

    def _announce(self) -> None:
        # where the CLI finds this broker (ringmq.announce); a convenience, so a failure to
        # write only logs
        paths = list(self.options.announce_to)
        if not paths:
            return
        urls = {
            lst.protocol: announce.listener_url(lst.protocol, lst.host, lst.port)
            for lst in self._listeners
        }
        found = announce.Announcement(
            os.getpid(), self.node, str(self.options.data_dir.resolve()), urls
        )
        try:
            announce.write(found, paths)
        except OSError as exc:
            log.warning("cannot write where this broker listens: %s", exc)

    def _factory_for(self, label: str, key: str, tls: bool) -> Callable[[], asyncio.Protocol]:
        # a listener's connections: PROXY headers read from trusted peers (the leader's side),
        # and relayed to the leader while another node leads (a follower's side)
        if key == "amqp":
            factory = self.handlers.amqp_port_factory(tls=tls)
        else:
            factory = self.handlers.protocol_factory(key, tls=tls)
        local = reading_headers(factory, self.trusted)
        return local if self.gate is None else self.gate.wrap(label, local)

    async def serve_forever(self, *, install_signals: bool = False) -> None:
        """Start, run until `request_stop()` (or SIGTERM/SIGINT), then stop cleanly."""
        loop = asyncio.get_running_loop()
        self._stopping = asyncio.Event()
        if install_signals:
            # installed before start-up, so a signal during a slow start still stops cleanly
            for sig in (signal.SIGTERM, signal.SIGINT):
                with contextlib.suppress(NotImplementedError, RuntimeError):
                    loop.add_signal_handler(sig, self.request_stop)
        try:
            await self.start()
            await self._stopping.wait()
        finally:
            await self.stop()

    def request_stop(self) -> None:
        """Ask `serve_forever` to shut down (call on the loop thread)."""
        if self._stopping is not None:
            log.info("shutting down")
            self._stopping.set()

    async def stop(self, reason: str = "broker shutdown") -> None:
        """Stop accepting, close every connection with 320, stop timers and management."""
        if self._stopped:
            return
        self._stopped = True
        for service in reversed(self.services):
            try:
                await service.stop()
            except Exception:
                log.exception("stopping %r failed", service)
        self.ports.stop_accepting()
        if self.gate is not None:
            self.gate.close()
        if self._attached:
            await self._close_connections(reason)
        if self.management is not None:
            await self.management.stop()
        self.ports.close()
        if self.jwks is not None:
            self.jwks.stop()
        if self.ldap is not None:
            self.ldap.close()
        if self._attached and self.conns.shard_links is not None:
            self.conns.shard_links.close()
        if self.commit is not None:
            await self.commit.close()
        if self._attached:
            self.broker.close()
        announce.remove(list(self.options.announce_to), os.getpid())
        if self.replication is not None:
            await self.replication.stop()
        if self._data_lock is not None:
            self._data_lock.release()
        if self._attached and self.flow.stats["paused"]:
            log.info(
                "publisher flow: %(paused)d pauses (%(settled)d drained, %(stalled)d stalled "
                "consumers, %(timeout)d at the limit)",
                self.flow.stats,
            )
        log.info("stopped")

    async def _close_connections(self, reason: str) -> None:
        conns = self.conns
        conns.stopped = True
        self.flow.stop()
        self.timers.stop()
        self.reloader.stop()
        if self.memory is not None:
            self.memory.stop()
        with conns.batch():
            for c in list(conns.table.values()):
                conns.close(c, Condition.CONNECTION_FORCED, reason)
        # give clients a moment to answer Close-Ok, then drop whatever is left
        if conns.table:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(conns.drained.wait(), SHUTDOWN_GRACE_S)
        for c in list(conns.table.values()):
            c.abort()
            self.timers.forget(c)

    # -- management --------------------------------------------------------------------------------

    def _start_management(self, lst: Listener) -> None:
        if self._app_factory is None:
            log.info("management API not wired: no HTTP server")
            return
        tls = self.options.config.tls
        https = tls if tls is not None and tls.https else None
        if https is not None:
            lst.protocol = "https"
        gate = self.gate if self.relay_http else None
        app = self._app_factory(self)
        if self.trusted:  # requests a follower forwarded name their client
            app = ForwardedFor(app, self.trusted)
        self.management = ManagementServer(
            app,
            lst,
            request_timeout_s=self.options.config.limits.handshake_timeout_ms / 1000,
            tls=https,
            wrap=None if gate is None else (lambda f: gate.wrap(lst.protocol, f)),
        )
        log.info("%s listening on %s:%d", lst.protocol.upper(), lst.host, lst.port)

    @property
    def http_server(self) -> uvicorn.Server | None:
        """The management HTTP server, while it runs."""
        return None if self.management is None else self.management.server

    # -- Runtime port (management, through the composition root) -----------------------------------

    def connections(self) -> list[ConnectionInfo]:
        held = self.flow.held
        return [connection_info(c, c in held) for c in self.conns.table.values() if c.opened]

    def close_connection(self, name: str, reason: str) -> bool:
        """Close the named connection with 320 CONNECTION_FORCED; False if unknown."""
        c = self.conns.named(name)
        if c is None:
            return False
        with self.conns.batch():
            self.conns.close(c, Condition.CONNECTION_FORCED, reason)
        return True

    def listeners(self) -> list[ListenerInfo]:
        return [ListenerInfo(lst.protocol, lst.host, lst.port) for lst in self._listeners]

    def emit(self, effects: list[Effect]) -> None:
        """Apply effects produced outside a client read (admin calls, alarms) as one batch."""
        with self.conns.batch():
            self.conns.apply(effects)

    def apply_effects(self, effects: Iterable[Effect]) -> None:
        """Queue the output of `effects` on their target connections (flushed at batch end)."""
        self.conns.apply(effects)

    def run_batch(self, fn: Callable[[], _T]) -> _T:
        """Run `fn` (a core call made outside a client read, e.g. by management) as a batch.

        Effects it returns through `apply_effects` are flushed when it completes.
        """
        with self.conns.batch():
            return fn()

    async def until_durable(self) -> None:
        """Return once an fsync covers every store write made so far (no store: at once).

        Raises:
            OSError: the store could not write or sync them (server/commit.py).
        """
        if self.commit is not None:
            await self.commit.until_durable()

    def content_in_flight(self) -> int:
        """Body bytes of the contents being received (`Connections.content_in_flight`)."""
        return self.conns.content_in_flight()

    def reload_config(self) -> bool:
        """Re-read the config file now (`ConfigReload.reload`); False if it is invalid."""
        return self.reloader.reload()
