"""MQTT publishes as the core's messages, stored in the AMQP 0-9-1 form, and back.

Theory of operation: an MQTT PUBLISH becomes a `Message` whose raw form is a 0-9-1 property
list (built with `ringmq.amqp.properties` and filled by the 0-9-1 adapter's `build`, the one
rule for the neutral fields), so 0-9-1 consumers read it with no conversion and every engine
feature (TTL, dead-lettering, last-value keys) reads what it always reads. The mapping is
docs/dev/messages.md §7, as RabbitMQ's `mc_mqtt` does it:

| MQTT | 0-9-1 |
|---|---|
| QoS > 0 | `delivery_mode` 2; the QoS itself in header `x-mqtt-publish-qos` |
| Message Expiry Interval (s) | `expiration` (ms) |
| Content Type | `content_type` |
| Response Topic | `reply_to` (longer than 255 bytes: header `x-reply-to`) |
| Correlation Data | `correlation_id` when short UTF-8, else header `x-correlation-id` (bytes) |
| User Property | `headers` (string values; the last of a repeated name wins) |
| Payload Format Indicator | header `x-mqtt-payload-format-indicator` |
| RETAIN | header `x-mqtt-retain` = the topic (the retained store's last-value key) |

Back to MQTT (`outgoing`), a message from any protocol: the topic is the routing key mapped
back (`topics.from_routing_key`), the QoS it was published with is `x-mqtt-publish-qos` or,
for a message from another protocol, 1 when persistent and 0 otherwise; properties map the
other way, headers whose value is a string, number or boolean become user properties.
"""

from __future__ import annotations

import math
from typing import Any, Final

from ringmq.adapters.amqp091.message import build
from ringmq.amqp.properties import BasicProperties, decode_properties, encode_properties
from ringmq.core.message import Message, amqp091_content
from ringmq.core.session import Session
from ringmq.mqtt import Properties, Publish

EXCHANGE: Final = "amq.topic"
QOS_HEADER: Final = "x-mqtt-publish-qos"
RETAIN_HEADER: Final = "x-mqtt-retain"
"""Set on a retained publish to its topic: the last-value key of the retained store."""
PUBLISHER_HEADER: Final = "x-mqtt-publisher"
"""The publishing client id, set only when that client has a no-local subscription."""
PFI_HEADER: Final = "x-mqtt-payload-format-indicator"
_CORRELATION_HEADER: Final = "x-correlation-id"
_REPLY_TO_HEADER: Final = "x-reply-to"
_OURS: Final = frozenset(
    {QOS_HEADER, RETAIN_HEADER, PUBLISHER_HEADER, PFI_HEADER, _CORRELATION_HEADER, _REPLY_TO_HEADER}
)


def _shortstr(text: str) -> bool:
    return len(text.encode("utf-8")) <= 255


_NO_PROPERTIES: Final = Properties()
_PLAIN: Final = tuple(
    encode_properties(BasicProperties(headers={QOS_HEADER: qos}, delivery_mode=2 if qos else 1))
    for qos in range(3)
)
"""The property list of a publish with nothing but its QoS, by QoS (the common case)."""


def incoming(
    s: Session,
    p: Publish,
    routing_key: str,
    now_ms: int,
    *,
    publisher: str | None = None,
    persistent: bool | None = None,
) -> Message:
    """The message of client publish `p` (routing key already mapped), see the module table.

    `publisher` marks the message with its client id (for the client's no-local
    subscriptions); `persistent` overrides QoS > 0 (the retained store keeps every message).
    """
    props = p.properties
    if (
        (props is None or props == _NO_PROPERTIES)
        and not p.retain
        and publisher is None
        and persistent is None
    ):
        # Nothing but the QoS: the cached property list, and the neutral fields it sets
        # (its one header and its delivery mode), without encoding and decoding it again.
        msg = Message(EXCHANGE, routing_key, _PLAIN[p.qos], p.payload, timestamp_ms=now_ms)
        msg.headers = {QOS_HEADER: p.qos}
        msg.persistent = p.qos > 0
        return msg
    headers: dict[str, Any] = {QOS_HEADER: p.qos}
    if p.retain:
        headers[RETAIN_HEADER] = p.topic
    if publisher is not None:
        headers[PUBLISHER_HEADER] = publisher
    durable = p.qos > 0 if persistent is None else persistent
    bp = BasicProperties(headers=headers, delivery_mode=2 if durable else 1)
    if props is not None:
        headers.update({k: v for k, v in props.user_properties if k not in _OURS and _shortstr(k)})
        if props.payload_format_indicator is not None:
            headers[PFI_HEADER] = props.payload_format_indicator
        if props.message_expiry_interval is not None:
            bp.expiration = str(min(props.message_expiry_interval * 1000, 4_294_967_295))
        bp.content_type = props.content_type if props.content_type is not None else None
        if bp.content_type is not None and not _shortstr(bp.content_type):
            bp.content_type = None
        if props.response_topic is not None:
            if _shortstr(props.response_topic):
                bp.reply_to = props.response_topic
            else:
                headers[_REPLY_TO_HEADER] = props.response_topic
        cd = props.correlation_data
        if cd is not None:
            try:
                text = cd.decode("utf-8")
            except UnicodeDecodeError:
                text = None
            if text is not None and _shortstr(text):
                bp.correlation_id = text
            else:
                headers[_CORRELATION_HEADER] = cd
    return build(s, EXCHANGE, routing_key, encode_properties(bp), p.payload, now_ms)


def published_qos(msg: Message) -> int:
    """The QoS the message was published with (see the module docstring)."""
    headers = msg.headers
    if headers is not None:
        qos = headers.get(QOS_HEADER)
        if isinstance(qos, int) and 0 <= qos <= 2:
            return qos
    return 1 if msg.persistent else 0


def retained_topic(msg: Message) -> str | None:
    """The topic a retained publish was retained under (None: not retained)."""
    headers = msg.headers
    topic = headers.get(RETAIN_HEADER) if headers is not None else None
    return topic if isinstance(topic, str) else None


def _user_value(value: Any) -> str | None:
    if isinstance(value, str):
        return value
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return str(value)
    if isinstance(value, bytes):
        try:
            return value.decode("utf-8")
        except UnicodeDecodeError:
            return None
    return None


def payload_of(msg: Message) -> bytes:
    """The PUBLISH payload of a stored message: the 0-9-1 body (an AMQP 1.0 message's data
    section, or its other body sections encoded, docs/dev/messages.md §3)."""
    return msg.body if not msg.form else amqp091_content(msg)[1]


def outgoing_properties(msg: Message, now_ms: int) -> Properties:
    """The 5.0 PUBLISH properties of a stored message (the remaining expiry at `now_ms`)."""
    props = Properties()
    if msg.expiration_ms is not None:
        left = msg.timestamp_ms + msg.expiration_ms - now_ms
        props.message_expiry_interval = max(0, math.ceil(left / 1000))
    # another protocol's form (AMQP 1.0) is read as its 0-9-1 conversion, cached on the message
    pb = msg.properties_bin if not msg.form else amqp091_content(msg)[0]
    if len(pb) >= 2 and not ((pb[0] << 8) | pb[1]) & 0xFE00 and not msg.headers:
        return props  # nothing but delivery mode and the like: no decode
    bp = decode_properties(pb)
    props.content_type = bp.content_type
    props.response_topic = bp.reply_to
    if bp.correlation_id is not None:
        props.correlation_data = bp.correlation_id.encode("utf-8")
    for key, value in (bp.headers or {}).items():
        if key == _CORRELATION_HEADER and isinstance(value, bytes):
            props.correlation_data = value
        elif key == _REPLY_TO_HEADER and isinstance(value, str):
            props.response_topic = value
        elif key == PFI_HEADER and value in (0, 1):
            props.payload_format_indicator = value
        elif key not in _OURS:
            text = _user_value(value)
            if text is not None:
                props.user_properties.append((key, text))
    return props
