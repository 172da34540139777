"""What a client's bytes become: protocol events turned into the broker's AMQP 0-9-1 calls.

Theory of operation: `Inbound` is the owner of every `AMQPConnection` (its `ConnectionHost`).
Input flows

    socket bytes -> AMQPConnection.data_received -> ServerConnection.receive_data -> events
    -> Broker calls (with now_ms from the Clock) -> effects -> Connections.apply

and the whole read is one batch of `Connections`, flushed (one write per connection) when it
ends. This module is the only place in the server that calls the broker's AMQP 0-9-1 handling:
`check_login`, `connection_opened`, `channel_opened`, `channel_closed`, `check_publish`,
`handle` and `connection_closed`; a protocol adapter in front of the core replaces these calls
here and nowhere else.

Publishes in flight: each connection's `publish_check` runs the broker's exchange and write
permission checks when a publish method arrives, before its body (a refused publish buffers
nothing). The declared sizes of contents being received count toward the memory watermark
(`Connections.content_in_flight`, read by the memory monitor), and while an alarm is on a
connection with more than a frame of content in flight is blocked after its read, before the
rest of the body is read. After each read the broker's publisher-flow requests pause the
publishers concerned (server/flow.py).

Publish runs: consecutive basic.publish commands of one read on one confirm channel, to one
exchange, none mandatory (`_publish_run`), go as one `Amqp091.publish_batch`: the core's batch
publish, which routes a run to one plain paging queue once (`core/ingest.py`) and publishes
anything else one message at a time through the same pipeline, with one coalesced ack
(`multiple`) where each publish would have had its own. Its errors close the channel as the
failing publish's would; a publish that blocks the connection ends the batch and the rest of
the run goes one by one. Anything else (a mandatory publish, another method, a transactional
or non-confirm channel, a lone publish) takes the per-command path. The run channels are
asked before each read and given to the connection (`ServerConnection.publish_runs`), whose
reader hands a run of whole publishes with one method frame over as one `PublishRun` (columns,
no command each): `_publish_columns` gives it to `Amqp091.publish_run` as it is.

Logins: repeated failures from one address delay the next credential check (`LoginGuard`,
shared with management's HTTP logins); the connection's machine waits in AUTHENTICATING, as it
does while a backend that blocks (LDAP) is asked in a worker thread (`slow_login`).

Errors: `AMQPError`s raised by the broker become Channel.Close or Connection.Close on that
connection (soft/hard, as RabbitMQ); commands parsed in the same read behind one that failed
are dropped. Any other exception is a bug: logged with its traceback, that connection alone is
closed with 541 INTERNAL_ERROR and the broker keeps serving.

Owned by the loop thread; no locks.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import traceback
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any, assert_never

from ringmq.adapters.amqp091 import Amqp091
from ringmq.amqp import spec
from ringmq.amqp.frames import RawContent
from ringmq.amqp.reply_codes import AMQPError, ReplyCode
from ringmq.core.certlogin import offers_external
from ringmq.core.errors import Condition
from ringmq.core.throttle import LoginGuard
from ringmq.protocol import events as ev
from ringmq.protocol.connection import ServerConnection
from ringmq.protocol.handshake import EXTERNAL, TuneParams
from ringmq.server.clock import Clock
from ringmq.server.configspec import LimitsSpec
from ringmq.server.connections import Connections
from ringmq.server.flow import PublisherFlow
from ringmq.server.transport import AMQPConnection

if TYPE_CHECKING:
    from ringmq.core.broker import Broker
    from ringmq.server.memory import MemoryMonitor

log = logging.getLogger(__name__)

_Command = ev.Command
_PublishRun = ev.PublishRun
_PUBLISH = spec.BasicPublish


class Inbound:
    """Connection events to broker calls (see the module docstring).

    Args:
        broker: the core broker.
        amqp091: the AMQP 0-9-1 adapter over it (the commands of 0-9-1 connections).
        clock: the server's clock.
        limits: the connection limits of the configuration.
        conns: the live connections and their output.
        flow: publisher flow.
        login_guard: failed logins per source address.
    """

    def __init__(
        self,
        broker: Broker,
        amqp091: Amqp091,
        clock: Clock,
        limits: LimitsSpec,
        conns: Connections,
        flow: PublisherFlow,
        login_guard: LoginGuard,
    ) -> None:
        self.broker = broker
        self.amqp091 = amqp091
        self.clock = clock
        self.limits = limits
        self.conns = conns
        self.flow = flow
        self.login_guard = login_guard
        self.memory: MemoryMonitor | None = None
        """The memory monitor, once the server started it (large bodies are measured at once)."""
        self.loop: asyncio.AbstractEventLoop | None = None
        """Set by the server once it runs (delayed logins need it)."""
        self.slow_login: Callable[[AMQPConnection, ev.LoginRequested], bool] | None = None
        """Tries a login the quick backends refused off the loop (LDAP, server/ldapauth.py):
        True when it took it; it answers through `login_done`."""
        self.ids: Iterator[int] = itertools.count(1)
        """Connection ids, shared with the other protocols' connections (`server.handlers`)."""
        self.publish_runs = True
        """Whether consecutive publishes of a read on a confirm channel go as one batch
        (False: each alone; the tests compare both)."""
        # one dispatch per read batch (on_events), bound once: the read path calls it per read
        broker.defer_dispatch = True
        self._dispatch_pending = broker.dispatch_pending

    def protocol_factory(self, *, tls: bool) -> Callable[[], asyncio.Protocol]:
        """What a listener calls for each accepted socket."""

        def make() -> asyncio.Protocol:
            return AMQPConnection(self, next(self.ids), tls=tls)

        return make

    def _now_ms(self) -> int:
        return self.clock.wall_ms()

    # -- ConnectionHost (called by AMQPConnection) -------------------------------------------------

    def new_protocol_connection(self) -> ServerConnection:
        limits = self.limits
        return ServerConnection(
            TuneParams(
                channel_max=limits.channel_max,
                frame_max=limits.frame_max,
                heartbeat_s=limits.heartbeat_s,
            ),
            max_message_size=limits.max_message_size,
        )

    def connection_made(self, c: AMQPConnection) -> None:
        if not self.conns.admit(c, self.limits):
            return
        if c.peer_cert is not None and offers_external(self.broker.auth.cert_login):
            c.proto.mechanisms = (*c.proto.mechanisms, EXTERNAL)
        check = self.amqp091.check_publish
        conn_id = c.conn_id
        c.proto.publish_check = lambda ch, method: check(conn_id, ch, method)

    def data_received(self, c: AMQPConnection, data: bytes) -> None:
        # `Connections.batch()` written out: this runs once per socket read, the generator
        # costs show.
        conns = self.conns
        conns.depth += 1
        try:
            # The channels whose publishes go as runs, asked once per read: the connection's
            # reader hands their runs of whole publishes over as columns (`PublishRun`).
            runs = self.amqp091.publish_run_channels(c.conn_id) if self.publish_runs else None
            c.proto.publish_runs = runs
            self.on_events(c, c.proto.receive_data(data), runs)
            if self.flow.requests:
                self.flow.pause()
            in_flight = c.proto.content_in_flight
            if in_flight > c.proto.frame_max:
                # a large body on its way: when a new one was announced, measure now (declared
                # sizes may cross the watermark before the next periodic check); while an
                # alarm is on stop reading it (RabbitMQ blocks at the publish method). A body
                # of one frame at most completes with its next frame and blocks then.
                if in_flight > c.in_flight_seen and self.memory is not None:
                    self.memory.check_in_flight()
                if self.broker.alarms:
                    conns.apply(self.broker.block_for_alarms(c.conn_id))
            c.in_flight_seen = in_flight
        except Exception:  # noqa: BLE001 - a bug must cost one connection, not the broker
            self.internal_error(c)
        finally:
            conns.depth -= 1
            if conns.depth == 0:
                conns.flush()

    def connection_lost(self, c: AMQPConnection, exc: Exception | None) -> None:
        if exc is not None:
            log.debug("connection %s lost: %s", c.name, exc)
        with self.conns.batch():
            self.forget(c)

    def writable_changed(self, c: AMQPConnection, writable: bool) -> None:
        if not c.opened or c.closing:
            return
        with self.conns.batch():
            try:
                self.conns.apply(self.broker.set_writable(c.conn_id, writable, self._now_ms()))
            except Exception:  # noqa: BLE001 - see data_received
                self.internal_error(c)

    # -- events -> broker --------------------------------------------------------------------------

    def on_events(
        self, c: AMQPConnection, events: list[ev.Event], runs: set[int] | bool | None = True
    ) -> None:
        """Hand one read's events to the broker and apply what it returns (inside a batch);
        `runs`: the connection's run channels when the caller asked already."""
        # One clock read per read batch: every event of the batch happened "now".
        now = self._now_ms()
        handle = self.amqp091.handle
        conn_id = c.conn_id
        table = self.conns.table
        apply = self.conns.apply
        # Commands parsed in the same read behind one that failed are dropped, as RabbitMQ
        # ignores everything after it sends Close: per channel for soft errors, all for hard.
        failed: set[int] = set()
        dead = False
        # Channels whose consecutive publishes go as runs (`_publish_run`; None: none, the
        # cheapest test per command): asked once per read and again after any event that is
        # not a command (a channel closed or opened); `solo` ends the events that go one by
        # one whatever.
        if runs is True:
            runs = self.amqp091.publish_run_channels(conn_id) if self.publish_runs else None
        assert runs is not False
        solo = 0
        i = 0
        while i < len(events) and conn_id in table:
            event = events[i]
            i += 1
            if type(event) is _Command:  # hot path: publish, ack, ...
                ch = event.channel
                if dead or ch in failed:
                    continue
                err: AMQPError | None = None
                if runs and ch in runs and i > solo and type(event.method) is _PUBLISH:
                    stop, err, solo = self._publish_run(c, events, i - 1, now)
                    if stop:
                        i = stop
                        if err is None:
                            continue
                if err is None:
                    try:
                        effects = handle(conn_id, ch, event.method, event.content, now)
                    except AMQPError as exc:
                        err = exc
                    else:
                        if effects:
                            apply(effects)
                        continue
                if self._refuse(c, ch, err):
                    dead = True
                else:
                    failed.add(ch)
                continue
            if type(event) is _PublishRun:  # a run of publishes as columns
                ch = event.channel
                if dead or ch in failed:
                    continue
                err, rest = self._publish_columns(c, event, runs, now)
                if rest:
                    # what the batch did not take goes one by one, as commands
                    events[i:i] = rest
                    solo = i + len(rest)
                if err is not None:
                    if self._refuse(c, ch, err):
                        dead = True
                    else:
                        failed.add(ch)
                continue
            # accept_login()/accept_open() return the events of bytes pipelined behind
            # Start-Ok and Open; they join this batch, in order
            more = self._on_event(c, event, now)
            if more:
                events[i:i] = more
            runs = self.amqp091.publish_run_channels(conn_id) if self.publish_runs else None
        effects = self._dispatch_pending(now)
        if effects:
            apply(effects)
        self.conns.dirty.add(c)

    def _publish_run(
        self, c: AMQPConnection, events: list[ev.Event], start: int, now: int
    ) -> tuple[int, AMQPError | None, int]:
        """The publishes from `events[start]` on, as one `Amqp091.publish_batch` when they
        make a run (module docstring); returns (the index after what was handled, or 0 when
        nothing was; the error that closes the channel or connection; `solo`)."""
        first = events[start]
        assert type(first) is _Command
        ch = first.channel
        method = first.method
        assert type(method) is _PUBLISH
        exchange = method.exchange
        rows: list[tuple[str, bytes, bytes]] = []
        n = len(events)
        j = start
        while j < n:
            e = events[j]
            if type(e) is not _Command or e.channel != ch:
                break
            m = e.method
            content = e.content
            if (
                type(m) is not _PUBLISH
                or m.exchange != exchange
                or m.mandatory
                or m.immediate
                or content is None
            ):
                break
            rows.append((m.routing_key, content.properties_bin, content.body))
            j += 1
        if len(rows) < 2:
            return 0, None, j  # one publish: the per-command step (which reports any error)
        done = self.amqp091.publish_batch(c.conn_id, ch, exchange, rows, 0, len(rows), now)
        if done.effects:
            self.conns.apply(done.effects)
        err = done.error
        if err is not None:
            assert isinstance(err, AMQPError)
            return j, err, 0
        if done.published < len(rows):
            # the batch stopped at a publish that blocked the connection: the rest of the run
            # goes one by one, as they would have
            return start + done.published, None, j
        return j, None, 0

    @staticmethod
    def _refuse(c: AMQPConnection, ch: int, err: AMQPError) -> bool:
        """Close channel `ch` or the connection for `err` (a run's or a command's error: one
        rule); True when it is the connection (what the read's later commands then meet)."""
        c.proto.send_error(ch, err)
        return err.is_hard or ch == 0

    def _publish_columns(
        self, c: AMQPConnection, run: ev.PublishRun, runs: set[int] | None, now: int
    ) -> tuple[AMQPError | None, list[ev.Event]]:
        """A `PublishRun` as one `Amqp091.publish_run` (the batch `_publish_run` makes of the
        same publishes as commands, with its columns as they are); returns (the error that
        closes the channel or connection; the publishes left to go one by one, as commands:
        those after one that blocked the connection, or all of them when the channel no
        longer takes runs)."""
        ch = run.channel
        method = run.method
        assert type(method) is _PUBLISH
        bodies = run.bodies
        n = len(bodies)
        done_n = 0
        if runs and ch in runs:
            done = self.amqp091.publish_run(
                c.conn_id, ch, method.exchange, method.routing_key, run.properties, bodies, now
            )
            if done.effects:
                self.conns.apply(done.effects)
            err = done.error
            if err is not None:
                assert isinstance(err, AMQPError)
                return err, []
            done_n = done.published
        props = run.properties
        return None, [
            _Command(ch, method, RawContent(60, len(bodies[k]), props[k], bodies[k]))
            for k in range(done_n, n)
        ]

    def _on_event(self, c: AMQPConnection, event: ev.Event, now: int) -> list[ev.Event]:
        broker = self.broker
        match event:
            case ev.Command() | ev.PublishRun():
                raise AssertionError("commands are handled by on_events")
            case ev.LoginRequested():
                # repeated failures from this address: the check waits (core.throttle)
                delay = self.login_guard.before(c.peer[0], now)
                if delay is None:
                    c.proto.reject_login()
                    return []
                if delay and self.loop is not None:
                    c.login_delay_ms = delay
                    self.loop.call_later(delay / 1000, self._delayed_login, c, event)
                    return []  # the machine stays AUTHENTICATING; later bytes wait
                return self._login(c, event, now)
            case ev.OpenRequested(vhost=vhost):
                try:
                    self.amqp091.connection_opened(
                        c.conn_id, c.user, vhost, c.peer_address, c.client_properties, now
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
                self.conns.apply(broker.channel_opened(c.conn_id, ch, now))
            case ev.ChannelClosed(channel=ch):
                # client-initiated close, or its Close-Ok to ours: either way the broker
                # requeues the channel's unacked messages and drops its consumers now
                c.channels = max(0, c.channels - 1)
                self.conns.apply(broker.channel_closed(c.conn_id, ch, now))
            case ev.SecretUpdated(new_secret=secret):
                # a fresh OAuth 2 token (RabbitMQ 3.11+); a refused one closes the connection
                try:
                    self.amqp091.update_secret(c.user, secret, now)
                except AMQPError as err:
                    c.proto.close(err.code, err.explanation, 10, 70)
            case ev.ProtocolError(channel=ch, reply_code=code, reply_text=text):
                log.info("closing %s channel %d: %s", c.name, ch, text)
                if code == ReplyCode.INTERNAL_ERROR:
                    log.error("protocol layer internal error on %s", c.name)
            case ev.ConnectionClosed():
                c.close_transport()
                self.forget(c)
            case _:
                assert_never(event)
        return []

    def _login(self, c: AMQPConnection, event: ev.LoginRequested, now: int) -> list[ev.Event]:
        try:
            user = self.amqp091.check_login(
                event.mechanism, event.response, c.peer_loopback, c.peer_cert, now
            )
        except AMQPError as err:
            if self.slow_login is not None and self.slow_login(c, event):
                return []  # asked off the loop (LDAP); it answers through login_done
            return self._login_refused(c, event, err.explanation, now)
        return self._login_accepted(c, event, user)

    def login_done(
        self, c: AMQPConnection, event: ev.LoginRequested, user: str | None, why: str
    ) -> None:
        """The answer of a login that was asked off the loop (`slow_login`): `user`, or None
        and `why` it was refused."""
        if c.closing or self.conns.table.get(c.conn_id) is not c:
            return  # the client gave up meanwhile
        with self.conns.batch():
            try:
                now = self._now_ms()
                if user is None:
                    self._login_refused(c, event, why, now)
                elif more := self._login_accepted(c, event, user):
                    self.on_events(c, more)
            except Exception:  # noqa: BLE001 - see data_received
                self.internal_error(c)
            self.conns.dirty.add(c)

    def _login_refused(
        self, c: AMQPConnection, event: ev.LoginRequested, why: str, now: int
    ) -> list[ev.Event]:
        self.login_guard.failed(c.peer[0], event.username, "AMQP", why, now)
        c.proto.reject_login(why)
        return []

    def _login_accepted(
        self, c: AMQPConnection, event: ev.LoginRequested, user: str
    ) -> list[ev.Event]:
        self.login_guard.succeeded(c.peer[0])
        c.user = user
        c.auth_mechanism = event.mechanism
        c.client_properties = dict(event.client_properties)
        return c.proto.accept_login()

    def _delayed_login(self, c: AMQPConnection, event: ev.LoginRequested) -> None:
        if c.closing or self.conns.table.get(c.conn_id) is not c:
            return  # the client gave up meanwhile
        with self.conns.batch():
            try:
                more = self._login(c, event, self._now_ms())
                if more:
                    self.on_events(c, more)
            except Exception:  # noqa: BLE001 - see data_received
                self.internal_error(c)
            self.conns.dirty.add(c)

    # -- the end of a connection -------------------------------------------------------------------

    def forget(self, c: AMQPConnection) -> None:
        """`c` is gone: drop it and let the broker clean up after it (inside a batch)."""
        if not self.conns.remove(c):
            return
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
                self.conns.apply(self.broker.connection_closed(c.conn_id, self._now_ms()))
            except Exception:
                log.exception("broker failed to clean up connection %s", c.name)

    def internal_error(self, c: AMQPConnection) -> None:
        """A bug while handling `c`: log it, close `c` alone with 541."""
        log.error("internal error on connection %s\n%s", c.name, traceback.format_exc())
        try:
            self.conns.close(c, Condition.INTERNAL_ERROR, "internal error")
            c.close_transport()
        except Exception:
            log.exception("could not close %s cleanly", c.name)
            c.abort()
        self.forget(c)


def _client_name(props: dict[str, Any]) -> str | None:
    # the client-provided connection name (pika's client_properties["connection_name"])
    name = props.get("connection_name")
    if isinstance(name, bytes):
        return name.decode(errors="replace")
    return name if isinstance(name, str) else None
