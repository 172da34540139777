"""HTTP errors in RabbitMQ's management shape: `{"error": ..., "reason": ...}`.

Handlers raise these (or let the broker's `AMQPError`/`ValueError` through); `to_response`
maps everything at one boundary in `api.py`:
404 `{"error": "Object Not Found", "reason": "Not Found"}`, 400 `{"error": "bad_request"}`,
401 `{"error": "not_authorized"}` for missing or wrong credentials (authorisation refusals are
`authz.NotAuthorisedError`, 401 `{"error": "not_authorised"}` as RabbitMQ spells them),
413 `{"error": "payload_too_large"}` for a body over the limit (`bodies`).

`answer` is that boundary's logging too: a server error (5xx) is a defect and is logged at
ERROR with its traceback; a refused request (4xx) is the client's mistake and gets one line
without a traceback (INFO for a malformed request, DEBUG for routine answers such as 404), so
the log of a broker that refuses bad requests does not read like the log of one that crashes.

No answer carries `WWW-Authenticate`: the API never invites the browser's Basic prompt, whose
remembered credentials a browser would attach to any cross-site request (docs/management.md,
"Cross-site requests"). Clients send credentials preemptively (curl -u, httpx, requests,
rabbitmqadmin, the console's `Authorization` header all do).
"""

from __future__ import annotations

import logging
from typing import Final

from starlette.requests import ClientDisconnect, Request
from starlette.responses import JSONResponse

from ringmq.amqp.reply_codes import AMQPError, ReplyCode
from ringmq.core.errors import BrokerError, Condition

_ROUTINE: Final = frozenset({401, 403, 404, 405})
"""Refusals that are ordinary answers (a wrong login is logged by the login guard; a 404 is
how clients ask whether something exists): logged at DEBUG, the other 4xx at INFO."""
_LOGGED_REASON: Final = 200
"""Characters of a refusal's reason the log keeps (a reason may quote the client's input)."""


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


class PayloadTooLargeError(HttpError):
    """A request body over the management body limit (`bodies.BodyLimit`)."""

    status = 413
    error = "payload_too_large"


def to_http_error(exc: Exception) -> HttpError:
    """The HTTP error for an exception raised by a handler or by the broker facade."""
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
    elif isinstance(exc, ClientDisconnect):  # it hung up while sending the body
        exc = BadRequestError("the client disconnected before the end of the request body")
    elif not isinstance(exc, HttpError):
        exc = HttpError(f"{type(exc).__name__}: {exc}")  # a defect: answered 500
    return exc


def to_response(exc: Exception) -> JSONResponse:
    """The JSON answer for an error raised by a handler or by the broker facade."""
    err = to_http_error(exc)
    return JSONResponse({"error": err.error, "reason": err.reason}, status_code=err.status)


def answer(exc: Exception, request: Request, log: logging.Logger) -> JSONResponse:
    """The answer to a request whose handling raised `exc`, logged on `log` by whose fault it
    is (see the module docstring): 5xx at ERROR with the traceback, 4xx in one line."""
    err = to_http_error(exc)
    path = request.url.path
    if err.status >= 500:
        log.error("management request %s %s failed", request.method, path, exc_info=exc)
    else:
        level = logging.DEBUG if err.status in _ROUTINE else logging.INFO
        if log.isEnabledFor(level):
            log.log(
                level,
                "management request %s %s refused: %d %s",
                request.method,
                path,
                err.status,
                err.reason[:_LOGGED_REASON],
            )
    return to_response(err)
