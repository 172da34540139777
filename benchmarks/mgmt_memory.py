"""What reading a paged queue through the management API costs the broker in memory.

Each scenario starts a fresh ``ringmq serve`` (default settings, ports 0, a temporary data dir),
publishes ``count`` messages of ``size`` bytes into one queue with no consumer (transient: a
non-durable queue and delivery-mode 1; durable: a durable queue and delivery-mode 2; the queue
list tells when all are in), then reads the queue the way an operator's tools do: the
queue page (``GET /api/queues/%2F/<q>``, what the console's queue page polls), the queue list,
the overview, ``/metrics`` and ``/metrics/per-object``, the definitions export, and the
console's other queue-page calls (bindings, consumers, scheduled). It prints the broker's RSS
(``/proc/<pid>/status`` VmRSS) after each step and the peaks (VmHWM, reset before the reads
and before the purge or drain), the queue page's ``messages_paged``, ``messages_ram`` and
``message_bytes_ram``, then empties the queue (``--end purge``: ``DELETE .../contents``;
``drain``: a consumer takes and acks everything) and prints the RSS a few seconds later.

To measure another build of ringmq (the code before a fix), put its ``src`` first on
``PYTHONPATH``: the broker subprocess inherits it.

    .venv/bin/python -m benchmarks.mgmt_memory                 # the four default scenarios
    .venv/bin/python -m benchmarks.mgmt_memory --size 65536 --count 3000 --durable
    .venv/bin/python -m benchmarks.mgmt_memory --end drain

Linux only (reads /proc); loopback only.
"""

from __future__ import annotations

import argparse
import base64
import json
import re
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pika
from benchmarks.amqp_brokers import ProcessStats, RingmqProcess

MIB = 1024 * 1024
SETTLE_S = 3.0  # after a purge or drain: the memory monitor's checks run every 0.5 s
PUBLISH_TIMEOUT_S = 600.0
QUEUE = "mgmt-memory"
READS: tuple[tuple[str, str], ...] = (
    ("queue page", f"/api/queues/%2F/{QUEUE}"),
    ("queue page again", f"/api/queues/%2F/{QUEUE}"),
    ("queue list", "/api/queues"),
    ("queue list vhost", "/api/queues/%2F"),
    ("overview", "/api/overview"),
    ("metrics", "/metrics"),
    ("metrics per-object", "/metrics/per-object"),
    ("definitions", "/api/definitions"),
    ("bindings", f"/api/queues/%2F/{QUEUE}/bindings"),
    ("consumers", "/api/consumers/%2F"),
    ("scheduled", f"/api/queues/%2F/{QUEUE}/scheduled"),
)


@dataclass(frozen=True, slots=True)
class Scenario:
    size: int
    count: int
    durable: bool

    def describe(self) -> str:
        kind = "durable" if self.durable else "transient"
        total = self.size * self.count / MIB
        return f"{self.count} x {self.size // 1024} KiB {kind} ({total:.0f} MiB)"


class Http:
    """Basic-auth JSON/text requests to the broker's management port (guest, loopback)."""

    def __init__(self, port: int) -> None:
        self.base = f"http://127.0.0.1:{port}"
        self.auth = "Basic " + base64.b64encode(b"guest:guest").decode()

    def request(self, method: str, path: str) -> bytes:
        req = urllib.request.Request(self.base + path, method=method)
        req.add_header("Authorization", self.auth)
        with urllib.request.urlopen(req, timeout=120) as resp:  # loopback
            body: bytes = resp.read()
            return body

    def json(self, path: str) -> Any:
        return json.loads(self.request("GET", path))


def http_port(log_path: Path, timeout_s: float = 30.0) -> int:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        found = re.search(r"HTTP listening on [0-9.]+:(\d+)", log_path.read_text(errors="replace"))
        if found:
            return int(found.group(1))
        time.sleep(0.05)
    raise RuntimeError("ringmq serve did not report its HTTP port")


def rss_mib(stats: ProcessStats) -> float:
    s = stats.sample()
    return s.rss_bytes / MIB if s else float("nan")


def hwm_mib(stats: ProcessStats) -> float:
    s = stats.sample()
    return s.hwm_bytes / MIB if s else float("nan")


def peak(stats: ProcessStats, resettable: bool) -> str:
    return f"{hwm_mib(stats):7.1f} MiB" if resettable else "n/a (clear_refs refused)"


def publish(url: str, http: Http, sc: Scenario) -> None:
    # No confirms (a blocking confirm per publish waits for an fsync each): the queue list,
    # which reads counters only, says when every publish is in.
    with pika.BlockingConnection(pika.URLParameters(url + "%2F?heartbeat=0")) as conn:
        ch = conn.channel()
        ch.queue_declare(QUEUE, durable=sc.durable)
        props = pika.BasicProperties(delivery_mode=2 if sc.durable else 1)
        body = b"x" * sc.size
        for _ in range(sc.count):
            ch.basic_publish("", QUEUE, body, props)
        deadline = time.monotonic() + PUBLISH_TIMEOUT_S
        while time.monotonic() < deadline:
            if any(q["name"] == QUEUE and q["messages"] == sc.count
                   for q in http.json("/api/queues/%2F")):  # fmt: skip
                return
            conn.process_data_events(0.2)
    raise RuntimeError(f"the queue did not reach {sc.count} messages")


def drain(url: str, count: int) -> None:
    with pika.BlockingConnection(pika.URLParameters(url + "%2F?heartbeat=0")) as conn:
        ch = conn.channel()
        ch.basic_qos(prefetch_count=100)
        for got, (method, _, _) in enumerate(ch.consume(QUEUE, inactivity_timeout=30), 1):
            if method is None:
                raise RuntimeError(f"drain starved after {got - 1} of {count}")
            ch.basic_ack(method.delivery_tag)
            if got == count:
                break
        ch.cancel()


def run(sc: Scenario, end: str) -> None:
    print(f"== {sc.describe()}")
    broker = RingmqProcess()
    url = broker.start()
    try:
        http = Http(http_port(broker.log_path))
        stats = ProcessStats(broker.pid)
        time.sleep(1.0)
        print(f"  {'started':<28} RSS {rss_mib(stats):7.1f} MiB")
        publish(url, http, sc)
        time.sleep(1.0)
        print(f"  {'published':<28} RSS {rss_mib(stats):7.1f} MiB  (peak {hwm_mib(stats):.1f})")
        peak_resettable = stats.reset_peak()
        for label, path in READS:
            body = http.request("GET", path)
            extra = ""
            if path.endswith(QUEUE):
                q = json.loads(body)
                extra = (
                    f"  messages_paged {q['messages_paged']:,} messages_ram {q['messages_ram']:,}"
                    f" message_bytes_ram {q['message_bytes_ram']:,}"
                )
            print(f"  GET {label:<24} RSS {rss_mib(stats):7.1f} MiB{extra}")
        print(f"  {'peak during the reads':<28} RSS {peak(stats, peak_resettable)}")
        peak_resettable = stats.reset_peak()
        if end == "purge":
            http.request("DELETE", f"/api/queues/%2F/{QUEUE}/contents")
        else:
            drain(url, sc.count)
        time.sleep(SETTLE_S)
        q = http.json(f"/api/queues/%2F/{QUEUE}")
        print(
            f"  {'after ' + end:<28} RSS {rss_mib(stats):7.1f} MiB"
            f"  messages {q['messages']:,} message_bytes_ram {q['message_bytes_ram']:,}"
        )
        print(f"  {'peak during the ' + end:<28} RSS {peak(stats, peak_resettable)}")
    finally:
        broker.stop()


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--size", type=int, help="body bytes (default: 64 KiB and 1 MiB)")
    p.add_argument("--count", type=int, help="messages (default: 3000 of 64 KiB, 200 of 1 MiB)")
    p.add_argument("--durable", action="store_true", help="only the durable scenario")
    p.add_argument("--transient", action="store_true", help="only the transient scenario")
    p.add_argument("--end", choices=("purge", "drain"), default="purge")
    args = p.parse_args(argv)
    sizes = [(args.size, args.count or 3000)] if args.size else [(64 * 1024, 3000), (MIB, 200)]
    if args.count and not args.size:
        sizes = [(s, args.count) for s, _ in sizes]
    kinds = [True] if args.durable else [False] if args.transient else [False, True]
    for size, count in sizes:
        for durable in kinds:
            run(Scenario(size, count, durable), args.end)


if __name__ == "__main__":
    main()
