"""AMQP 1.0 error conditions (spec part 2.8.15-2.8.18) and the machine's three error scopes.

A protocol error is raised where the rule lives as a `ConnectionLevelError`, `SessionError` or
`LinkError` and caught at one boundary (`Connection.receive_data`), which closes the
connection, ends the session or detaches the link with the condition.
"""

from __future__ import annotations

from typing import Final

INTERNAL_ERROR: Final = "amqp:internal-error"
NOT_FOUND: Final = "amqp:not-found"
UNAUTHORIZED_ACCESS: Final = "amqp:unauthorized-access"
DECODE_ERROR: Final = "amqp:decode-error"
RESOURCE_LIMIT_EXCEEDED: Final = "amqp:resource-limit-exceeded"
NOT_ALLOWED: Final = "amqp:not-allowed"
INVALID_FIELD: Final = "amqp:invalid-field"
NOT_IMPLEMENTED: Final = "amqp:not-implemented"
RESOURCE_LOCKED: Final = "amqp:resource-locked"
PRECONDITION_FAILED: Final = "amqp:precondition-failed"
RESOURCE_DELETED: Final = "amqp:resource-deleted"
ILLEGAL_STATE: Final = "amqp:illegal-state"
FRAME_SIZE_TOO_SMALL: Final = "amqp:frame-size-too-small"

CONNECTION_FORCED: Final = "amqp:connection:forced"
FRAMING_ERROR: Final = "amqp:connection:framing-error"

WINDOW_VIOLATION: Final = "amqp:session:window-violation"
ERRANT_LINK: Final = "amqp:session:errant-link"
HANDLE_IN_USE: Final = "amqp:session:handle-in-use"
UNATTACHED_HANDLE: Final = "amqp:session:unattached-handle"

DETACH_FORCED: Final = "amqp:link:detach-forced"
TRANSFER_LIMIT_EXCEEDED: Final = "amqp:link:transfer-limit-exceeded"
MESSAGE_SIZE_EXCEEDED: Final = "amqp:link:message-size-exceeded"

TRANSACTION_UNKNOWN_ID: Final = "amqp:transaction:unknown-id"
TRANSACTION_ROLLBACK: Final = "amqp:transaction:rollback"


class ProtocolError(Exception):
    """A peer broke a rule: `condition` (a symbol above) and `description` for the peer."""

    def __init__(self, condition: str, description: str) -> None:
        super().__init__(f"{condition}: {description}")
        self.condition = condition
        self.description = description


class ConnectionLevelError(ProtocolError):
    """Closes the connection."""


class SessionError(ProtocolError):
    """Ends the session on `channel`."""

    def __init__(self, channel: int, condition: str, description: str) -> None:
        super().__init__(condition, description)
        self.channel = channel


class LinkError(ProtocolError):
    """Detaches (closes) link `handle` of the session on `channel`."""

    def __init__(self, channel: int, handle: int, condition: str, description: str) -> None:
        super().__init__(condition, description)
        self.channel = channel
        self.handle = handle
