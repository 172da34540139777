"""One MQTT client connection on the core: the `Handler` the server drives.

Theory of operation
-------------------
`MqttHandler` pairs the sans-IO machine (`ringmq.mqtt.MqttConnection`: packets, packet ids,
keep-alive) with the core. Each read batch is one core call (`Broker.call`): the packets'
work on the owners (the connection's two core sessions: channel 1 for its subscriptions and
QoS 0 publishes, channel 2 in confirm mode for QoS 1/2 publishes), then the end of the call,
whose dispatch rule treats the batch as a publish (the server's `dispatch_pending` follows
every read and hands the batch out in one pass per queue); the effects go back to the server,
which hands this connection's own (deliveries, confirms) to `apply`. A client id takeover
releases the old connection inside the CONNECT's call: whole calls nested in it, which the
core's call protocol allows (`core/call.py`); their effects join the batch's.

* CONNECT (`opening.py`): login through `HandlerContext.login` (`vhost:user` picks the vhost,
  else "/"; no user name: the broker's anonymous login, `connect.credentials`), or a slow
  backend (LDAP) while the packets after it wait, the core connection and session, client id
  takeover (`sessions.Registry.live`), the session (clean or resumed: its queues, their
  bindings, the saved QoS 2 state), CONNACK.
* PUBLISH from the client: routed through `amq.topic` (`topics.to_routing_key`), stored as
  an AMQP 0-9-1 message (`message.incoming`); a retained one is also put in the vhost's
  retained store. QoS 1/2 publishes are acknowledged (PUBACK / PUBREC) when the core's
  `Confirm` for them comes back, i.e. after the fsync for persistent messages.
* SUBSCRIBE: each filter is a binding of the session's queue for its QoS (0, or 1 and 2) to
  `amq.topic`, with the options in the binding's arguments; a shared subscription consumes
  its group's one queue. SUBACK, then the retained messages that match.
* Deliveries (`apply(Deliver)`): the subscriptions that match the topic (MQTT's rule, with
  `$` topics, which the exchange does not know) give the QoS, subscription ids, no-local and
  retain-as-published; a QoS 1/2 delivery is settled in the core on PUBACK / PUBREC. What is
  delivered at QoS 0 from an acknowledged queue, or dropped (no matching subscription, too
  large for the client), is acknowledged in the core at once, from `apply`: the one core call
  `apply` makes, an ack, which adds no effect; the queue it marks is dispatched by the
  server's next dispatch (the deadline it re-arms after every batch is immediate then).
* The end (`connection_lost`): the will (unless the client said DISCONNECT), published now
  or held for its delay; a persistent session's in-memory part saved, a clean one's queues
  deleted; the core connection closed (unacknowledged deliveries go back to their queues).

Errors: a protocol violation is answered by the machine (DISCONNECT with a reason code in
5.0, a closed socket in 3.1.1); a refused core call on a QoS 1/2 publish is a PUBACK/PUBREC
reason code in 5.0 and a closed connection in 3.1.1 (which has no way to refuse one).
"""

from __future__ import annotations

import logging
from typing import Final

from ringmq.adapters.handler import HandlerContext, HandlerInfo
from ringmq.adapters.mqtt.connect import (
    TOPIC_ALIAS_MAXIMUM,
)
from ringmq.adapters.mqtt.errors import CLOSE, REFUSED, reason_of
from ringmq.adapters.mqtt.message import (
    EXCHANGE,
    incoming,
    outgoing_properties,
    payload_of,
    published_qos,
    retained_topic,
)
from ringmq.adapters.mqtt.opening import CHANNEL, connect
from ringmq.adapters.mqtt.sessions import (
    SavedSession,
    Sub,
    queue_name,
    registry_of,
    retained_matching,
)
from ringmq.adapters.mqtt.subscriptions import NEVER_EXPIRES, Subscriptions
from ringmq.adapters.mqtt.topics import (
    TopicError,
    check_filter,
    check_topic_name,
    from_routing_key,
    parse_shared,
    to_routing_key,
)
from ringmq.adapters.mqtt.wills import publish_will, store_retained
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
from ringmq.mqtt import (
    V5,
    Auth,
    Connect,
    Disconnect,
    MqttConnection,
    MQTTError,
    PubAck,
    Publish,
    PubRec,
    Reason,
    Stage,
    State,
    SubAck,
    Subscribe,
    UnsubAck,
    Unsubscribe,
    Violation,
)

log = logging.getLogger(__name__)

DEFAULT_INFLIGHT: Final = 100
"""Unacknowledged QoS 1/2 deliveries to a 3.1.1 client (5.0: its Receive Maximum)."""
_MQTT_MAX_PACKET: Final = 268_435_460


class MqttHandler:
    """One MQTT connection (see the module docstring)."""

    def __init__(self, ctx: HandlerContext) -> None:
        self.ctx = ctx
        self.broker = ctx.broker
        self.conn_id = ctx.conn_id
        self.registry = registry_of(ctx.broker)
        self.max_packet_size = min(ctx.limits.max_message_size + 65536, _MQTT_MAX_PACKET)
        self.machine = MqttConnection(
            max_packet_size=self.max_packet_size, topic_alias_maximum=TOPIC_ALIAS_MAXIMUM
        )
        self.is_open = False
        self.released = False
        self.waiting_login = False
        """A slow backend (LDAP) checks the CONNECT's login: packets wait (`opening.py`)."""
        self.client_id = ""
        self.vhost = "/"
        self.user = ""
        self.version = 4
        self.persistent = False
        self.expiry_s = 0
        self.session: Session | None = None
        self.confirming: Session | None = None
        self.subs: Subscriptions  # from the CONNECT on
        self.will: Publish | None = None
        self.will_delay_s = 0
        self.graceful = False
        self.taken_over = False
        self.inflight = DEFAULT_INFLIGHT
        self.confirms: dict[int, int] = {}  # publish seq -> packet id (QoS 1/2 publishes)
        self.out_tags: dict[int, int] = {}  # outbound packet id -> delivery tag (0: none)
        self.out_keys: dict[int, tuple[str, int]] = {}  # packet id -> (queue, seq) sent
        self.resend_ids: dict[tuple[str, int], int] = {}  # a resumed session's packet ids
        self.now_ms = 0
        # The last topic published on and its routing key: a client mostly publishes to one
        # topic, which then needs checking and mapping once, not per message. One attribute:
        # past 30 attribute names CPython stops sharing the class's key table, and every
        # handler gets a whole dict of its own.
        self._topic_key = ("", "")

    # ------------------------------------------------------------------ Handler
    @property
    def opened(self) -> bool:
        return self.is_open

    @property
    def closed(self) -> bool:
        return self.machine.state is State.CLOSED

    @property
    def key(self) -> tuple[str, str]:
        return (self.vhost, self.client_id)

    def receive_data(self, data: bytes, now_ms: int) -> list[Effect]:
        """Take socket bytes: run every whole packet, one core call for the batch."""
        self.now_ms = now_ms
        m = self.machine
        m.feed(data, now_ms)
        with self.broker.call(now_ms, publish=True) as out:
            self.take_events(out, now_ms)
        return out

    def take_events(self, out: list[Effect], now_ms: int) -> None:
        """Run the machine's whole packets, in a core call (none while a slow login of the
        CONNECT is asked: `opening.py`, which calls this again when it is answered)."""
        m = self.machine
        while not self.waiting_login and (event := m.next_event()) is not None:
            try:
                self._event(event, out, now_ms)
            except MQTTError as exc:
                self.disconnect(exc.reason, exc.text)
            except BrokerError as exc:
                self.disconnect(reason_of(exc), exc.explanation)

    def apply(self, effect: Effect) -> None:
        """Queue the packets of a core effect for this connection."""
        match effect:
            case Deliver():
                self._deliver(effect)
            case Confirm():
                self._confirmed(effect)
            case CloseConnection():  # the server calls `close` for these; direct drivers may not
                self.close(effect.condition, effect.text)
            case CloseChannel():  # a consumer timeout: MQTT's session is the connection
                self.close(effect.condition, effect.text)
            case CancelConsumer():
                self.subs.cancelled(effect.consumer_tag)
            case _:
                pass  # no MQTT form (returns, reply-to, blocks: flow is the socket's)

    def data_to_send(self) -> bytes:
        return self.machine.data_to_send()

    def tick(self, now_ms: int, mono_ms: int) -> list[Effect]:
        """Keep-alive (the delayed wills are `wills.mqtt_tick`'s, the protocol's own tick)."""
        self.now_ms = now_ms
        if not self.is_open or self.released:
            return []
        # The rule of a read batch's call: what is dirty waits for the server's next dispatch.
        with self.broker.call(now_ms, publish=True) as out:
            if self.machine.keep_alive_expired(now_ms):
                self.machine.close(Reason.KEEP_ALIVE_TIMEOUT, "keep-alive timeout")
        return out

    def tick_idle_ms(self, now_ms: int, mono_ms: int) -> int | None:
        """`TickDeadline`: `tick` has work once the keep-alive would expire."""
        if not self.is_open or self.released:
            return None
        due = self.machine.keep_alive_due_ms()
        return None if due is None else max(0, due - now_ms)

    def close(self, condition: Condition, text: str) -> None:
        reason = CLOSE.get(condition, Reason.IMPLEMENTATION_SPECIFIC_ERROR)
        if self.taken_over:
            reason = Reason.SESSION_TAKEN_OVER
        elif condition is Condition.CONNECTION_FORCED and "shut" in text.lower():
            reason = Reason.SERVER_SHUTTING_DOWN
        self.machine.close(reason, text)

    def connection_lost(self, now_ms: int) -> list[Effect]:
        if not self.is_open or self.released:
            return []
        return self.release(now_ms)

    def info(self) -> HandlerInfo:
        proto = {3: "MQTT 3.1", 4: "MQTT 3.1.1", 5: "MQTT 5.0"}.get(self.version, "MQTT")
        return HandlerInfo(
            protocol=proto,
            user=self.user,
            vhost=self.vhost,
            auth_mechanism="PLAIN" if self.user else "",
            client_properties={"client_id": self.client_id, "clean_session": not self.persistent},
            channels=1 if self.is_open and not self.released else 0,
            heartbeat_s=self.machine.keep_alive_s,
            frame_max=self.max_packet_size,
        )

    # ------------------------------------------------------------------ events
    def _event(self, event: object, out: list[Effect], now_ms: int) -> None:
        match event:
            case Publish():
                self._publish(event, now_ms)
            case PubAck() | PubRec():
                self.out_keys.pop(event.packet_id, None)
                tag = self.out_tags.pop(event.packet_id, 0)
                if tag:
                    self._settle(tag, now_ms)
            case Subscribe():
                self._subscribe(event, now_ms)
            case Unsubscribe():
                self._unsubscribe(event, now_ms)
            case Connect():
                connect(self, event, out, now_ms)
            case Disconnect():
                self._client_disconnect(event)
            case Auth():
                raise MQTTError(Reason.PROTOCOL_ERROR, "AUTH without an authentication method")
            case Violation():
                log.info("MQTT connection %s: %s", self.conn_id, event.text)
            case _:
                raise MQTTError(Reason.PROTOCOL_ERROR, f"unexpected {type(event).__name__}")

    def disconnect(self, reason: Reason, text: str) -> None:
        log.info("MQTT connection %s closed: %s (%s)", self.conn_id, text, reason.name)
        self.machine.close(reason, text)

    # ------------------------------------------------------------------ CONNECT (opening.py)
    def discard_session(self, now_ms: int) -> None:
        # A clean start, or the end of a session that does not outlive its connection:
        # whatever the client id has or left behind goes (queues, group bindings, saved state).
        self.registry.saved.pop(self.key, None)
        self.subs.leave_groups(now_ms)
        vh = self.broker.vhosts[self.vhost]
        for qos in (0, 1):
            q = vh.queues.get(queue_name(self.client_id, qos))
            if q is not None and q.exclusive_owner is None:
                self.broker.topology.delete_queue(vh, q, now_ms)

    def _client_disconnect(self, d: Disconnect) -> None:
        self.graceful = d.reason_code != Reason.DISCONNECT_WITH_WILL
        props = d.properties
        if props is not None and props.session_expiry_interval is not None:
            if not self.persistent and props.session_expiry_interval > 0:
                self.graceful = False  # §3.14.2.2.2: a protocol error
                return
            if props.session_expiry_interval == 0:
                self.persistent = False

    # ------------------------------------------------------------------ the end
    def release(self, now_ms: int) -> list[Effect]:
        # The connection is over (lost, or taken over): will, session, core connection.
        self.released = True
        with self.broker.call(now_ms) as out:
            if self.will is not None and not self.graceful:
                assert self.session is not None
                delay_s = min(self.will_delay_s, self.expiry_s) if self.persistent else 0
                publish_will(
                    self.broker, self.registry, self.session, self.key, self.will, delay_s, now_ms
                )
            if self.persistent:
                m = self.machine
                self.registry.saved[self.key] = SavedSession(
                    self.subs.plain,
                    self.subs.shared,
                    set(m.qos2_in),
                    {pid for pid, st in m.outbound.items() if st is Stage.AWAIT_PUBCOMP},
                    {key: pid for pid, key in self.out_keys.items() if pid in m.outbound},
                    None if self.expiry_s == NEVER_EXPIRES else now_ms + self.expiry_s * 1000,
                )
            else:
                self.discard_session(now_ms)
        if self.registry.live.get(self.key) is self:
            del self.registry.live[self.key]
        closed = self.broker.connection_closed(self.conn_id, now_ms)
        mine = self.conn_id
        return [e for e in out if e.conn_id != mine] + closed

    # ------------------------------------------------------------------ PUBLISH (client)
    def _publish(self, p: Publish, now_ms: int) -> None:
        m = self.machine
        s = self.confirming if p.qos else self.session
        assert s is not None
        topic = p.topic
        last, routing_key = self._topic_key
        if topic != last or not topic:
            try:
                check_topic_name(topic)
            except TopicError as exc:
                raise MQTTError(Reason.TOPIC_NAME_INVALID, str(exc)) from None
            routing_key = to_routing_key(topic)
            self._topic_key = (topic, routing_key)
        publisher = self.broker.publisher
        try:
            vh, x = publisher.exchange_for(s, EXCHANGE, routing_key)
            publisher.check_size(len(p.payload))
            msg = incoming(
                s,
                p,
                routing_key,
                now_ms,
                publisher=self.client_id if self.subs.no_local else None,
            )
            if p.retain:
                store_retained(self.broker, s, p, msg, now_ms)
            publisher.publish(msg, session=s, vhost=vh, exchange=x, now_ms=now_ms)
        except BrokerError as exc:
            if p.qos and self.version == V5:
                m.settle_publish(p.packet_id, reason_of(exc))
                return
            raise
        if p.qos:
            self.confirms[s.publish_seq] = p.packet_id

    def _confirmed(self, c: Confirm) -> None:
        confirms = self.confirms
        if c.multiple:
            seqs = [q for q in confirms if q <= c.seq]
        else:
            seqs = [c.seq] if c.seq in confirms else []
        for seq in seqs:
            pid = confirms.pop(seq)
            if c.ok:
                self.machine.settle_publish(pid)
            elif self.version == V5:
                reason = REFUSED.get(c.reason or "", Reason.IMPLEMENTATION_SPECIFIC_ERROR)
                self.machine.settle_publish(pid, reason)
            else:  # 3.1.1 cannot refuse a publish: close, the client publishes it again
                self.disconnect(Reason.UNSPECIFIED_ERROR, f"publish refused: {c.reason}")
                return

    # ------------------------------------------------------------------ SUBSCRIBE
    def _subscribe(self, p: Subscribe, now_ms: int) -> None:
        v5 = self.version == V5
        sub_id = None
        if p.properties is not None and p.properties.subscription_identifiers:
            sub_id = p.properties.subscription_identifiers[0]
        codes: list[int] = []
        retained: list[tuple[Sub, bool]] = []
        for entry in p.subscriptions:
            f = entry.topic_filter
            try:
                shared = parse_shared(f)
                if shared is None:
                    check_filter(f)
                elif entry.no_local:
                    raise MQTTError(Reason.PROTOCOL_ERROR, "no-local on a shared subscription")
                sub = Sub(
                    shared[1] if shared else f,
                    entry.qos,
                    entry.no_local,
                    entry.retain_as_published,
                    entry.retain_handling,
                    sub_id,
                    shared[0] if shared else None,
                )
                if shared is not None:
                    self.subs.add_shared(f, sub, now_ms)
                else:
                    retained.append((sub, self.subs.add_plain(sub, now_ms)))
                codes.append(entry.qos)
            except TopicError:
                codes.append(Reason.TOPIC_FILTER_INVALID if v5 else 0x80)
            except (BrokerError, SettingsError) as exc:
                log.info("MQTT subscribe %r refused: %s", f, exc)
                refused = isinstance(exc, BrokerError) and exc.condition in (
                    Condition.ACCESS_REFUSED,
                    Condition.NOT_ALLOWED,
                )
                codes.append(
                    (Reason.NOT_AUTHORIZED if refused else Reason.UNSPECIFIED_ERROR) if v5 else 0x80
                )
        self.machine.send(SubAck(p.packet_id, codes))
        for sub, existed in retained:
            if sub.retain_handling == 0 or (sub.retain_handling == 1 and not existed):
                self._send_retained(sub, now_ms)

    def _send_retained(self, sub: Sub, now_ms: int) -> None:
        for topic, msg in retained_matching(self.broker, self.vhost, sub.topic_filter, now_ms):
            qos = min(published_qos(msg), sub.qos)
            props = None
            if self.version == V5:
                props = outgoing_properties(msg, now_ms)
                if sub.identifier is not None:
                    props.subscription_identifiers = [sub.identifier]
            p = Publish(topic, msg.body, qos, True, False, 0, props)
            if self.machine.send_publish(p) and qos:
                self.out_tags[p.packet_id] = 0

    def _unsubscribe(self, p: Unsubscribe, now_ms: int) -> None:
        codes: list[int] = [
            Reason.SUCCESS if self.subs.remove(f, now_ms) else Reason.NO_SUBSCRIPTION_EXISTED
            for f in p.topic_filters
        ]
        self.machine.send(UnsubAck(p.packet_id, codes if self.version == V5 else []))

    # ------------------------------------------------------------------ deliveries
    def _deliver(self, d: Deliver) -> None:
        msg = d.message
        acked = self.subs.acked(d.consumer_tag)
        retained = retained_topic(msg)
        topic = retained or from_routing_key(msg.routing_key)
        subs = self.subs.matching(d.consumer_tag, topic, msg)
        if not subs:
            if acked:
                self._settle(d.delivery_id, self.now_ms)
            return
        qos = min(published_qos(msg), max(sub.qos for sub in subs))
        retain = retained is not None and any(sub.retain_as_published for sub in subs)
        props = None
        if self.version == V5:
            props = outgoing_properties(msg, self.now_ms)
            props.subscription_identifiers = sorted(
                {sub.identifier for sub in subs if sub.identifier is not None}
            )
        # A message sent before in this session and not acknowledged goes again under its
        # packet identifier (§4.4): the client recognises a QoS 2 message it already has.
        key = self._queue_key(d.delivery_id) if qos and acked else None
        pid = self.resend_ids.pop(key, 0) if key is not None and d.redelivered else 0
        if pid in self.machine.outbound:
            pid = 0
        p = Publish(topic, payload_of(msg), qos, retain, d.redelivered and qos > 0, pid, props)
        sent = self.machine.send_publish(p)
        if sent and qos:
            self.out_tags[p.packet_id] = d.delivery_id if acked else 0
            if key is not None:
                self.out_keys[p.packet_id] = key
        elif acked:
            self._settle(d.delivery_id, self.now_ms)

    def _queue_key(self, tag: int) -> tuple[str, int] | None:
        # (queue, seq) of an acknowledged delivery: what names a message across connections.
        s = self.session
        entry = s.unacked.get(tag) if s is not None else None
        return (entry.queue.name, entry.seq) if entry is not None else None

    def _settle(self, tag: int, now_ms: int) -> None:
        s = self.session
        if s is None or (self.released and self.broker.session(self.conn_id, CHANNEL) is None):
            return
        try:
            self.broker.delivery.settle(s, tag, False, SettleKind.ACK, now_ms)
        except BrokerError:
            pass  # already settled (the queue went away)
