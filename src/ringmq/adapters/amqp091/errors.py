"""Core errors as AMQP 0-9-1 errors: each `Condition` is a reply code.

Soft codes close the channel, hard ones the connection (`ReplyCode.is_hard`), as RabbitMQ.
"""

from __future__ import annotations

from typing import Final

from ringmq.amqp.reply_codes import AMQPError, ReplyCode
from ringmq.core.errors import BrokerError, Condition

REPLY_CODES: Final[dict[Condition, ReplyCode]] = {
    Condition.NOT_FOUND: ReplyCode.NOT_FOUND,
    Condition.ACCESS_REFUSED: ReplyCode.ACCESS_REFUSED,
    Condition.RESOURCE_LOCKED: ReplyCode.RESOURCE_LOCKED,
    Condition.PRECONDITION_FAILED: ReplyCode.PRECONDITION_FAILED,
    Condition.NOT_ALLOWED: ReplyCode.NOT_ALLOWED,
    Condition.NOT_IMPLEMENTED: ReplyCode.NOT_IMPLEMENTED,
    Condition.COMMAND_INVALID: ReplyCode.COMMAND_INVALID,
    Condition.CHANNEL_ERROR: ReplyCode.CHANNEL_ERROR,
    Condition.UNEXPECTED_FRAME: ReplyCode.UNEXPECTED_FRAME,
    Condition.CONNECTION_FORCED: ReplyCode.CONNECTION_FORCED,
    Condition.RESOURCE_ERROR: ReplyCode.RESOURCE_ERROR,
    Condition.INTERNAL_ERROR: ReplyCode.INTERNAL_ERROR,
}
"""Every condition's reply code (a test checks that each condition has one)."""


def to_amqp(exc: BrokerError, class_id: int = 0, method_id: int = 0) -> AMQPError:
    """The AMQP 0-9-1 error for a refused core call (class and method of the request)."""
    return AMQPError(
        REPLY_CODES[exc.condition], exc.explanation, class_id=class_id, method_id=method_id
    )
