"""The running broker: listeners, connections, timers, effects, management, config reload.

Theory of operation:

`BrokerServer` owns the pure `Broker` and every `AMQPConnection`, all on one event loop thread
(so the core needs no locks). Input flows

    socket bytes -> AMQPConnection.data_received -> ServerConnection.receive_data -> events
    -> Broker calls (with now_ms from the Clock) -> effects -> apply to the target connections

and output is *collected*: applying an effect only queues frames in the target's state machine
and marks it dirty. At the end of each batch (one read, one timer firing, one management call
hook) `_flush` writes every dirty connection once, so a publish fanned out to 100 consumers on
20 connections costs 20 writes, not 100.

Timers: one `loop.call_at` for the broker's `next_deadline_ms()` (TTL expiry, scheduled
messages, delayed exchanges), re-armed after every batch when the deadline changed; one sweep
per second (or per half heartbeat, whichever is shorter) for heartbeats, missed heartbeats
(2 intervals, as RabbitMQ) and the 10 s handshake timeout; one poll of the config file's mtime
when it asks for reloads (Artemis `configuration-file-refresh-period`).

Publishes in flight: each connection's `publish_check` runs the broker's exchange and write
permission checks when a publish method arrives, before its body (a refused publish buffers
nothing). The declared sizes of contents being received count toward the memory watermark
(`content_in_flight`, read by the memory monitor), and while an alarm is on a connection with
more than a frame of content in flight is blocked after its read, before the rest of the body
is read.

Publisher flow (RabbitMQ's credit flow, single-threaded): one thread both reads publishes and
writes deliveries, so a fast publisher can fill a consumed queue faster than the loop gets to
its consumers (their acks wait behind the publisher's reads) and the backlog grows until it
pages. After each read the runtime takes the broker's `take_flow()` requests and pauses reading
those publishers (`pause_reading("flow")`); after every batch a paused publisher reads again as
soon as `Broker.flow_settled(queue)`. A check every `FLOW_CHECK_S` releases a publisher whose
queue made no delivery for `FLOW_STALL_CHECKS` checks (its consumers are stalled: pausing
cannot help, and that queue asks for no flow again until it delivers) or that waited
`FLOW_MAX_PAUSE_S`, so a slow consumer throttles a publisher but never stops it. No
connection.blocked is sent (RabbitMQ's flow state is silent too).

Errors: `AMQPError`s raised by the broker become Channel.Close or Connection.Close on that
connection (soft/hard, as RabbitMQ). Any other exception is a bug: logged with its traceback,
that connection alone is closed with 541 INTERNAL_ERROR and the broker keeps serving.

Shutdown: stop accepting, send Connection.Close 320 CONNECTION_FORCED to every client, give them
a moment to answer, close the sockets, then stop the management server.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import importlib
import itertools
import logging
import os
import signal
import threading
import traceback
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final, TypeVar, assert_never

from ringmq.adapters.amqp091 import Amqp091, frame_of, reply_code
from ringmq.amqp.reply_codes import AMQPError, ReplyCode
from ringmq.core.effects import (
    Block,
    CancelConsumer,
    CloseConnection,
    Confirm,
    Deliver,
    DeliverReply,
    Effect,
    Return,
    SendContent,
    SendMethod,
    Unblock,
)
from ringmq.core.throttle import LoginGuard, LogLimiter
from ringmq.protocol import events as ev
from ringmq.protocol.connection import ServerConnection
from ringmq.protocol.handshake import TuneParams
from ringmq.server.clock import Clock, SystemClock
from ringmq.server.commit import GroupCommit
from ringmq.server.configfile import ConfigError, FileConfig, load_config
from ringmq.server.datadir import DataDirLock
from ringmq.server.httpserve import uvicorn_config
from ringmq.server.listener import (
    Listener,
    bind_http_socket,
    bind_socket,
    open_amqp_listener,
    tls_context,
)
from ringmq.server.memory import MemoryLimits, MemoryMonitor
from ringmq.server.setup import (
    apply_declarations,
    broker_config,
    build_broker,
    reload_settings,
    spill_directory,
)
from ringmq.server.transport import AMQPConnection

log = logging.getLogger(__name__)

_Command = ev.Command

_T = TypeVar("_T")

DEFAULT_HOST: Final = "127.0.0.1"
DEFAULT_AMQP_PORT: Final = 5672
DEFAULT_HTTP_PORT: Final = 15672
DEFAULT_DATA_DIR: Final = Path("./ringmq-data")
CLOSE_OK_TIMEOUT_S: Final = 3.0
"""A client that does not answer our Connection.Close within this time is disconnected."""
SHUTDOWN_GRACE_S: Final = 1.0
"""How long clients get to answer Connection.Close(320) before their sockets are closed."""


@dataclass(frozen=True, slots=True)
class ServerOptions:
    """Where and how to run.

    Attributes:
        host: address of every listener without its own (`*_bind`).
        amqp_port: AMQP port; 0 picks a free one; None: no plain AMQP listener (TLS only).
        http_port: management HTTP port; 0 picks a free one; None disables it.
        amqp_bind / amqps_bind / http_bind: the address of that listener (None: `host`).
        data_dir: directory for messages and definitions.
        config: the parsed configuration file (users, limits, declarations, TLS...).
        memory: memory high watermark, free-disk limit and per-queue paging bounds.
        node: node name reported to management.
    """

    host: str = DEFAULT_HOST
    amqp_port: int | None = DEFAULT_AMQP_PORT
    http_port: int | None = DEFAULT_HTTP_PORT
    amqp_bind: str | None = None
    amqps_bind: str | None = None
    http_bind: str | None = None
    data_dir: Path = DEFAULT_DATA_DIR
    config: FileConfig = field(default_factory=FileConfig)
    memory: MemoryLimits = field(default_factory=MemoryLimits)
    node: str = "ringmq@localhost"


def options_from(
    config: FileConfig,
    *,
    host: str | None = None,
    amqp_port: int | None = None,
    http_port: int | None = None,
    data_dir: Path | None = None,
    memory: MemoryLimits | None = None,
    amqp_bind: str | None = None,
    amqps_bind: str | None = None,
    http_bind: str | None = None,
) -> ServerOptions:
    """Command-line values win over the file's `[server]` table, which wins over defaults.

    An http_port of -1 (either source) disables the management listener, an amqp_port of -1
    the plain AMQP listener (only with TLS configured: some AMQP listener must remain).

    Raises:
        ConfigError: the plain AMQP listener is off and no `[tls]` is configured.
    """
    listen = config.listen
    http = http_port if http_port is not None else listen.http_port
    if http is None:
        http = DEFAULT_HTTP_PORT
    amqp = _first(amqp_port, listen.amqp_port, DEFAULT_AMQP_PORT)
    if amqp < 0 and config.tls is None:
        raise ConfigError("the plain AMQP listener is off (amqp_port off) but [tls] is not set")
    return ServerOptions(
        host=host or listen.host or DEFAULT_HOST,
        amqp_port=None if amqp < 0 else amqp,
        amqp_bind=amqp_bind or listen.amqp_bind,
        amqps_bind=amqps_bind or listen.amqps_bind,
        http_bind=http_bind or listen.http_bind,
        http_port=None if http < 0 else http,
        data_dir=data_dir or listen.data_dir or DEFAULT_DATA_DIR,
        config=config,
        memory=memory or MemoryLimits(),
    )


def _first(*values: int | None) -> int:
    for v in values:
        if v is not None:
            return v
    raise ValueError("no value")


FLOW_CHECK_S: Final = 0.02
"""How often paused publishers are checked for stalled consumers and the pause limit."""
FLOW_STALL_CHECKS: Final = 5
"""Consecutive checks without a delivery from the queue after which its consumers count as
stalled (100 ms: longer than a consumer process waits for a CPU on a busy machine)."""
FLOW_MAX_PAUSE_S: Final = 1.0
"""Longest one flow pause lasts, whatever the queue's consumers do."""


@dataclass(slots=True)
class _FlowHold:
    """Why a publisher is paused: the queue it fills and that queue's progress marks."""

    queue: Any
    since: float
    deliver_mark: int
    idle_checks: int = 0


@dataclass(slots=True)
class _Timer:
    handle: asyncio.TimerHandle | None = None
    due_ms: int | None = None

    def cancel(self) -> None:
        if self.handle is not None:
            self.handle.cancel()
        self.handle = None
        self.due_ms = None


class BrokerServer:
    """The asyncio server around the pure broker (see the module docstring).

    Typical use: `await BrokerServer(options).serve_forever()`; tests use `BrokerThread`.
    Implements management's `Runtime` port (`node`, `started_at_ms`, `connections()`,
    `close_connection()`, `listeners()`).
    """

    def __init__(
        self,
        options: ServerOptions,
        *,
        clock: Clock | None = None,
        broker: Any = None,
        amqp091: Any = None,
    ) -> None:
        self.options = options
        self.clock: Clock = clock or SystemClock()
        self.node = options.node
        self.started_at_ms = 0
        self.broker: Any = broker
        """The core `Broker`; built from the options at `start()` unless one is given."""
        self.amqp091: Any = amqp091
        """The AMQP 0-9-1 adapter over the broker (`adapters.amqp091.Amqp091`), made at
        `start()` unless one is given."""
        self._loop: asyncio.AbstractEventLoop | None = None
        self._conns: dict[int, AMQPConnection] = {}
        self._ids = itertools.count(1)
        self._dirty: set[AMQPConnection] = set()
        self._in_batch = 0
        self._flow_requests: dict[int, Any] = {}
        """The broker's `flow_requests` (same dict); empty unless a publisher outruns consumers."""
        self._flow_held: dict[AMQPConnection, _FlowHold] = {}
        self._flow_stalled: dict[int, tuple[Any, int]] = {}
        """id(queue) -> (queue, its deliver count when its consumers were found stalled)."""
        self._flow_handle: asyncio.TimerHandle | None = None
        self.flow_stats: dict[str, int] = {"paused": 0, "settled": 0, "stalled": 0, "timeout": 0}
        """Publisher flow pauses and how each ended (logged at shutdown)."""
        self._dispatch_pending: Callable[[int], list[Effect]] | None = None
        self._listeners: list[Listener] = []
        self._deadline = _Timer()
        self._sweep_handle: asyncio.TimerHandle | None = None
        self._reload_handle: asyncio.TimerHandle | None = None
        self._config_mtime: float | None = None
        self._http_server: Any = None
        self._http_task: asyncio.Task[None] | None = None
        self._stopping: asyncio.Event | None = None
        self._drained = asyncio.Event()
        self._stopped = False
        self._commit: GroupCommit | None = None
        """Group-commit fsync of the broker's store (None without a store)."""
        self.ready = threading.Event()
        self._data_lock: DataDirLock | None = None
        self.login_guard = LoginGuard()
        """Failed logins per source address (AMQP and management HTTP share it)."""
        self._max_conn_log = LogLimiter(10_000)
        self.memory: MemoryMonitor | None = None
        """Memory/disk monitor (watermark, alarms, paging bounds); set by `start()`."""
        """Set once every listener accepts connections (for threads waiting on start-up)."""

    # -- lifecycle -------------------------------------------------------------------------------

    @property
    def amqp_port(self) -> int:
        return self._port("amqp")

    @property
    def amqps_port(self) -> int:
        return self._port("amqp/ssl")

    @property
    def http_port(self) -> int:
        """The management port (HTTP or HTTPS)."""
        for lst in self._listeners:
            if lst.protocol in ("http", "https"):
                return lst.port
        raise LookupError("no http listener")

    def _port(self, protocol: str) -> int:
        for lst in self._listeners:
            if lst.protocol == protocol:
                return lst.port
        raise LookupError(f"no {protocol} listener")

    async def start(self) -> None:
        """Build the broker, apply the configuration, open listeners and timers."""
        self._loop = asyncio.get_running_loop()
        if self._stopping is None:
            self._stopping = asyncio.Event()
        opts = self.options
        cfg = opts.config
        self.started_at_ms = self.clock.wall_ms()
        # lock the data directory and bind the ports before the store is opened, so a start
        # that fails on either writes nothing into the directory
        amqp_pre = None
        if opts.amqp_port is not None:
            amqp_pre = bind_socket(
                opts.amqp_bind or opts.host,
                opts.amqp_port,
                "amqp",
                backlog=1024,
                option="--amqp-port",
            )
            self._listeners.append(amqp_pre)
        http_pre = None
        if opts.http_port is not None:
            http_pre = bind_http_socket(opts.http_bind or opts.host, opts.http_port)
            self._listeners.append(http_pre)
        self._data_lock = DataDirLock.acquire(opts.data_dir)
        if self.broker is None:
            self.broker = build_broker(broker_config(cfg), opts.data_dir, self.clock.wall_ms())
            # effects of admin calls (management, config reload) reach clients in one batch
            self.broker.admin.emit = self._emit
            apply_declarations(self.broker, cfg, self.clock.wall_ms())
        if self.amqp091 is None:
            self.amqp091 = Amqp091(self.broker)
        flow = getattr(self.broker, "flow_requests", None)
        if isinstance(flow, dict):
            self._flow_requests = flow
        if hasattr(self.broker, "dispatch_pending"):
            self.broker.defer_dispatch = True  # one dispatch per read batch (_on_events)
            self._dispatch_pending = self.broker.dispatch_pending
        durability = getattr(self.broker, "durability", None)
        if durability is not None and self._commit is None:
            self._commit = GroupCommit(
                self.broker,
                durability.store,
                self._loop,
                lambda fn: self.run_batch(lambda: self.apply_effects(fn())),
            )
        self._start_memory_monitor()

        if amqp_pre is not None:
            amqp = await open_amqp_listener(
                self._factory(tls=False),
                amqp_pre.host,
                amqp_pre.port,
                sock=amqp_pre.sock,
                now_ms=self._now_ms,
            )
            amqp_pre.sock = None  # the acceptor owns it now
            self._listeners.remove(amqp_pre)
            self._listeners.append(amqp)
            log.info("AMQP listening on %s:%d", amqp.host, amqp.port)
        else:
            log.info("plain AMQP listener off (TLS only)")
        if cfg.tls is not None:
            ctx = tls_context(cfg.tls)
            amqps = await open_amqp_listener(
                self._factory(tls=True),
                opts.amqps_bind or opts.host,
                cfg.tls.port,
                tls=ctx,
                now_ms=self._now_ms,
            )
            self._listeners.append(amqps)
            log.info("AMQPS listening on %s:%d", amqps.host, amqps.port)
        if http_pre is not None:
            await self._start_management(http_pre)

        self._arm_sweep()
        self._arm_deadline()
        if cfg.source is not None and cfg.refresh_period_ms:
            self._config_mtime = _mtime(cfg.source)
            self._arm_reload()
        self.ready.set()

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
        for lst in self._listeners:
            if lst.acceptor is not None:
                lst.close()
        for t in (self._sweep_handle, self._reload_handle, self._flow_handle):
            if t is not None:
                t.cancel()
        if self.memory is not None:
            self.memory.stop()
        self._deadline.cancel()
        conns = list(self._conns.values())
        with self._batch():
            for c in conns:
                self._close_connection(c, ReplyCode.CONNECTION_FORCED, reason)
        # give clients a moment to answer Close-Ok, then drop whatever is left
        if self._conns:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._drained.wait(), SHUTDOWN_GRACE_S)
        for c in list(self._conns.values()):
            c.abort()
            self._forget(c)
        if self._http_server is not None:
            self._http_server.should_exit = True
            if self._http_task is not None:
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await asyncio.wait_for(self._http_task, timeout=5)
        for lst in self._listeners:
            lst.close()
        if self._commit is not None:
            await self._commit.close()
        close = getattr(self.broker, "close", None)
        if callable(close):
            close()
        if self._data_lock is not None:
            self._data_lock.release()
        if self.flow_stats["paused"]:
            log.info(
                "publisher flow: %(paused)d pauses (%(settled)d drained, %(stalled)d stalled "
                "consumers, %(timeout)d at the limit)",
                self.flow_stats,
            )
        log.info("stopped")

    def _start_memory_monitor(self) -> None:
        # Paging under <data-dir>/paging (wiped: paged data is transient) and the periodic
        # memory/disk check that tightens queue heads and raises alarms.
        if self.memory is not None or not hasattr(self.broker, "memory_held_bytes"):
            return
        assert self._loop is not None
        lim = self.options.memory
        data_dir = self.options.data_dir
        # One paging directory and one disk-health source, whether or not live paging is on:
        # a recovered backlog pages there too.
        spill = spill_directory(self.broker, data_dir / "paging")
        if lim.paging:
            self.broker.enable_paging(spill, lim.head_count, lim.head_bytes, spill.body_store)
        self.memory = MemoryMonitor(
            self.broker,
            lim,
            data_dir,
            self._emit,
            paging_health=spill.health,
            in_flight=self.content_in_flight,
        )
        self.memory.start(self._loop)
        log.info(
            "memory high watermark %d bytes, free disk limit %d bytes, queue head %d / %d bytes",
            self.memory.governor.watermark_bytes,
            lim.disk_free_limit,
            lim.head_count,
            lim.head_bytes,
        )

    # -- management ----------------------------------------------------------------------------

    async def _start_management(self, lst: Listener) -> None:
        try:
            mod = importlib.import_module("ringmq.management.app")
        except ImportError:
            mod = None
        create_app = getattr(mod, "create_app", None)
        if create_app is None:
            log.info("management API not available (ringmq.management.app.create_app missing)")
            return
        import uvicorn

        tls = self.options.config.tls
        https = tls if tls is not None and tls.https else None
        if https is not None:
            lst.protocol = "https"
        app = create_app(self.broker, self)
        timeout_s = self.options.config.limits.handshake_timeout_ms / 1000
        server = uvicorn.Server(uvicorn_config(app, request_timeout_s=timeout_s, tls=https))
        self._http_server = server
        assert lst.sock is not None
        self._http_task = asyncio.create_task(self._serve_http(server, lst))
        log.info("%s listening on %s:%d", lst.protocol.upper(), lst.host, lst.port)

    async def _serve_http(self, server: Any, lst: Listener) -> None:
        # `_serve` skips uvicorn's own signal capture, which would swallow SIGINT/SIGTERM meant
        # for the whole broker; the broker stops uvicorn itself (should_exit) on shutdown.
        serve = getattr(server, "_serve", None) or server.serve
        try:
            await serve(sockets=[lst.sock])
        except Exception:
            log.exception("management server failed")

    # -- Runtime port (management) ----------------------------------------------------------------

    def connections(self) -> list[Any]:
        from ringmq.management.port import ConnectionInfo

        out = []
        for c in self._conns.values():
            if not c.opened:
                continue
            out.append(
                ConnectionInfo(
                    conn_id=c.conn_id,
                    name=c.name,
                    user=c.user,
                    vhost=c.vhost,
                    peer_host=c.peer[0],
                    peer_port=c.peer[1],
                    host=c.sock_name[0],
                    port=c.sock_name[1],
                    connected_at_ms=c.connected_at_ms,
                    state="closing"
                    if c.closing
                    else "blocked"
                    if c.blocked_reason
                    else "flow"  # RabbitMQ's name for a publisher held by credit flow
                    if c in self._flow_held
                    else "running",
                    blocked_reason=c.blocked_reason,
                    channels=c.channels,
                    client_properties=c.client_properties,
                    recv_oct=c.recv_oct,
                    send_oct=c.send_oct,
                    heartbeat_s=c.proto.heartbeat_s,
                    frame_max=c.proto.frame_max,
                    channel_max=c.proto.channel_max,
                    auth_mechanism=c.auth_mechanism,
                )
            )
        return out

    def close_connection(self, name: str, reason: str) -> bool:
        for c in list(self._conns.values()):
            if c.name == name:
                with self._batch():
                    self._close_connection(c, ReplyCode.CONNECTION_FORCED, reason)
                return True
        return False

    def listeners(self) -> list[Any]:
        from ringmq.management.port import ListenerInfo

        return [ListenerInfo(lst.protocol, lst.host, lst.port) for lst in self._listeners]

    def _emit(self, effects: list[Effect]) -> None:
        with self._batch():
            self.apply_effects(effects)

    def run_batch(self, fn: Callable[[], _T]) -> _T:
        """Run `fn` (a core call made outside a client read, e.g. by management) as a batch.

        Effects it returns through `apply_effects` are flushed when it completes.
        """
        with self._batch():
            return fn()

    async def until_durable(self) -> None:
        """Return once an fsync covers every store write made so far (no store: at once).

        Raises:
            OSError: the store could not write or sync them (server/commit.py).
        """
        if self._commit is not None:
            await self._commit.until_durable()

    # -- connections ---------------------------------------------------------------------------

    def _factory(self, *, tls: bool) -> Callable[[], asyncio.Protocol]:
        def make() -> asyncio.Protocol:
            return AMQPConnection(self, next(self._ids), tls=tls)

        return make

    def new_protocol_connection(self) -> ServerConnection:
        limits = self.options.config.limits
        return ServerConnection(
            TuneParams(
                channel_max=limits.channel_max,
                frame_max=limits.frame_max,
                heartbeat_s=limits.heartbeat_s,
            ),
            max_message_size=limits.max_message_size,
        )

    def connection_made(self, c: AMQPConnection) -> None:
        limits = self.options.config.limits
        if self._stopped or (
            limits.max_connections is not None and len(self._conns) >= limits.max_connections
        ):
            if not self._stopped and self._max_conn_log.admit(self._now_ms()) is not None:
                log.warning(
                    "refused connection from %s:%d: max_connections (%d) reached",
                    c.peer[0],
                    c.peer[1],
                    limits.max_connections,
                )
            c.abort()
            return
        self._conns[c.conn_id] = c
        c.connected_at_ms = self.clock.wall_ms()
        c.connected_mono = self.clock.monotonic()
        check = self.amqp091.check_publish
        conn_id = c.conn_id
        c.proto.publish_check = lambda ch, method: check(conn_id, ch, method)

    def content_in_flight(self) -> int:
        """Body bytes of the contents being received, for the memory watermark.

        A connection that reads counts the declared sizes (what it is about to make the broker
        hold); a paused one (blocked, flow) only the bytes it sent so far, since no more arrive
        until it reads again. Otherwise an alarm raised by declared sizes alone would hold its
        own cause blocked forever.
        """
        return sum(
            c.proto.content_received if c.reading_paused else c.proto.content_in_flight
            for c in self._conns.values()
        )

    def data_received(self, c: AMQPConnection, data: bytes) -> None:
        # `_batch()` written out: this runs once per socket read, the generator costs show.
        self._in_batch += 1
        try:
            self._on_events(c, c.proto.receive_data(data))
            if self._flow_requests:
                self._pause_publishers()
            in_flight = c.proto.content_in_flight
            if in_flight > c.proto.frame_max:
                # a large body on its way: when a new one was announced, measure now (declared
                # sizes may cross the watermark before the next periodic check); while an
                # alarm is on stop reading it (RabbitMQ blocks at the publish method). A body
                # of one frame at most completes with its next frame and blocks then.
                if in_flight > c.in_flight_seen and self.memory is not None:
                    self.memory.check_in_flight()
                if getattr(self.broker, "alarms", None):
                    self.apply_effects(self.broker.block_for_alarms(c.conn_id))
            c.in_flight_seen = in_flight
        except Exception:  # noqa: BLE001 - a bug must cost one connection, not the broker
            self._internal_error(c)
        finally:
            self._in_batch -= 1
            if self._in_batch == 0:
                self._flush()
                self._arm_deadline()

    def connection_lost(self, c: AMQPConnection, exc: Exception | None) -> None:
        if exc is not None:
            log.debug("connection %s lost: %s", c.name, exc)
        with self._batch():
            self._forget(c)

    def writable_changed(self, c: AMQPConnection, writable: bool) -> None:
        if not c.opened or c.closing:
            return
        with self._batch():
            try:
                self.apply_effects(self.broker.set_writable(c.conn_id, writable, self._now_ms()))
            except Exception:  # noqa: BLE001 - see data_received
                self._internal_error(c)

    # -- publisher flow (see the module docstring) ------------------------------------------------

    def _pause_publishers(self) -> None:
        mono = self.clock.monotonic()
        stalled = self._flow_stalled
        for conn_id, q in self.broker.take_flow():
            c = self._conns.get(conn_id)
            if c is None or c.closing or c in self._flow_held:
                continue
            mark = stalled.get(id(q))
            if mark is not None:
                if mark[0] is q and mark[1] == q.deliver:
                    continue  # its consumers were stalled and still are
                del stalled[id(q)]
            self._flow_held[c] = _FlowHold(q, mono, q.deliver)
            self.flow_stats["paused"] += 1
            c.pause_reading("flow")
        if self._flow_held and self._flow_handle is None and self._loop is not None:
            self._flow_handle = self._loop.call_later(FLOW_CHECK_S, self._flow_check)

    def _release_settled(self) -> None:
        # After every batch: reopen publishers whose queue drained (cheap: few are paused).
        settled = self.broker.flow_settled
        done = [c for c, hold in self._flow_held.items() if settled(hold.queue)]
        if done:
            mono = self.clock.monotonic()
            self.flow_stats["settled"] += len(done)
            for c in done:
                del self._flow_held[c]
                c.resume_reading(mono, reason="flow")

    def _flow_check(self) -> None:
        self._flow_handle = None
        mono = self.clock.monotonic()
        for c, hold in list(self._flow_held.items()):
            q = hold.queue
            if q.deliver == hold.deliver_mark:
                hold.idle_checks += 1
            else:
                hold.idle_checks = 0
            stalled = hold.idle_checks >= FLOW_STALL_CHECKS
            if stalled or mono - hold.since >= FLOW_MAX_PAUSE_S:
                self.flow_stats["stalled" if stalled else "timeout"] += 1
                if stalled:
                    self._flow_stalled[id(q)] = (q, q.deliver)
                del self._flow_held[c]
                c.resume_reading(mono, reason="flow")
            else:
                hold.deliver_mark = q.deliver
        for key, (q, _) in list(self._flow_stalled.items()):
            if q.deleted:
                del self._flow_stalled[key]
        if self._flow_held and not self._stopped and self._loop is not None:
            self._flow_handle = self._loop.call_later(FLOW_CHECK_S, self._flow_check)

    def _forget(self, c: AMQPConnection) -> None:
        self._flow_held.pop(c, None)
        if self._conns.pop(c.conn_id, None) is None:
            return
        if self._stopped and not self._conns:
            self._drained.set()
        self._dirty.discard(c)
        if c.opened:
            c.opened = False
            log.info(
                "connection closed: %s, user %r, vhost %r, name %r",
                c.name,
                c.user,
                c.vhost,
                _client_name(c.client_properties),
            )
            try:
                self.apply_effects(self.broker.connection_closed(c.conn_id, self._now_ms()))
            except Exception:
                log.exception("broker failed to clean up connection %s", c.name)

    # -- events -> broker -------------------------------------------------------------------------

    def _on_events(self, c: AMQPConnection, events: list[ev.Event]) -> None:
        # One clock read per read batch: every event of the batch happened "now".
        now = self._now_ms()
        handle = self.amqp091.handle
        conn_id = c.conn_id
        conns = self._conns
        # Commands parsed in the same read behind one that failed are dropped, as RabbitMQ
        # ignores everything after it sends Close: per channel for soft errors, all for hard.
        failed: set[int] = set()
        dead = False
        i = 0
        while i < len(events) and conn_id in conns:
            event = events[i]
            i += 1
            if type(event) is _Command:  # hot path: publish, ack, ...
                ch = event.channel
                if dead or ch in failed:
                    continue
                try:
                    effects = handle(conn_id, ch, event.method, event.content, now)
                except AMQPError as err:
                    c.proto.send_error(ch, err)
                    if err.is_hard or ch == 0:
                        dead = True
                    else:
                        failed.add(ch)
                    continue
                if effects:
                    self.apply_effects(effects)
                continue
            # accept_login()/accept_open() return the events of bytes pipelined behind
            # Start-Ok and Open; they join this batch, in order
            more = self._on_event(c, event, now)
            if more:
                events[i:i] = more
        if self._dispatch_pending is not None:
            effects = self._dispatch_pending(now)
            if effects:
                self.apply_effects(effects)
        self._dirty.add(c)

    def _on_event(self, c: AMQPConnection, event: ev.Event, now: int) -> list[ev.Event]:
        match event:
            case ev.Command():
                raise AssertionError("commands are handled by _on_events")
            case ev.LoginRequested():
                # repeated failures from this address: the check waits (core.throttle)
                delay = self.login_guard.before(c.peer[0], now)
                if delay is None:
                    c.proto.reject_login()
                    return []
                if delay and self._loop is not None:
                    c.login_delay_ms = delay
                    self._loop.call_later(delay / 1000, self._delayed_login, c, event)
                    return []  # the machine stays AUTHENTICATING; later bytes wait
                return self._login(c, event, now)
            case ev.OpenRequested(vhost=vhost):
                try:
                    self.amqp091.connection_opened(
                        c.conn_id, c.user, vhost, c.peer, c.client_properties, now
                    )
                except AMQPError as err:
                    c.proto.close(err.code, err.explanation, err.class_id, err.method_id)
                    return []
                c.opened = True
                c.vhost = vhost
                log.info(
                    "connection opened: %s, user %r, vhost %r, name %r",
                    c.name,
                    c.user,
                    vhost,
                    _client_name(c.client_properties),
                )
                return c.proto.accept_open()
            case ev.ChannelOpened(channel=ch):
                c.channels += 1
                self.apply_effects(self.broker.channel_opened(c.conn_id, ch, now))
            case ev.ChannelClosed(channel=ch):
                # client-initiated close, or its Close-Ok to ours: either way the broker
                # requeues the channel's unacked messages and drops its consumers now
                c.channels = max(0, c.channels - 1)
                self.apply_effects(self.broker.channel_closed(c.conn_id, ch, now))
            case ev.SecretUpdated():
                pass  # nothing here expires with a secret; Update-Secret-Ok is already queued
            case ev.ProtocolError(channel=ch, reply_code=code, reply_text=text):
                log.info("closing %s channel %d: %s", c.name, ch, text)
                if code == ReplyCode.INTERNAL_ERROR:
                    log.error("protocol layer internal error on %s", c.name)
            case ev.ConnectionClosed():
                c.close_transport()
                self._forget(c)
            case _:
                assert_never(event)
        return []

    def _login(self, c: AMQPConnection, event: ev.LoginRequested, now: int) -> list[ev.Event]:
        source = c.peer[0]
        try:
            user = self.amqp091.check_login(event.mechanism, event.response, c.peer_loopback)
        except AMQPError as err:
            self.login_guard.failed(source, event.username, "AMQP", err.explanation, now)
            c.proto.reject_login(err.explanation)
            return []
        self.login_guard.succeeded(source)
        c.user = user
        c.auth_mechanism = event.mechanism
        c.client_properties = dict(event.client_properties)
        return c.proto.accept_login()

    def _delayed_login(self, c: AMQPConnection, event: ev.LoginRequested) -> None:
        if c.closing or self._conns.get(c.conn_id) is not c:
            return  # the client gave up meanwhile
        with self._batch():
            try:
                more = self._login(c, event, self._now_ms())
                if more:
                    self._on_events(c, more)
            except Exception:  # noqa: BLE001 - see data_received
                self._internal_error(c)
            self._dirty.add(c)

    def _close_connection(self, c: AMQPConnection, code: int, text: str) -> None:
        """Server-initiated Connection.Close; `text` is the explanation (no code prefix)."""
        if c.closing:
            return
        if self._flow_held.pop(c, None) is not None:
            c.resume_reading(self.clock.monotonic(), reason="flow")  # read its Close-Ok
        c.proto.close(code, text)
        if c.closing_since is None:
            c.closing_since = self.clock.monotonic()
        self._dirty.add(c)

    def _internal_error(self, c: AMQPConnection) -> None:
        log.error("internal error on connection %s\n%s", c.name, traceback.format_exc())
        try:
            self._close_connection(c, ReplyCode.INTERNAL_ERROR, "internal error")
            c.close_transport()
        except Exception:
            log.exception("could not close %s cleanly", c.name)
            c.abort()
        self._forget(c)

    # -- effects -> connections ----------------------------------------------------------------

    def apply_effects(self, effects: Iterable[Effect]) -> None:
        """Queue the output of `effects` on their target connections (flushed at batch end)."""
        conns = self._conns
        dirty = self._dirty
        last_id = -1
        c: AMQPConnection | None = None
        for e in effects:
            if e.conn_id != last_id:  # runs of effects for one connection look it up once
                last_id = e.conn_id
                c = conns.get(last_id)
                if c is not None:
                    dirty.add(c)
            if c is None or c.closing:
                continue  # the target went away meanwhile; the broker learns it separately
            if type(e) is Deliver:
                # hot path: pre-encoded deliver header, no generic method encoding
                msg = e.message
                c.proto.send_deliver(
                    e.channel,
                    e.consumer_tag,
                    e.delivery_tag,
                    e.redelivered,
                    msg.exchange,
                    msg.routing_key,
                    msg.properties_bin,
                    msg.body,
                )
                continue
            match e:
                case SendContent(channel=ch, method=method, message=msg):
                    c.proto.send_content(ch, method, msg.properties_bin, msg.body)
                case Deliver():
                    raise AssertionError("handled above")
                case SendMethod(channel=ch, method=method):
                    c.proto.send_method(ch, method)
                case Confirm() | Return() | CancelConsumer() | DeliverReply():
                    frame = frame_of(e)
                    if type(frame) is SendMethod:
                        c.proto.send_method(frame.channel, frame.method)
                    elif type(frame) is SendContent:
                        msg = frame.message
                        c.proto.send_content(
                            frame.channel, frame.method, msg.properties_bin, msg.body
                        )
                case CloseConnection(condition=condition, text=text):
                    code = reply_code(condition)
                    self._close_connection(c, code, _explanation(code, text))
                case Block(reason=reason):
                    c.blocked_reason = reason
                    c.proto.send_blocked(reason)
                    c.pause_reading("block")
                case Unblock():
                    c.blocked_reason = None
                    c.proto.send_unblocked()
                    c.resume_reading(self.clock.monotonic(), reason="block")
                case _:
                    assert_never(e)
            dirty.add(c)

    @contextlib.contextmanager
    def _batch(self) -> Any:
        self._in_batch += 1
        try:
            yield
        finally:
            self._in_batch -= 1
            if self._in_batch == 0:
                self._flush()
                self._arm_deadline()

    def _flush(self) -> None:
        # End of a batch. Store first: its writes reach the OS before any reply that depends
        # on them, and the group fsync for held confirms starts (server/commit.py).
        if self._commit is not None:
            self._commit.after_batch()
        if self._flow_held:
            self._release_settled()
        dirty, self._dirty = self._dirty, set()
        for c in dirty:
            try:
                c.flush()
            except Exception:
                log.exception("write to %s failed", c.name)
                c.abort()

    def _now_ms(self) -> int:
        return self.clock.wall_ms()

    # -- timers ---------------------------------------------------------------------------------

    def _arm_deadline(self) -> None:
        if self._stopped or self.broker is None or self._loop is None:
            return
        due = self.broker.next_deadline_ms()
        if due == self._deadline.due_ms:
            return
        self._deadline.cancel()
        if due is None:
            return
        delay_s = max(0.0, (due - self._now_ms()) / 1000.0)
        self._deadline.due_ms = due
        self._deadline.handle = self._loop.call_at(self._loop.time() + delay_s, self._on_deadline)

    def _on_deadline(self) -> None:
        self._deadline.handle = None
        self._deadline.due_ms = None
        with self._batch():
            try:
                self.apply_effects(self.broker.tick(self._now_ms()))
            except Exception:
                log.exception("broker tick failed")

    def _sweep_period_s(self) -> float:
        # A client may negotiate heartbeats as short as 1 s; sending is due after half an
        # interval, so sweep twice a second whenever heartbeats can be on at all.
        return 0.5 if self.options.config.limits.heartbeat_s > 0 else 1.0

    def _arm_sweep(self) -> None:
        assert self._loop is not None
        self._sweep_handle = self._loop.call_later(self._sweep_period_s(), self._sweep)

    def _sweep(self) -> None:
        """Heartbeats, missed heartbeats and the handshake timeout."""
        mono = self.clock.monotonic()
        mono_ms = int(mono * 1000)
        handshake_s = self.options.config.limits.handshake_timeout_ms / 1000.0
        for lst in self._listeners:
            if lst.acceptor is not None:
                lst.acceptor.flush_log()  # what the refusal log's rate limit suppressed
        self.login_guard.flush_log(self._now_ms())
        with self._batch():
            for c in list(self._conns.values()):
                if c.closing:
                    continue
                try:
                    if not c.opened and mono - c.connected_mono > handshake_s:
                        log.info("handshake timeout on %s", c.name)
                        c.abort()
                        self._forget(c)
                        continue
                    # While blocked we do not read, so the client's heartbeats go unseen
                    # (RabbitMQ pauses its heartbeat monitor the same way); after resuming,
                    # give the client two intervals before judging it.
                    judged = not c.reading_paused and (
                        mono - c.read_resumed_mono >= 2 * c.proto.heartbeat_s
                    )
                    if judged and c.proto.peer_timed_out(mono_ms):
                        log.info("missed heartbeats from %s, closing", c.name)
                        c.abort()
                        self._forget(c)
                        continue
                    if c.closing_since is not None and mono - c.closing_since > CLOSE_OK_TIMEOUT_S:
                        c.abort()  # the client never answered our Connection.Close
                        self._forget(c)
                        continue
                    if c.proto.heartbeat_due(mono_ms):
                        c.proto.send_heartbeat()
                        self._dirty.add(c)
                except Exception:  # noqa: BLE001 - see data_received
                    self._internal_error(c)
        if self._commit is not None:
            self._commit.tick()
        if not self._stopped:
            self._arm_sweep()

    # -- config reload --------------------------------------------------------------------------

    def _arm_reload(self) -> None:
        assert self._loop is not None
        period = self.options.config.refresh_period_ms or 5000
        self._reload_handle = self._loop.call_later(period / 1000.0, self._check_reload)

    def _check_reload(self) -> None:
        src = self.options.config.source
        assert src is not None
        mtime = _mtime(src)
        if mtime is not None and mtime != self._config_mtime:
            self._config_mtime = mtime
            self.reload_config()
        if not self._stopped:
            self._arm_reload()

    def reload_config(self) -> bool:
        """Re-read the config file: replace address-settings, declare new queues/exchanges.

        Returns False (and keeps the running configuration) when the file is invalid.
        """
        src = self.options.config.source
        if src is None:
            return False
        try:
            new = load_config(src)
        except ConfigError as exc:
            log.error("configuration reload failed, keeping the running one: %s", exc)
            return False
        with self._batch():
            try:
                reload_settings(self.broker, new, self._now_ms())
            except (AMQPError, ValueError) as exc:
                # e.g. a queue redeclared with other arguments (406): what came before stays
                log.error("configuration reload stopped: %s", exc)
                return False
            except Exception:  # a reload must never take the broker down
                log.exception("configuration reload failed")
                return False
        log.info("configuration reloaded from %s", src)
        return True


def _explanation(code: int, text: str) -> str:
    # effects may carry a full RabbitMQ reply text; the protocol adds the "CODE_NAME - " prefix
    prefix = f"{ReplyCode(code).name} - "
    return text[len(prefix) :] if text.startswith(prefix) else text


def _client_name(props: dict[str, Any]) -> str | None:
    # the client-provided connection name (pika's client_properties["connection_name"])
    name = props.get("connection_name")
    if isinstance(name, bytes):
        return name.decode(errors="replace")
    return name if isinstance(name, str) else None


def _mtime(path: Path) -> float | None:
    try:
        return os.stat(path).st_mtime
    except OSError:
        return None


class BrokerThread:
    """A `BrokerServer` on its own event loop in a daemon thread (tests, embedding).

    `start()` returns once the listeners accept connections; `call(fn)` runs `fn` on the loop
    thread (the only thread allowed to touch the broker) and returns its result.
    """

    def __init__(
        self,
        options: ServerOptions,
        *,
        clock: Clock | None = None,
        broker: Any = None,
        amqp091: Any = None,
    ) -> None:
        self.server = BrokerServer(options, clock=clock, broker=broker, amqp091=amqp091)
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._error: BaseException | None = None

    @property
    def host(self) -> str:
        return self.server.options.host

    @property
    def port(self) -> int:
        """The plain AMQP port (LookupError when that listener is off)."""
        return self.server.amqp_port

    @property
    def broker(self) -> Any:
        return self.server.broker

    def start(self, timeout: float = 10.0) -> None:
        self._thread = threading.Thread(target=self._run, name="ringmq-broker", daemon=True)
        self._thread.start()
        if not self.server.ready.wait(timeout) or self._error is not None:
            raise RuntimeError("broker failed to start") from self._error

    def _run(self) -> None:
        loop = new_event_loop()
        self._loop = loop
        asyncio.set_event_loop(loop)
        try:
            loop.run_until_complete(self.server.serve_forever())
        except BaseException as exc:
            self._error = exc
            self.server.ready.set()
            raise
        finally:
            loop.close()

    def call(self, fn: Callable[[], _T], timeout: float = 10.0) -> _T:
        """Run `fn()` on the broker's loop thread as one batch and return its result."""
        assert self._loop is not None

        async def run() -> _T:
            return self.server.run_batch(fn)

        return asyncio.run_coroutine_threadsafe(run(), self._loop).result(timeout)

    def stop(self, timeout: float = 10.0) -> None:
        if self._loop is None or self._thread is None:
            return
        if self._thread.is_alive():
            with contextlib.suppress(RuntimeError):
                self._loop.call_soon_threadsafe(self.server.request_stop)
            self._thread.join(timeout)


def new_event_loop() -> asyncio.AbstractEventLoop:
    """uvloop when installed, else asyncio's default loop."""
    try:
        import uvloop
    except ImportError:
        return asyncio.new_event_loop()
    loop: asyncio.AbstractEventLoop = uvloop.new_event_loop()
    return loop


GC_THRESHOLDS: Final = (20_000, 20, 20)
"""Cyclic-GC thresholds of a serving process (CPython's default is 700, 10, 10).

Every message costs a few container allocations that reference counting frees, so the
default makes the collector run every ~100 messages and, with a backlog of live messages,
rescan the older generations often. Measured with the benchmark driver, scenario (f):
about 355 -> 230 us of broker CPU per published message; (a) about 47 -> 40.
"""


def tune_gc() -> None:
    """Collect cycles less often and never rescan what start-up created (`gc.freeze`)."""
    gc.collect()
    gc.freeze()
    gc.set_threshold(*GC_THRESHOLDS)


def run(options: ServerOptions) -> int:
    """Run the broker in the foreground until SIGTERM/SIGINT; returns the exit status."""
    tune_gc()
    server = BrokerServer(options)
    loop = new_event_loop()
    asyncio.set_event_loop(loop)
    try:
        loop.run_until_complete(server.serve_forever(install_signals=True))
    except (ConfigError, OSError, AMQPError, ValueError) as exc:
        # bad TLS files, a port in use, a declaration the core refuses, an invalid policy
        log.error("cannot start: %s", exc)
        return 1
    finally:
        loop.close()
    return 0
