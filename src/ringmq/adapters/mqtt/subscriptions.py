"""The subscriptions of one MQTT session as queues, bindings and consumers of the core.

Theory of operation: a session has up to two queues (`sessions.queue_name`: one for QoS 0
subscriptions, consumed without acknowledgement, one for QoS 1 and 2, consumed with
acknowledgements under the client's Receive Maximum as prefetch), each bound to `amq.topic`
once per subscription with the filter as binding key (`topics.to_routing_key`) and the
subscription's options as binding arguments (`Sub.binding_args`), so that a durable session
comes back from its bindings after a restart. A shared subscription consumes its group's one
queue (`sessions.shared_queue_name`). Queues are declared through `Topology.declare_queue`
with the session's permissions, so each takes the policies and address settings that match
its name.

`matching` answers, at delivery, which subscriptions a message satisfies: the exchange chose
the queue, MQTT's own rule (`topics.matches`, `$` topics, no-local) chooses the subscriptions.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Final

from ringmq.adapters.mqtt.message import EXCHANGE, PUBLISHER_HEADER
from ringmq.adapters.mqtt.sessions import (
    MEMBER_ARG,
    SHARED_PREFIX,
    SavedSession,
    Sub,
    queue_name,
    shared_queue_name,
)
from ringmq.adapters.mqtt.topics import from_routing_key, matches, to_routing_key
from ringmq.core.message import Message
from ringmq.core.session import Session

if TYPE_CHECKING:
    from ringmq.core.broker import Broker
    from ringmq.core.entities import QueueEntity

TAG_QOS0: Final = "mqtt-qos0"
TAG_QOS1: Final = "mqtt-qos1"
TAG_SHARE: Final = "mqtt-share/"
NEVER_EXPIRES: Final = 0xFFFFFFFF


class Subscriptions:
    """The subscriptions of one connected session (see the module docstring).

    Args:
        broker: the core.
        session: the connection's core session.
        client_id: the MQTT client id (names the queues).
        persistent: the session outlives the connection (durable queues).
        expiry_s: the 5.0 Session Expiry Interval (`x-expires` of its queues).
        inflight: unacknowledged QoS 1/2 deliveries allowed (the prefetch).
    """

    def __init__(
        self,
        broker: Broker,
        session: Session,
        client_id: str,
        *,
        persistent: bool,
        expiry_s: int,
        inflight: int,
    ) -> None:
        self.broker = broker
        self.session = session
        self.client_id = client_id
        self.persistent = persistent
        self.expiry_s = expiry_s
        self.inflight = inflight
        self.plain: dict[str, Sub] = {}
        self.shared: dict[str, Sub] = {}
        """By the whole filter as subscribed (`$share/<group>/<filter>`)."""
        self.no_ack_tags: set[str] = set()

    @property
    def no_local(self) -> bool:
        """Some subscription asks not to receive this client's own publishes."""
        plain = self.plain  # asked per publish: most publishers subscribe to nothing
        return bool(plain) and any(sub.no_local for sub in plain.values())

    # ------------------------------------------------------------------ session
    def restore(self, saved: SavedSession | None, now_ms: int) -> None:
        """Resume a session: its subscriptions (read back from the queues' bindings without
        `saved`, i.e. after a restart) and its consumers."""
        vh = self.session.vhost
        if saved is None:
            plain: dict[str, Sub] = {}
            for qos in (0, 1):
                name = queue_name(self.client_id, qos)
                if name in vh.queues:
                    for x, rk, args in vh.bindings_to(("q", name)):
                        if x.name == EXCHANGE:
                            f = from_routing_key(rk)
                            plain[f] = Sub.from_binding(f, args, qos)
            shared = {
                f"$share/{sub.group}/{sub.topic_filter}": sub
                for _name, sub in self.member_bindings()
            }
        else:
            plain, shared = saved.subs, saved.shared
        self.plain = plain
        for qos in (0, 1):
            if queue_name(self.client_id, qos) in vh.queues:
                self._queue(qos, now_ms)
        for full, sub in shared.items():
            self.add_shared(full, sub, now_ms)

    def _queue(self, qos: int, now_ms: int) -> QueueEntity:
        # The session's queue for QoS 0 or for QoS 1/2: declared and consumed on first use.
        s = self.session
        name = queue_name(self.client_id, qos)
        tag = TAG_QOS0 if qos == 0 else TAG_QOS1
        topology = self.broker.topology
        q = s.vhost.queues.get(name)
        if q is None:
            args: dict[str, Any] = {}
            if self.persistent and self.expiry_s != NEVER_EXPIRES:
                args["x-expires"] = self.expiry_s * 1000
            topology.declare_queue(
                s,
                name,
                durable=self.persistent,
                exclusive=not self.persistent,
                auto_delete=False,
                arguments=args,
                now_ms=now_ms,
            )
            q = topology.queue_for(s, name)
        if tag not in s.consumers:
            self._consume(name, tag, no_ack=qos == 0, now_ms=now_ms)
        return q

    def _consume(self, queue: str, tag: str, *, no_ack: bool, now_ms: int) -> None:
        s = self.session
        delivery = self.broker.delivery
        if no_ack:
            self.no_ack_tags.add(tag)
        else:
            delivery.set_prefetch(s, self.inflight, session_wide=False)
        delivery.consume(s, queue, tag, no_ack=no_ack, exclusive=False, arguments={}, now_ms=now_ms)

    # ------------------------------------------------------------------ SUBSCRIBE
    def add_plain(self, sub: Sub, now_ms: int) -> bool:
        """Bind a plain subscription (replacing one of the same filter); True if it existed."""
        s = self.session
        topology = self.broker.topology
        q = self._queue(sub.queue_qos, now_ms)
        rk = to_routing_key(sub.topic_filter)
        old = self.plain.get(sub.topic_filter)
        args = sub.binding_args()
        if old is not None:
            old_q = queue_name(self.client_id, old.queue_qos)
            if old_q != q.name or old.binding_args() != args:
                topology.unbind_queue(s, old_q, EXCHANGE, rk, old.binding_args())
        topology.bind_queue(s, q.name, EXCHANGE, rk, args)
        self.plain[sub.topic_filter] = sub
        return old is not None

    def add_shared(self, full: str, sub: Sub, now_ms: int) -> None:
        """Consume a shared subscription's group queue (declared and bound on first use)."""
        s = self.session
        assert sub.group is not None
        topology = self.broker.topology
        name = shared_queue_name(sub.group, sub.topic_filter)
        if name not in s.vhost.queues:
            topology.declare_queue(
                s,
                name,
                durable=self.persistent,
                exclusive=False,
                auto_delete=not self.persistent,
                arguments={},
                now_ms=now_ms,
            )
        old = self.shared.get(full)
        rk = to_routing_key(sub.topic_filter)
        if old is not None and old.binding_args(self.client_id) != sub.binding_args(self.client_id):
            topology.unbind_queue(s, name, EXCHANGE, rk, old.binding_args(self.client_id))
        # One binding per member: the group's queue is bound while some member subscribes
        topology.bind_queue(s, name, EXCHANGE, rk, sub.binding_args(self.client_id))
        tag = TAG_SHARE + full
        if tag in s.consumers:
            self.broker.delivery.cancel(s, tag, now_ms)
            self.no_ack_tags.discard(tag)
        self.shared[full] = sub
        self._consume(name, tag, no_ack=sub.qos == 0, now_ms=now_ms)

    def remove(self, topic_filter: str, now_ms: int) -> bool:
        """UNSUBSCRIBE one filter; False when there was no such subscription."""
        s = self.session
        shared = self.shared.pop(topic_filter, None)
        if shared is not None:
            self.broker.delivery.cancel(s, TAG_SHARE + topic_filter, now_ms)
            self._unbind_member(shared_queue_name(shared.group or "", shared.topic_filter), shared)
            return True
        sub = self.plain.pop(topic_filter, None)
        if sub is None:
            return False
        name = queue_name(self.client_id, sub.queue_qos)
        rk = to_routing_key(topic_filter)
        self.broker.topology.unbind_queue(s, name, EXCHANGE, rk, sub.binding_args())
        return True

    def leave_groups(self, now_ms: int) -> None:
        """The session ends: drop this client's bindings of every shared queue (those of
        this connection, and any a previous persistent session left)."""
        for name, sub in self.member_bindings():
            self._unbind_member(name, sub)
        for full in list(self.shared):
            self.broker.delivery.cancel(self.session, TAG_SHARE + full, now_ms)
        self.shared.clear()

    def member_bindings(self) -> list[tuple[str, Sub]]:
        """(shared queue, subscription) of every binding that names this client a member."""
        vh = self.session.vhost
        out: list[tuple[str, Sub]] = []
        for name in [n for n in vh.queues if n.startswith(SHARED_PREFIX)]:
            for x, rk, args in vh.bindings_to(("q", name)):
                if x.name == EXCHANGE and args.get(MEMBER_ARG) == self.client_id:
                    sub = Sub.from_binding(from_routing_key(rk), args, 1)
                    if sub.group is not None:
                        out.append((name, sub))
        return out

    def _unbind_member(self, name: str, sub: Sub) -> None:
        rk = to_routing_key(sub.topic_filter)
        args = sub.binding_args(self.client_id)
        self.broker.topology.unbind_queue(self.session, name, EXCHANGE, rk, args)

    def cancelled(self, tag: str) -> None:
        """The broker deleted a queue this session consumed: its subscriptions are gone."""
        if tag.startswith(TAG_SHARE):
            self.shared.pop(tag[len(TAG_SHARE) :], None)
        elif tag in (TAG_QOS0, TAG_QOS1):
            qq = 0 if tag == TAG_QOS0 else 1
            self.plain = {f: sub for f, sub in self.plain.items() if sub.queue_qos != qq}

    # ------------------------------------------------------------------ deliveries
    def acked(self, tag: str) -> bool:
        """Deliveries to consumer `tag` wait for an acknowledgement."""
        return tag not in self.no_ack_tags

    def matching(self, tag: str, topic: str, msg: Message) -> list[Sub]:
        """The subscriptions behind consumer `tag` that a message on `topic` satisfies."""
        if tag.startswith(TAG_SHARE):
            one = self.shared.get(tag[len(TAG_SHARE) :])
            return [one] if one is not None and matches(one.topic_filter, topic) else []
        qq = 0 if tag == TAG_QOS0 else 1
        subs = [
            sub
            for sub in self.plain.values()
            if sub.queue_qos == qq and matches(sub.topic_filter, topic)
        ]
        headers = msg.headers
        if subs and headers and headers.get(PUBLISHER_HEADER) == self.client_id:
            subs = [sub for sub in subs if not sub.no_local]
        return subs
