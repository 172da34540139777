"""kill -9 under confirmed publishing to a stream queue: nothing confirmed is lost, and every
offset keeps its message across the crashes.

Each cycle starts `ringmq serve` on the same data dir, publishes numbered messages with
publisher confirms from a thread (each `basic_publish` returns once confirmed), SIGKILLs the
broker after a random while, and reads the whole stream back on the next start.
"""

from __future__ import annotations

import contextlib
import random
import threading
import time
from pathlib import Path

import pika
import pika.exceptions
import pytest

from tests.serve import Serve

pytestmark = [
    pytest.mark.integration,
    # pika leaves the sockets of connections the kill broke for the garbage collector
    pytest.mark.filterwarnings("ignore::ResourceWarning"),
    pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning"),
]

CYCLES = 3
ARGS = {"x-queue-type": "stream", "x-stream-max-segment-size-bytes": 20_000}


def _params(serve: Serve) -> pika.ConnectionParameters:
    return pika.ConnectionParameters(
        host="127.0.0.1", port=serve.port, connection_attempts=1, socket_timeout=5
    )


def _publish(serve: Serve, first_id: int, confirmed: list[int], stop: threading.Event) -> None:
    with contextlib.suppress(pika.exceptions.AMQPError, OSError):
        conn = pika.BlockingConnection(_params(serve))
        ch = conn.channel()
        ch.queue_declare("s", durable=True, arguments=ARGS)
        ch.confirm_delivery()
        n = first_id
        while not stop.is_set() and n < first_id + 100_000:
            ch.basic_publish("", "s", str(n).encode() + b" " + b"x" * 200)
            confirmed.append(n)  # returned: confirmed by the broker
            n += 1


def _read_all(serve: Serve) -> list[tuple[int, int]]:
    conn = pika.BlockingConnection(_params(serve))
    try:
        ch = conn.channel()
        ch.queue_declare("s", durable=True, arguments=ARGS)
        total = ch.queue_declare("s", passive=True).method.message_count
        ch.basic_qos(prefetch_count=total or 1)  # the whole stream at once, acked at the end
        out: list[tuple[int, int]] = []
        if total:
            for method, props, body in ch.consume(
                "s", arguments={"x-stream-offset": "first"}, inactivity_timeout=10
            ):
                assert method is not None, "the stream did not deliver all it holds"
                out.append((props.headers["x-stream-offset"], int(body.split(b" ")[0])))
                if len(out) == total:
                    break
        return out
    finally:
        with contextlib.suppress(pika.exceptions.AMQPError, OSError):
            conn.close()


def test_kill_9_loses_nothing_confirmed_and_keeps_offsets(tmp_path: Path) -> None:
    rng = random.Random(27)
    data = tmp_path / "data"
    confirmed: list[int] = []
    seen: dict[int, int] = {}  # offset -> message id, as read after a restart
    next_id = 0
    for cycle in range(CYCLES + 1):
        serve = Serve(data, tmp_path / f"broker{cycle}.log")
        try:
            if cycle:
                stream = _read_all(serve)
                offsets = [o for o, _ in stream]
                assert offsets == list(range(len(stream)))  # contiguous from 0
                ids = {i for _, i in stream}
                assert set(confirmed) <= ids  # nothing confirmed is lost
                for offset, ident in stream:  # every offset keeps its message
                    assert seen.setdefault(offset, ident) == ident
                next_id = max(ids | set(confirmed), default=-1) + 1
            if cycle == CYCLES:
                break
            stop = threading.Event()
            t = threading.Thread(target=_publish, args=(serve, next_id, confirmed, stop))
            t.start()
            time.sleep(rng.uniform(0.3, 0.8))
        finally:
            serve.kill()
        stop.set()
        t.join(timeout=30)
        assert not t.is_alive()
    assert len(confirmed) > CYCLES  # the publishers did publish
