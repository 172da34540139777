"""Events a ``ServerConnection`` returns from ``receive_data`` (frozen dataclasses, nouns)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ringmq.amqp.frames import RawContent
from ringmq.amqp.spec import Method


@dataclass(frozen=True, slots=True)
class LoginRequested:
    """The client sent Connection.Start-Ok; answer with ``accept_login()`` or ``reject_login()``.

    ``username``/``password`` are parsed from PLAIN or AMQPLAIN; ``response`` is the raw SASL
    response for authenticators that want it (``Broker.check_login``).
    """

    #: "PLAIN" or "AMQPLAIN".
    mechanism: str
    #: the raw SASL response bytes.
    response: bytes
    username: str
    password: str
    #: the client's properties table (product, version, capabilities, connection_name...).
    client_properties: dict[str, Any] = field(default_factory=dict)
    locale: str = "en_US"


@dataclass(frozen=True, slots=True)
class OpenRequested:
    """The client sent Connection.Open; answer with ``accept_open()`` or ``close(...)``."""

    vhost: str


@dataclass(frozen=True, slots=True)
class ChannelOpened:
    """A channel was opened (Channel.Open-Ok already queued)."""

    channel: int


@dataclass(frozen=True, slots=True)
class ChannelClosed:
    """A channel is gone: the client closed it (Close-Ok queued) or confirmed our close.

    Not emitted for the channels of a closing connection: ``ConnectionClosed`` covers them.
    """

    channel: int


@dataclass(slots=True)
class Command:
    """A complete command for the broker (exchange, queue, basic, confirm and tx classes).

    One is built per client command (every publish and ack), so it is a plain slotted class:
    a frozen dataclass's __init__ sets each field through object.__setattr__, about twice as
    slow. Treat it as immutable like the other events.
    """

    channel: int
    method: Method
    #: method + header + body for content-bearing methods (Basic.Publish), else None.
    content: RawContent | None = None


@dataclass(slots=True)
class PublishRun:
    """Consecutive Basic.Publish commands of one read on one channel with the same method
    (exchange, routing key, flags), as columns: what that many `Command`s would carry, for a
    channel the server asked runs for (`ServerConnection.publish_runs`). Treat it as
    immutable."""

    channel: int
    method: Method
    #: each publish's raw property list (content header) and body, in order
    properties: list[bytes]
    bodies: list[bytes]


@dataclass(frozen=True, slots=True)
class SecretUpdated:
    """Connection.Update-Secret (Update-Secret-Ok already queued)."""

    new_secret: bytes
    reason: str


@dataclass(frozen=True, slots=True)
class ProtocolError:
    """The peer broke a rule; the matching Channel.Close or Connection.Close is queued.

    ``channel`` is 0 when the whole connection is closing (hard error or error on channel 0).
    """

    channel: int
    reply_code: int
    reply_text: str
    class_id: int = 0
    method_id: int = 0


@dataclass(frozen=True, slots=True)
class ConnectionClosed:
    """The connection is finished: write ``data_to_send()`` and close the transport.

    ``by_peer`` is True when the client initiated the close (Connection.Close from it, or a bad
    protocol header); ``reply_code``/``reply_text`` are those of the Connection.Close exchanged
    (0/"" when none was).
    """

    reply_code: int
    reply_text: str
    by_peer: bool


Event = (
    LoginRequested
    | OpenRequested
    | ChannelOpened
    | ChannelClosed
    | Command
    | PublishRun
    | SecretUpdated
    | ProtocolError
    | ConnectionClosed
)

__all__ = [
    "ChannelClosed",
    "ChannelOpened",
    "Command",
    "ConnectionClosed",
    "Event",
    "LoginRequested",
    "OpenRequested",
    "ProtocolError",
    "PublishRun",
    "SecretUpdated",
]
