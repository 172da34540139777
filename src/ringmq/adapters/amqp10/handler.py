"""The AMQP 1.0 `Handler`: one client connection, its machine driven, the core called.

Theory of operation
-------------------
The server hands every byte of an AMQP 1.0 connection (from its protocol header on) to
`Amqp10Handler.receive_data`. The handler feeds the sans-IO machine
(`ringmq.amqp10.connection.Connection`), which answers the protocol's own steps and returns
events; each event that needs the broker is one core call (`_call`: the owner steps of
`links.Links` between `Calls.begin` and `Calls.end`, whose one rule says whether to dispatch
now, a run of transfers being a publish, and which writes the durable definitions), and its
effects are returned, in order, for the server to apply: the effects for this connection
come back through `apply` (deliveries become transfers, confirms become dispositions,
`Drained` a drain's echo, `CancelConsumer` a detach, `Block`/`Unblock` withhold link credit,
`CloseConnection` a close).

Login: SASL PLAIN checks ringmq's users through the shared throttle (`HandlerContext.login`),
then a slow backend (LDAP: `ask_slow_login`, answered later while SASL waits) if configured;
ANONYMOUS (and a client that skips SASL) logs in as the broker's anonymous login
(`BrokerConfig.anonymous_login`, the one setting of every protocol's anonymous clients), as
RabbitMQ 4 does (default guest/guest, which is loopback-only; None switches it off). The
open's hostname names the vhost as RabbitMQ reads it ("vhost:NAME"; anything else: "/").
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from typing import Any, Final

from ringmq.adapters.amqp10.errors import condition_of
from ringmq.adapters.amqp10.links import Links
from ringmq.adapters.handler import (
    HandlerContext,
    HandlerInfo,
    LoginThrottledError,
    SlowAnswer,
    ask_slow_login,
)
from ringmq.amqp10 import events as ev
from ringmq.amqp10.conditions import RESOURCE_LIMIT_EXCEEDED
from ringmq.amqp10.connection import Connection
from ringmq.amqp10.types import Int, Symbol
from ringmq.core.auth import ExternalGrant, Identity
from ringmq.core.certlogin import offers_external
from ringmq.core.effects import (
    Block,
    CancelConsumer,
    CloseChannel,
    CloseConnection,
    Confirm,
    Deliver,
    Drained,
    Effect,
    Unblock,
)
from ringmq.core.errors import BrokerError, Condition

log = logging.getLogger(__name__)

PROTOCOL: Final = "AMQP 1.0"
_MESSAGES: Final = (ev.MessagesReceived, ev.MessageReceived)
_ASKED: Final = "asked a slow login backend"
"""`_login`'s answer when a slow backend (LDAP) took the login: the outcome comes later."""
"""The events that publish (a tuple: its `in` tests by identity first)."""
DEFAULT_VHOST: Final = "/"


class Amqp10Handler:
    """One AMQP 1.0 client connection (see the module docstring)."""

    def __init__(self, ctx: HandlerContext, servers: Sequence[tuple[str, int]] = ()) -> None:
        self.ctx = ctx
        self.broker = ctx.broker
        self.conn_id = ctx.conn_id
        limits = ctx.limits
        self.conn = Connection(
            container_id=ctx.node,
            max_frame_size=limits.frame_max,
            channel_max=limits.channel_max,
            idle_timeout_ms=limits.heartbeat_s * 1000,
            max_message_size=limits.max_message_size,
            properties=open_properties(servers),
            message_runs=True,
            # EXTERNAL only where a verified client certificate may name the user (as
            # RabbitMQ's rabbit_auth_mechanism_ssl offers it)
            mechanisms=(
                ("EXTERNAL", "PLAIN", "ANONYMOUS")
                if ctx.peer.cert is not None and offers_external(ctx.broker.auth.cert_login)
                else ("PLAIN", "ANONYMOUS")
            ),
        )
        self.links = Links(self.broker, self.conn, self.conn_id)
        self.user = ""
        self.grant: ExternalGrant | None = None
        """The login's grant (a token's, LDAP's): this connection's alone."""
        self.vhost = ""
        self.mechanism = ""
        self.client_properties: dict[str, Any] = {}
        self._opened = False

    # ------------------------------------------------------------------ Handler
    @property
    def opened(self) -> bool:
        return self._opened

    @property
    def closed(self) -> bool:
        return self.conn.closed

    def data_to_send(self) -> bytes:
        return self.conn.data_to_send()

    def receive_data(self, data: bytes, now_ms: int) -> list[Effect]:
        return self._run(self.conn.receive_data(data), now_ms)

    def _run(self, events: list[ev.Event], now_ms: int) -> list[Effect]:
        # The machine's events in order, then what it held back behind them, until none.
        out: list[Effect] = []
        conn = self.conn
        while events:
            i = 0
            while i < len(events):
                e = events[i]
                i += 1
                try:
                    if type(e) in _MESSAGES:  # a run of messages: one core call
                        j = i
                        while j < len(events) and type(events[j]) in _MESSAGES:
                            j += 1
                        self._messages(events[i - 1 : j], now_ms, out)
                        i = j
                    else:
                        self._event(e, now_ms, out, events)
                except BrokerError as exc:
                    # A refusal no narrower scope answers: the connection closes with it.
                    conn.close(condition_of(exc.condition), exc.text)
            # frames held back behind an attach that is now answered
            events = conn.receive_data(b"")
        return out

    def _event(self, e: ev.Event, now_ms: int, out: list[Effect], events: list[ev.Event]) -> None:
        links = self.links
        match e:
            case ev.Settled():
                out += self._call(now_ms, links.settled, e, now_ms)
            case ev.CreditGranted():
                out += self._call(now_ms, links.credit, e)
            case ev.LinkAttaching():
                out += self._call(now_ms, links.attach, e, now_ms)
            case ev.LinkDetached():
                out += self._call(now_ms, links.detached, e.channel, e.handle, e.closed, now_ms)
            case ev.SessionBegun():
                if self._opened:
                    links.session_begun(e.channel, now_ms)
            case ev.SessionEnded():
                links.session_ended(e.channel, now_ms)
                if self._opened:
                    out += self.broker.channel_closed(self.conn_id, e.channel, now_ms)
            case ev.Authenticate():
                refused = self._login(e, now_ms)
                if refused is not _ASKED:  # else a slow backend answers (`_slow_answer`)
                    events += self.conn.sasl_outcome(refused is None, refused or "")
            case ev.Opened():
                self._open(e, now_ms)

    def _messages(self, batch: list[Any], now_ms: int, out: list[Effect]) -> None:
        out += self._call(now_ms, self.links.messages, batch, now_ms, publish=True)

    def _call(
        self, now_ms: int, step: Callable[..., None], *args: Any, publish: bool = False
    ) -> list[Effect]:
        # One core call made of owner steps (as adapters/amqp091 does); the core's rule says
        # when its queues are dispatched (a publish's may wait for the read batch). The plain
        # `begin` ... `end` / `abort` pair: dispositions may come one per message, where a
        # `with` block costs several times as much.
        calls = self.broker.calls
        out = calls.begin(now_ms)
        try:
            step(*args)
        except BaseException:
            calls.abort()
            raise
        calls.end(publish)
        return out

    def _login(self, e: ev.Authenticate, now_ms: int) -> str | None:
        # None: logged in; else why not (a client that skipped SASL reads it in the close)
        if e.mechanism == "PLAIN":
            parts = e.response.split(b"\x00")
            if len(parts) != 3:
                return "malformed SASL PLAIN response"
            user, password = (x.decode("utf-8", "replace") for x in parts[1:])
        elif e.mechanism == "EXTERNAL":
            user = password = ""  # the certificate names the user (`ctx.login`)
        elif e.mechanism == "ANONYMOUS" and self.broker.config.anonymous_login is not None:
            user, password = self.broker.config.anonymous_login
        else:
            return "anonymous logins are off: log in with SASL PLAIN"
        try:
            who = self.ctx.login(e.mechanism, user, password, now_ms)
        except BrokerError as exc:
            slow = not isinstance(exc, LoginThrottledError)
            if slow and ask_slow_login(
                self.ctx, e.mechanism, user, password, self._slow_answer(e.mechanism)
            ):
                return _ASKED  # SASL waits in SASL_CHECK; later bytes stay buffered
            log.info("AMQP 1.0 login refused for %r from %s: %s", user, self.ctx.peer.address, exc)
            return exc.text
        self.user, self.grant, self.mechanism = who.user, who.grant, e.mechanism
        return None

    def _slow_answer(self, mechanism: str) -> SlowAnswer:
        # A slow backend's (LDAP) answer, as a read of the connection: the SASL outcome, then
        # what the peer sent behind its login.
        def answer(who: Identity | None, why: str, now_ms: int) -> None:
            if who is not None:
                self.user, self.grant, self.mechanism = who.user, who.grant, mechanism
                outcome = self.conn.sasl_outcome(True)
            else:
                text = BrokerError(Condition.ACCESS_REFUSED, why).text
                log.info("AMQP 1.0 login refused from %s: %s", self.ctx.peer.address, text)
                outcome = self.conn.sasl_outcome(False, text)
            self.ctx.emit(self._run(outcome, now_ms))

        return answer

    def _open(self, e: ev.Opened, now_ms: int) -> None:
        host = e.hostname or ""
        self.vhost = host[len("vhost:") :] if host.startswith("vhost:") else DEFAULT_VHOST
        self.client_properties = {str(k): v for k, v in e.properties.items()}
        self.client_properties["container_id"] = e.container_id
        props = dict(self.client_properties)
        props["capabilities"] = {"consumer_cancel_notify": True}
        try:
            self.broker.connection_opened(
                self.conn_id,
                self.user,
                self.vhost,
                self.ctx.peer.address,
                props,
                now_ms,
                protocol="amqp10",
                grant=self.grant,
            )
        except BrokerError as exc:
            self.conn.close(condition_of(exc.condition), exc.text)
            return
        self._opened = True
        self.links.container_id = e.container_id

    def apply(self, effect: Effect) -> None:
        links = self.links
        if type(effect) is Deliver:  # one per message: no pattern matching on the way
            links.deliver(effect)
            return
        match effect:
            case Confirm():
                links.confirmed(
                    effect.channel, effect.seq, effect.multiple, effect.ok, effect.reason
                )
            case Drained():
                links.drained(effect.channel, effect.consumer_tag)
            case CancelConsumer():
                links.cancelled(effect.channel, effect.consumer_tag)
            case CloseChannel(consumer_tag=tag) if tag is not None:
                links.cancelled(effect.channel, tag, RESOURCE_LIMIT_EXCEEDED, effect.text)
            case Block():
                self.conn.pause_incoming(True)
            case Unblock():
                self.conn.pause_incoming(False)
            case CloseConnection():
                self.close(effect.condition, effect.text)
            case _:
                pass  # 0-9-1 only: returns, direct reply-to, adapter replies

    def tick(self, now_ms: int, mono_ms: int) -> list[Effect]:
        self.conn.tick(mono_ms)
        return []

    def close(self, condition: Condition, text: str) -> None:
        self.conn.close(condition_of(condition), text)

    def connection_lost(self, now_ms: int) -> list[Effect]:
        self.links.sessions.clear()
        if not self._opened:
            return []
        return self.broker.connection_closed(self.conn_id, now_ms)

    def info(self) -> HandlerInfo:
        conn = self.conn
        return HandlerInfo(
            protocol=PROTOCOL,
            user=self.user,
            vhost=self.vhost,
            auth_mechanism=self.mechanism,
            client_properties=dict(self.client_properties),
            channels=len(conn.sessions),
            heartbeat_s=conn.idle_timeout_ms // 1000,
            frame_max=conn.max_frame_size,
            channel_max=conn.channel_max,
        )


FAILOVER_SERVER_LIST: Final = Symbol("failover-server-list")


def open_properties(servers: Sequence[tuple[str, int]]) -> dict[Any, Any]:
    """The open frame's properties: the product, and the cluster's nodes when there are any as
    `failover-server-list`, the list of `{network-host, port}` maps Artemis sends and Qpid JMS
    reads (its `failover.amqpOpenServerListAction`, ADD by default, adds them to its pool)."""
    props: dict[Any, Any] = {"product": "ringmq"}
    if servers:
        props[FAILOVER_SERVER_LIST] = [
            {Symbol("network-host"): host, Symbol("port"): Int(port)} for host, port in servers
        ]
    return props


def factory(
    failover: Callable[[], Sequence[tuple[str, int]]] | None = None,
) -> Callable[[HandlerContext], Amqp10Handler]:
    """The `HandlerFactory` of AMQP 1.0 connections (`node.PROTOCOL_HANDLERS["amqp10"]`).

    Args:
        failover: the cluster's nodes' (host, AMQP port), asked at each connection, for the
            open frame's `failover-server-list` (None or empty: a single node, no list).
    """

    def make(ctx: HandlerContext) -> Amqp10Handler:
        return Amqp10Handler(ctx, failover() if failover is not None else ())

    return make
