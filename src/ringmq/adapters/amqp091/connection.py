"""One AMQP 0-9-1 client connection behind the server's `Handler` seam.

Theory of operation: `Amqp091Handler` is to AMQP 0-9-1 what the other adapters' handlers are to
their protocols (`ringmq.adapters.handler`): the server's one connection driver hands it the
bytes of each read and gets the frames to write; everything 0-9-1 lives here:

    socket bytes -> receive_data -> ServerConnection.receive_data -> events
    -> Amqp091 calls (commands), Broker calls (channels, the connection) -> effects
    -> HandlerContext.emit (the server applies them at once: this connection's come back
       through `apply`, as frames) ... the server writes `data_to_send()` once per read.

Each command's effects are emitted as they come, not returned at the end of the read: a
channel error of a later command (`ServerConnection.send_error`) must follow the frames of the
commands before it, as when the server drove 0-9-1 itself.

Publishes in flight: `publish_check` runs the broker's exchange and write permission checks
when a publish method arrives, before its body (a refused publish buffers nothing). The
declared sizes of the contents being received count toward the memory watermark
(`content_in_flight`); once a read leaves more than a frame of content in flight, a new large
body has the memory monitor measure now (`HandlerContext.check_in_flight`) and, while an alarm
is on, the connection is blocked (`Broker.block_for_alarms`) before the rest of it is read.

Publish runs (`runs.py`): on the channels `Amqp091.publish_run_channels` names, asked before
each read, consecutive publishes of a read go to the core as one batch.

Logins: repeated failures from one address delay the next credential check (`LoginGuard`,
shared with management's HTTP logins; `HandlerContext.later` resumes it); the connection's
machine waits in AUTHENTICATING, as it does while a backend that blocks (LDAP) is asked off the
loop (`HandlerContext.slow_login`, for a PLAIN/AMQPLAIN password the quick backends refused; its
answer finishes the login, the throttle counting a refusal then). EXTERNAL is offered when TLS
verified the client's certificate and `[auth]` lists it (`core.certlogin`).

Errors: `AMQPError`s raised by the adapter become Channel.Close or Connection.Close on this
connection (soft/hard, as RabbitMQ); commands parsed in the same read behind one that failed
are dropped. Anything else escapes to the server, which closes this connection with 541.

Heartbeats (`tick`): sent when due; a peer silent for two intervals is dropped
(`Socket.abort`), except while the server does not read it (a `Block`, publisher flow) and
for two intervals after reading resumes (RabbitMQ pauses its heartbeat monitor the same way).

Owned by the loop thread; no locks.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from typing import Final, assert_never

from ringmq.adapters.amqp091.adapter import Amqp091
from ringmq.adapters.amqp091.errors import to_amqp
from ringmq.adapters.amqp091.frames import frame_of, reply_code
from ringmq.adapters.amqp091.runs import publish_columns, publish_rows
from ringmq.adapters.handler import SERVER_PART, HandlerContext, HandlerInfo, SlowAnswer
from ringmq.amqp import spec
from ringmq.amqp.reply_codes import AMQPError, ReplyCode
from ringmq.core.asks import DefinitionElsewhere
from ringmq.core.auth import ExternalGrant, Identity
from ringmq.core.broker import Broker
from ringmq.core.certlogin import offers_external
from ringmq.core.effects import (
    ActivateConsumer,
    Block,
    Bounce,
    CancelConsumer,
    CloseChannel,
    CloseConnection,
    Confirm,
    DefinitionAnswered,
    Deliver,
    DeliverReply,
    Drained,
    Effect,
    Reply,
    ReplyContent,
    Unblock,
)
from ringmq.core.errors import BrokerError, Condition
from ringmq.core.message import amqp091_content
from ringmq.protocol import events as ev
from ringmq.protocol.connection import ServerConnection
from ringmq.protocol.handshake import EXTERNAL, TuneParams

log = logging.getLogger(__name__)

PARKED_MAX: Final = 10_000
"""Events a connection may send while a command waits for shard 0 (a client waiting for its
declare-ok sends few; one that floods is closed)."""
PARKED_TEXT: Final = "too many commands while a declaration waits for shard 0"

PROTOCOL: Final = "AMQP 0-9-1"
"""How management names the protocol."""

PASSWORD_MECHANISMS: Final = frozenset({"PLAIN", "AMQPLAIN"})
"""The mechanisms whose password a slow backend (LDAP) may check."""

_Command = ev.Command
_PublishRun = ev.PublishRun
_PUBLISH = spec.BasicPublish
_Deliver = Deliver


class Amqp091Handler:
    """One AMQP 0-9-1 connection (see the module docstring).

    Args:
        ctx: what the server gives the connection (its broker, id, peer, limits, emit...).
        adapter: the 0-9-1 adapter over `ctx.broker` (its commands).
        publish_runs: whether consecutive publishes of a read go as one batch.
    """

    def __init__(self, ctx: HandlerContext, adapter: Amqp091, *, publish_runs: bool) -> None:
        self.ctx = ctx
        self.broker: Broker = ctx.broker
        self.amqp091 = adapter
        self.conn_id = ctx.conn_id
        self.publish_runs = publish_runs
        limits = ctx.limits
        self.proto = ServerConnection(
            TuneParams(
                channel_max=limits.channel_max,
                frame_max=limits.frame_max,
                heartbeat_s=limits.heartbeat_s,
            ),
            max_message_size=limits.max_message_size,
        )
        if ctx.peer.cert is not None and offers_external(ctx.broker.auth.cert_login):
            self.proto.mechanisms = (*self.proto.mechanisms, EXTERNAL)
        check = adapter.check_publish
        conn_id = self.conn_id
        self.proto.publish_check = lambda ch, method: check(conn_id, ch, method)
        self.data_to_send: Callable[[], bytes] = self.proto.data_to_send
        """`Handler.data_to_send`: the machine's own, bound once (the server asks after every
        read; a method of ours around it would be a Python call more)."""
        self.emit = ctx.emit
        self.user = ""
        self.grant: ExternalGrant | None = None
        """The login's grant (a token's, LDAP's): this connection's alone."""
        self.vhost = ""
        self.auth_mechanism = ""
        self.client_properties: dict[str, object] = {}
        self.channels = 0
        self.in_flight_seen = 0
        """`proto.content_in_flight` after the previous read (a rise: a new large body)."""
        self.login_delay_ms = 0
        """How long the login throttle held this connection's credential check (0: not)."""
        self.parked: list[ev.Event] | None = None
        """A command shard 0 makes (core/asks.py), first, and every later event of this
        connection, in order, until its answer (`DefinitionAnswered`)."""
        # `Handler.opened` / `closed` as plain attributes: the driver reads them after every
        # read and every flush (a property is a Python call each time).
        self.opened = False
        self.closed = False

    # -- Handler -----------------------------------------------------------------------------------

    def receive_data(self, data: bytes, now_ms: int) -> list[Effect]:
        # The channels whose publishes go as runs, asked once per read: the connection's
        # reader hands their runs of whole publishes over as columns (`PublishRun`).
        proto = self.proto
        runs = self.amqp091.publish_run_channels(self.conn_id) if self.publish_runs else None
        proto.publish_runs = runs
        self.on_events(proto.receive_data(data), now_ms, runs)
        in_flight = proto.content_in_flight
        if in_flight > proto.frame_max:
            # a large body on its way: when a new one was announced, measure now (declared
            # sizes may cross the watermark before the next periodic check); while an alarm is
            # on stop reading it (RabbitMQ blocks at the publish method). A body of one frame
            # at most completes with its next frame and blocks then.
            if in_flight > self.in_flight_seen:
                self.ctx.check_in_flight()
            if self.broker.alarms:
                self.emit(self.broker.block_for_alarms(self.conn_id))
        self.in_flight_seen = in_flight
        return []

    def content_in_flight(self, paused: bool) -> int:
        proto = self.proto
        return proto.content_received if paused else proto.content_in_flight

    def apply(self, e: Effect) -> None:
        if type(e) is _Deliver:
            self.apply_run((e,), 0)
        else:
            self._apply(e)

    def apply_run(self, effects: Sequence[Effect], start: int) -> int:
        # `apply` on each, in one call (`AppliesRuns`), up to the first effect for another
        # connection or the server's: a dispatch's deliveries to this connection's consumers
        # come as one run, so the deliver hot path is this loop: a pre-encoded deliver
        # header, no generic method encoding (a frame as small as can be).
        send_deliver = self.proto.send_deliver
        conn_id = self.conn_id
        for k in range(start, len(effects)):
            e = effects[k]
            if type(e) is not _Deliver:
                if e.conn_id != conn_id or type(e) in SERVER_PART:
                    return k
                self._apply(e)
                continue
            if e.conn_id != conn_id:
                return k
            msg = e.message
            pb, body = msg.properties_bin, msg.body
            if msg.form:  # another protocol's message: its 0-9-1 content, made once
                pb, body = amqp091_content(msg)
            send_deliver(
                e.channel,
                e.consumer_tag,
                e.delivery_id,
                e.redelivered,
                msg.exchange,
                msg.routing_key,
                pb,
                body,
            )
        return len(effects)

    def _apply(self, e: Effect) -> None:
        proto = self.proto
        match e:
            case ReplyContent(channel=ch, frame=method, message=msg):
                proto.send_content(ch, method, *amqp091_content(msg))
            case Deliver():
                raise AssertionError("handled above")
            case Reply(channel=ch, frame=method):
                proto.send_method(ch, method)
            case Confirm() | Bounce() | CancelConsumer() | DeliverReply():
                # the core's neutral effects, as this connection's protocol frames
                frame = frame_of(e)
                if type(frame) is Reply:
                    proto.send_method(frame.channel, frame.frame)
                elif type(frame) is ReplyContent:
                    proto.send_content(frame.channel, frame.frame, *amqp091_content(frame.message))
            case Drained() | ActivateConsumer():
                # link credit is AMQP 1.0's, activation the stream protocol's: never sent here
                pass
            case CloseChannel(channel=ch, condition=condition, text=text):
                # a consumer timeout: Channel.Close; its Close-Ok returns the rest
                proto.send_error(ch, AMQPError(reply_code(condition), text))
            case CloseConnection():
                pass  # the server closes (`close`) before handing it on
            case Block(reason=reason):
                proto.send_blocked(reason)
            case Unblock():
                proto.send_unblocked()
            case DefinitionAnswered():
                # the core is in a call: the parked commands run next, as a read
                self.ctx.later(0, lambda now_ms: self._unpark(e, now_ms))
            case _:
                assert_never(e)

    def tick(self, now_ms: int, mono_ms: int) -> list[Effect]:
        proto = self.proto
        sock = self.ctx.socket
        if sock is not None:
            # While blocked the server does not read, so the client's heartbeats go unseen;
            # after resuming, give the client two intervals before judging it.
            mono = mono_ms / 1000
            judged = not sock.reading_paused and (
                mono - sock.read_resumed_mono >= 2 * proto.heartbeat_s
            )
            if judged and proto.peer_timed_out(mono_ms):
                log.info("missed heartbeats from %s, closing", self.ctx.peer.name)
                sock.abort()
                return []
        if proto.heartbeat_due(mono_ms):
            proto.send_heartbeat()
        return []

    def close(self, condition: Condition, text: str) -> None:
        code = reply_code(condition)
        self.proto.close(code, _explanation(code, text))

    def connection_lost(self, now_ms: int) -> list[Effect]:
        self.closed = True
        return self.broker.connection_closed(self.conn_id, now_ms)

    def info(self) -> HandlerInfo:
        proto = self.proto
        return HandlerInfo(
            protocol=PROTOCOL,
            user=self.user,
            vhost=self.vhost,
            auth_mechanism=self.auth_mechanism,
            client_properties=self.client_properties,
            channels=self.channels,
            heartbeat_s=proto.heartbeat_s,
            frame_max=proto.frame_max,
            channel_max=proto.channel_max,
        )

    # -- events -> core ----------------------------------------------------------------------------

    def on_events(
        self,
        events: list[ev.Event],
        now: int,
        runs: set[int] | bool | None = True,
        refused: AMQPError | None = None,
    ) -> None:
        """Hand one read's events to the core and emit what it returns; `runs`: the
        connection's run channels when the caller asked already."""
        if self.parked is not None:  # a command waits for shard 0: the rest waits behind it
            self.parked += events
            if len(self.parked) > PARKED_MAX:
                self.parked = None
                self.proto.close(ReplyCode.RESOURCE_ERROR, PARKED_TEXT)
            return
        handle = self.amqp091.handle
        conn_id = self.conn_id
        emit = self.emit
        # Commands parsed in the same read behind one that failed are dropped, as RabbitMQ
        # ignores everything after it sends Close: per channel for soft errors, all for hard.
        failed: set[int] = set()
        dead = False
        if refused is not None:  # the parked command, refused by shard 0
            first = events[0]
            assert isinstance(first, ev.Command)
            if self._refuse(first.channel, refused):
                dead = True
            else:
                failed.add(first.channel)
            events = events[1:]
        # Channels whose consecutive publishes go as runs (`publish_rows`; None: none, the
        # cheapest test per command): asked once per read and again after any event that is
        # not a command (a channel closed or opened); `solo` ends the events that go one by
        # one whatever.
        if runs is True:
            runs = self.amqp091.publish_run_channels(conn_id) if self.publish_runs else None
        assert runs is not False
        solo = 0
        i = 0
        while i < len(events) and not self.closed:
            event = events[i]
            i += 1
            if type(event) is _Command:  # hot path: publish, ack, ...
                ch = event.channel
                if dead or ch in failed:
                    continue
                err: AMQPError | None = None
                if runs and ch in runs and i > solo and type(event.method) is _PUBLISH:
                    stop, err, solo = publish_rows(self.amqp091, conn_id, emit, events, i - 1, now)
                    if stop:
                        i = stop
                        if err is None:
                            continue
                if err is None:
                    try:
                        effects = handle(conn_id, ch, event.method, event.content, now)
                    except AMQPError as exc:
                        err = exc
                    except DefinitionElsewhere as asked:  # shard 0 makes it: park
                        self.parked = events[i - 1 :]
                        self.broker.ask_definition(conn_id, ch, asked.request)
                        return
                    else:
                        if effects:
                            emit(effects)
                        continue
                if self._refuse(ch, err):
                    dead = True
                else:
                    failed.add(ch)
                continue
            if type(event) is _PublishRun:  # a run of publishes as columns
                ch = event.channel
                if dead or ch in failed:
                    continue
                err, rest = publish_columns(self.amqp091, conn_id, emit, event, runs, now)
                if rest:
                    # what the batch did not take goes one by one, as commands
                    events[i:i] = rest
                    solo = i + len(rest)
                if err is not None:
                    if self._refuse(ch, err):
                        dead = True
                    else:
                        failed.add(ch)
                continue
            # accept_login()/accept_open() return the events of bytes pipelined behind
            # Start-Ok and Open; they join this batch, in order
            more = self._on_event(event, now)
            if more:
                events[i:i] = more
            runs = self.amqp091.publish_run_channels(conn_id) if self.publish_runs else None

    def _refuse(self, ch: int, err: AMQPError) -> bool:
        """Close channel `ch` or the connection for `err` (a run's or a command's error: one
        rule); True when it is the connection (what the read's later commands then meet)."""
        self.proto.send_error(ch, err)
        return err.is_hard or ch == 0

    def _on_event(self, event: ev.Event, now: int) -> list[ev.Event]:
        broker = self.broker
        proto = self.proto
        match event:
            case ev.Command() | ev.PublishRun():
                raise AssertionError("commands are handled by on_events")
            case ev.LoginRequested():
                # repeated failures from this address: the check waits (core.throttle)
                guard = self.ctx.login_guard
                delay = guard.before(self.ctx.peer.host, now) if guard is not None else 0
                if delay is None:
                    proto.reject_login()
                    return []
                if delay:
                    self.login_delay_ms = delay
                    self.ctx.later(delay, lambda now_ms: self._delayed_login(event, now_ms))
                    return []  # the machine stays AUTHENTICATING; later bytes wait
                return self._login(event, now)
            case ev.OpenRequested(vhost=vhost):
                try:
                    self.amqp091.connection_opened(
                        self.conn_id,
                        self.user,
                        vhost,
                        self.ctx.peer.address,
                        self.client_properties,
                        now,
                        self.grant,
                    )
                except AMQPError as err:
                    proto.close(err.code, err.explanation, err.class_id, err.method_id)
                    return []
                self.opened = True
                self.vhost = vhost
                return proto.accept_open()
            case ev.ChannelOpened(channel=ch):
                self.channels += 1
                self.emit(broker.channel_opened(self.conn_id, ch, now))
            case ev.ChannelClosed(channel=ch):
                # client-initiated close, or its Close-Ok to ours: either way the broker
                # requeues the channel's unacked messages and drops its consumers now
                self.channels = max(0, self.channels - 1)
                self.emit(broker.channel_closed(self.conn_id, ch, now))
            case ev.SecretUpdated(new_secret=secret):
                # a fresh OAuth 2 token (RabbitMQ 3.11+); a refused one closes the connection
                try:
                    self.amqp091.update_secret(self.conn_id, secret, now)
                except AMQPError as err:
                    proto.close(err.code, err.explanation, 10, 70)
            case ev.ProtocolError(channel=ch, reply_code=code, reply_text=text):
                log.info("closing %s channel %d: %s", self.ctx.peer.name, ch, text)
                if code == ReplyCode.INTERNAL_ERROR:
                    log.error("protocol layer internal error on %s", self.ctx.peer.name)
            case ev.ConnectionClosed():
                self.closed = True  # the server closes the socket and releases the connection
            case _:
                assert_never(event)
        return []

    def _unpark(self, answer: DefinitionAnswered, now: int) -> None:
        # Shard 0 answered the parked command: run it again (local now) and what waited
        # behind it, or refuse it with shard 0's error and run the rest.
        events = self.parked
        if events is None or self.closed:
            return
        self.parked = None
        refused = None
        if answer.condition is not None:
            first = events[0]
            assert isinstance(first, ev.Command)
            method = first.method
            refused = to_amqp(
                BrokerError(answer.condition, answer.text), method.CLASS_ID, method.METHOD_ID
            )
        self.on_events(events, now, refused=refused)

    def _login(self, event: ev.LoginRequested, now: int) -> list[ev.Event]:
        peer = self.ctx.peer
        try:
            who = self.amqp091.check_login(
                event.mechanism, event.response, peer.loopback, peer.cert, now
            )
        except AMQPError as err:
            slow = self.ctx.slow_login
            if (
                slow is not None
                and event.mechanism in PASSWORD_MECHANISMS
                and slow(event.username, event.password, self._slow_answer(event))
            ):
                return []  # asked off the loop (LDAP): the machine stays AUTHENTICATING
            return self._login_refused(event, err.explanation, now)
        return self._login_accepted(event, who)

    def _slow_answer(self, event: ev.LoginRequested) -> SlowAnswer:
        # `HandlerContext.slow_login`'s answer: the driver runs it as a read of this connection
        def answer(who: Identity | None, why: str, now: int) -> None:
            if self.closed:
                return
            more = (
                self._login_refused(event, why, now)
                if who is None
                else self._login_accepted(event, who)
            )
            if more:
                self.on_events(more, now)

        return answer

    def _login_refused(self, event: ev.LoginRequested, why: str, now: int) -> list[ev.Event]:
        guard = self.ctx.login_guard
        if guard is not None:
            guard.failed(self.ctx.peer.host, event.username, "AMQP", why, now)
        self.proto.reject_login(why)
        return []

    def _login_accepted(self, event: ev.LoginRequested, who: Identity) -> list[ev.Event]:
        guard = self.ctx.login_guard
        if guard is not None:
            guard.succeeded(self.ctx.peer.host)
        self.user, self.grant = who.user, who.grant
        self.auth_mechanism = event.mechanism
        self.client_properties = dict(event.client_properties)
        return self.proto.accept_login()

    def _delayed_login(self, event: ev.LoginRequested, now: int) -> None:
        more = self._login(event, now)
        if more:
            self.on_events(more, now)


def _explanation(code: int, text: str) -> str:
    # effects may carry a full RabbitMQ reply text; the protocol adds the "CODE_NAME - " prefix
    prefix = f"{ReplyCode(code).name} - "
    return text[len(prefix) :] if text.startswith(prefix) else text


class Amqp091Handlers:
    """The `HandlerFactory` of AMQP 0-9-1 (what the composition root registers).

    Args:
        adapter: the 0-9-1 adapter to serve through (a test double); None: one `Amqp091` per
            broker, made by the first connection.
    """

    def __init__(self, adapter: Amqp091 | None = None) -> None:
        self.given = adapter
        self.adapter = adapter
        self.publish_runs = True
        """Whether consecutive publishes of a read on a confirm channel go as one batch
        (False: each alone; the tests compare both)."""

    def __call__(self, ctx: HandlerContext) -> Amqp091Handler:
        adapter = self.given
        if adapter is None:
            adapter = self.adapter
            if adapter is None or adapter.broker is not ctx.broker:
                adapter = self.adapter = Amqp091(ctx.broker)
        return Amqp091Handler(ctx, adapter, publish_runs=self.publish_runs)
