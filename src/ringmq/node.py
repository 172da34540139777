"""The composition root: the one place that wires a ringmq node.

Theory of operation: a node is a broker, its store, its paging directory, the asyncio server
around them and the management app beside it. Each layer is built knowing only the ones below
it; this module alone knows them all and puts them together:

* `open_core(options)` is the server's `OpenCore`. The server calls it once the data directory
  is locked and the ports are bound. It opens the `FileStore` under `<data-dir>/store`, recovers
  the `Broker` over it (durable definitions and persistent messages of the previous run come
  back before any listener opens; confirms of persistent messages wait for the group commit),
  points the broker's admin effects at the server's batch (`emit`), declares the configuration
  file's exchanges, queues and bindings, and hands back the `Core`: the broker, the store and
  the store's one paging directory, whose disk health the memory monitor reads.
* `management_app` is the server's `AppFactory`: the management ASGI app over the broker and a
  `ManagementRuntime`, management's `Runtime` port adapted from the server's own records.
* `PROTOCOL_HANDLERS` is the one table of the protocols a node speaks: each protocol's key
  ("amqp091", "amqp10", "stomp", "mqtt") and its adapter's `HandlerFactory` (the `Handler`
  seam, `ringmq.adapters.handler`); `PROTOCOL_TICKS` their own periodic work. The server gets
  the table and imports no codec and no adapter (an import-linter contract says so): adding a
  protocol is an adapter plus a row here (and its listener's port in the options).
* With `options.cluster` (`--cluster-etcd`), `run` (`ringmq serve`) runs a replicated
  `ringmq.server.member.ClusterMember`: it owns the `ClusterNode` (etcd membership, election)
  and runs, as the node's role says, `leader_server` (this module's full server, confirms
  gated on the ISR) or a follower of the leader's log beside `follower_server` (client ports
  that relay to the leader). Embedded (`server(options)`,
  `BrokerThread`), `cluster_node` adds the `ClusterNode` to the server's services instead: the
  control plane alone, every node serving its own data directory.
* `server(options)` builds a `BrokerServer` from both; `BrokerThread` runs one on a thread
  (tests, embedding) and `run` in the foreground (`ringmq serve`; a cluster member with
  `--cluster-etcd`, above).

`server/` imports nothing of `management/` (an import-linter contract says so); only this
module imports both. Nothing here runs per message.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping
from dataclasses import replace
from pathlib import Path
from typing import TypeVar

from ringmq.adapters.amqp091 import Amqp091
from ringmq.adapters.amqp091.connection import Amqp091Handlers
from ringmq.adapters.amqp091.refusal import Amqp091Refuser
from ringmq.adapters.amqp10.handler import factory as amqp10_handler
from ringmq.adapters.amqp10.refusal import Amqp10Refuser
from ringmq.adapters.handler import HandlerFactory, ProtocolTick
from ringmq.adapters.mqtt import mqtt_handler, mqtt_tick
from ringmq.adapters.mqtt.refusal import MqttRefuser
from ringmq.adapters.shardlink import shardlink_handler
from ringmq.adapters.stomp import stomp_handler
from ringmq.adapters.stomp.refusal import StompRefuser
from ringmq.adapters.stream import stream_handler
from ringmq.adapters.stream.refusal import StreamRefuser
from ringmq.adapters.websocket import (
    AMQP_SUBPROTOCOLS,
    MQTT_SUBPROTOCOLS,
    STOMP_SUBPROTOCOLS,
    websocket_handler,
    websocket_refuser,
)
from ringmq.cluster.agent import ClusterNode
from ringmq.cluster.keys import NodeRecord
from ringmq.core.auth import Identity
from ringmq.core.broker import Broker
from ringmq.core.config import BrokerConfig
from ringmq.core.effects import Effect
from ringmq.core.throttle import LoginGuard
from ringmq.management.app import create_app
from ringmq.management.consoleauth import ConsoleOAuth
from ringmq.server.clock import Clock, SystemClock
from ringmq.server.clusterleader import ViewLeader
from ringmq.server.configspec import FileConfig
from ringmq.server.httpforward import LeaderForwarding
from ringmq.server.httpserve import ASGIApp
from ringmq.server.member import run_member
from ringmq.server.memory import MemoryMonitor
from ringmq.server.options import ServerOptions
from ringmq.server.proxy import LeaderProvider, ProxyGate, static_provider
from ringmq.server.proxyheader import TrustedPeers
from ringmq.server.refusal import Refusals, RefuserFactory
from ringmq.server.runtime import BrokerServer, Core, Emit, OpenCore
from ringmq.server.setup import apply_auth, apply_declarations, broker_config
from ringmq.server.thread import ServerThread, run_server
from ringmq.status import ConnectionInfo, ListenerInfo
from ringmq.storage.bodystore import SpillDirectory
from ringmq.storage.store import FileStore

__all__ = [
    "BrokerThread",
    "ManagementRuntime",
    "build_broker",
    "cluster_node",
    "management_app",
    "open_core",
    "protocol_handlers",
    "run",
    "server",
    "spill_directory",
]

log = logging.getLogger(__name__)

_T = TypeVar("_T")
_CLOCK: Clock = SystemClock()  # how long recovery took (logged)


def build_broker(config: BrokerConfig, data_dir: Path, now_ms: int) -> Broker:
    """Create the core `Broker` for `config` over a `FileStore` in `data_dir/store`, recovered.

    Durable definitions and persistent messages of the previous run come back before any
    listener opens; confirms of persistent messages wait for the group-commit fsync
    (`delay_persistent_confirms`, released by `server.commit.GroupCommit`).
    """
    started = _CLOCK.monotonic()
    fresh = not (data_dir / "store").exists()
    store = FileStore.open(data_dir / "store", spill_directory=data_dir / "paging")
    config.delay_persistent_confirms = True
    broker = Broker(config, store=store, now_ms=now_ms)
    dur = broker.durability
    assert dur is not None
    if fresh:
        log.info("new data directory %s: nothing to recover", data_dir)
        return broker
    log.info(
        "recovered %d persistent messages from %s (%s) in %.0f ms",
        dur.recovered_messages,
        data_dir,
        (
            "after a clean stop, from the recovery terms"
            if store.used_terms
            else "after a clean stop"
        )
        if dur.clean
        else "no clean-stop marker: after a crash or a kill",
        (_CLOCK.monotonic() - started) * 1000,
    )
    return broker


def spill_directory(broker: Broker, directory: Path) -> SpillDirectory:
    """The broker's paging directory: the `FileStore`'s own when it has one, or a new one at
    `directory` (wiped: paged data is transient).

    With a `FileStore`, recovered backlogs and live paging share that one directory and its one
    disk-health source (the memory monitor's disk alarm), and a persistent message of a durable
    queue is paged as a reference to its journal copy (no second write).
    """
    dur = broker.durability
    store = dur.store if dur is not None else None
    if isinstance(store, FileStore):
        return store.spills
    return SpillDirectory(directory)


PROTOCOL_HANDLERS: dict[str, HandlerFactory] = {
    "amqp091": Amqp091Handlers(),
    "amqp10": amqp10_handler(),
    "stomp": stomp_handler,
    "mqtt": mqtt_handler,
    "stream": stream_handler,
    "web-stomp": websocket_handler(stomp_handler, STOMP_SUBPROTOCOLS, text=True),
    "web-mqtt": websocket_handler(mqtt_handler, MQTT_SUBPROTOCOLS, text=False),
    "web-amqp": websocket_handler(amqp10_handler(), AMQP_SUBPROTOCOLS, text=False),
}
"""The protocols a node serves, by key ("amqp091", "amqp10", "stomp", "mqtt", "stream",
"web-stomp", "web-mqtt", "web-amqp": STOMP, MQTT and AMQP 1.0 over WebSockets): each one's
`HandlerFactory` (`ringmq.adapters.handler`). The server opens a listener for each (AMQP 0-9-1
and 1.0 share the AMQP port, told apart by the protocol header). `protocol_handlers` builds
them from a configuration file."""


PROTOCOL_TICKS: dict[str, ProtocolTick] = {"mqtt": mqtt_tick}

PROTOCOL_REFUSERS: dict[str, RefuserFactory] = {
    "amqp091": Amqp091Refuser,
    "amqp10": Amqp10Refuser,
    "stomp": StompRefuser,
    "mqtt": MqttRefuser,
    "stream": StreamRefuser,
    "web-stomp": websocket_refuser(StompRefuser, STOMP_SUBPROTOCOLS, text=True),
    "web-mqtt": websocket_refuser(MqttRefuser, MQTT_SUBPROTOCOLS, text=False),
    "web-amqp": websocket_refuser(Amqp10Refuser, AMQP_SUBPROTOCOLS, text=False),
}
"""How each protocol refuses a client on a follower that does not relay (`[cluster] proxy =
false`, server/refusal.py), by the keys of `PROTOCOL_HANDLERS`."""
"""The adapter protocols' own periodic work (`ProtocolTick`), by the same keys."""


def protocol_handlers(
    config: FileConfig, amqp091: Amqp091 | None = None
) -> dict[str, HandlerFactory]:
    """`PROTOCOL_HANDLERS` for `config`: the same for every file (the adapters' settings, such
    as the anonymous login, reach them through the broker's `BrokerConfig`), AMQP 0-9-1's a
    factory of its own that serves through `amqp091` when given (a test double)."""
    return {**PROTOCOL_HANDLERS, "amqp091": Amqp091Handlers(amqp091)}


def open_core(options: ServerOptions) -> OpenCore:
    """The server's `OpenCore` for `options` (see the module docstring)."""

    def open_(emit: Emit, now_ms: int) -> Core:
        cfg = options.config
        broker = build_broker(broker_config(cfg), options.data_dir, now_ms)
        # effects of admin calls (management, config reload) reach clients in one batch
        broker.admin.emit = emit
        apply_auth(broker, cfg)
        apply_declarations(broker, cfg, now_ms)
        dur = broker.durability
        store = dur.store if dur is not None else None
        return Core(
            broker,
            store=store if isinstance(store, FileStore) else None,
            spill=spill_directory(broker, options.data_dir / "paging"),
        )

    return open_


class ManagementRuntime:
    """Management's `Runtime` port over a running `BrokerServer`.

    Connections and listeners are the server's records (`ringmq.status`, which management's
    port names too); batches, effects and durability go straight through.
    """

    def __init__(self, server: BrokerServer, cluster: ClusterNode | None = None) -> None:
        self.server = server
        self.node = server.node
        self.started_at_ms = server.started_at_ms
        self.clock: Clock = server.clock
        self.cluster: ClusterNode | None = cluster or next(
            (s for s in server.services if isinstance(s, ClusterNode)), None
        )
        """This node's cluster membership (None: a single node); given by a `ClusterMember`,
        whose `ClusterNode` outlives the servers it runs, or one of the server's services."""

    @property
    def options(self) -> ServerOptions:
        return self.server.options

    @property
    def memory(self) -> MemoryMonitor | None:
        return self.server.memory

    @property
    def login_guard(self) -> LoginGuard:
        return self.server.login_guard

    def connections(self) -> list[ConnectionInfo]:
        return self.server.connections()

    def close_connection(self, name: str, reason: str) -> bool:
        return self.server.close_connection(name, reason)

    def listeners(self) -> list[ListenerInfo]:
        return self.server.listeners()

    def run_batch(self, fn: Callable[[], _T]) -> _T:
        return self.server.run_batch(fn)

    def apply_effects(self, effects: Iterable[Effect]) -> None:
        self.server.apply_effects(effects)

    async def until_durable(self) -> None:
        await self.server.until_durable()


def management_app(server: BrokerServer, cluster: ClusterNode | None = None) -> ASGIApp:
    """The server's `AppFactory`: the management app over its broker and runtime."""
    settings = server.options.config.management

    async def ldap_login(user: str, password: str) -> Identity | None:
        # the server's LDAP backend, when it has one by the time a request asks
        return None if server.ldap is None else await server.ldap.login(user, password)

    console_oauth = None
    if settings.oauth_enabled and settings.oauth_client_id and settings.oauth_provider_url:
        console_oauth = ConsoleOAuth(
            settings.oauth_client_id, settings.oauth_provider_url, settings.oauth_scopes
        )
    return create_app(
        server.broker,
        ManagementRuntime(server, cluster),
        max_body_size=settings.max_body_size,
        slow_login=ldap_login if "ldap" in server.options.config.auth.backends else None,
        console_oauth=console_oauth,
    )


def server(
    options: ServerOptions,
    *,
    clock: Clock | None = None,
    broker: Broker | None = None,
    amqp091: Amqp091 | None = None,
    handlers: Mapping[str, HandlerFactory] | None = None,
) -> BrokerServer:
    """A wired `BrokerServer` for `options`.

    Args:
        options: where and how to run.
        clock: the time source (tests pass a `FakeClock`).
        broker: serve this broker instead of opening the data directory's (tests, benchmarks):
            the server then runs no group commit and sets up no paging directory for it, and
            the file's declarations are not applied.
        amqp091: with `broker`, the AMQP 0-9-1 adapter to serve it through (a test double).
        handlers: the protocols to serve (default `protocol_handlers` of the options'
            configuration); AMQP 0-9-1 is served unless `handlers` names "amqp091" itself.
    """
    opener = open_core(options) if broker is None else _given(broker)
    wired = protocol_handlers(options.config, amqp091)
    provider = options.leader or static_provider(options.config.proxy)
    if provider is not None:
        # one provider for the relays and AMQP 1.0's failover list
        options = replace(options, leader=provider)
        wired["amqp10"] = amqp10_handler(failover=_failover_list(provider))
    _wire_shard_link(wired, options)
    if handlers is not None:
        wired = {"amqp091": wired["amqp091"], **handlers}
    srv = BrokerServer(
        options,
        opener,
        clock=clock,
        app_factory=management_app,
        handlers=wired,
        ticks=PROTOCOL_TICKS,
        refusers=PROTOCOL_REFUSERS,
    )
    if options.cluster is not None:
        srv.services.append(cluster_node(srv))
    return srv


def cluster_node(srv: BrokerServer) -> ClusterNode:
    """The `ClusterNode` of a server started with `options.cluster` (registered with the
    server's listener ports, read once they are open)."""
    settings = srv.options.cluster
    assert settings is not None
    assert settings.node_name
    address = settings.advertise or f"{srv.options.host}:{settings.cluster_port}"

    def record() -> NodeRecord:
        return NodeRecord(
            name=srv.node,
            address=address,
            amqp=_port(srv, "amqp"),
            http=_port(srv, "http") or _port(srv, "https"),
            stomp=_port(srv, "stomp"),
            mqtt=_port(srv, "mqtt"),
            stream=_port(srv, "stream"),
            web_stomp=_port(srv, "web-stomp"),
            web_mqtt=_port(srv, "web-mqtt"),
            web_amqp=_port(srv, "web-amqp"),
        )

    clock = srv.clock
    return ClusterNode(settings, record, lambda: int(clock.monotonic() * 1000))


def _port(srv: BrokerServer, protocol: str) -> int | None:
    try:
        return srv.port_of(protocol)
    except LookupError:
        return None


def _failover_list(provider: LeaderProvider) -> Callable[[], list[tuple[str, int]]]:
    def servers() -> list[tuple[str, int]]:
        return [(n.host, n.amqp_port) for n in provider.nodes() if n.amqp_port is not None]

    return servers


def _wire_shard_link(handlers: dict[str, HandlerFactory], options: ServerOptions) -> None:
    # internal, experimental: the owner side of the link between shards (docs/dev/shards.md),
    # on a single node and on a cluster's leader (a follower's empty broker owns no queues)
    if options.shard_link_port is not None and options.shard_link_secret:
        handlers["shard-link"] = shardlink_handler(options.shard_link_secret, options.shard_index)


def leader_server(options: ServerOptions, cluster: ClusterNode, leader: ViewLeader) -> BrokerServer:
    """A cluster leader's full server (`ringmq.server.member`): the node's store, protocols
    and management app, reporting `cluster` (which outlives the server). AMQP 1.0's open
    lists every node (`failover-server-list`), and PROXY headers from the cluster's nodes
    name the clients the followers relay; with `--shard-link-port`, the shard link's owner
    side serves there too."""
    handlers = protocol_handlers(options.config)
    handlers["amqp10"] = amqp10_handler(failover=_failover_list(leader))
    _wire_shard_link(handlers, options)
    srv = BrokerServer(
        options,
        open_core(options),
        app_factory=_app_of(cluster),
        handlers=handlers,
        ticks=PROTOCOL_TICKS,
        refusers=PROTOCOL_REFUSERS,  # a leader that no longer leads refuses in protocol terms
    )
    srv.trusted = TrustedPeers(options.config.proxy.proxy_protocol_from, leader.peer_hosts)
    return srv


def follower_server(
    options: ServerOptions, cluster: ClusterNode, leader: ViewLeader
) -> BrokerServer:
    """A cluster follower's server (`ringmq.server.member`): its client ports relay every
    connection to the leader (or refuse it, naming the leader, with `[cluster] proxy = false`;
    or close it while no leader is known), over an empty broker that serves nobody; its
    management port answers `/api/cluster` and `/api/nodes` and forwards the rest."""
    cfg = options.config
    opts = replace(options, replication=None, leader=leader)

    def empty(emit: Emit, now_ms: int) -> Core:
        return Core(Broker(broker_config(cfg), now_ms=now_ms))

    forward = LeaderForwarding(leader, redirect=not cfg.proxy.proxy)
    app = _app_of(cluster)

    def factory(server: BrokerServer) -> ASGIApp:
        forward.app = app(server)
        return forward

    srv = BrokerServer(
        opts,
        empty,
        app_factory=factory,
        handlers=protocol_handlers(cfg),
        ticks=PROTOCOL_TICKS,
        refusers=PROTOCOL_REFUSERS,
    )
    refuse = None if cfg.proxy.proxy else Refusals(srv.refusers)
    srv.gate = ProxyGate(leader, refuse, serve_unled=False)
    srv.relay_http = False
    srv.services.append(forward)
    return srv


def _app_of(cluster: ClusterNode) -> Callable[[BrokerServer], ASGIApp]:
    def factory(server: BrokerServer) -> ASGIApp:
        return management_app(server, cluster)

    return factory


def _given(broker: Broker) -> OpenCore:
    def open_(emit: Emit, now_ms: int) -> Core:
        return Core(broker)

    return open_


class BrokerThread(ServerThread):
    """A wired broker on its own event loop in a daemon thread (tests, embedding).

    `start()` returns once the listeners accept connections; `call(fn)` runs `fn` on the loop
    thread (the only thread allowed to touch the broker) and returns its result.
    """

    def __init__(
        self,
        options: ServerOptions,
        *,
        clock: Clock | None = None,
        broker: Broker | None = None,
        amqp091: Amqp091 | None = None,
        handlers: Mapping[str, HandlerFactory] | None = None,
    ) -> None:
        super().__init__(
            server(options, clock=clock, broker=broker, amqp091=amqp091, handlers=handlers)
        )


def run(options: ServerOptions) -> int:
    """Run a node in the foreground until SIGTERM/SIGINT; returns the exit status."""
    if options.replication is not None and options.replication.follow is not None:
        from ringmq.server.replication_follower import run_follower

        return run_follower(options)
    if options.cluster is not None:
        return run_member(options, leader_server, follower_server)
    return run_server(server(options))
