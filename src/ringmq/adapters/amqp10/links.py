"""AMQP 1.0 links as core calls: attach and detach, publish, credit, settlement.

Theory of operation
-------------------
Each begun AMQP 1.0 session is one core `Session` (same channel number) in confirm mode, so
every publish on it is numbered and settled by the core's `Confirm` effects, after the fsync
for persistent messages reaching durable queues (the 0-9-1 confirms' rule). `Links` keeps,
per session (`LinkSession`):

* links the broker **receives** on (`InLink`, the peer's senders): the node their target
  names, or none (anonymous relay: each message's `to`); each message is built by the 1.0
  message form (`message.build`) and published through `Publisher.publish`; an unsettled
  transfer's publish number maps to its delivery id (`confirms`) until its `Confirm` comes back
  and becomes a disposition: `accepted`, `released` when no queue took it, `rejected` with a
  condition when a queue refused it (overflow, address full, store failure) or the publish
  itself was refused (`BrokerError`). Pre-settled transfers are at most once: their confirms
  are dropped.
* links the broker **sends** on (`OutLink`, the peer's receivers): each is a core consumer
  (`Delivery.consume`) whose link credit is the core's (`Delivery.flow`; drain comes back as
  `Drained`); each unsettled delivery's id maps to its core delivery tag (`unsettled`) until
  the peer's disposition settles it: accepted -> ACK, released -> RELEASE, rejected -> REJECT
  (dead-letter), modified with undeliverable-here -> REJECT, other modified -> REQUEUE
  (counted as a failed delivery). A detached link returns its unsettled deliveries to their
  queue (REQUEUE, in delivery order, one batch, as a closing channel does) and cancels its
  consumer; a dynamic node's temporary queue goes with it (exclusive, auto-delete) and a
  durable subscription's queue when the peer closes the link (unsubscribe).

Addresses resolve through `addresses.py`; an anycast queue that does not exist is created
(durable, as Artemis auto-creates them, so address settings apply), a multicast receiver
gets a subscription queue bound to `amq.topic`. Permissions are the core's: configure to
create a queue, write to the exchange a sender publishes to, read on the queue a receiver
consumes, as RabbitMQ checks them on attach. A dynamic target (a sender's) gets a temporary
queue as a dynamic source does, deleted when its link detaches. A receiver's consumer
priority is its attach's `rabbitmq:priority` or `priority` property (RabbitMQ 4, Artemis),
the consume's `x-priority`.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Final

from ringmq.adapters.amqp10 import message as m10
from ringmq.adapters.amqp10.addresses import TOPIC_EXCHANGE, AddressError, Kind, Node, resolve
from ringmq.adapters.amqp10.errors import REFUSAL_TEXTS, REFUSALS, condition_of
from ringmq.adapters.amqp10.filters import FilterError, SourceFilters, source_filters
from ringmq.adapters.amqp10.runs import publish_run
from ringmq.adapters.amqp10.transactions import Coordinator
from ringmq.amqp10 import conditions as c
from ringmq.amqp10 import performatives as p
from ringmq.amqp10 import sections
from ringmq.amqp10.connection import error
from ringmq.amqp10.events import MessagesReceived
from ringmq.amqp10.types import DecodeError
from ringmq.core.errors import BrokerError
from ringmq.core.publish import UNROUTABLE
from ringmq.core.selector import Selector, SelectorError
from ringmq.core.session import Session, SettleKind

if TYPE_CHECKING:
    from ringmq.amqp10.connection import Connection
    from ringmq.amqp10.events import CreditGranted, LinkAttaching, MessageReceived, Settled
    from ringmq.core.broker import Broker
    from ringmq.core.effects import Deliver

CONFIRM_CHANNEL_BASE: Final = 1 << 16
"""Core session numbers of the confirm-mode twin of each session (above every ushort)."""
log = logging.getLogger(__name__)

SETTLED: Final = 1
"""sender-settle-mode `settled`: the broker's deliveries are pre-settled (at most once)."""
EXPIRY_NEVER: Final = "never"
UNSETTLED_STATE: Final = 2
"""terminus-durable `unsettled-state` (Qpid JMS durable subscribers ask for it)."""
SENDER_CAPABILITIES: Final = ("DELAYED_DELIVERY",)
"""What the broker's attach offers a peer's sender: scheduled delivery (`x-opt-delivery-time`),
which Qpid JMS needs offered before it sends a message with a delivery delay."""
RECEIVER_CAPABILITIES: Final = ("SHARED-SUBS",)
"""What the broker's attach offers a peer's receiver: shared subscriptions, which Qpid JMS
needs offered before it attaches a shared consumer."""
PRIORITY_PROPERTIES: Final = ("rabbitmq:priority", "priority")
"""A receiver's attach properties that give its consumer priority (RabbitMQ 4, Artemis)."""
_ACCEPTED: Final = p.Accepted()
_RELEASED: Final = p.Released()


class RefusalError(Exception):
    """An attach the broker cannot honour: `condition`, `description`."""

    def __init__(self, condition: str, description: str) -> None:
        super().__init__(description)
        self.condition = condition
        self.description = description


@dataclass(slots=True)
class InLink:
    """A link the broker receives on."""

    handle: int
    node: Node | None
    """Where its messages go (None: anonymous relay, each message's `to`)."""
    coordinator: bool = False
    """A transaction controller's link (declare and discharge)."""
    exchange: str = ""
    routing_key: str | None = None
    """`node`'s exchange and routing key, read once (None: each message's subject)."""
    temporary: str | None = None
    """A dynamic target's temporary queue, deleted with the link."""


@dataclass(slots=True)
class OutLink:
    """A link the broker sends on: a core consumer."""

    handle: int
    tag: str
    queue: str
    settled: bool
    delete_on_close: bool = False
    """A durable subscription: its queue goes when the peer closes the link."""


@dataclass(slots=True)
class LinkSession:
    """The links of one session and what they wait for."""

    core: Session
    """Consumers and pre-settled publishes (no confirms)."""
    confirm: Session
    """Unsettled publishes: a core session in confirm mode (channel + `CONFIRM_CHANNEL_BASE`)."""
    ins: dict[int, InLink] = field(default_factory=dict)
    outs: dict[int, OutLink] = field(default_factory=dict)
    by_tag: dict[str, OutLink] = field(default_factory=dict)
    unsettled: dict[int, tuple[int, OutLink]] = field(default_factory=dict)
    """The broker's unsettled deliveries: delivery id -> (core delivery tag, link)."""
    confirms: dict[int, int] = field(default_factory=dict)
    """Unsettled publishes waiting for their confirm: publish number -> delivery id."""
    unroutable: set[int] = field(default_factory=set)
    """Publish numbers that reached no queue (released when confirmed)."""


def _caps(value: tuple[str, ...] | None) -> tuple[str, ...]:
    # a terminus' capabilities, decoded as a tuple of symbols (None: none)
    return tuple(str(v) for v in value or ())


def _priority(properties: Any) -> dict[str, Any]:
    # A receiver's consumer priority from its attach properties, as the core's consume
    # arguments (the `x-priority` of an AMQP 0-9-1 basic.consume): RabbitMQ 4 reads
    # `rabbitmq:priority`, Artemis `priority`; an integer, else the attach is refused.
    if not isinstance(properties, dict):
        return {}
    for name in PRIORITY_PROPERTIES:
        value = properties.get(name)
        if value is None:
            continue
        if isinstance(value, bool) or not isinstance(value, int):
            raise RefusalError(c.INVALID_FIELD, f"{name} {value!r}: must be an integer")
        return {"x-priority": int(value)}
    return {}


def _answered(target: Any, address: str) -> Any:
    # a dynamic target as the broker's attach answers it: with the address of its node
    return p.Target(
        address=address,
        durable=target.durable,
        expiry_policy=target.expiry_policy,
        timeout=target.timeout,
        dynamic=True,
        dynamic_node_properties=target.dynamic_node_properties,
        capabilities=target.capabilities,
    )


def _outcome(state: Any) -> SettleKind | None:
    # A receiver's delivery state as the core's settle kind (None: not terminal).
    match state:
        case p.Accepted():
            return SettleKind.ACK
        case p.Released():
            return SettleKind.RELEASE
        case p.Rejected():
            return SettleKind.REJECT
        case p.Modified():
            if state.undeliverable_here:
                return SettleKind.REJECT
            return SettleKind.REQUEUE if state.delivery_failed else SettleKind.RELEASE
    return None


class Links:
    """The links of one AMQP 1.0 connection on the core (see the module docstring)."""

    def __init__(self, broker: Broker, conn: Connection, conn_id: int) -> None:
        self.broker = broker
        self.conn = conn
        self.conn_id = conn_id
        self.sessions: dict[int, LinkSession] = {}
        self.container_id = ""
        self.txn = Coordinator(broker, conn, conn_id)
        self._serial = 0

    # ------------------------------------------------------------------ sessions
    def session_begun(self, channel: int, now_ms: int) -> None:
        """A session began: its core sessions, plain and in confirm mode."""
        b = self.broker
        b.channel_opened(self.conn_id, channel, now_ms)
        b.channel_opened(self.conn_id, CONFIRM_CHANNEL_BASE + channel, now_ms, part_of=channel)
        s = b.session(self.conn_id, channel)
        confirm = b.session(self.conn_id, CONFIRM_CHANNEL_BASE + channel)
        assert s is not None
        assert confirm is not None
        b.confirms.select(confirm)
        self.sessions[channel] = LinkSession(s, confirm)

    def session_ended(self, channel: int) -> list[int]:
        """Forget a session's links; returns its core sessions, for the caller to close (the
        core's channel close returns what was unsettled)."""
        self.sessions.pop(channel, None)
        return [channel, CONFIRM_CHANNEL_BASE + channel]

    # ------------------------------------------------------------------ attach
    def attach(self, ev: LinkAttaching, now_ms: int) -> None:
        """Resolve and create the link the peer attaches, or refuse it."""
        ls = self.sessions.get(ev.channel)
        a = ev.attach
        if ls is None:
            self.conn.refuse_attach(ev.channel, a, c.ILLEGAL_STATE, "the session is not open")
            return
        try:
            if a.role is False:  # the peer sends: the broker receives
                self._attach_in(ls, ev, a, now_ms)
            else:
                self._attach_out(ls, ev, a, now_ms)
        except RefusalError as exc:
            self.conn.refuse_attach(ev.channel, a, exc.condition, exc.description)
        except BrokerError as exc:
            self.conn.refuse_attach(ev.channel, a, condition_of(exc.condition), exc.text)

    def _attach_in(self, ls: LinkSession, ev: LinkAttaching, a: Any, now_ms: int) -> None:
        target = a.target
        if isinstance(target, p.Coordinator):
            self.conn.attach(ev.channel, a, source=a.source, target=target)
            ls.ins[ev.handle] = InLink(ev.handle, None, coordinator=True)
            return
        if target is None:
            raise RefusalError(c.INVALID_FIELD, "a sender needs a target")
        node: Node | None = None
        temporary = None
        if target.dynamic:  # a temporary queue, its name the address (Qpid JMS temporary queues)
            self.broker.publisher.exchange_for(ls.core, "")  # write, before the queue is made
            temporary = self._temporary_queue(ls.core, now_ms, auto_delete=False)
            node = Node(Kind.QUEUE, temporary)
            target = _answered(target, temporary)
        elif target.address is not None:
            node = self._node(str(target.address), _caps(target.capabilities))
            s = ls.core
            if node.kind is Kind.ANYCAST:
                self._ensure_queue(s, node.name, now_ms)
            elif node.kind is Kind.QUEUE:
                self.broker.topology.queue_for(s, node.name)
            self.broker.publisher.exchange_for(s, node.exchange)
        self.conn.attach(
            ev.channel, a, source=a.source, target=target, offered_capabilities=SENDER_CAPABILITIES
        )
        link = InLink(ev.handle, node, temporary=temporary)
        if node is not None:
            link.exchange, link.routing_key = node.exchange, node.routing_key
        ls.ins[ev.handle] = link

    def _attach_out(self, ls: LinkSession, ev: LinkAttaching, a: Any, now_ms: int) -> None:
        source = a.source
        if source is None:
            raise RefusalError(c.INVALID_FIELD, "a receiver needs a source")
        browse = source.distribution_mode == "copy"  # a QueueBrowser: leaves them to others
        selector, filters = self._selector(source.filter)
        arguments = _priority(a.properties)  # refused before any queue is made
        s = ls.core
        b = self.broker
        caps = _caps(source.capabilities)
        delete_on_close = False
        no_local = False  # Artemis applies no-local to a (not shared) multicast subscription
        owner: str | None = None  # ... keyed by the client's container id
        if source.dynamic:
            queue = address = self._temporary_queue(s, now_ms, auto_delete=True)
        else:
            if source.address is None:
                raise RefusalError(c.INVALID_FIELD, "a receiver's source needs an address")
            address = str(source.address)
            node = self._node(address, caps)
            match node.kind:
                case Kind.QUEUE:
                    queue = node.name
                case Kind.ANYCAST:
                    queue = node.name
                    self._ensure_queue(s, queue, now_ms)
                case Kind.MULTICAST:
                    # a subscription consumes its queue whatever the distribution mode, as on
                    # Artemis (Qpid JMS durable subscribers ask for `copy`)
                    browse = False
                    queue, delete_on_close = self._subscription(s, a, source, node, caps, now_ms)
                    no_local = filters.no_local and "shared" not in caps
                    if "shared" not in caps:
                        owner = self.container_id or None
                case Kind.EXCHANGE:
                    raise RefusalError(
                        c.INVALID_FIELD, f"a receiver's source must be a queue, not {address!r}"
                    )
        self._serial += 1
        tag = f"amqp10-{ev.handle}-{self._serial}"
        settled = a.snd_settle_mode == SETTLED
        b.delivery.consume(
            s, queue, tag, no_ack=settled, exclusive=False, arguments=arguments,
            now_ms=now_ms, browse=browse, selector=selector, no_local=no_local, owner=owner,
        )  # fmt: skip
        b.delivery.flow(s, tag, credit=0, drain=False)
        reply = p.Source(
            address=address,
            durable=source.durable,
            expiry_policy=source.expiry_policy,
            timeout=source.timeout,
            dynamic=source.dynamic,
            distribution_mode=source.distribution_mode,
            filter=filters.applied(no_local=no_local),
            default_outcome=p.Modified(delivery_failed=True),
            outcomes=source.outcomes,
            capabilities=source.capabilities,
        )
        self.conn.attach(
            ev.channel, a, source=reply, target=a.target, offered_capabilities=RECEIVER_CAPABILITIES
        )
        link = OutLink(ev.handle, tag, queue, settled, delete_on_close)
        ls.outs[ev.handle] = link
        ls.by_tag[tag] = link

    @staticmethod
    def _selector(filters: Any) -> tuple[Selector | None, SourceFilters]:
        # The source's filters the broker knows, its JMS selector parsed (the attach echoes
        # only the filters applied: a client sees that the others are not).
        try:
            found = source_filters(filters)
            if found.selector is None:
                return None, found
            return Selector(found.selector), found
        except (FilterError, SelectorError) as exc:
            raise RefusalError(c.INVALID_FIELD, f"invalid selector: {exc}") from None

    def _node(self, address: str, caps: tuple[str, ...]) -> Node:
        try:
            return resolve(address, caps)
        except AddressError as exc:
            raise RefusalError(c.INVALID_FIELD, str(exc)) from None

    def _temporary_queue(self, s: Session, now_ms: int, *, auto_delete: bool) -> str:
        # A dynamic node: a temporary queue of this connection (exclusive), named by the
        # broker; a dynamic source's goes with its consumer (auto-delete), a dynamic target's
        # is deleted with its link (`detached`).
        return self.broker.topology.declare_queue(
            s, "", durable=False, exclusive=True, auto_delete=auto_delete, arguments=None,
            now_ms=now_ms,
        ).name  # fmt: skip

    def _ensure_queue(self, s: Session, name: str, now_ms: int) -> None:
        # Artemis auto-create-queues: an anycast address without its queue gets one (durable,
        # so the address settings for its name apply, as to Artemis' auto-created queues).
        if name not in s.vhost.queues:
            self.broker.topology.declare_queue(
                s, name, durable=True, exclusive=False, auto_delete=False, arguments=None,
                now_ms=now_ms,
            )  # fmt: skip

    def _subscription(
        self, s: Session, a: Any, source: Any, node: Node, caps: tuple[str, ...], now_ms: int
    ) -> tuple[str, bool]:
        # A multicast receiver's queue, bound to amq.topic with the address: durable (terminus
        # durable, expiry never) and shared subscriptions are named as Artemis names them
        # (client container id and link name; shared ones without the id when `global`);
        # others get a temporary queue of their own.
        topology = self.broker.topology
        durable = bool(source.durable) and str(source.expiry_policy or "") == EXPIRY_NEVER
        shared = "shared" in caps
        if durable or shared:
            name = str(a.name).split("|", 1)[0]
            if "global" not in caps:
                name = f"{self.container_id}.{name}" if self.container_id else name
            topology.declare_queue(
                s, name, durable=durable, exclusive=False, auto_delete=not durable,
                arguments=None, now_ms=now_ms,
            )  # fmt: skip
        else:
            name = topology.declare_queue(
                s, "", durable=False, exclusive=True, auto_delete=True, arguments=None,
                now_ms=now_ms,
            ).name  # fmt: skip
        topology.bind_queue(s, name, TOPIC_EXCHANGE, node.name, None)
        return name, durable

    # ------------------------------------------------------------------ detach
    def detached(self, channel: int, handle: int, closed: bool, now_ms: int) -> None:
        """A link went away: a consumer's unsettled deliveries go back, its consumer ends."""
        ls = self.sessions.get(channel)
        if ls is None:
            return
        sender = ls.ins.pop(handle, None)
        if sender is not None:
            if sender.temporary is not None:  # a dynamic target's queue goes with its link
                self.broker.topology.delete_named(ls.core, sender.temporary, now_ms)
            return
        link = ls.outs.pop(handle, None)
        if link is None:
            return
        ls.by_tag.pop(link.tag, None)
        for d in [d for d, (_t, lk) in ls.unsettled.items() if lk is link]:
            del ls.unsettled[d]
        s = ls.core
        b = self.broker
        # Every delivery of its consumer still unsettled goes back, those sent and those the
        # server has not applied yet (a flow and a detach in one read).
        consumer = s.consumers.get(link.tag)
        tags = [t for t, e in s.unacked.items() if e.consumer is consumer and consumer]
        entries = [e for t in tags for e in s.take(t, False)]
        b.delivery.cancel(s, link.tag, now_ms)
        b.delivery.settle_entries(entries, SettleKind.REQUEUE, now_ms)
        if closed and link.delete_on_close:  # unsubscribe (configure permission checked)
            try:
                name, _n = b.topology.delete_for(s, link.queue, if_unused=False, if_empty=False)
            except BrokerError as exc:  # the detach is answered already: the queue stays
                log.info("AMQP 1.0 unsubscribe of %r refused: %s", link.queue, exc.text)
                return
            if name:
                b.topology.delete_named(s, name, now_ms)

    # ------------------------------------------------------------------ publish
    def messages(self, batch: list[MessageReceived | MessagesReceived], now_ms: int) -> None:
        """Publish the messages of one read, in order (`message` each; a run of them:
        `runs.publish_run`)."""
        message = self.message
        for ev in batch:
            if type(ev) is MessagesReceived:
                publish_run(self, ev, now_ms)
            else:
                message(ev, now_ms)  # type: ignore[arg-type]

    def message(self, ev: MessageReceived, now_ms: int) -> None:
        """Publish a message the peer sent; its outcome comes with the confirm (or now)."""
        ls = self.sessions.get(ev.channel)
        if ls is None:
            return
        link = ls.ins.get(ev.handle)
        if link is None:
            return
        if link.coordinator:
            self.txn.control(ev, now_ms)
            return
        s = ls.core if ev.settled else ls.confirm
        b = self.broker
        publisher = b.publisher
        try:
            txs = None if ev.state is None else self.txn.session(ev.state)
            if txs is not None:
                s = txs
            node = link.node
            if node is None:
                to = m10.address_of(ev.payload)
                if to is None:
                    raise RefusalError(c.PRECONDITION_FAILED, "anonymous relay: no 'to' address")
                node = self._node(to, ())
                if node.kind is Kind.ANYCAST and node.name not in s.vhost.queues:
                    self._ensure_queue(s, node.name, now_ms)
                exchange, rk = node.exchange, node.routing_key
            else:
                exchange, rk = link.exchange, link.routing_key
            if rk is None:  # /exchanges/:x: the message's subject is its routing key
                props = sections.scan(ev.payload).properties
                rk = (props.subject if props is not None else None) or ""
            vh, x = publisher.exchange_for(s, exchange)
            publisher.check_size(len(ev.payload))
            msg = m10.build(ev.payload, exchange=exchange, routing_key=rk, now_ms=now_ms)
            outcome = publisher.publish(s, vh, x, msg, False, now_ms)
        except RefusalError as exc:
            self._refused(ev, exc.condition, exc.description)
            return
        except BrokerError as exc:
            self._refused(ev, condition_of(exc.condition), exc.text)
            return
        except DecodeError as exc:
            self._refused(ev, c.DECODE_ERROR, str(exc))
            return
        if txs is not None:  # buffered: the outcome takes effect at the commit
            if not ev.settled:
                txn_id = ev.state.txn_id
                done = p.TransactionalState(txn_id=txn_id, outcome=_ACCEPTED)
                self.conn.settle(ev.channel, ev.delivery_id, ev.delivery_id, done)
            return
        if ev.settled:
            return  # at most once: no outcome to send
        seq = s.publish_seq
        if outcome == UNROUTABLE:
            ls.unroutable.add(seq)
        ls.confirms[seq] = ev.delivery_id

    def _refused(self, ev: MessageReceived, condition: str, description: str) -> None:
        self.refuse(ev.channel, ev.delivery_id, ev.settled, condition, description)

    def refuse(
        self, channel: int, delivery_id: int, settled: bool, condition: str, description: str
    ) -> None:
        """A publish refused: an unsettled one is settled `rejected` with the condition."""
        if not settled:
            rejected = p.Rejected(error=error(condition, description))
            self.conn.settle(channel, delivery_id, delivery_id, rejected)

    def confirmed(
        self, channel: int, seq: int, multiple: bool, ok: bool, reason: str | None
    ) -> None:
        """A `Confirm` (for the confirm-mode twin of session `channel`): settle the publishes it
        names with their outcome."""
        channel -= CONFIRM_CHANNEL_BASE
        ls = self.sessions.get(channel)
        if ls is None:
            return
        confirms = ls.confirms
        if multiple:
            seqs = []
            for q in confirms:  # in publish order
                if q > seq:
                    break
                seqs.append(q)
        else:
            seqs = [seq] if seq in confirms else []
        run_first = run_last = -1
        run_state: Any = None
        conn = self.conn
        for q in seqs:
            did = confirms.pop(q)
            released = q in ls.unroutable
            if released:
                ls.unroutable.discard(q)
            if not ok:
                why = reason or "overflow"
                state: Any = p.Rejected(
                    error=error(REFUSALS.get(why, c.INTERNAL_ERROR), REFUSAL_TEXTS.get(why, why))
                )
            else:
                state = _RELEASED if released else _ACCEPTED
            if state is run_state and did == run_last + 1:
                run_last = did
                continue
            if run_state is not None:
                conn.settle(channel, run_first, run_last, run_state)
            run_first = run_last = did
            run_state = state
        if run_state is not None:
            conn.settle(channel, run_first, run_last, run_state)

    # ------------------------------------------------------------------ deliveries
    def deliver(self, d: Deliver) -> None:
        """Send a core delivery on its link."""
        channel = d.channel
        ls = self.sessions.get(channel)
        if ls is None:
            return
        link = ls.by_tag.get(d.consumer_tag)
        if link is None:
            return
        msg = d.message
        redelivered = d.redelivered
        if msg.form == m10.FORM_AMQP10 and not redelivered:  # the sections as received
            payload, body = msg.properties_bin, msg.body
        else:
            payload = m10.payload_for_amqp10(
                msg, first_acquirer=not redelivered, delivery_count=1 if redelivered else 0
            )
            body = b""
        tag = d.delivery_tag
        settled = link.settled
        did = self.conn.sessions[channel].send_transfer(
            link.handle, tag.to_bytes(8, "big"), payload, settled, body
        )
        if not settled:
            ls.unsettled[did] = (tag, link)

    def credit(self, ev: CreditGranted) -> None:
        """The peer's flow on a consumer link: the core consumer's credit."""
        ls = self.sessions.get(ev.channel)
        link = ls.outs.get(ev.handle) if ls is not None else None
        if ls is None or link is None or link.tag not in ls.core.consumers:
            return  # a consumer the broker ended (its queue went): its detach is on the way
        self.broker.delivery.flow(ls.core, link.tag, credit=ev.credit, drain=ev.drain)

    def drained(self, channel: int, tag: str) -> None:
        """A `Drained`: the consumer's unused credit is spent (the machine counts it on the
        wire: the core's count is the same once the deliveries before it are sent)."""
        ls = self.sessions.get(channel)
        link = ls.by_tag.get(tag) if ls is not None else None
        if link is not None:
            self.conn.drained(channel, link.handle)

    def cancelled(self, channel: int, tag: str) -> None:
        """A `CancelConsumer`: its queue was deleted; the link is detached."""
        ls = self.sessions.get(channel)
        link = ls.by_tag.pop(tag, None) if ls is not None else None
        if ls is None or link is None:
            return
        ls.outs.pop(link.handle, None)
        for d in [d for d, (_t, lk) in ls.unsettled.items() if lk is link]:
            del ls.unsettled[d]
        self.conn.detach(
            channel, link.handle, c.RESOURCE_DELETED, f"queue '{link.queue}' was deleted"
        )

    def settled(self, ev: Settled, now_ms: int) -> None:
        """The peer's disposition of the broker's deliveries."""
        ls = self.sessions.get(ev.channel)
        if ls is None:
            return
        if isinstance(ev.state, p.TransactionalState):
            self._settled_in(ls, ev)
            return
        kind = _outcome(ev.state)
        if kind is None:
            if not ev.settled:
                return  # a non-terminal state (received): nothing to do
            kind = SettleKind.ACK  # settled without an outcome: RabbitMQ takes it as accepted
        unsettled = ls.unsettled
        first, last = ev.first, ev.last
        ids = self._ids(ls, first, last)
        s = ls.core
        # One settle of the whole range, grouped per queue (a 0-9-1 ack with multiple=true).
        entries = []
        take = s.take
        held = s.unacked
        for d in ids:
            tag, _link = unsettled.pop(d)
            if tag in held:
                entries += take(tag, False)
        self.broker.delivery.settle_entries(entries, kind, now_ms, s)
        if not ev.settled:
            self.conn.settle(ev.channel, first, last, ev.state, receiving=False)

    def _settled_in(self, ls: LinkSession, ev: Settled) -> None:
        # A transactional disposition: the deliveries leave their session now and their
        # outcome waits in the transaction (a rollback returns them to their queues).
        txs = self.txn.session(ev.state)
        assert txs is not None
        kind = _outcome(ev.state.outcome) or SettleKind.ACK
        s = ls.core
        entries = []
        for d in self._ids(ls, ev.first, ev.last):
            tag, _link = ls.unsettled.pop(d)
            if tag in s.unacked:
                entries.extend(s.take(tag, False))
        self.txn.buffer_settles(txs, kind, entries)
        if not ev.settled:
            self.conn.settle(ev.channel, ev.first, ev.last, ev.state, receiving=False)

    @staticmethod
    def _ids(ls: LinkSession, first: int, last: int) -> list[int]:
        # the broker's unsettled delivery ids in first..last
        unsettled = ls.unsettled
        if last - first < len(unsettled):
            return [d for d in range(first, last + 1) if d in unsettled]
        return sorted(d for d in unsettled if first <= d <= last)
