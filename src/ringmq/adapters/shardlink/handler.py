"""The owner side of a shard link as a `Handler`: one link from an origin shard, served by the
broker that owns the queues.

Theory of operation
-------------------
`OwnerLinkHandler` drives a sans-IO `OwnerSession` (`ringmq.shardlink.owner`) over the socket
the server accepted on the shard link's listener (`--shard-link-port`, loopback only). The
origin speaks first; its `Hello` must carry the HMAC of the broker's shard-link secret, or
the session answers `Refuse` and the handler closes the socket (the core never hears of it).
Once `Opened`, the link is one core connection, as a user of its own (`LINK_USER`) whose grant
allows everything: the origin already checked its client's permissions, and the secret is
what admits the link. The connection opens in the default vhost (`LINK_VHOST`, which must
exist), but serves every vhost: each forward and each subscribe names its own, and an unknown
one is refused (404) for that forward or subscribe alone.

Each link event is one core call (`Calls.begin` ... `end`, `abort` when it raised), its
effects returned in order:

* `Received` -> `Forwards` (forwards.py): the entries enqueued into their queues, resolved by
  the core's confirms (`apply(Confirm)`).
* `FollowAsked` (no core call) -> `Followers` (definitions.py): the snapshot of this shard's
  definitions now, the changes at the end of every batch after.
* `AskReceived` -> `Broker.run_definition_request` on a session of the link's connection in
  the request's vhost (one per vhost, opened on first use): answered with the feed sequence
  of the change, or the refusal's code and text.
* `SubscribeAsked`, `CreditAdded`, `Settled`, `CancelAsked` -> `Consumers` (consumers.py),
  whose deliveries come back as `apply(Deliver)` and whose ends as `CancelConsumer` /
  `CloseChannel`. What cannot be done inside `apply` (release a stray delivery, close a
  consumer's core session) runs right after, as a read of the connection
  (`HandlerContext.later`).

The end: a `ProtocolError` (from the codec or the session) breaks the link: logged, the socket
closes, and the core state goes with the connection (`connection_lost`:
`Broker.connection_closed`, which requeues every unsettled delivery). `OwnerSession.lost()`
says what was unresolved: forwards the core may still store (the origin nacks them) and
deliveries the core requeues. A close the server starts (shutdown, an operator) sends
`Refuse` with its text first.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING, Final

from ringmq.adapters.handler import HandlerContext, HandlerInfo
from ringmq.adapters.shardlink.consumers import Consumers
from ringmq.adapters.shardlink.definitions import Followers
from ringmq.adapters.shardlink.forwards import Forwards
from ringmq.core.effects import CancelConsumer, CloseChannel, Confirm, Deliver, Effect
from ringmq.core.errors import BrokerError, Condition
from ringmq.shardlink.codec import ProtocolError, Refuse, encode
from ringmq.shardlink.codes import of_condition
from ringmq.shardlink.owner import (
    AskReceived,
    CancelAsked,
    Closed,
    CreditAdded,
    Event,
    FollowAsked,
    Opened,
    OwnerSession,
    Received,
    Settled,
    SubscribeAsked,
)

if TYPE_CHECKING:
    from ringmq.core.broker import Broker

log = logging.getLogger(__name__)

LINK_USER: Final = "ringmq-shard-link"
"""The user a link's core connection runs as (no such user logs in: `LinkGrant` answers)."""
LINK_VHOST: Final = "/"
"""The vhost a link's core connection opens in (its sessions open in any: `channel_opened`)."""
PUBLISH_CHANNEL: Final = 1
"""The core session of a link's forwards; consumers get the numbers after it."""
ASK_CHANNELS: Final = 1 << 30
"""The first core session of the origin's definition steps, one per vhost (consumers' numbers
never reach it)."""


@dataclass(frozen=True, slots=True)
class LinkGrant:
    """A link's permissions: all (`core.auth.ExternalGrant`). The origin checked its client's
    permissions before it forwarded; the link proved the broker's secret."""

    user: str = LINK_USER
    tags: tuple[str, ...] = ()
    expires_ms: int | None = None

    def allows_vhost(self, vhost: str) -> bool:
        return True

    def allows(self, access: str, vhost: str, name: str, kind: str = "queue") -> bool:
        return True

    def checks_topic(self, vhost: str, exchange: str) -> bool:
        return False

    def allows_topic(
        self, access: str, vhost: str, exchange: str, routing_key: str, client_id: str | None
    ) -> bool:
        return True


class _Live:
    """What an opened link holds: its forwards and its consumers."""

    __slots__ = ("consumers", "forwards")

    def __init__(self, forwards: Forwards, consumers: Consumers) -> None:
        self.forwards = forwards
        self.consumers = consumers


class OwnerLinkHandler:
    """One shard link, owner side (see the module docstring).

    Args:
        ctx: the accepted socket's context.
        secret: the HMAC secret the origin must prove.
        shard: this shard's index (what `Welcome` tells the origin).
        followers: the broker's links that follow its definitions (None: a link's `Follow`
            breaks it).
    """

    def __init__(
        self, ctx: HandlerContext, secret: bytes, shard: int = 0, followers: Followers | None = None
    ) -> None:
        self.ctx = ctx
        self.followers = followers
        self.broker: Broker = ctx.broker
        self.conn_id = ctx.conn_id
        self.session = OwnerSession(shard, secret)
        self.live: _Live | None = None
        self._closed = False
        self._released = False
        self._tidy_due = False  # a `later` that runs the consumers' housekeeping is armed
        self._extra: list[bytes] = []
        self._ask_channels: dict[str, int] = {}
        self.record = HandlerInfo(protocol="shard link")

    # ------------------------------------------------------------------ Handler
    @property
    def opened(self) -> bool:
        """True once the origin proved the secret and the core knows the link."""
        return self.live is not None

    @property
    def closed(self) -> bool:
        """True once the socket should be closed."""
        return self._closed

    def receive_data(self, data: bytes, now_ms: int) -> list[Effect]:
        """Run the link events the bytes complete; return the core's effects."""
        if self.closed:
            return []
        try:
            events = self.session.receive_data(data)
        except ProtocolError as exc:
            log.warning("shard link %s broken: %s", self.ctx.peer.name, exc)
            self._closed = True
            return self._release(now_ms)
        out: list[Effect] = []
        for ev in events:
            out += self._event(ev, now_ms)
            if self._closed:
                break
        live = self.live
        if live is not None and live.consumers.pending and not self._closed:
            out += live.consumers.housekeeping(now_ms)
        if self._closed:
            out += self._release(now_ms)
        return out

    def apply(self, effect: Effect) -> None:
        """A core effect for the link: a delivery, a confirm, a consumer's end."""
        live = self.live
        if live is None or self._closed:
            return  # the link is ending: `connection_lost` requeues what the core holds
        match effect:
            case Deliver():
                live.consumers.deliver(effect)
            case Confirm():
                if effect.channel == PUBLISH_CHANNEL:
                    live.forwards.confirmed(effect)
            case CancelConsumer():
                c = live.consumers.by_channel.get(effect.channel)
                where = f"'{c.queue}' in vhost '{c.vhost}'" if c is not None else "?"
                live.consumers.gone(effect.channel, f"queue {where} was deleted")
            case CloseChannel():  # a consumer timeout
                live.consumers.gone(effect.channel, effect.text)
            case _:
                pass  # Block / Unblock: the server pauses reading the link, which is enough
        if live.consumers.pending:
            self._tidy_later()

    def data_to_send(self) -> bytes:
        """The link's bytes to write."""
        out = self.session.data_to_send()
        if self._extra:
            out += b"".join(self._extra)
            self._extra.clear()
        return out

    def tick(self, now_ms: int, mono_ms: int) -> list[Effect]:
        """Nothing times out on a link (the origin's side watches it)."""
        return []

    def close(self, condition: Condition, text: str) -> None:
        """A close the server starts: `Refuse` with its text, then the socket closes."""
        if not self._closed and not self.session.closed:
            self._extra.append(encode(Refuse(f"{condition.label} - {text}")))
        self._closed = True

    def connection_lost(self, now_ms: int) -> list[Effect]:
        """The socket is gone: release the link's core state (unsettled deliveries go back)."""
        return self._release(now_ms)

    def info(self) -> HandlerInfo:
        """The link as management shows it."""
        return self.record

    # ------------------------------------------------------------------ events
    def _event(self, ev: Event, now_ms: int) -> list[Effect]:
        if isinstance(ev, Opened):
            return self._open(ev, now_ms)
        if isinstance(ev, Closed):
            if self.live is None:
                log.warning("shard link from %s refused: %s", self.ctx.peer.name, ev.reason)
            self._closed = True
            return []
        live = self.live
        assert live is not None  # the session yields nothing else before `Opened`
        if isinstance(ev, FollowAsked):
            self._follow()
            return []
        if isinstance(ev, AskReceived):
            return self._ask(ev, now_ms)
        calls = self.broker.calls
        out = calls.begin(now_ms)
        try:
            match ev:
                case Received():
                    live.forwards.received(ev, now_ms)
                case SubscribeAsked():
                    live.consumers.subscribe(ev, now_ms)
                case CreditAdded():
                    live.consumers.credit(ev)
                case Settled():
                    live.consumers.settled(ev, now_ms)
                case CancelAsked():
                    live.consumers.cancel(ev, now_ms)
        except BrokerError as exc:  # the core refused a step no link frame can answer
            calls.abort()
            log.warning("shard link %s: %s refused: %s", self.ctx.peer.name, ev, exc.text)
            self.close(exc.condition, exc.text)
            return out
        except BaseException:
            calls.abort()
            raise
        calls.end(publish=isinstance(ev, Received))
        return out

    def _open(self, ev: Opened, now_ms: int) -> list[Effect]:
        broker = self.broker
        # the capability makes the core tell a consumer whose queue went (`CancelConsumer`)
        props = {"origin_shard": ev.origin, "capabilities": {"consumer_cancel_notify": True}}
        try:
            broker.connection_opened(
                self.conn_id, LINK_USER, LINK_VHOST, self.ctx.peer.address, props, now_ms,
                protocol="shardlink", grant=LinkGrant(),
            )  # fmt: skip
        except BrokerError as exc:
            log.warning("shard link from %s not opened: %s", self.ctx.peer.name, exc.text)
            self.close(exc.condition, exc.text)
            return []
        out = broker.channel_opened(self.conn_id, PUBLISH_CHANNEL, now_ms)
        s = broker.session(self.conn_id, PUBLISH_CHANNEL)
        assert s is not None
        broker.confirms.select(s)
        session = self.session
        self.live = _Live(
            Forwards(broker, session, s),
            Consumers(broker, session, self.conn_id, PUBLISH_CHANNEL + 1),
        )
        self.record = HandlerInfo(
            protocol="shard link",
            user=LINK_USER,
            vhost=LINK_VHOST,
            client_properties=props,
            channels=1,
        )
        log.info("shard link from shard %d (%s) open", ev.origin, self.ctx.peer.name)
        return out

    def _follow(self) -> None:
        followers = self.followers
        if followers is None:
            self.close(Condition.NOT_IMPLEMENTED, "this link serves no definitions")
            return
        session = self.session
        followers.follow(session)
        self.ctx.at_batch_end(lambda: followers.send(session))
        log.info("shard link from shard %s follows the definitions", self.session.origin)

    def _ask(self, ev: AskReceived, now_ms: int) -> list[Effect]:
        # One definition step of the origin's client, made here (shard 0): answered with the
        # feed sequence of the change, or refused with the step's code
        broker = self.broker
        session = self.session
        out: list[Effect] = []
        try:
            channel = self._ask_channels.get(ev.request.vhost)
            if channel is None:
                channel = ASK_CHANNELS + len(self._ask_channels)
                out += broker.channel_opened(self.conn_id, channel, now_ms, vhost=ev.request.vhost)
                self._ask_channels[ev.request.vhost] = channel
            out += broker.run_definition_request(
                self.conn_id, channel, ev.request, origin=session.origin or 0, now_ms=now_ms
            )
        except BrokerError as exc:
            session.answer(ev.rid, 0, of_condition(exc.condition), exc.text)
            return out
        except (KeyError, TypeError, ValueError) as exc:  # a request without its fields
            log.warning("shard link %s: bad ask %r: %r", self.ctx.peer.name, ev.request, exc)
            session.answer(ev.rid, 0, of_condition(Condition.COMMAND_INVALID), f"bad ask: {exc}")
            return out
        session.answer(ev.rid, broker.definitions_seq())
        return out

    def _tidy_later(self) -> None:
        # stray deliveries and ended consumers' sessions need core calls, which `apply` may
        # not make: they run next, as a read of this connection
        if self._tidy_due:
            return
        self._tidy_due = True

        def tidy(now_ms: int) -> None:
            self._tidy_due = False
            live = self.live
            if live is not None and not self._released:
                self.ctx.emit(live.consumers.housekeeping(now_ms))

        self.ctx.later(0, tidy)

    def _release(self, now_ms: int) -> list[Effect]:
        # once, for a link the core knew: what was unresolved is logged, the core requeues
        # every unsettled delivery and forgets the link's sessions
        if self.live is None or self._released:
            return []
        self._released = True
        if self.followers is not None:
            self.followers.leave(self.session)
        lost = self.session.lost()
        if lost.upto >= lost.first or lost.outstanding:
            log.info(
                "shard link %s lost: forwards %d..%d unresolved, %d consumers' deliveries "
                "requeued",
                self.ctx.peer.name, lost.first, lost.upto, len(lost.outstanding),
            )  # fmt: skip
        return self.broker.connection_closed(self.conn_id, now_ms)
