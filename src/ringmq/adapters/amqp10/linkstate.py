"""What the AMQP 1.0 links of one connection are, as plain records: the links the broker
receives and sends on, per session, and what they wait for (`Links` and `Attacher` own them)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from ringmq.adapters.amqp10.addresses import Node

if TYPE_CHECKING:
    from ringmq.core.session import Session


class RefusalError(Exception):
    """An attach the broker cannot honour: `condition`, `description`."""

    def __init__(self, condition: str, description: str) -> None:
        super().__init__(description)
        self.condition = condition
        self.description = description


@dataclass(slots=True)
class InLink:
    """A link the broker receives on."""

    handle: int
    node: Node | None
    """Where its messages go (None: anonymous relay, each message's `to`)."""
    coordinator: bool = False
    """A transaction controller's link (declare and discharge)."""
    exchange: str = ""
    routing_key: str | None = None
    """`node`'s exchange and routing key, read once (None: each message's subject)."""
    temporary: str | None = None
    """A dynamic target's temporary queue, deleted with the link."""


@dataclass(slots=True)
class OutLink:
    """A link the broker sends on: a core consumer."""

    handle: int
    tag: str
    queue: str
    settled: bool
    delete_on_close: bool = False
    """A durable subscription: its queue goes when the peer closes the link."""


@dataclass(slots=True)
class LinkSession:
    """The links of one session and what they wait for."""

    core: Session
    """The core session under the same number: its consumers and its publishes (in confirm
    mode but while a pre-settled transfer publishes, `Links.message`)."""
    ins: dict[int, InLink] = field(default_factory=dict)
    outs: dict[int, OutLink] = field(default_factory=dict)
    by_tag: dict[str, OutLink] = field(default_factory=dict)
    unsettled: dict[int, tuple[int, OutLink]] = field(default_factory=dict)
    """The broker's unsettled deliveries: delivery id -> (core delivery id, link)."""
    confirms: dict[int, int] = field(default_factory=dict)
    """Unsettled publishes waiting for their confirm: publish number -> delivery id."""
    unroutable: set[int] = field(default_factory=set)
    """Publish numbers that reached no queue (released when confirmed)."""
