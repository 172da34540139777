"""What a publish leaves beyond its delivery: the retained store's copy, and wills.

A retained publish is also put, durably whatever its QoS, into the vhost's retained store
(`sessions.retained_queue`: the newest message per topic). A will is published like a client
publish when its connection ends badly; with a 5.0 Will Delay Interval (and a session that
outlives the connection) it waits in the registry (`sessions.Registry.wills`) until
`publish_due_wills`, run from any MQTT connection's periodic tick, or until the client comes
back and cancels it.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from ringmq.adapters.mqtt.message import EXCHANGE, incoming
from ringmq.adapters.mqtt.sessions import PendingWill, Registry, retained_queue
from ringmq.adapters.mqtt.topics import to_routing_key
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
    broker.publisher.enqueue(vh, x, (q,), stored, s, now_ms)


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
        vh, x = broker.publisher.exchange_for(s, EXCHANGE)
        msg = incoming(s, will, to_routing_key(will.topic), now_ms)
    except BrokerError as exc:
        log.info("MQTT will of %r not published: %s", key[1], exc.explanation)
        return
    if delay_s:
        registry.wills[key] = PendingWill(now_ms + delay_s * 1000, msg, will.retain)
        return
    if will.retain:
        store_retained(broker, s, will, msg, now_ms)
    broker.publisher.publish(s, vh, x, msg, False, now_ms)


def publish_due_wills(broker: Broker, registry: Registry, s: Session, now_ms: int) -> None:
    """Publish the held wills whose delay is over (on session `s`, whichever ticks first)."""
    for vhost, will in registry.due_wills(now_ms):
        vh = broker.vhosts.get(vhost)
        x = vh.exchanges.get(EXCHANGE) if vh is not None else None
        if vh is None or x is None:
            continue
        if will.retained:
            q = retained_queue(broker, vhost, now_ms)
            broker.publisher.enqueue(vh, x, (q,), will.message, None, now_ms)
        broker.publisher.publish(s, vh, x, will.message, False, now_ms)
