"""STOMP destinations in RabbitMQ's and Artemis' dialects, read into one plain description.

A destination says where a SEND publishes (exchange and routing key) and what a SUBSCRIBE
reads (a queue, declared or bound first when the kind says so). Reading one needs no broker
beyond two questions (does this exchange / queue exist?), which the caller answers.

RabbitMQ's dialect (a leading `/`):

| destination | SEND | SUBSCRIBE |
|---|---|---|
| `/queue/n` | default exchange, key n; queue n declared if missing | queue n (declared: durable) |
| `/amq/queue/n` | default exchange, key n | existing queue n |
| `/topic/k` | `amq.topic`, key k | a queue of its own bound to `amq.topic` with k |
| `/exchange/x[/p]` | exchange x, key p | a queue of its own bound to x with p |
| `/reply-queue/q` | default exchange, key q (a temp queue's real name) | not allowed |
| `/temp-queue/n` | only in `reply-to` | not allowed |

Artemis' dialect (any other name, or the anycast / multicast prefixes): an address is ANYCAST
(a queue of the same name, reached through the default exchange) or MULTICAST (a fanout
exchange of that name, each subscription a queue bound to it), as `server/brokerxml.py` maps
broker.xml addresses. The routing type comes from the prefix (`queue://`, `topic://`), then
the `destination-type` / `subscription-type` header, then what exists (an exchange of that
name: multicast; a queue: anycast), then the address-setting `default-address-routing-type`
for that name, then the configured default.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from enum import Enum
from typing import Final

from ringmq.core.errors import BrokerError, Condition


class Kind(Enum):
    """What a destination names."""

    QUEUE = "queue"  # /queue/n: declared by STOMP
    AMQ_QUEUE = "amq-queue"  # /amq/queue/n: existing
    TOPIC = "topic"  # /topic/k on amq.topic
    EXCHANGE = "exchange"  # /exchange/x/p
    REPLY_QUEUE = "reply-queue"  # /reply-queue/q: a temp queue's real name
    TEMP_QUEUE = "temp-queue"  # /temp-queue/n: reply-to only
    ANYCAST = "anycast"  # Artemis address with queue semantics
    MULTICAST = "multicast"  # Artemis address with topic semantics


ANYCAST: Final = "ANYCAST"
MULTICAST: Final = "MULTICAST"
TOPIC_EXCHANGE: Final = "amq.topic"


@dataclass(frozen=True, slots=True)
class Dialects:
    """The configurable parts of destination reading (Artemis' acceptor settings)."""

    anycast_prefix: str = "queue://"
    multicast_prefix: str = "topic://"
    default_routing: str = ANYCAST
    """The routing type of a plain address that names nothing yet (Artemis' default is
    MULTICAST; ringmq's ANYCAST keeps a first SEND's message until a subscriber comes)."""


@dataclass(frozen=True, slots=True)
class Destination:
    """One destination, read (see the module docstring).

    Attributes:
        text: as the client wrote it.
        kind: what it names.
        exchange: where a SEND publishes.
        routing_key: the SEND's routing key, or the SUBSCRIBE's binding key.
        name: the queue (QUEUE, AMQ_QUEUE, REPLY_QUEUE, ANYCAST), the address (MULTICAST) or
            the temp queue's label (TEMP_QUEUE).
    """

    text: str
    kind: Kind
    exchange: str
    routing_key: str
    name: str

    @property
    def rabbit(self) -> bool:
        """Written in RabbitMQ's dialect."""
        return self.kind not in (Kind.ANYCAST, Kind.MULTICAST)


_RABBIT: Final = (
    ("/amq/queue/", Kind.AMQ_QUEUE),
    ("/queue/", Kind.QUEUE),
    ("/topic/", Kind.TOPIC),
    ("/exchange/", Kind.EXCHANGE),
    ("/reply-queue/", Kind.REPLY_QUEUE),
    ("/temp-queue/", Kind.TEMP_QUEUE),
)


def _invalid(text: str, why: str) -> BrokerError:
    return BrokerError(Condition.NOT_FOUND, f"invalid destination '{text}': {why}")


def parse(
    text: str,
    headers: Mapping[str, str],
    dialects: Dialects,
    *,
    exchange_exists: Callable[[str], bool],
    queue_exists: Callable[[str], bool],
    routing_for: Callable[[str], str | None] | None = None,
) -> Destination:
    """Read destination `text` of a frame with `headers` (NOT_FOUND when malformed);
    `routing_for` gives the configured routing type of a plain address that names nothing yet
    (Artemis' `default-address-routing-type`), else `dialects.default_routing` applies."""
    for prefix, kind in _RABBIT:
        if text.startswith(prefix):
            rest = text[len(prefix) :]
            if not rest:
                raise _invalid(text, "no name after the prefix")
            match kind:
                case Kind.TOPIC:
                    return Destination(text, kind, TOPIC_EXCHANGE, rest, rest)
                case Kind.EXCHANGE:
                    name, _, key = rest.partition("/")
                    if not name:
                        raise _invalid(text, "no exchange name")
                    return Destination(text, kind, name, key, name)
                case Kind.TEMP_QUEUE:
                    return Destination(text, kind, "", "", rest)
                case _:
                    return Destination(text, kind, "", rest, rest)
    if text.startswith("/"):
        raise _invalid(text, "unknown destination type")
    routing = None
    name = text
    if dialects.anycast_prefix and text.startswith(dialects.anycast_prefix):
        routing, name = ANYCAST, text[len(dialects.anycast_prefix) :]
    elif dialects.multicast_prefix and text.startswith(dialects.multicast_prefix):
        routing, name = MULTICAST, text[len(dialects.multicast_prefix) :]
    if not name:
        raise _invalid(text, "no address name")
    if routing is None:
        hinted = headers.get("subscription-type") or headers.get("destination-type")
        if hinted is not None:
            routing = hinted.strip().upper()
            if routing not in (ANYCAST, MULTICAST):
                raise BrokerError(
                    Condition.PRECONDITION_FAILED,
                    f"invalid routing type '{hinted}': ANYCAST or MULTICAST",
                )
        elif exchange_exists(name):
            routing = MULTICAST
        elif queue_exists(name):
            routing = ANYCAST
        else:
            routing = (routing_for(name) if routing_for else None) or dialects.default_routing
    if routing == MULTICAST:
        return Destination(text, Kind.MULTICAST, name, "", name)
    return Destination(text, Kind.ANYCAST, "", name, name)


def _quote(part: str) -> str:
    # RabbitMQ: '/', '%' and non-ASCII bytes in a name become %dd in a MESSAGE destination.
    if part.isascii() and "/" not in part and "%" not in part:
        return part
    return "".join(
        chr(b) if b < 0x80 and chr(b) not in "/%" else f"%{b:02X}" for b in part.encode()
    )


def message_destination(exchange: str, routing_key: str, rabbit: bool) -> str:
    """The `destination` of a MESSAGE: as though the message came from a SEND (RabbitMQ's
    rule for its dialect; the address for Artemis')."""
    if not rabbit:
        return exchange or routing_key
    if not exchange:
        return f"/queue/{_quote(routing_key)}"
    if exchange == TOPIC_EXCHANGE:
        return f"/topic/{_quote(routing_key)}"
    if routing_key:
        return f"/exchange/{_quote(exchange)}/{_quote(routing_key)}"
    return f"/exchange/{_quote(exchange)}"
