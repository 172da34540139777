"""Load and sampling for the descriptor and soak tests (and benchmarks/fd_soak.py).

Theory of operation
-------------------
* `Sampler` reads a process's `/proc/<pid>/fd` count, VmRSS and Threads once per `every_s`
  in a thread of its own, from start to `stop()`, with the time since its start.
* `Ledger` is what the clients of one protocol saw: the ids whose publish the broker confirmed
  (positively) or refused, and a count of receptions per id. `lost()` is every confirmed id
  never received, `duplicates()` the receptions beyond the first. It assumes only that a
  positively confirmed publish is delivered at least once.
* `PikaPublisher` publishes persistent messages with publisher confirms on a `SelectConnection`
  in its own thread, paced at `rate_per_s` (pipelined: it does not wait for each confirm), until
  `count` are sent, `duration_s` passed or `stop` is set; then it waits (bounded) for the
  outstanding confirms. `PikaConsumer` consumes with manual acks until `stop` is set.
  Each message body starts with its id in ten digits.
"""

from __future__ import annotations

import collections
import contextlib
import statistics
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pika
import pika.exceptions
import pika.spec

CONFIRM_GRACE_S = 30.0  # how long a publisher waits for its last confirms (a bound only)


@dataclass(frozen=True, slots=True)
class Sample:
    t_s: float
    fds: int
    rss_kib: int
    threads: int


def sample(pid: int, t_s: float = 0.0) -> Sample | None:
    """One sample of `pid`, or None once it is gone."""
    try:
        fds = len(list(Path(f"/proc/{pid}/fd").iterdir()))
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return None
    fields = dict(line.split(":", 1) for line in status.splitlines() if ":" in line)
    return Sample(t_s, fds, int(fields["VmRSS"].split()[0]), int(fields["Threads"]))


def fd_targets(pid: int, top: int = 5) -> list[tuple[str, int]]:
    """The most common targets of `pid`'s descriptors (what leaked, when a bound fails)."""
    targets: collections.Counter[str] = collections.Counter()
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        with contextlib.suppress(OSError):
            targets[str(fd.readlink())] += 1
    return targets.most_common(top)


class Sampler(threading.Thread):
    """Samples a process every `every_s` seconds until `stop()` (see the module docstring);
    sets `over_limit` once a sample holds more than `fd_limit` descriptors."""

    def __init__(self, pid: int, every_s: float = 1.0, fd_limit: int | None = None) -> None:
        super().__init__(name="sampler", daemon=True)
        self.pid = pid
        self.every_s = every_s
        self.fd_limit = fd_limit
        self.over_limit = threading.Event()
        self.samples: list[Sample] = []
        self._stop_event = threading.Event()
        self.t0 = time.monotonic()
        """`time.monotonic()` at creation: samples' `t_s` count from there."""

    def run(self) -> None:
        while True:
            s = sample(self.pid, time.monotonic() - self.t0)
            if s is not None:
                self.samples.append(s)
                if self.fd_limit is not None and s.fds > self.fd_limit:
                    self.over_limit.set()
            if self._stop_event.wait(self.every_s):
                return

    def stop(self) -> list[Sample]:
        self._stop_event.set()
        self.join(timeout=10)
        return self.samples


def median_of(samples: list[Sample], lo: float, hi: float, field: str) -> float:
    """Median of `field` over the samples from fraction `lo` to `hi` of the list."""
    n = len(samples)
    window = samples[int(n * lo) : max(int(n * hi), int(n * lo) + 1)]
    return float(statistics.median(float(getattr(s, field)) for s in window))


class Ledger:
    """What one protocol's clients saw (see the module docstring). Thread-safe."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.lock = threading.Lock()
        self.sent = 0
        self.confirmed: set[int] = set()
        self.refused = 0
        self.received: collections.Counter[int] = collections.Counter()

    def send(self) -> int:
        with self.lock:
            self.sent += 1
            return self.sent - 1

    def confirm(self, msg_id: int) -> None:
        with self.lock:
            self.confirmed.add(msg_id)

    def refuse(self) -> None:
        with self.lock:
            self.refused += 1

    def receive(self, msg_id: int) -> None:
        with self.lock:
            self.received[msg_id] += 1

    def lost(self) -> list[int]:
        with self.lock:
            return sorted(i for i in self.confirmed if i not in self.received)

    def duplicates(self) -> int:
        with self.lock:
            return sum(n - 1 for n in self.received.values())

    def complete(self) -> bool:
        return not self.lost()

    def row(self) -> str:
        with self.lock:
            received = len(self.received)
        return (
            f"{self.name:<8} sent {self.sent:>7} confirmed {len(self.confirmed):>7} "
            f"refused {self.refused:>4} received {received:>7} lost {len(self.lost()):>4} "
            f"duplicates {self.duplicates():>4}"
        )


def body_of(msg_id: int, size: int) -> bytes:
    head = b"%010d" % msg_id
    return head + b"." * max(0, size - len(head))


def id_of(body: bytes) -> int:
    return int(body[:10])


PERSISTENT = pika.BasicProperties(delivery_mode=2)


class PikaPublisher(threading.Thread):
    """Paced confirmed persistent publishes on a SelectConnection (see the module docstring).

    Every `large_every`-th message is `large_size` bytes (stored in the shared body store),
    the others `size` bytes."""

    def __init__(
        self,
        url: str,
        queue: str,
        ledger: Ledger,
        *,
        rate_per_s: float,
        count: int,
        duration_s: float,
        stop: threading.Event | None = None,
        size: int = 200,
        large_every: int = 0,
        large_size: int = 8192,
    ) -> None:
        super().__init__(name=f"pika-pub-{queue}", daemon=True)
        self.url = url
        self.queue = queue
        self.ledger = ledger
        self.rate_per_s = rate_per_s
        self.count = count
        self.duration_s = duration_s
        self.stop_event = stop or threading.Event()
        self.size = size
        self.large_every = large_every
        self.large_size = large_size
        self.error: BaseException | None = None
        self._conn: Any = None
        self._ch: Any = None
        self._outstanding: dict[int, int] = {}  # delivery tag -> id
        self._tag = 0
        self._t0 = 0.0

    def run(self) -> None:
        try:
            self._conn = pika.SelectConnection(
                pika.URLParameters(self.url),
                on_open_callback=self._on_open,
                on_open_error_callback=self._on_error,
                on_close_callback=self._on_closed,
            )
            try:
                self._conn.ioloop.start()
            finally:
                self._conn.ioloop.close()  # its wake-up socket pair
        except Exception as exc:  # noqa: BLE001 - reported by the test
            self.error = exc

    def _on_open(self, conn: Any) -> None:
        conn.channel(on_open_callback=self._on_channel)

    def _on_error(self, _conn: Any, exc: BaseException) -> None:
        self.error = exc
        self._conn.ioloop.stop()

    def _on_closed(self, _conn: Any, reason: BaseException) -> None:
        if not isinstance(reason, pika.exceptions.ConnectionClosedByClient):
            self.error = reason
        self._conn.ioloop.stop()

    def _on_channel(self, ch: Any) -> None:
        self._ch = ch
        ch.confirm_delivery(ack_nack_callback=self._on_confirm, callback=self._on_select_ok)

    def _on_select_ok(self, _frame: Any) -> None:
        self._t0 = time.monotonic()
        self._tick()

    def _finished(self, now: float) -> bool:
        return (
            self.ledger.sent >= self.count
            or now - self._t0 >= self.duration_s
            or self.stop_event.is_set()
        )

    def _tick(self) -> None:
        now = time.monotonic()
        if self._finished(now):
            if not self._outstanding or now - self._t0 > self.duration_s + CONFIRM_GRACE_S:
                self._conn.close()
                return
            self._conn.ioloop.call_later(0.05, self._tick)  # wait for the last confirms
            return
        due = min(int((now - self._t0) * self.rate_per_s), self.count)
        for _ in range(min(due - self.ledger.sent, 100)):  # catch up, never in a flood
            msg_id = self.ledger.send()
            large = self.large_every and msg_id % self.large_every == 0
            body = body_of(msg_id, self.large_size if large else self.size)
            self._ch.basic_publish("", self.queue, body, PERSISTENT)
            self._tag += 1
            self._outstanding[self._tag] = msg_id
        self._conn.ioloop.call_later(0.01, self._tick)

    def _on_confirm(self, frame: Any) -> None:
        method = frame.method
        tag = method.delivery_tag
        tags = [t for t in self._outstanding if t <= tag] if method.multiple else [tag]
        ack = isinstance(method, pika.spec.Basic.Ack)
        for t in tags:
            msg_id = self._outstanding.pop(t, None)
            if msg_id is None:
                continue
            if ack:
                self.ledger.confirm(msg_id)
            else:
                self.ledger.refuse()


class PikaConsumer(threading.Thread):
    """Consumes `queue` with manual acks, recording ids, until `stop` is set."""

    def __init__(
        self, url: str, queue: str, ledger: Ledger, stop: threading.Event, prefetch: int = 200
    ) -> None:
        super().__init__(name=f"pika-sub-{queue}", daemon=True)
        self.url = url
        self.queue = queue
        self.ledger = ledger
        self.stop_event = stop
        self.prefetch = prefetch
        self.error: BaseException | None = None
        self.ready = threading.Event()

    def run(self) -> None:
        try:
            conn = pika.BlockingConnection(pika.URLParameters(self.url))
            try:
                ch = conn.channel()
                ch.queue_declare(self.queue, durable=True)
                ch.basic_qos(prefetch_count=self.prefetch)
                self.ready.set()
                for method, _props, body in ch.consume(self.queue, inactivity_timeout=0.2):
                    if method is not None:
                        self.ledger.receive(id_of(body))
                        ch.basic_ack(method.delivery_tag)
                    elif self.stop_event.is_set():
                        break
                ch.cancel()
            finally:
                conn.close()
        except Exception as exc:  # noqa: BLE001 - reported by the test
            self.error = exc
            self.ready.set()
