"""STOMP messages in the core's container: a SEND stored in the AMQP 0-9-1 form, and the
headers of a MESSAGE read back from it.

The chosen form: a SEND's headers become AMQP 0-9-1 basic properties (`docs/dev/messages.md`
§7), encoded with the 0-9-1 encoder and built into a `Message` by the 0-9-1 adapter's builder
(`adapters.amqp091.message.build`), so a 0-9-1 consumer gets the raw property list re-sent
verbatim and the core reads its neutral fields (persistence, priority, TTL, headers) by the one
rule every 0-9-1 publish goes through. A STOMP consumer's MESSAGE headers are read back from
those properties, whatever protocol published the message.

| STOMP header | 0-9-1 |
|---|---|
| `persistent:true` | `delivery_mode` 2 (`false`: 1) |
| `priority` | `priority` |
| `expiration` (relative ms, RabbitMQ) | `expiration` |
| `expires` (absolute ms, Artemis/JMS; 0: never) | `expiration`, relative at arrival |
| `content-type`, `content-encoding`, `correlation-id`, `reply-to`, `type`, `app-id` | same |
| `user-id` | `user_id` |
| `timestamp` (seconds) | `timestamp` |
| `amqp-message-id` | `message_id` |
| `AMQ_SCHEDULED_DELAY` (relative ms) | header `x-delay` |
| `AMQ_SCHEDULED_TIME` (absolute ms) | header `_AMQ_SCHED_DELIVERY` |
| any other header (`_AMQ_LVQ_NAME` included) | `headers`, as a string |

Frame-level headers (`destination`, `receipt`, `transaction`, `content-length`...), a SEND's
`message-id` (the broker sets it, as RabbitMQ) and queue parameters (`durable`, `x-*` queue
arguments) are not carried.
"""

from __future__ import annotations

import struct
from typing import Any, Final

from ringmq.adapters.amqp091.message import build
from ringmq.amqp.properties import BasicProperties, decode_properties, encode_properties
from ringmq.amqp.reply_codes import AMQPError
from ringmq.core.arguments import BY_ARGUMENT
from ringmq.core.errors import BrokerError, Condition
from ringmq.core.message import FORM_AMQP091, Message, amqp091_content
from ringmq.core.session import Session

SCHEDULED_DELAY: Final = "AMQ_SCHEDULED_DELAY"
SCHEDULED_TIME: Final = "AMQ_SCHEDULED_TIME"
_DELAY_HEADER: Final = "x-delay"
_TIME_HEADER: Final = "_AMQ_SCHED_DELIVERY"

_PROPERTY_HEADERS: Final = {
    "content-type": "content_type",
    "content-encoding": "content_encoding",
    "correlation-id": "correlation_id",
    "reply-to": "reply_to",
    "type": "type",
    "app-id": "app_id",
    "user-id": "user_id",
}
NOT_CARRIED: Final = frozenset(
    {
        "destination",
        "receipt",
        "transaction",
        "content-length",
        "message-id",
        "subscription",
        "ack",
        "redelivered",
        "destination-type",
        "subscription-type",
        "durable",
        "auto-delete",
        "exclusive",
        "x-queue-name",
        "persistent",
        "priority",
        "expiration",
        "expires",
        "timestamp",
        "amqp-message-id",
        SCHEDULED_DELAY,
        SCHEDULED_TIME,
        *_PROPERTY_HEADERS,
        *BY_ARGUMENT,
    }
)
"""SEND headers that do not become message headers (frame-level, properties, queue args)."""

_EMPTY: Final = encode_properties(BasicProperties())
_FRAME_ONLY: Final = frozenset(
    {"destination", "receipt", "transaction", "content-length", "message-id", "destination-type"}
)
"""SEND headers that carry nothing into the message: such a SEND has no properties."""

_FRAME_HEADERS: Final = frozenset(
    {"destination", "message-id", "subscription", "ack", "content-length", "redelivered"}
)


def _int(name: str, text: str) -> int:
    try:
        return int(text.strip())
    except ValueError:
        raise BrokerError(
            Condition.PRECONDITION_FAILED, f"invalid '{name}' header {text!r}: not an integer"
        ) from None


def properties_of(headers: dict[str, str], now_ms: int) -> BasicProperties:
    """The 0-9-1 properties of a SEND with `headers` (see the module docstring)."""
    props = BasicProperties()
    for header, attr in _PROPERTY_HEADERS.items():
        value = headers.get(header)
        if value is not None:
            setattr(props, attr, value)
    persistent = headers.get("persistent")
    if persistent is not None:
        props.delivery_mode = 2 if persistent.strip().lower() == "true" else 1
    if (priority := headers.get("priority")) is not None:
        props.priority = _int("priority", priority)
        if not 0 <= props.priority <= 255:
            raise BrokerError(Condition.PRECONDITION_FAILED, f"invalid priority {priority!r}")
    if (expiration := headers.get("expiration")) is not None:
        props.expiration = expiration
    elif (expires := headers.get("expires")) is not None:
        at = _int("expires", expires)
        if at:
            props.expiration = str(max(0, at - now_ms))
    if (timestamp := headers.get("timestamp")) is not None:
        props.timestamp = _int("timestamp", timestamp)
    if (message_id := headers.get("amqp-message-id")) is not None:
        props.message_id = message_id
    table: dict[str, Any] = {}
    if (delay := headers.get(SCHEDULED_DELAY)) is not None:
        table[_DELAY_HEADER] = _int(SCHEDULED_DELAY, delay)
    if (at_ms := headers.get(SCHEDULED_TIME)) is not None:
        table[_TIME_HEADER] = _int(SCHEDULED_TIME, at_ms)
    table.update((k, v) for k, v in headers.items() if k not in NOT_CARRIED)
    if table:
        props.headers = table
    return props


def build_message(
    s: Session,
    exchange: str,
    routing_key: str,
    headers: dict[str, str],
    body: bytes,
    now_ms: int,
) -> Message:
    """The core message of a SEND on session `s`, in the AMQP 0-9-1 form."""
    if headers.keys() <= _FRAME_ONLY:  # nothing to carry: the empty property list
        return build(s, exchange, routing_key, _EMPTY, body, now_ms)
    try:
        pb = encode_properties(properties_of(headers, now_ms))
    except (ValueError, struct.error) as exc:  # a value AMQP 0-9-1 cannot carry
        raise BrokerError(Condition.PRECONDITION_FAILED, f"invalid message header: {exc}") from None
    return build(s, exchange, routing_key, pb, body, now_ms)


def _text(value: Any) -> str | None:
    # A header value as STOMP text; tables and arrays are not carried (RabbitMQ).
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, bytes | bytearray):
        return bytes(value).decode("utf-8", "replace")
    if isinstance(value, dict | list | tuple):
        return None
    return str(value)


def message_body(msg: Message) -> bytes:
    """The body a STOMP consumer gets: the 0-9-1 body (an AMQP 1.0 message's data section,
    or its other body sections encoded, docs/dev/messages.md §3)."""
    return msg.body if msg.form == FORM_AMQP091 else amqp091_content(msg)[1]


def message_headers(msg: Message) -> dict[str, str]:
    """The MESSAGE headers a message's properties give (see the module docstring)."""
    # another protocol's form (AMQP 1.0) is read as its 0-9-1 conversion (docs/dev/messages.md
    # §3), cached on the message for every 0-9-1 and STOMP consumer
    raw = msg.properties_bin if msg.form == FORM_AMQP091 else amqp091_content(msg)[0]
    if raw == _EMPTY:
        return {}
    try:
        props = decode_properties(raw)
    except AMQPError:
        # A 0-9-1 publish whose property list the core never had to read is stored raw
        # (re-sent verbatim to 0-9-1 consumers); unreadable, it gives no STOMP header.
        return {}
    out: dict[str, str] = {}
    for header, attr in _PROPERTY_HEADERS.items():
        value = getattr(props, attr)
        if value is not None:
            out[header] = value
    if props.delivery_mode == 2:
        out["persistent"] = "true"
    if props.priority is not None:
        out["priority"] = str(props.priority)
    if props.expiration is not None:
        out["expiration"] = props.expiration
    if props.timestamp is not None:
        out["timestamp"] = str(props.timestamp)
    if props.message_id is not None:
        out["amqp-message-id"] = props.message_id
    for name, value in (props.headers or {}).items():
        if name == _DELAY_HEADER:
            name = SCHEDULED_DELAY
        elif name == _TIME_HEADER:
            name = SCHEDULED_TIME
        if name in _FRAME_HEADERS or name in out:
            continue
        text = _text(value)
        if text is not None:
            out[name] = text
    return out
