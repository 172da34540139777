"""The core's errors: what went wrong, in words no protocol owns.

The engine, topology, permissions and sessions raise `BrokerError(condition, explanation)`.
Each protocol adapter maps the `Condition` to its own error at its boundary: AMQP 0-9-1 to a
reply code and a Channel.Close or Connection.Close (`ringmq.adapters.amqp091.errors`), the
management API to an HTTP status, AMQP 1.0 to an error condition (`amqp:not-found`, ...).

The condition names follow the AMQP 0-9-1 reply-code names ringmq's users already see in
RabbitMQ's texts ("NOT_FOUND - no queue 'q' in vhost '/'"), so `text` reads the same on
every protocol; the explanation never names a protocol's method.
"""

from __future__ import annotations

from enum import Enum


class Condition(Enum):
    """Why a core call was refused (a protocol-neutral error class)."""

    NOT_FOUND = "not-found"
    """The named vhost, exchange, queue or delivery does not exist."""
    ACCESS_REFUSED = "access-refused"
    """The user may not do this (permissions, reserved names, login)."""
    RESOURCE_LOCKED = "resource-locked"
    """Another connection owns the queue exclusively."""
    PRECONDITION_FAILED = "precondition-failed"
    """The request contradicts the state or the settings (inequivalent redeclare, limits...)."""
    NOT_ALLOWED = "not-allowed"
    """The connection may not do this at all (vhost access, a reused consumer tag)."""
    NOT_IMPLEMENTED = "not-implemented"
    """A feature ringmq does not offer (immediate publishing, prefetch by size)."""
    COMMAND_INVALID = "command-invalid"
    """A request the core cannot take in its form (unknown exchange type, login mechanism)."""
    CHANNEL_ERROR = "channel-error"
    """The session the request names is not open."""
    UNEXPECTED_FRAME = "unexpected-frame"
    """A publish without its content."""
    CONNECTION_FORCED = "connection-forced"
    """An operator closed the connection, or the broker is stopping."""
    RESOURCE_ERROR = "resource-error"
    """The broker lacks a resource to serve the request."""
    INTERNAL_ERROR = "internal-error"
    """A defect: the request hit a bug."""

    @property
    def label(self) -> str:
        """The upper-case name used in texts ("NOT_FOUND")."""
        return self.name


class BrokerError(Exception):
    """A refused core call.

    Args:
        condition: the neutral error class the adapters map.
        explanation: what was wrong, for the client and the log.
    """

    def __init__(self, condition: Condition, explanation: str) -> None:
        super().__init__(f"{condition.name} - {explanation}")
        self.condition = condition
        self.explanation = explanation

    @property
    def text(self) -> str:
        """ "NOT_FOUND - no queue 'q' in vhost '/'": the condition and the explanation."""
        return f"{self.condition.name} - {self.explanation}"
