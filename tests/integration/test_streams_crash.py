"""Settles, leases and the de-duplication window of the streams API across broker restarts.

A `ringmq serve` subprocess with its management port; the test drives the streams API with the
connector's own client (`StreamClient`, what the Spark reader and writer call) and restarts the
broker on the same data dir, either cleanly (SIGTERM) or with a SIGKILL.
"""

from __future__ import annotations

from pathlib import Path

import pika
import pytest

from ringmq.connector.client import StreamClient
from ringmq.connector.publisher import Publisher
from ringmq.connector.records import encode_publish
from tests.serve import Serve

pytestmark = [pytest.mark.integration, pytest.mark.slow]

PERSISTENT = b"\x10\x00\x02"  # basic properties: delivery-mode flag, delivery_mode=2


def _declare(serve: Serve, queue: str) -> None:
    conn = pika.BlockingConnection(pika.ConnectionParameters("127.0.0.1", serve.port))
    try:
        conn.channel().queue_declare(queue, durable=True)
    finally:
        conn.close()


def _publish(serve: Serve, queue: str, n: int) -> None:
    with Publisher(serve.amqp_url) as pub:
        pub.publish_many(("", queue, PERSISTENT, b"%d" % i) for i in range(n))


def _restart(serve: Serve, how: str, data: Path, log: Path) -> Serve:
    serve.kill() if how == "kill" else serve.stop()
    return Serve(data, log, http=True)


@pytest.mark.parametrize("how", ["kill", "stop"])
def test_settled_messages_stay_settled_after_restart(tmp_path: Path, how: str) -> None:
    data = tmp_path / "data"
    serve = Serve(data, tmp_path / "serve-0.log", http=True)
    try:
        _declare(serve, "settle-q")
        _publish(serve, "settle-q", 20_000)
        got: list[bytes] = []
        with StreamClient(serve.http_url) as c:
            start = 0
            while True:  # the streaming reader's loop: reserve, read, settle
                end = c.reserve("settle-q", "job", start, 5000)["end"]
                if end == start:
                    break
                got += [r.body for r in c.read("settle-q", "job", start, end)]
                c.settle("settle-q", "job", end)
                start = end
            assert c.info("settle-q")["messages"] == 0
        assert sorted(got) == sorted(b"%d" % i for i in range(20_000))
        serve = _restart(serve, how, data, tmp_path / "serve-1.log")
        with StreamClient(serve.http_url) as c:
            info = c.info("settle-q")
        assert (info["messages"], info["ready"]) == (0, 0)
    finally:
        serve.kill()


def _read(c: StreamClient, queue: str, consumer: str, lo: int, hi: int) -> list[tuple[int, bytes]]:
    return [(r.pos, r.body) for r in c.read(queue, consumer, lo, hi)]


@pytest.mark.parametrize("how", ["kill", "stop"])
def test_leases_keep_their_positions_across_restart(tmp_path: Path, how: str) -> None:
    data = tmp_path / "data"
    serve = Serve(data, tmp_path / "serve-0.log", http=True)
    try:
        _declare(serve, "lease-q")
        _publish(serve, "lease-q", 1000)
        with StreamClient(serve.http_url) as c:
            assert c.reserve("lease-q", "a", 0, 200)["end"] == 200
            assert c.reserve("lease-q", "b", 0, 200)["end"] == 200
            assert c.reserve("lease-q", "a", 200, 100)["end"] == 300
            c.settle("lease-q", "a", 50)
            before = {
                "a": _read(c, "lease-q", "a", 0, 300),
                "b": _read(c, "lease-q", "b", 0, 200),
            }
        assert [p for p, _ in before["a"]] == list(range(50, 300))
        serve = _restart(serve, how, data, tmp_path / "serve-1.log")
        with StreamClient(serve.http_url) as c:
            after = {
                "a": _read(c, "lease-q", "a", 0, 300),
                "b": _read(c, "lease-q", "b", 0, 200),
            }
            assert after == before  # the same message behind every position
            info = c.info("lease-q")
            assert info["ready"] == 1000 - 50 - 250 - 200
            leases = {
                le["consumer"]: (le["settled"], le["next"], le["held"]) for le in info["leases"]
            }
            assert leases == {"a": (50, 300, 250), "b": (0, 200, 200)}
            # drain everything through the two leases: every message exactly once
            got = [b for _, b in before["a"] + before["b"]]
            c.settle("lease-q", "a", 300)
            c.settle("lease-q", "b", 200)
            start = 300
            while True:
                end = c.reserve("lease-q", "a", start, 400)["end"]
                if end == start:
                    break
                got += [b for _, b in _read(c, "lease-q", "a", start, end)]
                c.settle("lease-q", "a", end)
                start = end
            assert c.info("lease-q")["messages"] == 0
        first_50 = set(range(50))  # settled before the restart, read then
        assert sorted(got) == sorted(b"%d" % i for i in range(1000) if i not in first_50)
    finally:
        serve.kill()


WINDOW = {"x-message-deduplication-window-ms": 600_000}


def _with_id(i: int) -> tuple[str, bytes, bytes]:
    mid = b"w-%d" % i  # properties: delivery-mode and message-id flags, then both values
    return ("dd-q", b"\x10\x80\x02" + bytes((len(mid),)) + mid, b"%d" % i)


@pytest.mark.parametrize("how", ["kill", "stop"])
@pytest.mark.parametrize("scope", ["queue", "exchange"])
def test_replayed_write_after_restart_is_deduplicated(tmp_path: Path, how: str, scope: str) -> None:
    data = tmp_path / "data"
    serve = Serve(data, tmp_path / "serve-0.log", http=True)
    exchange = "dd-x" if scope == "exchange" else ""
    try:
        conn = pika.BlockingConnection(pika.ConnectionParameters("127.0.0.1", serve.port))
        ch = conn.channel()
        ch.queue_declare("dd-q", durable=True, arguments=WINDOW if scope == "queue" else None)
        if exchange:
            ch.exchange_declare(exchange, "direct", durable=True, arguments=WINDOW)
            ch.queue_bind("dd-q", exchange, "dd-q")
        conn.close()
        with StreamClient(serve.http_url) as c:
            assert c.publish(exchange, encode_publish(map(_with_id, range(1000))))["published"]
            assert c.reserve("dd-q", "job", 0, 400)["end"] == 400
            c.settle("dd-q", "job", 400)  # consumed: only the window remembers these
            assert c.info("dd-q")["messages"] == 600
        serve = _restart(serve, how, data, tmp_path / "serve-1.log")
        with StreamClient(serve.http_url) as c:
            c.publish(exchange, encode_publish(map(_with_id, range(1100))))  # the write replayed
            bodies = sorted(int(r.body) for r in c.browse_all("dd-q"))
        assert bodies == list(range(400, 1100))  # only the 100 new ids got in
    finally:
        serve.kill()
