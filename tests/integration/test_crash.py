"""The real crash test: SIGKILL a `ringmq serve` under confirmed persistent load, many times.

Each cycle starts the broker on the same data dir (port 0), runs a publisher (persistent
messages, publisher confirms; every confirmed id is recorded) and a consumer (basic.get + ack)
for a random while, then SIGKILLs the broker at a random moment. At the end a last broker drains
the queue. Checked: no confirmed message is lost, and a message received more than once is
flagged redelivered on every reception after the first.
"""

from __future__ import annotations

import contextlib
import gc
import os
import random
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pika
import pika.exceptions
import pytest

from tests.serve import Serve

pytestmark = [
    pytest.mark.integration,
    pytest.mark.slow,
    # pika leaves the sockets of connections the kill broke for the garbage collector
    pytest.mark.filterwarnings("ignore::ResourceWarning"),
    pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning"),
]

QUEUE = "crash-q"
CYCLES = 8
_CLIENT_ERRORS = (pika.exceptions.AMQPError, OSError)


class Ledger:
    """What the clients saw, shared by the publisher and consumer threads."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.next_id = 0
        self.confirmed: set[int] = set()
        self.received: list[tuple[int, bool]] = []  # (id, redelivered) in reception order


def _params(serve: Serve) -> pika.ConnectionParameters:
    return pika.ConnectionParameters(
        host="127.0.0.1", port=serve.port, connection_attempts=1, socket_timeout=5
    )


def _publisher(serve: Serve, ledger: Ledger, stop: threading.Event) -> None:
    with contextlib.suppress(*_CLIENT_ERRORS):
        conn = pika.BlockingConnection(_params(serve))
        ch = conn.channel()
        ch.confirm_delivery()
        props = pika.BasicProperties(delivery_mode=2)
        while not stop.is_set():
            with ledger.lock:
                msg_id = ledger.next_id
                ledger.next_id += 1
            ch.basic_publish("", QUEUE, b"%d" % msg_id, props)  # returns once confirmed
            with ledger.lock:
                ledger.confirmed.add(msg_id)


def _consumer(serve: Serve, ledger: Ledger, stop: threading.Event) -> None:
    with contextlib.suppress(*_CLIENT_ERRORS):
        conn = pika.BlockingConnection(_params(serve))
        ch = conn.channel()
        while not stop.is_set():
            method, _props, body = ch.basic_get(QUEUE, auto_ack=False)
            if method is None:
                time.sleep(0.005)
                continue
            with ledger.lock:
                ledger.received.append((int(body), bool(method.redelivered)))
            ch.basic_ack(method.delivery_tag)


@contextlib.contextmanager
def _load(serve: Serve, ledger: Ledger) -> Iterator[None]:
    stop = threading.Event()
    threads = [
        threading.Thread(target=_publisher, args=(serve, ledger, stop), daemon=True),
        threading.Thread(target=_consumer, args=(serve, ledger, stop), daemon=True),
    ]
    for t in threads:
        t.start()
    try:
        yield
    finally:
        stop.set()
        serve.kill()  # the clients' sockets break; they stop on the error
        for t in threads:
            t.join(timeout=30)


def _declare(serve: Serve) -> None:
    conn = pika.BlockingConnection(_params(serve))
    try:
        conn.channel().queue_declare(QUEUE, durable=True)
    finally:
        conn.close()


def _drain(serve: Serve, ledger: Ledger) -> None:
    conn = pika.BlockingConnection(_params(serve))
    try:
        ch = conn.channel()
        while True:
            method, _props, body = ch.basic_get(QUEUE, auto_ack=True)
            if method is None:
                return
            ledger.received.append((int(body), bool(method.redelivered)))
    finally:
        conn.close()


def test_sigkill_under_confirmed_load_loses_nothing(tmp_path: Path) -> None:
    rng = random.Random(int(os.environ.get("RINGMQ_CRASH_SEED", "4")))
    data = tmp_path / "data"
    ledger = Ledger()
    first = Serve(data, tmp_path / "serve-0.log")
    _declare(first)
    first.kill()
    for cycle in range(CYCLES):
        serve = Serve(data, tmp_path / f"serve-{cycle + 1}.log")
        with _load(serve, ledger):
            time.sleep(rng.uniform(0.3, 2.0))  # the kill lands at a random moment
    last = Serve(data, tmp_path / "serve-last.log")
    try:
        _drain(last, ledger)
    finally:
        last.kill()
    gc.collect()  # pika's broken connections: their sockets warn now, under this test's filters

    seen: dict[int, int] = {}
    duplicates_unflagged: list[int] = []
    for msg_id, redelivered in ledger.received:
        seen[msg_id] = seen.get(msg_id, 0) + 1
        if seen[msg_id] > 1 and not redelivered:
            duplicates_unflagged.append(msg_id)
    lost = sorted(ledger.confirmed - seen.keys())
    stats: dict[str, Any] = {
        "published": ledger.next_id,
        "confirmed": len(ledger.confirmed),
        "received": len(ledger.received),
        "duplicates": sum(n - 1 for n in seen.values()),
    }
    assert len(ledger.confirmed) > CYCLES, stats  # the load really ran
    assert lost == [], stats
    assert duplicates_unflagged == [], stats
    assert seen.keys() <= set(range(ledger.next_id)), stats  # nothing invented
