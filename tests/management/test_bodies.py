"""`management.bodies`: JSON nesting counted without recursion, the body limit as ASGI
middleware, and the error boundary's logging (a server error keeps its traceback)."""

from __future__ import annotations

import json
import logging
from typing import Any

import httpx
import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from ringmq.management import bodies
from ringmq.management.admin import CoreAdmin
from ringmq.management.bodies import MAX_JSON_DEPTH, BodyLimit, decode_json, json_object
from ringmq.management.errors import BadRequestError, PayloadTooLargeError

_JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(alphabet='ab[]{}"\\\n é', max_size=6),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=3), inner),
    max_leaves=20,
)


def _depth(value: Any) -> int:
    # the reference: nesting of arrays and objects, counted on the parsed value with a stack
    deepest, stack = 0, [(value, 0)]
    while stack:
        v, d = stack.pop()
        if isinstance(v, list | dict):
            deepest = max(deepest, d + 1)
            stack.extend((x, d + 1) for x in (v.values() if isinstance(v, dict) else v))
    return deepest


def _nest(value: Any, levels: int) -> Any:
    for i in range(levels):
        value = [value] if i % 2 else {"k": value}
    return value


@given(value=_JSON, extra=st.integers(0, 8), limit=st.integers(0, 12), ascii=st.booleans())
@example(value='"[[["', extra=0, limit=0, ascii=True)  # brackets in a string are text
@example(value='\\"[', extra=0, limit=0, ascii=True)  # an escaped quote does not end it
@example(value="\\\\", extra=2, limit=1, ascii=True)  # an escaped backslash escapes no quote
def test_nesting_is_counted_as_the_parsed_value_nests(
    value: Any, extra: int, limit: int, ascii: bool
) -> None:
    doc = _nest(value, extra)
    raw = json.dumps(doc, ensure_ascii=ascii).encode()
    assert bodies._nests_deeper(raw, limit) == (_depth(doc) > limit)


@pytest.mark.parametrize(
    "raw",
    [
        b"[" * 500_000,  # unterminated: the parser would recurse as deep before failing
        b"[" * 500_000 + b"]" * 500_000,
        b'{"a":' * 200 + b"1" + b"}" * 200,
        b"[" * 60 + b"[1]," * 10_000 + b"[" * 60,  # deep after a long flat stretch
        b'["' + b'\\"' * 1000 + b'"' + b"[" * 200,  # escaped quotes, then real nesting
    ],
)
def test_deep_bodies_are_refused_before_parsing(raw: bytes) -> None:
    with pytest.raises(BadRequestError, match=f"nests deeper than {MAX_JSON_DEPTH} levels"):
        decode_json(raw)


def test_nesting_at_the_limit_is_parsed() -> None:
    doc = _nest(1, MAX_JSON_DEPTH)
    assert decode_json(json.dumps(doc).encode()) == doc
    with pytest.raises(BadRequestError, match="nests deeper"):
        decode_json(json.dumps([doc]).encode())
    # brackets inside strings are text: many of them, and a shallow document
    text = "[{" * 10_000
    assert decode_json(json.dumps({"t": text}).encode()) == {"t": text}


@pytest.mark.parametrize(
    ("raw", "reason"),
    [
        (b"{nope", "not valid JSON"),
        (b"\xff{}", "not UTF-8"),
        (b"[1, 2]", "must be a JSON object"),
        (b'"text"', "must be a JSON object"),
    ],
)
def test_json_object_refusals(raw: bytes, reason: str) -> None:
    with pytest.raises(BadRequestError, match=reason):
        json_object(raw)


def test_json_object_of_an_empty_body_is_empty() -> None:
    assert json_object(b"") == {}
    assert json_object(b"  \n") == {}


async def _echo(scope: Any, receive: Any, send: Any) -> None:
    # reads the whole body; a BodyLimit refusal escapes as the exception
    size = 0
    more = True
    while more:
        message = await receive()
        size += len(message.get("body", b""))
        more = message.get("more_body", False)
    await send({"type": "http.response.start", "status": 200, "headers": []})
    await send({"type": "http.response.body", "body": str(size).encode()})


def _receive_of(*chunks: bytes) -> Any:
    queue = [
        {"type": "http.request", "body": c, "more_body": i < len(chunks) - 1}
        for i, c in enumerate(chunks)
    ]
    calls: list[int] = []

    async def receive() -> dict[str, Any]:
        calls.append(1)
        return queue.pop(0)

    receive.calls = calls  # type: ignore[attr-defined]
    return receive


def _scope(length: int | None = None) -> dict[str, Any]:
    headers = [] if length is None else [(b"content-length", str(length).encode())]
    return {"type": "http", "method": "PUT", "path": "/", "headers": headers}


async def _noop_send(message: Any) -> None:
    return None


async def test_a_declared_length_over_the_limit_is_refused_before_reading() -> None:
    receive = _receive_of(b"x" * 11)
    with pytest.raises(PayloadTooLargeError, match="of 11 bytes exceeds the limit of 10"):
        await BodyLimit(_echo, 10)(_scope(11), receive, _noop_send)
    assert receive.calls == []  # not one read: uvicorn sends no 100 Continue either


async def test_an_undeclared_body_is_counted_as_it_arrives() -> None:
    receive = _receive_of(b"x" * 6, b"x" * 6, b"x" * 6)
    with pytest.raises(PayloadTooLargeError, match="exceeds the limit of 10 bytes"):
        await BodyLimit(_echo, 10)(_scope(), receive, _noop_send)
    assert len(receive.calls) == 2  # refused at the chunk that passed the limit


async def test_a_lifted_limit_reads_everything() -> None:
    sent: list[Any] = []

    async def send(message: Any) -> None:
        sent.append(message)

    async def lifting(scope: Any, receive: Any, send: Any) -> None:
        bodies.lift_limit(scope)
        await _echo(scope, receive, send)

    await BodyLimit(lifting, 10)(_scope(18), _receive_of(b"x" * 9, b"x" * 9), send)
    assert sent[-1]["body"] == b"18"


def test_a_limit_under_one_byte_is_refused() -> None:
    with pytest.raises(ValueError, match="at least 1"):
        BodyLimit(_echo, 0)


async def test_a_server_error_is_logged_at_error_with_its_traceback(
    client: httpx.AsyncClient,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    # The other side of the logging rule: a defect (5xx) still reads as one.
    def broken(*args: Any, **kwargs: Any) -> Any:
        raise RuntimeError("facade bug")

    monkeypatch.setattr(CoreAdmin, "queues", broken)
    caplog.set_level(logging.DEBUG, logger="ringmq.management")
    r = await client.get("/api/queues")
    assert r.status_code == 500
    errors = [rec for rec in caplog.records if rec.levelno == logging.ERROR]
    assert [rec.getMessage() for rec in errors] == ["management request GET /api/queues failed"]
    assert errors[0].exc_info is not None
    assert isinstance(errors[0].exc_info[1], RuntimeError)
