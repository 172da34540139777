"""AMQP 0-9-1 reply codes and the one exception type that carries them.

Raise `AMQPError` where the rule lives; the protocol boundary turns it into Channel.Close
(soft codes) or Connection.Close (hard codes, or any error on channel 0), as RabbitMQ does.
"""

from __future__ import annotations

from enum import IntEnum


class ReplyCode(IntEnum):
    REPLY_SUCCESS = 200
    CONTENT_TOO_LARGE = 311
    NO_ROUTE = 312
    NO_CONSUMERS = 313
    CONNECTION_FORCED = 320
    INVALID_PATH = 402
    ACCESS_REFUSED = 403
    NOT_FOUND = 404
    RESOURCE_LOCKED = 405
    PRECONDITION_FAILED = 406
    FRAME_ERROR = 501
    SYNTAX_ERROR = 502
    COMMAND_INVALID = 503
    CHANNEL_ERROR = 504
    UNEXPECTED_FRAME = 505
    RESOURCE_ERROR = 506
    NOT_ALLOWED = 530
    NOT_IMPLEMENTED = 540
    INTERNAL_ERROR = 541

    @property
    def is_hard(self) -> bool:
        """True when the code closes the whole connection rather than one channel."""
        return self not in _SOFT


_SOFT = frozenset(
    {
        ReplyCode.CONTENT_TOO_LARGE,
        ReplyCode.NO_ROUTE,
        ReplyCode.NO_CONSUMERS,
        ReplyCode.ACCESS_REFUSED,
        ReplyCode.NOT_FOUND,
        ReplyCode.RESOURCE_LOCKED,
        ReplyCode.PRECONDITION_FAILED,
    }
)

_MAX_REPLY_TEXT = 255


class AMQPError(Exception):
    """A protocol-level error with its reply code.

    Args:
        code: the AMQP reply code.
        explanation: what was wrong, for the peer and the log.
        class_id: class of the method that caused it (0 when none).
        method_id: method id of the method that caused it (0 when none).
    """

    def __init__(
        self, code: ReplyCode, explanation: str, *, class_id: int = 0, method_id: int = 0
    ) -> None:
        super().__init__(f"{code.name} - {explanation}")
        self.code = code
        self.explanation = explanation
        self.class_id = class_id
        self.method_id = method_id

    @property
    def reply_text(self) -> str:
        """RabbitMQ-style text, e.g. "NOT_FOUND - no queue 'q' in vhost '/'", <= 255 bytes."""
        text = f"{self.code.name} - {self.explanation}"
        raw = text.encode("utf-8")
        if len(raw) <= _MAX_REPLY_TEXT:
            return text
        return raw[:_MAX_REPLY_TEXT].decode("utf-8", errors="ignore")

    @property
    def is_hard(self) -> bool:
        return self.code.is_hard
