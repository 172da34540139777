"""`management.bodies`: JSON nesting counted without recursion."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from ringmq.management import bodies
from ringmq.management.bodies import MAX_JSON_DEPTH, decode_json, json_object
from ringmq.management.errors import BadRequestError

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
