"""HTTP errors in RabbitMQ's management shape: `{"error": ..., "reason": ...}`.

Handlers raise these (or let the broker's `AMQPError`/`ValueError` through); `to_response`
maps everything at one boundary in `api.py`:
404 `{"error": "Object Not Found", "reason": "Not Found"}`, 400 `{"error": "bad_request"}`,
401 `{"error": "not_authorized"}` for missing or wrong credentials (authorisation refusals are
`authz.NotAuthorisedError`, 401 `{"error": "not_authorised"}` as RabbitMQ spells them).

No answer carries `WWW-Authenticate`: the API never invites the browser's Basic prompt, whose
remembered credentials a browser would attach to any cross-site request (docs/management.md,
"Cross-site requests"). Clients send credentials preemptively (curl -u, httpx, requests,
rabbitmqadmin, the console's `Authorization` header all do).
"""

from __future__ import annotations

from starlette.responses import JSONResponse

from ringmq.amqp.reply_codes import AMQPError, ReplyCode
from ringmq.core.errors import BrokerError, Condition


class HttpError(Exception):
    """An HTTP error answer."""

    status = 500
    error = "internal_error"

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class BadRequestError(HttpError):
    status = 400
    error = "bad_request"


class NotFoundError(HttpError):
    status = 404
    error = "Object Not Found"

    def __init__(self, reason: str = "Not Found") -> None:
        super().__init__(reason)


class UnauthorizedError(HttpError):
    status = 401
    error = "not_authorized"


class MethodNotAllowedError(HttpError):
    status = 405
    error = "method_not_allowed"


def to_response(exc: Exception) -> JSONResponse:
    """The JSON answer for an error raised by a handler or by the broker facade."""
    if isinstance(exc, BrokerError):
        if exc.condition is Condition.NOT_FOUND:
            exc = NotFoundError(exc.explanation)
        else:
            exc = BadRequestError(exc.text)
    elif isinstance(exc, AMQPError):
        if exc.code == ReplyCode.NOT_FOUND:
            exc = NotFoundError(exc.explanation)
        else:
            exc = BadRequestError(exc.reply_text)
    elif isinstance(exc, ValueError):
        exc = BadRequestError(str(exc))
    elif not isinstance(exc, HttpError):
        exc = HttpError(f"{type(exc).__name__}: {exc}")
    return JSONResponse({"error": exc.error, "reason": exc.reason}, status_code=exc.status)
