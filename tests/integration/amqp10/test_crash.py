"""SIGKILL a `ringmq serve` under AMQP 1.0 load: durable messages sent unsettled and settled by
the broker (accepted only after the fsync that holds them) are never lost.

Each cycle starts the broker on the same data dir, runs a proton sender (every message whose
transfer the broker settled as accepted is recorded) and a proton receiver (accepting what it
gets) for a random while, then SIGKILLs the broker at a random moment. A last broker drains the
queue over AMQP 1.0.
"""

from __future__ import annotations

import contextlib
import os
import random
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from proton import Message
from proton.utils import BlockingConnection

from tests.serve import Serve

pytestmark = [
    pytest.mark.integration,
    pytest.mark.slow,
    pytest.mark.filterwarnings("ignore::ResourceWarning"),
    pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning"),
]

QUEUE = "crash10"
CYCLES = 3


class Ledger:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.next_id = 0
        self.accepted: set[int] = set()
        self.received: list[int] = []


def _id(m: Message) -> int:
    body: Any = m.body
    return int(body)


def _url(serve: Serve) -> str:
    return f"amqp://guest:guest@127.0.0.1:{serve.port}"


def _sender(serve: Serve, ledger: Ledger, stop: threading.Event) -> None:
    with contextlib.suppress(Exception):
        conn = BlockingConnection(_url(serve), timeout=2)
        snd = conn.create_sender(QUEUE)
        while not stop.is_set():
            with ledger.lock:
                msg_id = ledger.next_id
                ledger.next_id += 1
            snd.send(Message(body=msg_id, durable=True))  # returns once accepted
            with ledger.lock:
                ledger.accepted.add(msg_id)


def _receiver(serve: Serve, ledger: Ledger, stop: threading.Event) -> None:
    with contextlib.suppress(Exception):
        conn = BlockingConnection(_url(serve), timeout=2)
        rcv = conn.create_receiver(QUEUE, credit=10)
        while not stop.is_set():
            m = rcv.receive(timeout=1)
            with ledger.lock:
                ledger.received.append(_id(m))
            rcv.accept()


@contextlib.contextmanager
def _load(serve: Serve, ledger: Ledger) -> Iterator[None]:
    stop = threading.Event()
    threads = [
        threading.Thread(target=f, args=(serve, ledger, stop), daemon=True)
        for f in (_sender, _receiver)
    ]
    for t in threads:
        t.start()
    try:
        yield
    finally:
        stop.set()
        serve.kill()
        for t in threads:
            t.join(timeout=30)


def test_sigkill_under_unsettled_durable_load_loses_nothing(tmp_path: Path) -> None:
    rng = random.Random(int(os.environ.get("RINGMQ_CRASH_SEED", "10")))
    data = tmp_path / "data"
    ledger = Ledger()
    for cycle in range(CYCLES):
        serve = Serve(data, tmp_path / f"serve-{cycle}.log")
        with _load(serve, ledger):
            time.sleep(rng.uniform(0.5, 1.5))
    last = Serve(data, tmp_path / "serve-last.log")
    try:
        conn = BlockingConnection(_url(last), timeout=5)
        rcv = conn.create_receiver(QUEUE, credit=100)
        while True:
            try:
                m = rcv.receive(timeout=1)
            except Exception:  # noqa: BLE001 (proton's Timeout: the queue is drained)
                break
            ledger.received.append(_id(m))
            rcv.accept()
        conn.close()
    finally:
        last.kill()
    stats: dict[str, Any] = {
        "sent": ledger.next_id,
        "accepted": len(ledger.accepted),
        "received": len(ledger.received),
    }
    assert len(ledger.accepted) > CYCLES, stats  # the load really ran
    assert sorted(ledger.accepted - set(ledger.received)) == [], stats
    assert set(ledger.received) <= set(range(ledger.next_id)), stats
