"""Kill -9 restarts of a real `ringmq serve` behind a standing backlog: the store's files stay
bounded by what is live, not by the number of restarts.

Each round acks what the previous round left in a work queue (so this start's journal segment
depends on the previous one, back to the backlog's), publishes more with confirms, acks most of
it, and SIGKILLs the broker. Before `reclaim.py` copied a standing backlog forward, every
restart left one more dead journal segment that the next replay read.
"""

from __future__ import annotations

import gc
from pathlib import Path
from typing import Any

import pika
import pytest

from tests.serve import Serve

pytestmark = [
    pytest.mark.integration,
    # pika leaves the sockets of connections the kill broke for the garbage collector
    pytest.mark.filterwarnings("ignore::ResourceWarning"),
    pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning"),
]

ROUNDS = 5
BACKLOG = 200
PERSISTENT = pika.BasicProperties(delivery_mode=2)


def _channel(serve: Serve) -> tuple[Any, Any]:
    conn = pika.BlockingConnection(
        pika.ConnectionParameters("127.0.0.1", serve.port, connection_attempts=1)
    )
    return conn, conn.channel()


def _journal(data: Path) -> list[Path]:
    return sorted((data / "store" / "journal").glob("*.seg"))


def test_kill_restart_rounds_behind_a_backlog_keep_the_store_bounded(tmp_path: Path) -> None:
    data = tmp_path / "data"
    serve = Serve(data, tmp_path / "serve-0.log")
    segments: list[int] = []
    try:
        conn, ch = _channel(serve)
        ch.queue_declare("backlog", durable=True)
        ch.queue_declare("work", durable=True)
        ch.confirm_delivery()
        for i in range(BACKLOG):
            ch.basic_publish("", "backlog", b"backlog-%d" % i, PERSISTENT)
        conn.close()
        for n in range(ROUNDS):
            conn, ch = _channel(serve)
            while True:  # what the previous round left
                method, _props, _body = ch.basic_get("work")
                if method is None:
                    break
                ch.basic_ack(method.delivery_tag)
            ch.confirm_delivery()
            for i in range(20):
                ch.basic_publish("", "work", b"work-%d-%d" % (n, i), PERSISTENT)
            for _ in range(15):
                method, _props, _body = ch.basic_get("work")
                assert method is not None
                ch.basic_ack(method.delivery_tag)
            # an fsync after the acks (confirms wait for it), so the round's work is on disk
            ch.basic_publish("", "work", b"marker-%d" % n, PERSISTENT)
            serve.kill()
            serve = Serve(data, tmp_path / f"serve-{n + 1}.log")
            segments.append(len(_journal(data)))
        conn, ch = _channel(serve)
        ok = ch.queue_declare("backlog", passive=True)
        assert ok.method.message_count == BACKLOG
        bodies = []
        while True:
            method, _props, body = ch.basic_get("backlog", auto_ack=True)
            if method is None:
                break
            bodies.append(body)
        conn.close()
    finally:
        serve.kill()
        gc.collect()  # pika's broken connections warn now, under this test's filters
    assert sorted(bodies) == sorted(b"backlog-%d" % i for i in range(BACKLOG))
    # before: one more journal segment per restart (2, 3, ..., ROUNDS + 1)
    assert max(segments) <= 3, segments
