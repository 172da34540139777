"""What the server asks of a client connection, whatever its protocol: the `Handler` seam.

Theory of operation: the server owns the socket; everything else about a connection of AMQP
0-9-1, AMQP 1.0, STOMP or MQTT is one `Handler`, sans-IO, made by that protocol's adapter for
each accepted socket (`HandlerFactory`). The composition root hands the server one table of
them by key (`ringmq.node.PROTOCOL_HANDLERS`); the server imports no codec and no adapter, only
this module. One driver (`server/handlers.py`) runs every protocol, all on the loop thread:

    socket bytes -> Handler.receive_data(data, now_ms) -> core calls -> effects (any connection)
    -> the server applies them: an effect for a Handler connection -> Handler.apply(effect)
       (a run of one connection's effects in one AppliesRuns.apply_run, when it has one)
    -> once per batch: Handler.data_to_send() -> one transport.write

* `receive_data` decodes, runs the protocol's machine and calls the core (the owners of
  `ringmq.core.broker.Broker`, as `adapters/amqp091` does, inside core calls: `Broker.call` or
  `Calls.begin` / `end`, the call protocol of `core/call.py`, which alone decides when dispatch
  runs); it returns the core's effects, in order, for every connection they concern (a
  publish may deliver to consumers elsewhere). The
  handler's own protocol replies are queued in its output directly, or come back through
  `apply` when they are core effects for this connection (its deliveries, confirms, ...): the
  server applies a call's effects in order, so replies and deliveries keep their order as long
  as the handler queues its direct replies before returning. A handler whose own replies
  interleave with core effects within one read (AMQP 0-9-1: a channel error after a publish
  that delivered) hands each call's effects to `HandlerContext.emit` as it goes instead, which
  applies them at once, and returns what is left (nothing).
* After each read batch the server calls `Broker.dispatch_pending(now_ms)` and applies what it
  returns (the server sets `defer_dispatch`, so a plain publish's dispatch waits for it), then
  pauses the publishers publisher flow asked for. A handler `closed` after a read is closed and
  released at once, before that dispatch (its output is written first).
* `tick` runs from the server's periodic sweep (twice a second): heartbeats and keep-alive,
  idle timeouts, anything the protocol times out. A peer gone silent is dropped with
  `Socket.abort()` (no flush: its buffer may never drain); the server then releases it. A
  handler that can tell when its `tick` next has work (`TickDeadline`) is ticked only then
  once it opened, so an idle connection costs nothing between its deadlines.
* `close` is a close the server starts (shutdown, an operator, a bug on this connection): queue
  the protocol's close or error frame. `closed` turns true once the handler wants the socket
  closed (after its close handshake, or at once for protocols without one): the server writes
  what `data_to_send` still has and closes the socket.
* `connection_lost` is the end, however it came: release the connection's core state
  (`Broker.connection_closed`, which requeues unsettled deliveries) and return the effects.
  It is called exactly once, and only for a handler whose `opened` was true at some point.
* Errors: a protocol error or a refused core call is answered in the protocol's own terms on
  this connection (AMQP 0-9-1 Channel.Close or Connection.Close, AMQP 1.0 error conditions, a
  STOMP ERROR frame, an MQTT reason code or disconnect) by the handler itself. An exception
  escaping a handler method is a defect: the server logs it, calls
  `close(Condition.INTERNAL_ERROR, ...)`, closes the socket and drops the connection; the
  broker keeps serving.
* Flow: `Block` / `Unblock` effects also pause and resume reading the socket (the server does
  that before handing the effect to `apply`); a handler with a way to tell its client (AMQP 1.0
  link credit) may do so in `apply`.

Logins go through `HandlerContext.login`, which applies the shared failed-login throttle
(`core.throttle.LoginGuard`, also used by the management API) and refuses a throttled address
at once. AMQP 0-9-1 delays the check instead (RabbitMQ's behaviour): it asks the guard itself
(`HandlerContext.login_guard`) and resumes the handshake through `HandlerContext.later`. A
password the quick backends refused may still pass a slow one (LDAP, asked off the loop):
`HandlerContext.slow_login` hands it over and answers later, as a read of the connection (only
AMQP 0-9-1 waits for it so far; STOMP, MQTT and AMQP 1.0 refuse an LDAP-only user, since their
CONNECT / SASL steps do not yet wait for an answer).

The rest of the context is for what only some protocols need: `socket` (whether the server
paused reading, for heartbeat judgement; `abort`), `check_in_flight` (a large body announced:
the memory monitor measures now), and the optional `InFlight.content_in_flight` a handler may
have (the declared sizes of contents being received, counted toward the memory watermark).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Final, Protocol

from ringmq.core.auth import Identity
from ringmq.core.effects import Block, CloseConnection, Effect, Unblock
from ringmq.core.errors import BrokerError, Condition

if TYPE_CHECKING:
    from ringmq.core.broker import Broker
    from ringmq.core.throttle import LoginGuard


@dataclass(frozen=True, slots=True)
class Peer:
    """Both ends of an accepted socket."""

    host: str
    port: int
    local_host: str
    local_port: int
    tls: bool = False
    cert: bytes | None = None
    """The client's certificate (DER), when TLS verified one: what SASL EXTERNAL and the
    STOMP/MQTT certificate logins take the user name from (`core.certlogin`)."""

    def cert_login(self, broker: Broker, protocol: str) -> bool:
        """Whether a login of `protocol` ("stomp", "mqtt") without credentials is one by this
        certificate (RabbitMQ's `stomp.ssl_cert_login`, `mqtt.ssl_cert_login`)."""
        how = broker.auth.cert_login
        return self.cert is not None and how is not None and bool(getattr(how, protocol))

    @property
    def address(self) -> str:
        """The client's "host:port" (what the core records as the connection's peer)."""
        return f"{self.host}:{self.port}"

    @property
    def name(self) -> str:
        """RabbitMQ's connection name: "peer_host:peer_port -> local_host:local_port"."""
        return f"{self.host}:{self.port} -> {self.local_host}:{self.local_port}"

    @property
    def loopback(self) -> bool:
        """The client connects from this machine (the default user is loopback-only)."""
        h = self.host
        return h.startswith("127.") or h in {"::1", "::ffff:127.0.0.1", "localhost"}


@dataclass(frozen=True, slots=True)
class HandlerLimits:
    """The configured connection limits a handler applies in its protocol's terms."""

    max_message_size: int
    """Largest message body accepted (bytes)."""
    frame_max: int
    """Largest frame the broker offers (AMQP 1.0 max-frame-size; STOMP/MQTT frame limit; the
    stream protocol's Tune, from its own setting)."""
    channel_max: int
    """Most sessions (AMQP 1.0 channel-max)."""
    heartbeat_s: int
    """The heartbeat / idle timeout the broker offers (0: off)."""


@dataclass(slots=True)
class HandlerInfo:
    """What management shows of a handler's connection (`/api/connections`)."""

    protocol: str
    """As RabbitMQ names it: "AMQP 1.0", "STOMP 1.2", "MQTT 3.1.1", "MQTT 5.0"."""
    user: str = ""
    vhost: str = ""
    auth_mechanism: str = ""
    client_properties: dict[str, Any] = field(default_factory=dict)
    """Client-provided properties; MQTT and STOMP put their client id under "client_id"."""
    channels: int = 0
    """Open sessions (AMQP 1.0 sessions; 1 for STOMP and MQTT once connected)."""
    heartbeat_s: int = 0
    frame_max: int = 0
    channel_max: int = 0


class Handler(Protocol):
    """One client connection, whatever its protocol (see the module docstring)."""

    @property
    def opened(self) -> bool:
        """True once the core knows the connection (`Broker.connection_opened` succeeded)."""

    @property
    def closed(self) -> bool:
        """True once the socket should be closed (after flushing `data_to_send`)."""

    def receive_data(self, data: bytes, now_ms: int) -> list[Effect]:
        """Take bytes read from the socket; return the core's effects (any connection)."""

    def apply(self, effect: Effect) -> None:
        """Queue the frames of a core effect for this connection."""

    def data_to_send(self) -> bytes:
        """Everything queued for the client since the last call (b"" when nothing)."""

    def tick(self, now_ms: int, mono_ms: int) -> list[Effect]:
        """The periodic sweep: heartbeats, keep-alive and timeouts (`mono_ms` is monotonic)."""

    def close(self, condition: Condition, text: str) -> None:
        """A close the server starts: queue the protocol's close/error frame."""

    def connection_lost(self, now_ms: int) -> list[Effect]:
        """The socket is gone: release the connection's core state; return the effects."""

    def info(self) -> HandlerInfo:
        """The connection as management shows it."""


SERVER_PART: Final = frozenset({Block, Unblock, CloseConnection})
"""The effects the server acts on itself before (or, for a close, instead of) the handler:
`Block` and `Unblock` pause and resume reading, `CloseConnection` closes. A run
(`AppliesRuns`) ends before one."""


class AppliesRuns(Protocol):
    """What a `Handler` may add: a run of effects in one call (the server uses it when there).

    A dispatch hands out a queue's messages consumer by consumer, so the effects for one
    connection come in runs; a handler whose protocol delivers at high rate (AMQP 0-9-1)
    takes a run in one call rather than a call per effect (one Python call is about 1% of a
    publish-deliver-ack cycle under callgrind, benchmarks/hotpath_bench.py). The handler finds
    the end of the run itself, in the loop that applies it: a test per effect it makes
    anyway, where a scan of the run ahead of it would be a second loop over the effects."""

    def apply_run(self, effects: Sequence[Effect], start: int) -> int:
        """Queue the frames of `effects[start:]`, in order, as `apply` on each would, up to
        the first that is for another connection or in `SERVER_PART`; return its index
        (`len(effects)` when there is none). `effects[start]` is this connection's and not in
        `SERVER_PART`."""


class TickDeadline(Protocol):
    """What a `Handler` may add: how long its `tick` will have nothing to do.

    Without it the server ticks an open connection every sweep; with it, only when this says
    (server/timers.py keeps the time in a timer wheel and asks again after each tick). The
    answer must hold while bytes come and go: they may only postpone the work (a keep-alive
    deadline moves later with every packet received, never earlier), so the server need not
    ask again after a read. A close the server starts puts the connection back on every sweep.
    """

    def tick_idle_ms(self, now_ms: int, mono_ms: int) -> int | None:
        """Milliseconds from now during which `tick` would do nothing (0: it may have work
        now); None: nothing at all while the connection stays as it is (no keep-alive)."""


class Socket(Protocol):
    """What a handler sees of its socket (the server's connection object)."""

    @property
    def reading_paused(self) -> bool:
        """The server stopped reading (a `Block`, publisher flow): the peer's bytes wait."""

    @property
    def read_resumed_mono(self) -> float:
        """When reading last resumed (monotonic seconds)."""

    def abort(self) -> None:
        """Drop the socket without flushing (a dead peer); the server then releases it."""


class InFlight(Protocol):
    """What a handler may also have: contents being received, for the memory watermark."""

    def content_in_flight(self, paused: bool) -> int:
        """Body bytes of the contents being received: the declared sizes while the socket is
        read, only the bytes received so far while it is `paused` (no more arrive until it
        reads again, so an alarm raised by declared sizes alone cannot hold its own cause)."""


Emit = Callable[[Iterable[Effect]], None]
"""`emit(effects)`: apply core effects now, in order (the server's `Connections.apply`)."""

Later = Callable[[int, Callable[[int], None]], None]
"""`later(delay_ms, fn)`: run `fn(now_ms)` on the loop thread after `delay_ms`, as a read of this
connection (what it emits is applied, the dispatch runs, its output is written), unless the
connection is gone by then."""


SlowAnswer = Callable[[Identity | None, str, int], None]
"""`answer(who, why, now_ms)`: the outcome of a slow login, run on the loop thread as a read of
the connection (what it emits is applied, the dispatch runs, its output is written), unless the
connection is gone by then: who it logged in (the user and the backend's grant, which the
connection opens with), or None and `why` it was refused."""

SlowLogin = Callable[[str, str, SlowAnswer], bool]
"""`slow_login(user, password, answer) -> taken`: hands a password login the quick backends
refused to a backend that blocks (LDAP, asked off the loop); True when it took it (then
`answer` is called exactly once, unless the connection is gone), False when it does not try
(it decides at once). The throttle's counting is the caller's: the backend only answers."""


def _no_emit(effects: Iterable[Effect]) -> None:
    raise RuntimeError("this handler's context has no emit (a server wires it)")


def _no_later(delay_ms: int, fn: Callable[[int], None]) -> None:
    raise RuntimeError("this handler's context has no timer (a server wires it)")


def _nothing() -> None:
    pass


def _no_batch_end(fn: Callable[[], bool]) -> None:
    raise RuntimeError("this handler's context has no batch end (a server wires it)")


Login = Callable[[str, str, str, int], Identity]
"""`login(mechanism, user, password, now_ms) -> who`: checks credentials through the shared
throttle; raises `BrokerError(ACCESS_REFUSED)` for bad credentials, a loopback-only user from
another host, or an address throttled after repeated failures. Mechanism "EXTERNAL" ignores
`user` and `password`: the peer's verified certificate names the user. `who.grant` (a token's,
LDAP's) belongs to this connection: the handler opens it with that grant
(`Broker.connection_opened(..., grant=who.grant)`)."""


@dataclass(slots=True)
class HandlerContext:
    """What a protocol adapter gets to build the handler of one accepted socket."""

    broker: Broker
    conn_id: int
    """The connection's id in the core (every effect for it carries it)."""
    peer: Peer
    limits: HandlerLimits
    login: Login
    node: str = "ringmq@localhost"
    """The node name (AMQP 1.0 container id, STOMP `server` header)."""
    emit: Emit = _no_emit
    """Applies effects at once, in order (see the module docstring)."""
    later: Later = _no_later
    """A timer of this connection (AMQP 0-9-1's delayed login)."""
    socket: Socket | None = None
    """The socket, once the server accepted it."""
    login_guard: LoginGuard | None = None
    """The shared failed-login throttle itself (for a protocol that delays, not refuses)."""
    check_in_flight: Callable[[], None] = _nothing
    """Asks the memory monitor to measure now (a large body was announced)."""
    slow_login: SlowLogin | None = None
    """The slow login backends (LDAP) when any is configured (None: none; see `SlowLogin`)."""
    at_batch_end: Callable[[Callable[[], bool]], None] = _no_batch_end
    """Registers `fn` to run at the end of every batch of the server, whichever connection's
    read or timer it was, while this connection lives; when it returns True the connection
    is written in that batch (the shard link's definitions feed: a change any client made
    goes to every following shard)."""


HandlerFactory = Callable[[HandlerContext], Handler]
"""Builds the handler of one accepted socket of a protocol."""

ProtocolTick = Callable[["Broker", int], list[Effect]]
"""`tick(broker, now_ms) -> effects`: a protocol's own periodic work that belongs to no
connection (MQTT's delayed wills, whose connection is gone), run by the server's sweep whether
or not any connection of that protocol is open."""


class LoginThrottledError(BrokerError):
    """`HandlerContext.login` refused the attempt unchecked: too many failed logins from the
    address (no slow backend is asked then)."""


def ask_slow_login(
    ctx: HandlerContext, mechanism: str, user: str, password: str, answer: SlowAnswer
) -> bool:
    """After `ctx.login` refused a password login (not a `LoginThrottledError` one), hand it to the
    slow backends (LDAP, `HandlerContext.slow_login`); True when one took it (`answer` comes
    later, as a read of the connection), False when none is configured or the login is not a
    password one. The quick refusal already counted one failure with the throttle; a login
    the slow backend accepts clears it, as any successful login does."""
    slow = ctx.slow_login
    if slow is None or mechanism == "EXTERNAL" or not password:
        return False
    guard, host = ctx.login_guard, ctx.peer.host

    def answered(who: Identity | None, why: str, now_ms: int) -> None:
        if who is not None and guard is not None:
            guard.succeeded(host)
        answer(who, why, now_ms)

    return slow(user, password, answered)


def make_login(broker: Broker, guard: LoginGuard, peer: Peer, protocol: str) -> Login:
    """The `HandlerContext.login` of a connection from `peer`, speaking `protocol`.

    Repeated failures from one address are throttled as for AMQP 0-9-1 and HTTP
    (`core.throttle.LoginGuard`); where AMQP 0-9-1 delays the check, the protocols behind a
    `Handler` refuse it at once ("too many failed logins, retry later"), so no handler waits.
    """

    def login(mechanism: str, user: str, password: str, now_ms: int) -> Identity:
        delay = guard.before(peer.host, now_ms)
        if delay is None or delay > 0:
            raise LoginThrottledError(
                Condition.ACCESS_REFUSED,
                f"too many failed logins from {peer.host}, retry later",
            )
        try:
            if mechanism == "EXTERNAL":
                who = Identity(broker.auth.login_external(peer.cert, peer.loopback).name)
            else:
                who = broker.auth.login_any(mechanism, user, password, peer.loopback, now_ms)
        except BrokerError as exc:
            guard.failed(peer.host, user, protocol, exc.explanation, now_ms)
            raise
        guard.succeeded(peer.host)
        return who

    return login
