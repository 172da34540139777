"""Request bodies: JSON parsed with a nesting limit.

`decode_json` parses a JSON body (UTF-8, RFC 8259) after checking, without recursion, that it
nests no deeper than `MAX_JSON_DEPTH`: Python's parser recurses once per level and a body of
500,000 `[` would exhaust the stack, and a document that parses could still break the code
that later walks it (encoding it again, storing it). Every JSON body of the API is parsed here.
"""

from __future__ import annotations

import json
from array import array
from itertools import accumulate
from typing import Any, Final

from ringmq.management.errors import BadRequestError

MAX_JSON_DEPTH: Final = 100
"""Deepest nesting of arrays and objects a JSON body may have; no document the API takes
nests beyond a few levels (a definitions import: 4, a queue argument: a few more)."""

_STEPS: Final = bytes.maketrans(b"[{]}", b"\x01\x01\xff\xff")
"""Openers to +1 and closers to -1 (as signed bytes)."""
_NOT_BRACKETS: Final = bytes(c for c in range(256) if c not in b"[]{}")
_CHUNK: Final = 1 << 16
"""Steps summed per slice: a slice at a time keeps the running depth small and lets a body
nested too deep stop at its first slice."""


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
