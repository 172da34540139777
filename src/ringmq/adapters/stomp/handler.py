"""The STOMP adapter: one client connection's frames as calls on the core.

Theory of operation
-------------------
`StompHandler` is the `adapters.handler.Handler` of a STOMP socket. Its `StompConnection`
(`ringmq.stomp`) turns bytes into client frames under STOMP's rules; the handler runs each
frame as one core call (owner calls between `Calls.begin` and `Calls.end`, whose one rule
says whether to dispatch now: a SEND's dispatch may wait for the read batch's
`dispatch_pending`, as a 0-9-1 publish's does) and answers it: RECEIPT when asked, ERROR (then
close) when the frame or the core refuses it. CONNECT (login, vhost, the core connection,
CONNECTED; a slow login backend's wait) is `opening.py`'s.

Core sessions: the connection opens one core session for its plain SENDs (channel 1, in
confirm mode from the first SEND that asks a RECEIPT, so that a SEND's RECEIPT follows the
core's confirms of it and of every SEND before it: after the fsync for a persistent message
under delayed confirms, as RabbitMQ does; `receipts.py` orders them), one per subscription
(so that
`prefetch-count` and the cumulative ACK of `ack:client` are per subscription), and one per open
transaction (in the core's transactional mode, buffering the transaction's SENDs until COMMIT,
all or nothing). ACK and NACK inside a transaction are held by the handler: COMMIT applies them
after the transaction's SENDs, ABORT returns those messages to their queues' heads, last
acquired first (the seed's rollback rule).

The end: a DISCONNECT waits for the receipts of the SENDs before it. When the connection
closes from this side (ERROR, DISCONNECT, missed heart-beats)
its core state is released at once (subscriptions end, unacknowledged messages go back), so no
delivery goes to a socket about to close; `connection_lost` releases it otherwise.

Message ids: a MESSAGE's `message-id` (and 1.2 `ack`) is `<channel>-<delivery tag>` of the
subscription's core session, so ACK/NACK name their delivery without a table.

Destinations (`destinations.py`) and messages (`message.py`, stored in the AMQP 0-9-1 form)
are their own modules; `subscribe.py` finds or makes the queue a SUBSCRIBE reads.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Final

from ringmq.adapters.handler import (
    HandlerContext,
    HandlerFactory,
    HandlerInfo,
)
from ringmq.adapters.stomp.destinations import Destination, Dialects, Kind, message_destination
from ringmq.adapters.stomp.message import build_message, message_body, message_headers
from ringmq.adapters.stomp.opening import PUBLISH_CHANNEL, connect
from ringmq.adapters.stomp.receipts import Receipts
from ringmq.adapters.stomp.subscribe import Subscriber, stream_offset_argument, truthy
from ringmq.core.effects import (
    CancelConsumer,
    CloseChannel,
    CloseConnection,
    Confirm,
    Deliver,
    Effect,
)
from ringmq.core.errors import BrokerError, Condition
from ringmq.core.session import Session, SettleKind
from ringmq.core.settings import SettingsError
from ringmq.stomp import V1_2, Command, Frame, FrameLimits, StompConnection

log = logging.getLogger(__name__)

TEMP_QUEUE: Final = "/temp-queue/"
REPLY_QUEUE: Final = "/reply-queue/"
_DEST_CACHE: Final = 1000
"""Most destinations read once and kept per connection."""


@dataclass(slots=True)
class Subscription:
    """One SUBSCRIBE: its id, core session, ack mode and destination."""

    id: str
    channel: int
    ack: str
    destination: Destination
    queue: str
    durable: bool
    """Its queue is a durable subscription's (UNSUBSCRIBE with durable:true deletes it)."""


@dataclass(slots=True)
class Transaction:
    """One open transaction: the core session buffering its SENDs, and its held settles."""

    channel: int
    settles: list[tuple[int, int, bool, SettleKind]] = field(default_factory=list)
    """(channel, delivery tag, multiple, kind) of each ACK/NACK, in order."""


class StompHandler:
    """A STOMP connection on the core (see the module docstring).

    Args:
        ctx: the accepted socket's context (broker, connection id, peer, limits, login).
        dialects: how destinations are read (Artemis prefixes, default routing type).
    """

    def __init__(self, ctx: HandlerContext, dialects: Dialects | None = None) -> None:
        self.ctx = ctx
        self.broker = ctx.broker
        self.conn_id = ctx.conn_id
        self.conn = StompConnection(FrameLimits(max_body=ctx.limits.max_message_size))
        self.dialects = dialects or Dialects()
        self.subscriber = Subscriber(ctx.broker, self.dialects)
        self.is_open = False
        self._released = False
        self.waiting_login = False  # a slow backend (LDAP) checks the CONNECT's login
        self.publishing: Session
        """The core session of SENDs outside transactions (set at CONNECT)."""
        self._confirming = False
        self.record = HandlerInfo(protocol="STOMP")
        self._next_channel = PUBLISH_CHANNEL + 1
        self._subs: dict[str, Subscription] = {}
        self._by_channel: dict[int, Subscription] = {}
        self._txs: dict[str, Transaction] = {}
        self._receipts = Receipts()
        """SENDs waiting for their confirm to be answered."""
        self._temps: dict[str, str] = {}
        """Temp queue label -> its queue's name."""
        self._dests: dict[str, Destination] = {}
        self._written: dict[tuple[str, str, bool], str] = {}
        """MESSAGE destinations by (exchange, routing key, RabbitMQ dialect)."""
        self._leaving: Frame | None = None
        """A DISCONNECT waiting for the receipts of earlier SENDs."""
        self._closing: list[int] = []
        """Core sessions to close once the current call ends."""
        self.client_id = ""

    # ------------------------------------------------------------------ Handler
    @property
    def opened(self) -> bool:
        """True once the core knows the connection."""
        return self.is_open

    @property
    def closed(self) -> bool:
        """True once the socket should be closed."""
        return self.conn.closed

    def receive_data(self, data: bytes, now_ms: int) -> list[Effect]:
        """Run every whole frame received; return the core's effects."""
        conn = self.conn
        if self._leaving is not None:
            return []  # after DISCONNECT: nothing more is read
        conn.receive_data(data)
        out: list[Effect] = []
        while not self.waiting_login and (frame := conn.next_frame()) is not None:
            out.extend(self._frame(frame, now_ms))
            if conn.closed:
                break
        if conn.closed:
            out.extend(self._release(now_ms))
        return out

    def _release(self, now_ms: int) -> list[Effect]:
        # The connection is over (ERROR, DISCONNECT, missed heart-beats): its subscriptions end
        # now, so no message is handed to a socket about to close (an auto-ack delivery would
        # be lost); `connection_lost` then has nothing left to do.
        if not self.is_open or self._released:
            return []
        self._released = True
        return self.broker.connection_closed(self.conn_id, now_ms)

    def apply(self, effect: Effect) -> None:
        """Queue the frames of a core effect for this connection."""
        match effect:
            case Deliver():
                self._message(effect)
            case Confirm():
                self._confirmed(effect)
            case CancelConsumer():
                sub = self._by_channel.get(effect.channel)
                name = sub.id if sub is not None else effect.consumer_tag
                self.conn.fail(
                    "subscription ended", f"the queue of subscription '{name}' was deleted"
                )
            case CloseConnection() | CloseChannel():  # a consumer timeout ends the connection
                self.conn.fail(effect.text, f"{effect.condition.label} - {effect.text}")
            case _:
                pass  # flow (Block/Unblock) pauses the socket; STOMP has no word for it

    def data_to_send(self) -> bytes:
        """Everything queued for the client since the last call."""
        return self.conn.data_to_send()

    def tick(self, now_ms: int, mono_ms: int) -> list[Effect]:
        """Heart-beats both ways."""
        self.conn.tick(mono_ms)
        return self._release(now_ms) if self.conn.closed else []

    def close(self, condition: Condition, text: str) -> None:
        """A close the server starts: an ERROR frame, then the socket closes."""
        self.conn.fail(text, f"{condition.label} - {text}")

    def connection_lost(self, now_ms: int) -> list[Effect]:
        """Release the connection's core state (unacked messages go back to their queues)."""
        return self._release(now_ms)

    def info(self) -> HandlerInfo:
        """The connection as management shows it."""
        return self.record

    # ------------------------------------------------------------------ frames
    def _frame(self, frame: Frame, now_ms: int) -> list[Effect]:
        # One frame as one core call; a refusal is an ERROR on this connection only.
        command = frame.command
        if command in (Command.CONNECT, Command.STOMP):
            connect(self, frame, now_ms)
            return []
        if command == Command.DISCONNECT:
            if self._receipts:  # its RECEIPT follows those of the SENDs before it
                self._leaving = frame
            else:
                self.conn.disconnect(frame)
            return []
        run = self._COMMANDS[command]
        broker = self.broker
        # The call as the plain `begin` ... `end` / `abort` pair (a frame per message: a
        # `with` block costs several times as much). A refused frame's call is aborted
        # (nothing dispatched); its effects so far go out.
        calls = broker.calls
        out = calls.begin(now_ms)
        try:
            receipt_now = run(self, frame, now_ms)
        except BaseException as exc:
            calls.abort()
            if isinstance(exc, BrokerError):
                log.debug("STOMP connection %d: %s refused: %s", self.conn_id, command, exc.text)
                self.conn.fail(exc.text, exc.text, frame=frame)
                return out
            if isinstance(exc, SettingsError):
                text = f"{Condition.PRECONDITION_FAILED.label} - {exc}"
                self.conn.fail(text, text, frame=frame)
                return out
            raise
        calls.end(publish=command == Command.SEND)
        if receipt_now:
            self.conn.receipt(frame)
        while self._closing:
            out.extend(broker.channel_closed(self.conn_id, self._closing.pop(0), now_ms))
        return out

    # ------------------------------------------------------------------ commands
    def session_of(self, channel: int) -> Session:
        s = self.broker.session(self.conn_id, channel)
        if s is None:
            raise BrokerError(Condition.CHANNEL_ERROR, f"no session {channel}")
        return s

    def _open(self, now_ms: int) -> Session:
        channel = self._next_channel
        self._next_channel += 1
        if (refusal := self.channel_refusal(channel, now_ms)) is not None:
            raise BrokerError(Condition.NOT_ALLOWED, refusal)
        return self.session_of(channel)

    def channel_refusal(self, channel: int, now_ms: int) -> str | None:
        # Open a core session; the user's max-channels may refuse it (its text).
        for e in self.broker.channel_opened(self.conn_id, channel, now_ms):
            if isinstance(e, CloseConnection):
                return e.text
        return None

    def _destination(self, frame: Frame, s: Session) -> Destination:
        # RabbitMQ's destinations depend on nothing but their text: read once per connection.
        text = frame.get("destination") or ""
        dest = self._dests.get(text)
        if dest is None:
            dest = self.subscriber.destination(text, frame.headers, s)
            if dest.rabbit and len(self._dests) < _DEST_CACHE:
                self._dests[text] = dest
        return dest

    def _send(self, frame: Frame, now_ms: int) -> bool:
        tx_name = frame.get("transaction")
        receipt = frame.get("receipt")
        if tx_name:
            s = self.session_of(self._tx(tx_name).channel)
        else:
            s = self.publishing
            if receipt is not None and not self._confirming:
                # Confirm mode from the first SEND that asks a receipt on: its RECEIPT waits
                # for its confirm (and every later SEND is numbered); SENDs without receipts
                # before it cost no confirm at all.
                self.broker.confirms.select(s)
                self._confirming = True
        dest = self._destination(frame, s)
        if dest.kind is Kind.TEMP_QUEUE:
            raise BrokerError(Condition.NOT_FOUND, "SEND to a /temp-queue/ destination")
        headers = frame.headers
        reply_to = headers.get("reply-to")
        if reply_to is not None and reply_to.startswith(TEMP_QUEUE):
            headers = dict(headers)
            headers["reply-to"] = REPLY_QUEUE + self._temp_queue(reply_to, now_ms)
        broker = self.broker
        publisher = broker.publisher
        self.subscriber.prepare_send(s, dest, frame.headers, now_ms)
        vh, x = publisher.exchange_for(s, dest.exchange, dest.routing_key)
        publisher.check_size(len(frame.body))
        msg = build_message(s, dest.exchange, dest.routing_key, headers, frame.body, now_ms)
        publisher.publish(msg, session=s, vhost=vh, exchange=x, now_ms=now_ms)
        if receipt is None or tx_name:
            return True
        self._receipts.expect(s.publish_seq, receipt)  # answered with the confirm
        return False

    def _temp_queue(self, reply_to: str, now_ms: int) -> str:
        # RabbitMQ's temp queues: an exclusive queue per label, subscribed to at once (auto
        # ack, subscription id = the label as written).
        label = reply_to[len(TEMP_QUEUE) :]
        name = self._temps.get(label)
        if name is not None:
            return name
        s = self._open(now_ms)
        name = self.subscriber.temp_queue(s, now_ms)
        self.broker.delivery.consume(
            s, name, reply_to, no_ack=True, exclusive=False, arguments={}, now_ms=now_ms
        )
        dest = Destination(reply_to, Kind.REPLY_QUEUE, "", name, name)
        sub = Subscription(reply_to, s.channel, "auto", dest, name, False)
        self._by_channel[s.channel] = sub
        self._temps[label] = name
        return name

    def _subscribe(self, frame: Frame, now_ms: int) -> bool:
        sub_id = frame.get("id") or frame.get("destination") or ""
        ack = self.conn.subscriptions[sub_id]  # a new id, a valid mode: the machine checked
        prefetch_text = frame.get("prefetch-count") or _window_prefetch(frame)
        if not (prefetch_text.isascii() and prefetch_text.isdigit()):
            raise BrokerError(
                Condition.PRECONDITION_FAILED, f"invalid prefetch-count '{prefetch_text}'"
            )
        s = self._open(now_ms)
        dest = self._destination(frame, s)
        if dest.kind in (Kind.TEMP_QUEUE, Kind.REPLY_QUEUE):
            raise BrokerError(Condition.NOT_FOUND, f"cannot subscribe to '{dest.text}'")
        delivery = self.broker.delivery
        delivery.set_prefetch(s, int(prefetch_text), session_wide=False)
        queue, durable = self.subscriber.queue_for(
            s, dest, frame.headers, sub_id, self.client_id, now_ms
        )
        offset = frame.get("x-stream-offset")  # a stream consumer's start (RabbitMQ STOMP)
        arguments = {} if offset is None else {"x-stream-offset": stream_offset_argument(offset)}
        delivery.consume(
            s, queue, sub_id, no_ack=ack == "auto", exclusive=False, arguments=arguments,
            now_ms=now_ms,
        )  # fmt: skip
        sub = Subscription(sub_id, s.channel, ack, dest, queue, durable)
        self._subs[sub_id] = sub
        self._by_channel[s.channel] = sub
        return True

    def _unsubscribe(self, frame: Frame, now_ms: int) -> bool:
        sub = self._subs.pop(frame.get("id") or frame.get("destination") or "")
        del self._by_channel[sub.channel]
        s = self.session_of(sub.channel)
        self.broker.delivery.cancel(s, sub.id, now_ms)
        h = frame.headers
        forget = truthy(h.get("durable") or h.get("persistent")) or (
            "durable-subscription-name" in h or "activemq.subscriptionName" in h
        )
        if sub.durable and forget:
            self.subscriber.delete_queue(self.publishing, sub.queue, now_ms)
        self._closing.append(sub.channel)  # its unacked messages go back
        return True

    def _settle(self, frame: Frame, now_ms: int) -> bool:
        ident = frame.get("id") if self.conn.version == V1_2 else frame.get("message-id")
        channel, tag = _delivery(ident or "")
        sub = self._by_channel.get(channel)
        if sub is None or sub.ack == "auto":
            raise BrokerError(Condition.PRECONDITION_FAILED, f"unknown message id '{ident}'")
        s = self.session_of(channel)
        if tag not in s.unacked:
            raise BrokerError(Condition.PRECONDITION_FAILED, f"unknown message id '{ident}'")
        if frame.command == Command.ACK:
            kind = SettleKind.ACK
        else:  # RabbitMQ: NACK requeues unless `requeue:false`, which dead-letters
            requeue = (frame.get("requeue") or "true").strip().lower() != "false"
            kind = SettleKind.REQUEUE if requeue else SettleKind.REJECT
        multiple = sub.ack == "client"  # cumulative
        tx_name = frame.get("transaction")
        if tx_name:
            self._tx(tx_name).settles.append((channel, tag, multiple, kind))
        else:
            self.broker.delivery.settle(s, tag, multiple, kind, now_ms)
        return True

    def _tx(self, name: str) -> Transaction:
        return self._txs[name]  # an open one: the machine checked

    def _begin(self, frame: Frame, now_ms: int) -> bool:
        name = frame.get("transaction") or ""
        s = self._open(now_ms)
        self.broker.transactions.select(s)
        self._txs[name] = Transaction(s.channel)
        return True

    def _commit(self, frame: Frame, now_ms: int) -> bool:
        name = frame.get("transaction") or ""
        tx = self._tx(name)
        broker = self.broker
        broker.transactions.commit(self.session_of(tx.channel), now_ms)  # all or nothing
        del self._txs[name]
        for channel, tag, multiple, kind in tx.settles:
            s = broker.session(self.conn_id, channel)
            if s is not None and tag in s.unacked:
                broker.delivery.settle(s, tag, multiple, kind, now_ms)
        self._closing.append(tx.channel)
        return True

    def _abort(self, frame: Frame, now_ms: int) -> bool:
        tx = self._txs.pop(frame.get("transaction") or "")
        broker = self.broker
        # What the transaction acknowledged goes back to the head, last acquired first.
        for channel, tag, multiple, _kind in reversed(tx.settles):
            s = broker.session(self.conn_id, channel)
            if s is not None and tag in s.unacked:
                broker.delivery.settle(s, tag, multiple, SettleKind.REQUEUE, now_ms)
        broker.transactions.rollback(self.session_of(tx.channel), now_ms)
        self._closing.append(tx.channel)
        return True

    _COMMANDS: Final[dict[str, Callable[[StompHandler, Frame, int], bool]]] = {
        Command.SEND: _send,
        Command.SUBSCRIBE: _subscribe,
        Command.UNSUBSCRIBE: _unsubscribe,
        Command.ACK: _settle,
        Command.NACK: _settle,
        Command.BEGIN: _begin,
        Command.COMMIT: _commit,
        Command.ABORT: _abort,
    }

    # ------------------------------------------------------------------ effects
    def _message(self, d: Deliver) -> None:
        sub = self._by_channel.get(d.channel)
        if sub is None:
            return  # delivered to a subscription ended in this batch: it is requeued
        msg = d.message
        ident = f"{d.channel}-{d.delivery_id}"
        key = (msg.exchange, msg.routing_key, sub.destination.rabbit)
        destination = self._written.get(key)
        if destination is None:
            destination = message_destination(*key)
            if len(self._written) < _DEST_CACHE:
                self._written[key] = destination
        headers = {
            "subscription": sub.id,
            "destination": destination,
            "message-id": ident,
            "redelivered": "true" if d.redelivered else "false",
        }
        if sub.ack != "auto" and self.conn.version == V1_2:
            headers["ack"] = ident
        for name, value in message_headers(msg).items():
            headers.setdefault(name, value)
        if msg.expiration_ms is not None and not sub.destination.rabbit:
            # Artemis clients read the expiry as epoch ms (JMS expiration)
            headers.setdefault("expires", str(msg.timestamp_ms + msg.expiration_ms))
        body = message_body(msg)
        headers["content-length"] = str(len(body))
        self.conn.send(Command.MESSAGE, headers, body)

    def _confirmed(self, c: Confirm) -> None:
        # Receipts go out in order, each once every SEND up to it is confirmed (receipts.py).
        if c.channel != PUBLISH_CHANNEL:
            return
        if not c.ok and (receipt := self._receipts.refused(c.seq)) is not None:
            self.conn.fail(
                "message refused",
                f"the broker refused the message ({c.reason or 'refused'})",
                receipt_id=receipt,
            )
            return
        for receipt in self._receipts.confirmed(c.seq, c.multiple):
            self.conn.send(Command.RECEIPT, {"receipt-id": receipt})
        if not self._receipts and self._leaving is not None:
            self.conn.disconnect(self._leaving)  # the DISCONNECT that waited for them


def _window_prefetch(frame: Frame) -> str:
    # Artemis' consumer-window-size (bytes) as a prefetch: -1 (no flow control) and any byte
    # window are unlimited; 0 (no buffering) is one message at a time.
    window = (frame.get("consumer-window-size") or "").strip()
    return "1" if window == "0" else "0"


def _delivery(ident: str) -> tuple[int, int]:
    # "<channel>-<delivery tag>", as `_message` writes it.
    channel, sep, tag = ident.partition("-")
    if not (sep and ident.isascii() and channel.isdigit() and tag.isdigit()):
        raise BrokerError(Condition.PRECONDITION_FAILED, f"unknown message id '{ident}'")
    return int(channel), int(tag)


def handler_factory(dialects: Dialects | None = None) -> HandlerFactory:
    """A `HandlerFactory` making `StompHandler`s with `dialects` (Artemis prefixes...)."""

    def make(ctx: HandlerContext) -> StompHandler:
        return StompHandler(ctx, dialects)

    return make
