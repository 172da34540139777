"""Request bodies: the size limit every request is read under, and JSON with a nesting limit.

Theory of operation: `BodyLimit` wraps the management app (ASGI). Each HTTP request gets a
`receive` that refuses a body over `max_bytes` while it is read: at the first read, before a
byte of body is taken (and before uvicorn answers `Expect: 100-continue`), a `Content-Length`
over the limit raises `PayloadTooLargeError`; then the bytes of each chunk are counted as they
arrive (a chunked body declares no length) and the read that passes the limit raises it. So
whatever reads the body (`Api.guard`, through Starlette's `Request.body()`) never holds more
than the limit plus one received chunk, and the error boundary (`errors.answer`) turns the
exception into 413 `{"error": "payload_too_large", ...}`. What the client still sends after
the answer is read and dropped by uvicorn as it arrives (the connection stays usable), within
the request-head timeout of `server.httpserve`, which then closes the connection.

The limit is the management setting `management.http.max_body_size` (RabbitMQ's name,
default `DEFAULT_MAX_BODY_SIZE`), held per request in the ASGI scope (`BODY_LIMIT`) so that
`Api.guard` can lift it, before reading, for the one route whose body is a batch of messages
rather than a document (the streams bulk publish, `authz.PUBLISH_BODY`; docs/spark.md).

`decode_json` parses a JSON body (UTF-8, RFC 8259) after checking, without recursion, that it
nests no deeper than `MAX_JSON_DEPTH`: Python's parser recurses once per level and a body of
500,000 `[` would exhaust the stack, and a document that parses could still break the code
that later walks it (encoding it again, storing it). Every JSON body of the API is parsed here.
"""

from __future__ import annotations

import json
from array import array
from collections.abc import MutableMapping
from dataclasses import dataclass
from itertools import accumulate
from typing import Any, Final

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from ringmq.management.errors import BadRequestError, PayloadTooLargeError

DEFAULT_MAX_BODY_SIZE: Final = 20 * 1024 * 1024
"""Largest request body by default (bytes): 20 MiB, near RabbitMQ's 20,000,000; the
definitions of about 200,000 queues with short names in compact JSON (150,000 indented)."""
MAX_JSON_DEPTH: Final = 100
"""Deepest nesting of arrays and objects a JSON body may have; no document the API takes
nests beyond a few levels (a definitions import: 4, a queue argument: a few more)."""
BODY_LIMIT: Final = "ringmq.body_limit"
"""ASGI scope key of a request's `_Budget`."""

_STEPS: Final = bytes.maketrans(b"[{]}", b"\x01\x01\xff\xff")
"""Openers to +1 and closers to -1 (as signed bytes)."""
_NOT_BRACKETS: Final = bytes(c for c in range(256) if c not in b"[]{}")
_CHUNK: Final = 1 << 16
"""Steps summed per slice: a slice at a time keeps the running depth small and lets a body
nested too deep stop at its first slice."""


@dataclass(slots=True)
class _Budget:
    """What one request may still send: its limit (None: unlimited), its declared length."""

    max_bytes: int | None
    declared: int | None
    seen: int = 0
    started: bool = False

    def refuse(self, declared: int | None = None) -> PayloadTooLargeError:
        size = "" if declared is None else f" of {declared} bytes"
        return PayloadTooLargeError(
            f"request body{size} exceeds the limit of {self.max_bytes} bytes"
            " (management.http.max_body_size)"
        )


class BodyLimit:
    """ASGI middleware: each request's body is read under `max_bytes` (see module docstring)."""

    def __init__(self, app: ASGIApp, max_bytes: int) -> None:
        if max_bytes < 1:
            raise ValueError(f"max_bytes must be at least 1, got {max_bytes}")
        self.app = app
        self.max_bytes = max_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        budget = _Budget(self.max_bytes, _content_length(scope))
        scope = dict(scope)
        scope[BODY_LIMIT] = budget

        async def limited() -> Message:
            limit = budget.max_bytes
            if not budget.started:
                budget.started = True
                if limit is not None and budget.declared is not None and budget.declared > limit:
                    raise budget.refuse(budget.declared)
            message = await receive()
            if message["type"] == "http.request":
                budget.seen += len(message.get("body", b""))
                if limit is not None and budget.seen > limit:
                    raise budget.refuse()
            return message

        await self.app(scope, limited, send)


def lift_limit(scope: MutableMapping[str, Any]) -> None:
    """Read this request's body without the size limit (before any of it is read)."""
    budget = scope.get(BODY_LIMIT)
    if isinstance(budget, _Budget):
        assert not budget.started, "the body limit is lifted before the body is read"
        budget.max_bytes = None


def _content_length(scope: Scope) -> int | None:
    for name, value in scope.get("headers", ()):
        if name == b"content-length":
            try:
                return int(value)
            except ValueError:
                return None  # (h11 refuses a malformed Content-Length before the app runs)
    return None


def decode_json(raw: bytes) -> Any:
    """The JSON value of a request body.

    Raises:
        BadRequestError: the body is not UTF-8 JSON, or nests deeper than `MAX_JSON_DEPTH`.
    """
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise BadRequestError(f"request body is not UTF-8: {exc}") from None
    if _nests_deeper(raw, MAX_JSON_DEPTH):
        raise BadRequestError(f"request body nests deeper than {MAX_JSON_DEPTH} levels")
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise BadRequestError(f"request body is not valid JSON: {exc}") from None


def json_object(raw: bytes) -> dict[str, Any]:
    """A request body that must be a JSON object; an empty body is `{}`.

    Raises:
        BadRequestError: as `decode_json`, or the value is not an object.
    """
    if not raw.strip():
        return {}
    body = decode_json(raw)
    if not isinstance(body, dict):
        raise BadRequestError("request body must be a JSON object")
    return body


def _nests_deeper(raw: bytes, limit: int) -> bool:
    """Whether the arrays and objects of `raw` (UTF-8 JSON) nest deeper than `limit`.

    Counted without recursion, with C-speed bytes operations: once the escaped backslashes and
    escaped quotes are gone, every quote left opens or closes a string, so the text outside
    strings is every other piece between quotes; of it only the brackets are kept, and the
    running sum of +1 (opener) / -1 (closer) is taken a slice at a time. A regular expression
    for strings would backtrack on an unterminated one. For a body that is not JSON the count
    up to the parser's first error is the same, so it still bounds the depth the parser
    reaches.
    """
    if raw.count(b"[") + raw.count(b"{") <= limit:
        return False  # fewer openers than the limit: the common case, no scan
    bare = raw.replace(b"\\\\", b"").replace(b'\\"', b"")
    outside = b"".join(bare.split(b'"')[::2])
    steps = array("b", outside.translate(_STEPS, _NOT_BRACKETS))
    depth = 0
    for start in range(0, len(steps), _CHUNK):
        levels = list(accumulate(steps[start : start + _CHUNK], initial=depth))
        if max(levels) > limit:
            return True
        depth = levels[-1]
    return False
