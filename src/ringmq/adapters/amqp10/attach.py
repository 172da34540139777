"""AMQP 1.0 attach: the link a peer attaches, resolved to core nodes and calls, or refused.

Theory of operation
-------------------
`Attacher.attach` answers one `LinkAttaching` event. A peer's sender (the broker receives)
gets an `InLink`: a transaction coordinator, an anonymous relay (no target address: each
message's `to`), a dynamic target (a temporary queue of the connection, named by the broker,
deleted with its link by `Links.detached`), or the node its address names
(`addresses.resolve`: an anycast queue is created if missing, as Artemis auto-creates them;
the write permission on the exchange is checked now). A peer's receiver (the broker sends)
gets an `OutLink`, a core consumer with no credit yet: of a queue, an anycast queue (created
if missing), a dynamic source's temporary queue, or a multicast subscription queue bound to
`amq.topic` (durable and shared subscriptions named as Artemis names them; no-local keyed by
the client's container id). Source filters (`filters.py`) give a selector and no-local; the
reply echoes only the filters applied. Every refusal is a `RefusalError` or a core
`BrokerError`, answered by refusing the attach (the peer then detaches). The records go into
the session's `LinkSession`, which `Links` owns for what follows (transfers, settlement,
detach).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Final

from ringmq.adapters.amqp10.addresses import TOPIC_EXCHANGE, AddressError, Kind, Node, resolve
from ringmq.adapters.amqp10.errors import condition_of
from ringmq.adapters.amqp10.filters import FilterError, SourceFilters, source_filters
from ringmq.adapters.amqp10.linkstate import InLink, LinkSession, OutLink, RefusalError
from ringmq.amqp10 import conditions as c
from ringmq.amqp10 import performatives as p
from ringmq.core.errors import BrokerError
from ringmq.core.policies import RoutingType
from ringmq.core.selector import Selector, SelectorError

if TYPE_CHECKING:
    from ringmq.amqp10.connection import Connection
    from ringmq.amqp10.events import LinkAttaching
    from ringmq.core.broker import Broker
    from ringmq.core.session import Session

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


class Attacher:
    """Attaches the links of one connection (see the module docstring)."""

    def __init__(self, broker: Broker, conn: Connection, sessions: dict[int, LinkSession]) -> None:
        self.broker = broker
        self.conn = conn
        self.sessions = sessions
        self.container_id = ""
        """The client's container id (its open): names subscriptions, keys no-local."""
        self._serial = 0

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
            s = ls.core
            node = self._node(s, str(target.address), _caps(target.capabilities))
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
            node = self._node(s, address, caps)
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
        if filters.stream_offset is not None:
            arguments["x-stream-offset"] = filters.stream_offset_argument()
        b.delivery.consume(
            s, queue, tag, no_ack=settled, exclusive=False, arguments=arguments,
            now_ms=now_ms, browse=browse, selector=selector, no_local=no_local, owner=owner,
            credit_flow=True,  # link credit, not a prefetch (a stream accepts either)
        )  # fmt: skip
        entity = s.vhost.queues.get(queue)
        stream = entity is not None and entity.stream is not None
        b.delivery.flow(s, tag, credit=0, drain=False)
        reply = p.Source(
            address=address,
            durable=source.durable,
            expiry_policy=source.expiry_policy,
            timeout=source.timeout,
            dynamic=source.dynamic,
            distribution_mode=source.distribution_mode,
            filter=filters.applied(no_local=no_local, stream=stream),
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

    def relay_node(self, s: Session, address: str, now_ms: int) -> Node:
        """The node an anonymous relay's message names by its `to` (an anycast queue is
        created if missing, as for a sender attaching to it); RefusalError if invalid."""
        node = self._node(s, address, ())
        if node.kind is Kind.ANYCAST:
            self._ensure_queue(s, node.name, now_ms)
        return node

    def _node(self, s: Session, address: str, caps: tuple[str, ...]) -> Node:
        def plain(name: str) -> Kind | None:
            # Artemis' default-address-routing-type, for a plain name that is no queue yet.
            if name in s.vhost.queues:
                return Kind.ANYCAST
            routing = self.broker.address_settings.resolve(name).routing_type
            if routing is None:
                return None
            return Kind.MULTICAST if routing is RoutingType.MULTICAST else Kind.ANYCAST

        try:
            return resolve(address, caps, plain)
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
            if not self.broker.address_settings.resolve(name).may_auto_create:
                raise RefusalError(
                    c.NOT_FOUND,
                    f"no queue '{name}' in vhost '{s.vhost.name}' and auto-create-queues "
                    "is off for this address",
                )
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
