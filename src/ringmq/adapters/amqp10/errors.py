"""Core errors in AMQP 1.0 terms: each `Condition` is an error condition, in one table.

A refused link attach answers with the condition (and the core's text as the description);
a refused publish settles as `rejected` with it; a connection-wide refusal closes with it.
"""

from __future__ import annotations

from typing import Final

from ringmq.amqp10 import conditions as c
from ringmq.core.errors import Condition

CONDITIONS: Final[dict[Condition, str]] = {
    Condition.NOT_FOUND: c.NOT_FOUND,
    Condition.ACCESS_REFUSED: c.UNAUTHORIZED_ACCESS,
    Condition.RESOURCE_LOCKED: c.RESOURCE_LOCKED,
    Condition.PRECONDITION_FAILED: c.PRECONDITION_FAILED,
    Condition.NOT_ALLOWED: c.NOT_ALLOWED,
    Condition.NOT_IMPLEMENTED: c.NOT_IMPLEMENTED,
    Condition.COMMAND_INVALID: c.INVALID_FIELD,
    Condition.CHANNEL_ERROR: c.ILLEGAL_STATE,
    Condition.UNEXPECTED_FRAME: c.ILLEGAL_STATE,
    Condition.CONNECTION_FORCED: c.CONNECTION_FORCED,
    Condition.RESOURCE_ERROR: c.RESOURCE_LIMIT_EXCEEDED,
    Condition.INTERNAL_ERROR: c.INTERNAL_ERROR,
}
"""Every condition's AMQP 1.0 error condition (a test checks that each condition has one)."""

REFUSALS: Final[dict[str, str]] = {
    "overflow": c.RESOURCE_LIMIT_EXCEEDED,
    "address-full": c.RESOURCE_LIMIT_EXCEEDED,
    "store-failed": c.INTERNAL_ERROR,
}
"""Why a queue refused a publish (a negative `Confirm`'s reason) as the rejected outcome's
condition."""

REFUSAL_TEXTS: Final[dict[str, str]] = {
    "overflow": "a queue refused the message: it is full (overflow reject-publish)",
    "address-full": "the address is full (address-full-policy FAIL)",
    "store-failed": "the message could not be stored",
}


def condition_of(condition: Condition) -> str:
    """The AMQP 1.0 error condition of a core condition."""
    return CONDITIONS[condition]
