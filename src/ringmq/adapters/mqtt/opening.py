"""The CONNECT of an MQTT connection (`MqttHandler`'s handshake): login, the core connection
and its two sessions, the will, client id takeover, the session resumed or discarded, CONNACK.

Theory of operation: `connect` runs for the CONNECT packet inside the read's core call. The
quick login backends answer at once (`HandlerContext.login`: the user table, OAuth 2 tokens,
certificates). When they refuse a password login and a slow backend is configured (LDAP,
`adapters.handler.ask_slow_login`, checked off the loop), the handler stops taking packets
(`MqttHandler.waiting_login`: what the client sends meanwhile stays in the machine's buffer)
until the answer comes back as a read of the connection; then `open_session` (or the refusal)
runs in a core call of its own and the packets that waited are taken, in order. Everything
else here runs as it did inside the handler: the functions take the handler, whose state this
module fills in once per connection.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Final

from ringmq.adapters.handler import LoginThrottledError, SlowAnswer, ask_slow_login
from ringmq.adapters.mqtt.connect import connack, connect_refusal, credentials
from ringmq.adapters.mqtt.message import EXCHANGE
from ringmq.adapters.mqtt.sessions import SavedSession, queue_name
from ringmq.adapters.mqtt.subscriptions import NEVER_EXPIRES, Subscriptions
from ringmq.adapters.mqtt.topics import to_routing_key
from ringmq.core.auth import Identity
from ringmq.core.effects import CloseConnection, Effect
from ringmq.core.errors import BrokerError, Condition
from ringmq.core.settings import SettingsError
from ringmq.mqtt import V5, Connect, Properties, Publish, Reason, State

if TYPE_CHECKING:
    from ringmq.adapters.mqtt.handler import MqttHandler

CHANNEL: Final = 1
"""The core session of subscriptions, QoS 0 publishes and wills."""
CONFIRM_CHANNEL: Final = 2
"""The core session of QoS 1/2 publishes, in confirm mode (QoS 0 ones need no confirm)."""
PROTOCOL_LABELS: Final = {3: "mqtt310", 4: "mqtt311", 5: "mqtt50"}
"""The `/metrics` protocol label of each MQTT protocol level, as rabbitmq_prometheus names them."""


def connect(h: MqttHandler, c: Connect, out: list[Effect], now_ms: int) -> None:
    """The CONNECT packet `c` (see the module docstring)."""
    m = h.machine
    h.version = c.protocol_level
    props = c.properties or Properties()
    if props.authentication_method is not None:
        m.refuse(Reason.BAD_AUTHENTICATION_METHOD, "enhanced authentication not supported")
        return
    # RabbitMQ's mqtt.ssl_cert_login: no credentials, a verified certificate names the user
    by_cert = c.username is None and c.password is None and h.ctx.peer.cert_login(h.broker, "mqtt")
    refused = connect_refusal(c, by_cert=by_cert)
    if refused is not None:
        m.refuse(*refused)
        return
    mechanism = "PLAIN"
    if by_cert:
        vhost, user, mechanism, password = "/", "", "EXTERNAL", ""
    else:
        login = credentials(c, h.broker.vhosts, h.broker.config.anonymous_login)
        if login is None:
            m.refuse(
                Reason.BAD_USER_NAME_OR_PASSWORD,
                "anonymous logins are off: a user name is required",
            )
            return
        vhost, user, password = login
    cid = c.client_id
    assigned = None
    if not cid:
        cid = assigned = h.broker.state.gen_name("mqtt-")
    try:
        who = h.ctx.login(mechanism, user, password, now_ms)
    except LoginThrottledError as exc:
        m.refuse(Reason.BAD_USER_NAME_OR_PASSWORD, exc.explanation)
        return
    except BrokerError as exc:
        answer = _slow_answer(h, c, vhost, cid, assigned)
        if ask_slow_login(h.ctx, mechanism, user, password, answer):
            h.waiting_login = True  # the packets after CONNECT wait in the machine
            return
        m.refuse(Reason.BAD_USER_NAME_OR_PASSWORD, exc.explanation)
        return
    open_session(h, c, vhost, who, cid, assigned, out, now_ms)


def _slow_answer(
    h: MqttHandler, c: Connect, vhost: str, cid: str, assigned: str | None
) -> SlowAnswer:
    # The slow backend's answer, run as a read of the connection: the CONNECT goes on (or is
    # refused) in a core call of its own, then the packets that waited are taken.
    def answer(who: Identity | None, why: str, now_ms: int) -> None:
        if h.released or h.machine.state is State.CLOSED:
            return
        h.waiting_login = False
        with h.broker.call(now_ms, publish=True) as out:
            if who is None:
                h.machine.refuse(Reason.BAD_USER_NAME_OR_PASSWORD, why)
            else:
                open_session(h, c, vhost, who, cid, assigned, out, now_ms)
            h.take_events(out, now_ms)
        h.ctx.emit(out)

    return answer


def open_session(
    h: MqttHandler,
    c: Connect,
    vhost: str,
    who: Identity,
    cid: str,
    assigned: str | None,
    out: list[Effect],
    now_ms: int,
) -> None:
    """The CONNECT of logged-in `who`: core connection (with the login's grant, this
    connection's alone) and sessions, will, client id takeover, the session resumed or
    discarded, CONNACK."""
    m = h.machine
    user = who.user
    v5 = c.protocol_level == V5
    props = c.properties or Properties()
    client_props = {"client_id": cid, "protocol": f"MQTT {h.version}"}
    try:
        h.broker.connection_opened(
            h.conn_id,
            user,
            vhost,
            h.ctx.peer.address,
            client_props,
            now_ms,
            protocol=PROTOCOL_LABELS.get(h.version, "mqtt"),
            grant=who.grant,
        )
    except BrokerError as exc:
        m.refuse(Reason.NOT_AUTHORIZED, exc.explanation)
        return
    h.is_open = True
    h.client_id, h.vhost, h.user = cid, vhost, user
    for channel in (CHANNEL, CONFIRM_CHANNEL):
        for e in h.broker.channel_opened(h.conn_id, channel, now_ms):
            if isinstance(e, CloseConnection):  # the user's max-channels
                refuse_opened(h, Reason.NOT_AUTHORIZED, e.text, out, now_ms)
                return
    s = h.session = h.broker.session(h.conn_id, CHANNEL)
    h.confirming = h.broker.session(h.conn_id, CONFIRM_CHANNEL)
    assert s is not None
    assert h.confirming is not None
    h.broker.confirms.select(h.confirming)
    if c.will is not None:
        try:
            h.broker.publisher.exchange_for(s, EXCHANGE, to_routing_key(c.will.topic))
        except BrokerError as exc:
            refuse_opened(h, Reason.NOT_AUTHORIZED, exc.explanation, out, now_ms)
            return
        w = c.will
        h.will = Publish(w.topic, w.payload, w.qos, w.retain, properties=w.properties)
        if w.properties is not None:
            h.will_delay_s = w.properties.will_delay_interval or 0
            w.properties.will_delay_interval = None
    if v5:
        h.expiry_s = props.session_expiry_interval or 0
        h.persistent = h.expiry_s > 0
        h.inflight = props.receive_maximum or 0xFFFF
    else:
        h.persistent = not c.clean_start
        h.expiry_s = NEVER_EXPIRES if h.persistent else 0
    h.subs = Subscriptions(
        h.broker,
        s,
        cid,
        persistent=h.persistent,
        expiry_s=h.expiry_s,
        inflight=h.inflight,
    )
    take_over(h, out, now_ms)
    h.registry.wills.pop(h.key, None)  # back before the will's delay: no will
    if c.clean_start:
        h.discard_session(now_ms)
    present = not c.clean_start and session_exists(h, now_ms)
    m.accept(connack(present, v5, assigned, h.max_packet_size))
    h.registry.live[h.key] = h
    try:
        resume(h, present, now_ms)
    except (BrokerError, SettingsError) as exc:
        h.disconnect(Reason.IMPLEMENTATION_SPECIFIC_ERROR, f"session not resumed: {exc}")


def refuse_opened(
    h: MqttHandler, reason: Reason, text: str, out: list[Effect], now_ms: int
) -> None:
    # Refuse a CONNECT after the core connection opened: close that too.
    h.machine.refuse(reason, text)
    h.released = True
    out.extend(h.broker.connection_closed(h.conn_id, now_ms))  # a nested call


def take_over(h: MqttHandler, out: list[Effect], now_ms: int) -> None:
    # §3.1.4-3: a second connection with a client id in use closes the first.
    old = h.registry.live.get(h.key)
    if old is None or old is h or type(old) is not type(h):
        return
    old.taken_over = True
    if not old.released:
        out.extend(old.release(now_ms))  # nested calls
    out.append(CloseConnection(old.conn_id, Condition.CONNECTION_FORCED, "session taken over"))


def session_exists(h: MqttHandler, now_ms: int) -> bool:
    vh = h.broker.vhosts[h.vhost]
    if h.registry.saved_session(h.key, now_ms) is not None:
        return True
    if any(queue_name(h.client_id, qos) in vh.queues for qos in (0, 1)):
        return True
    return bool(h.subs.member_bindings())  # only shared subscriptions


def resume(h: MqttHandler, present: bool, now_ms: int) -> None:
    # A resumed session: its subscriptions and consumers, its QoS 2 state.
    if not present:
        return
    found = h.registry.saved.pop(h.key, None)
    h.subs.restore(found, now_ms)
    saved = found or SavedSession()
    h.machine.qos2_in = set(saved.qos2_in)
    h.resend_ids = dict(saved.resend_ids)
    for pid in sorted(saved.pubrel_out):
        h.machine.resend_pubrel(pid)
