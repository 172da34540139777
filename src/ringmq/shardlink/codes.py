"""The codes an owner answers a refused forward or subscribe with (plain numbers on the link).

The link carries a positive code and, for a subscribe, a text; the numbers are AMQP 0-9-1's
reply codes, which RabbitMQ's texts already name ("NOT_FOUND - no queue 'q' in vhost '/'"), so
an origin can hand them to a client of any protocol the way its adapter maps a core error,
and turns a refused forward's code back into its confirm's reason (`reason_of`).
"""

from __future__ import annotations

from typing import Final

from ringmq.core.errors import Condition
from ringmq.core.published import ADDRESS_FULL, OVERFLOW
from ringmq.core.transactions import STORE_FAILED

NOT_FOUND: Final = 404
"""A forward to a queue the owner does not have (deleted, or the origin's routing is stale)."""
PRECONDITION_FAILED: Final = 406
INTERNAL_ERROR: Final = 541

_BY_REASON: Final = {
    OVERFLOW: 406,  # a full queue's reject-publish (PRECONDITION_FAILED, as its limit is)
    ADDRESS_FULL: 506,  # an Artemis FAIL address (RESOURCE_ERROR)
    STORE_FAILED: 541,  # the store could not make it durable (INTERNAL_ERROR)
}

_BY_CONDITION: Final = {
    Condition.NOT_FOUND: 404,
    Condition.ACCESS_REFUSED: 403,
    Condition.RESOURCE_LOCKED: 405,
    Condition.PRECONDITION_FAILED: 406,
    Condition.NOT_ALLOWED: 530,
    Condition.NOT_IMPLEMENTED: 540,
    Condition.COMMAND_INVALID: 503,
    Condition.CHANNEL_ERROR: 504,
    Condition.UNEXPECTED_FRAME: 505,
    Condition.CONNECTION_FORCED: 320,
    Condition.RESOURCE_ERROR: 506,
    Condition.INTERNAL_ERROR: 541,
}


def of_reason(reason: str | None) -> int:
    """The code of a negative confirm's reason (`Confirm.reason`)."""
    return _BY_REASON.get(reason or "", PRECONDITION_FAILED)


def of_condition(condition: Condition) -> int:
    """The code of a refused core call's condition."""
    return _BY_CONDITION.get(condition, INTERNAL_ERROR)


_CONDITIONS: Final = {code: condition for condition, code in _BY_CONDITION.items()}


def condition_of(code: int) -> Condition:
    """The condition of a refusal's code: the inverse of `of_condition` (an unknown code:
    INTERNAL_ERROR)."""
    return _CONDITIONS.get(code, Condition.INTERNAL_ERROR)


_REASONS: Final = {code: reason for reason, code in _BY_REASON.items()}


def reason_of(code: int) -> str:
    """The confirm reason an origin gives a publish its owner refused with `code`: the
    inverse of `of_reason`, else `refused-<code>` (404: the owner has no such queue)."""
    return _REASONS.get(code, f"refused-{code}")
