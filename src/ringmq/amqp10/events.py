"""What the AMQP 1.0 connection machine tells its user (`connection.Connection`).

Events are nouns (STYLE §5), frozen and slotted. The machine answers the protocol's own
handshakes itself (open, begin, end, close, the peer's detach, credit top-ups for links it
receives on); the events say what the broker has to act on: a login, a link to resolve, a
message, credit, a settlement, a link or session that went away.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True, slots=True)
class Authenticate:
    """A login to check: a SASL init (`sasl` True) or a client that skipped SASL (`sasl`
    False, `mechanism` "ANONYMOUS"). Answer with `Connection.sasl_outcome`."""

    mechanism: str
    response: bytes
    hostname: str | None
    sasl: bool = True


@dataclass(frozen=True, slots=True)
class Opened:
    """The peer's open (already answered): container id, hostname (the vhost, as RabbitMQ reads
    it: "vhost:NAME" or a plain name), its properties."""

    container_id: str
    hostname: str | None
    properties: dict[Any, Any]


@dataclass(frozen=True, slots=True)
class SessionBegun:
    """A session began on `channel` (already answered)."""

    channel: int


@dataclass(frozen=True, slots=True)
class SessionEnded:
    """The session on `channel` ended (by the peer, answered; or by us after `end`): its links
    are gone without further events."""

    channel: int
    error: Any


@dataclass(frozen=True, slots=True)
class LinkAttaching:
    """The peer attaches a link (`attach` is the performative): answer with
    `Connection.attach` or `Connection.refuse_attach`. `attach.role` is the peer's role:
    False (sender) means the broker receives."""

    channel: int
    handle: int
    attach: Any


@dataclass(frozen=True, slots=True)
class LinkDetached:
    """The peer detached an attached link (already answered)."""

    channel: int
    handle: int
    closed: bool
    error: Any


@dataclass(slots=True)
class MessageReceived:
    """A whole message on a link the broker receives on (all its transfer frames).

    `state` is the first transfer's delivery state (a transactional-state under a
    transaction); `settled` True means pre-settled (at most once). One per message, so not
    frozen (a frozen dataclass sets each field through object.__setattr__): treat it as
    immutable like the others."""

    channel: int
    handle: int
    delivery_id: int
    delivery_tag: bytes
    settled: bool
    payload: bytes
    state: Any
    message_format: int


@dataclass(slots=True)
class MessagesReceived:
    """Whole messages of one transfer frame each on a link the broker receives on, in order:
    delivery ids `first_id`, `first_id + 1`, ..., all pre-settled (`settled`) or all not, no
    delivery state, message-format 0 (`transfers.take`: one event per run, not per message;
    treat it as immutable). The same messages as that many `MessageReceived`."""

    channel: int
    handle: int
    first_id: int
    settled: bool
    payloads: list[bytes]


@dataclass(frozen=True, slots=True)
class CreditGranted:
    """The peer's flow on a link the broker sends on: `credit` is how many more transfers it
    may send now (the peer's delivery count and credit against ours), `drain` asks to use it
    or give it back (`Connection.drained`)."""

    channel: int
    handle: int
    credit: int
    drain: bool


@dataclass(frozen=True, slots=True)
class Settled:
    """The peer's disposition of deliveries the broker sent, `first` to `last` inclusive."""

    channel: int
    first: int
    last: int
    settled: bool
    state: Any


Event = (
    Authenticate
    | Opened
    | SessionBegun
    | SessionEnded
    | LinkAttaching
    | LinkDetached
    | MessageReceived
    | MessagesReceived
    | CreditGranted
    | Settled
)
