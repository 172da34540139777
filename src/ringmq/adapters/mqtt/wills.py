"""What a publish leaves beyond its delivery: the retained store's copy, and wills.

A retained publish is also put, durably whatever its QoS, into the vhost's retained store
(`sessions.retained_queue`: the newest message per topic). A will is published like a client
publish when its connection ends badly; with a 5.0 Will Delay Interval (and a session that
outlives the connection) it waits in the registry (`sessions.Registry.wills`) until
`publish_due_wills`, which the server's periodic sweep runs whether or not any MQTT connection
is open (`mqtt_tick`, a protocol tick of `adapters/handler.py`), or until the client comes back
and cancels it. A held will is published with no session: its connection checked the user's
write permission on `amq.topic` when it connected.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from ringmq.adapters.mqtt.message import EXCHANGE, incoming
from ringmq.adapters.mqtt.sessions import PendingWill, Registry, registry_if_any, retained_queue
from ringmq.adapters.mqtt.topics import to_routing_key
from ringmq.core.effects import Effect
from ringmq.core.errors import BrokerError
from ringmq.core.message import Message
from ringmq.core.session import Session
from ringmq.mqtt import Publish

if TYPE_CHECKING:
    from ringmq.core.broker import Broker

log = logging.getLogger(__name__)


def store_retained(broker: Broker, s: Session, p: Publish, msg: Message, now_ms: int) -> None:
    """Keep `msg` (publish `p` on `s`) as its topic's retained message, durably."""
    vh = s.vhost
    x = vh.exchanges[EXCHANGE]
    stored = msg if msg.persistent else incoming(s, p, msg.routing_key, now_ms, persistent=True)
    q = retained_queue(broker, vh.name, now_ms)
    broker.publisher.enqueue(stored, vhost=vh, exchange=x, queues=(q,), now_ms=now_ms, session=s)


def publish_will(
    broker: Broker,
    registry: Registry,
    s: Session,
    key: tuple[str, str],
    will: Publish,
    delay_s: int,
    now_ms: int,
) -> None:
    """Publish the will of the connection of session `s` (client `key`), or hold it for
    `delay_s` seconds."""
    try:
        routing_key = to_routing_key(will.topic)
        vh, x = broker.publisher.exchange_for(s, EXCHANGE, routing_key)
        msg = incoming(s, will, routing_key, now_ms)
    except BrokerError as exc:
        log.info("MQTT will of %r not published: %s", key[1], exc.explanation)
        return
    if delay_s:
        registry.wills[key] = PendingWill(now_ms + delay_s * 1000, msg, will.retain)
        return
    if will.retain:
        store_retained(broker, s, will, msg, now_ms)
    broker.publisher.publish(msg, session=s, vhost=vh, exchange=x, now_ms=now_ms)


def publish_due_wills(broker: Broker, registry: Registry, now_ms: int) -> list[Effect]:
    """Publish the held wills whose delay is over, as one core call; its effects."""
    due = registry.due_wills(now_ms)
    if not due:
        return []
    with broker.call(now_ms) as out:
        for vhost, will in due:
            vh = broker.vhosts.get(vhost)
            x = vh.exchanges.get(EXCHANGE) if vh is not None else None
            if vh is None or x is None:
                continue
            if will.retained:
                q = retained_queue(broker, vhost, now_ms)
                broker.publisher.enqueue(
                    will.message, vhost=vh, exchange=x, queues=(q,), now_ms=now_ms
                )
            broker.publisher.publish_without_session(
                will.message, vhost=vh, exchange=x, now_ms=now_ms
            )
    return out


def mqtt_tick(broker: Broker, now_ms: int) -> list[Effect]:
    """MQTT's protocol tick (`adapters.handler.ProtocolTick`): the delayed wills now due."""
    registry = registry_if_any(broker)
    if registry is None or not registry.wills:
        return []
    return publish_due_wills(broker, registry, now_ms)
