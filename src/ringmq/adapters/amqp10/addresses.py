"""AMQP 1.0 addresses as ringmq nodes, in the forms ActiveMQ Artemis and RabbitMQ 4 accept.

* RabbitMQ 4 "v2" addresses: `/queues/:queue` (an existing queue), `/exchanges/:exchange/:key`
  and `/exchanges/:exchange` (sending only; the message's routing key is its subject).
  Segments are percent-encoded (RFC 3986), as RabbitMQ's clients write them.
* Artemis addresses: a plain name with a routing type. Anycast (queue semantics: a queue of
  that name, auto-created, reached through the default exchange) or multicast (topic
  semantics: the address is a routing key on `amq.topic`; each receiver gets a subscription
  queue bound with it, so Artemis' `#` and `*` wildcards work for receivers). The routing type
  comes from a prefix (`queue://`, `topic://`, Artemis' `anycastPrefix` / `multicastPrefix`
  as Qpid JMS users configure them) or from the terminus capabilities (`queue`, `topic`, as
  Qpid JMS sends them); a plain name without either takes the routing type the caller's
  `plain` gives (Artemis' `default-address-routing-type` for that name), anycast when unset.

A receiver's source filters are read by `filters.py`.

Pure: a function of the address text and capabilities.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from enum import Enum
from typing import Final
from urllib.parse import unquote

TOPIC_EXCHANGE: Final = "amq.topic"
"""The exchange multicast addresses route through."""
ANYCAST_PREFIX: Final = "queue://"
MULTICAST_PREFIX: Final = "topic://"


class Kind(Enum):
    """What an address names."""

    QUEUE = "queue"
    """A queue that must exist (`/queues/:q`)."""
    ANYCAST = "anycast"
    """A queue of that name, created when missing (Artemis anycast)."""
    MULTICAST = "multicast"
    """A routing key of `amq.topic` (Artemis multicast)."""
    EXCHANGE = "exchange"
    """An exchange and a routing key (`/exchanges/:x/:key`; None: the message's subject)."""


@dataclass(frozen=True, slots=True)
class Node:
    """A resolved address.

    Attributes:
        kind: what it names.
        name: the queue (QUEUE, ANYCAST), the routing key (MULTICAST) or the exchange.
        key: the routing key of an EXCHANGE address (None: each message's subject).
    """

    kind: Kind
    name: str
    key: str | None = None

    @property
    def exchange(self) -> str:
        """The exchange a message sent to this node is published to."""
        match self.kind:
            case Kind.QUEUE | Kind.ANYCAST:
                return ""
            case Kind.MULTICAST:
                return TOPIC_EXCHANGE
            case Kind.EXCHANGE:
                return self.name

    @property
    def routing_key(self) -> str | None:
        """The routing key of a message sent to this node (None: its subject)."""
        return self.key if self.kind is Kind.EXCHANGE else self.name


class AddressError(ValueError):
    """An address this broker cannot read (`amqp:invalid-field`)."""


def resolve(
    address: str,
    capabilities: tuple[str, ...] | None = None,
    plain: Callable[[str], Kind | None] | None = None,
) -> Node:
    """The node `address` names, with the routing type its capabilities ask for (`plain`: the
    routing type of a plain name without prefix or capability, if configured).

    Raises:
        AddressError: an empty name or a malformed v2 address.
    """
    if address.startswith("/"):
        return _v2(address)
    if address.startswith(ANYCAST_PREFIX):
        return _named(address[len(ANYCAST_PREFIX) :], Kind.ANYCAST)
    if address.startswith(MULTICAST_PREFIX):
        return _named(address[len(MULTICAST_PREFIX) :], Kind.MULTICAST)
    caps = capabilities or ()
    if "topic" in caps and "queue" not in caps:
        return _named(address, Kind.MULTICAST)
    if "queue" not in caps and plain is not None and address:
        return _named(address, plain(address) or Kind.ANYCAST)
    return _named(address, Kind.ANYCAST)


def _named(name: str, kind: Kind) -> Node:
    if not name:
        raise AddressError("empty address")
    return Node(kind, name)


def _v2(address: str) -> Node:
    parts = address.split("/")
    # "", "queues", q  |  "", "exchanges", x [, key]
    if len(parts) == 3 and parts[1] == "queues" and parts[2]:
        return Node(Kind.QUEUE, unquote(parts[2]))
    if len(parts) in (3, 4) and parts[1] == "exchanges" and parts[2]:
        key = unquote(parts[3]) if len(parts) == 4 else None
        name = unquote(parts[2])
        return Node(Kind.EXCHANGE, "" if name == "amq.default" else name, key)
    raise AddressError(f"address {address!r} is not a v2 address (/queues/:q, /exchanges/:x)")
