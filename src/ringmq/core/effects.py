"""Effects: what the pure core asks the server to do.

`Broker` methods return lists of effects; the server applies them in order and writes each
connection's output once per read batch. Effects are imperatives (STYLE §5).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ringmq.amqp import spec
from ringmq.core.message import Message


@dataclass(frozen=True, slots=True)
class SendMethod:
    """Send a content-less method frame (e.g. QueueDeclareOk, BasicCancel) on a channel."""

    conn_id: int
    channel: int
    method: Any  # an ringmq.amqp.spec method dataclass


@dataclass(frozen=True, slots=True)
class SendContent:
    """Send a content-bearing method (BasicDeliver, BasicGetOk, BasicReturn) with its message.

    The server writes method, header (message.properties_bin verbatim) and body frames.
    """

    conn_id: int
    channel: int
    method: Any
    message: Message


@dataclass(slots=True)
class Deliver:
    """Send basic.deliver of `message` to a consumer: method (exchange and routing key of the
    message), header (properties_bin verbatim) and body frames.

    The delivery hot path builds one per delivered message, so it is a plain slotted class
    (a frozen dataclass's __init__ sets each field through object.__setattr__, several times
    slower); treat it as immutable like the other effects. `SendContent` with a BasicDeliver
    says the same thing and serves the rare deliveries whose routing key is not the message's
    (direct reply-to).
    """

    conn_id: int
    channel: int
    consumer_tag: str
    delivery_tag: int
    redelivered: bool
    message: Message

    @property
    def method(self) -> spec.BasicDeliver:
        """The basic.deliver method this effect sends."""
        m = self.message
        return spec.BasicDeliver(
            self.consumer_tag, self.delivery_tag, self.redelivered, m.exchange, m.routing_key
        )


@dataclass(frozen=True, slots=True)
class CloseChannel:
    """Close a channel from the broker side (Channel.Close with this code and text)."""

    conn_id: int
    channel: int
    code: int
    text: str
    class_id: int = 0
    method_id: int = 0


@dataclass(frozen=True, slots=True)
class CloseConnection:
    """Close a connection from the broker side (e.g. management, vhost deleted)."""

    conn_id: int
    code: int
    text: str


@dataclass(frozen=True, slots=True)
class Block:
    """Send connection.blocked and stop reading from this publishing connection."""

    conn_id: int
    reason: str


@dataclass(frozen=True, slots=True)
class Unblock:
    """Send connection.unblocked and resume reading."""

    conn_id: int


Effect = SendMethod | SendContent | Deliver | CloseChannel | CloseConnection | Block | Unblock
