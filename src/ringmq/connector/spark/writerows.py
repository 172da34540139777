"""The writer's rows as messages: the parts the AMQP sink and the bulk HTTP path share.

A row's message id (when the row has none) ends with `digest(routing_key, body)` so that a
retried batch write produces the same ids and the broker's de-duplication drops the copies;
`row_properties` turns a row's `headers` map and `properties` struct into AMQP basic
properties. Pure functions.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from typing import Any


def text(v: Any) -> str:
    """A cell as text (bytes decoded as UTF-8)."""
    if isinstance(v, bytes | bytearray):
        return bytes(v).decode("utf-8", "replace")
    return str(v)


def digester(rk: str) -> Callable[[bytes], str]:
    """`digest(rk, body)` as a function of the body: the routing key hashed once, for the
    many rows of a batch that share it."""
    base = hashlib.blake2b(digest_size=12)
    base.update(rk.encode())
    base.update(b"\x00")
    copy = base.copy

    def one(body: bytes) -> str:
        h = copy()
        h.update(body)
        return h.hexdigest()

    return one


def digest(rk: str, body: bytes) -> str:
    """The content part of a batch write's message id: a hash of routing key and body."""
    return digester(rk)(body)


def row_properties(mid: str, headers: Any, extra: Any, persistent: bool = False) -> Any:
    """A row's `BasicProperties`: its message id, `headers` map and `properties` struct
    (content_type, correlation_id, type, app_id, delivery_mode); maps may arrive as pairs.
    `persistent` (the writer option) makes delivery_mode 2 unless the row sets one."""
    from ringmq.amqp.properties import BasicProperties

    if headers is not None and not isinstance(headers, dict):
        headers = dict(headers)
    extra = {} if not extra else dict(extra)
    return BasicProperties(
        message_id=mid,
        headers={str(k): text(v) for k, v in headers.items()} if headers else None,
        content_type=extra.get("content_type"),
        correlation_id=extra.get("correlation_id"),
        type=extra.get("type"),
        app_id=extra.get("app_id"),
        delivery_mode=(
            int(extra["delivery_mode"]) if "delivery_mode" in extra else (2 if persistent else None)
        ),
    )
