"""Offset range reads of a stream queue (`GET /api/streams/{vhost}/{queue}/log`) and its
bounds, before and after a SIGKILL of the broker: what the Spark stream source relies on.

A `ringmq serve` subprocess with its management port, driven by the connector's own client.
"""

from __future__ import annotations

import time
from pathlib import Path

import pika
import pytest

from ringmq.connector.client import StreamAPIError, StreamClient
from ringmq.connector.publisher import Publisher
from tests.serve import Serve

pytestmark = [pytest.mark.integration]
pytest.importorskip("pyarrow")


def _declare(serve: Serve, queue: str, **arguments: str) -> None:
    conn = pika.BlockingConnection(pika.ConnectionParameters("127.0.0.1", serve.port))
    try:
        conn.channel().queue_declare(queue, durable=True, arguments=arguments or None)
    finally:
        conn.close()


def _publish(serve: Serve, queue: str, lo: int, hi: int) -> None:
    with Publisher(serve.amqp_url) as pub:
        pub.publish_many(("", queue, b"\x00\x00", b"%d" % i) for i in range(lo, hi))


def _range(c: StreamClient, queue: str, lo: int, hi: int) -> list[tuple[int, bytes]]:
    from ringmq.connector.spark.rows import columns_to_batch

    batch = columns_to_batch(queue, c.read_log_columns(queue, lo, hi))
    return list(
        zip(batch.column("position").to_pylist(), batch.column("body").to_pylist(), strict=True)
    )


def test_offset_ranges_are_exact_and_survive_a_kill(tmp_path: Path) -> None:
    data = tmp_path / "data"
    serve = Serve(data, tmp_path / "serve-0.log", http=True)
    try:
        _declare(serve, "log-s", **{"x-queue-type": "stream"})
        _declare(serve, "log-q")
        _publish(serve, "log-s", 0, 600)
        time.sleep(0.05)
        t = int(time.time() * 1000)
        time.sleep(0.05)
        _publish(serve, "log-s", 600, 1000)
        want = [(i, b"%d" % i) for i in range(1000)]
        with StreamClient(serve.http_url) as c:
            b = c.stream_bounds("log-s", t)
            assert (b["type"], b["first_offset"], b["next_offset"]) == ("stream", 0, 1000)
            assert b["offset_at"] == 600
            assert b["leases"] == []
            assert _range(c, "log-s", 100, 250) == want[100:250]
            assert _range(c, "log-s", 990, 2000) == want[990:]  # short at the log's end
            assert _range(c, "log-s", 5, 5) == []
            assert "type" not in c.stream_bounds("log-q")  # a classic queue has no offsets
            with pytest.raises(StreamAPIError) as exc:
                c.read_log_columns("log-q", 0, 1)
            assert exc.value.status == 400
            with pytest.raises(StreamAPIError) as exc:
                c.read_log_columns("log-s", 0, 300_000)  # wider than one read may be
            assert exc.value.status == 400
        serve.kill()
        serve = Serve(data, tmp_path / "serve-1.log", http=True)
        with StreamClient(serve.http_url) as c:  # the same offsets hold the same messages
            assert c.stream_bounds("log-s")["next_offset"] == 1000
            assert _range(c, "log-s", 0, 1000) == want
            assert c.stream_bounds("log-s", t)["offset_at"] == 600
        _publish(serve, "log-s", 1000, 1010)
        with StreamClient(serve.http_url) as c:  # appends continue after the last offset
            assert _range(c, "log-s", 995, 1010) == [(i, b"%d" % i) for i in range(995, 1010)]
    finally:
        serve.kill()
