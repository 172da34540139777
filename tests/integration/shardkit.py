"""What the tests of shards running side by side share: the event loop an in-process shard
runs on, the shard link's log line, and draining a queue of a `ringmq serve` process."""

from __future__ import annotations

import re
from collections.abc import Coroutine
from typing import Any, Final, TypeVar

import pika

from ringmq.server.loop import new_event_loop
from tests.serve import Serve

LINK_LINE: Final = re.compile(rb"SHARD-LINK listening on ([0-9.]+):(\d+)")
"""The log line of a shard link listener (its port: group 2)."""
_T = TypeVar("_T")


def run_on_ringmq_loop(main: Coroutine[Any, Any, _T]) -> _T:
    """Run `main` (an in-process shard and its clients) on the loop `ringmq serve` runs on
    (uvloop when installed)."""
    loop = new_event_loop()
    try:
        return loop.run_until_complete(main)
    finally:
        loop.close()


def drain(serve: Serve, name: str) -> list[bytes]:
    """Every message of queue `name` of `serve`, taken with pika's basic.get."""
    out: list[bytes] = []
    with pika.BlockingConnection(pika.URLParameters(serve.amqp_url)) as conn:
        ch = conn.channel()
        while True:
            method, _props, body = ch.basic_get(name, auto_ack=True)
            if method is None:
                return out
            out.append(body)
