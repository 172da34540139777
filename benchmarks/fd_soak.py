"""The broker's descriptors under confirmed durable publishing (defects issue, item 3).

Starts `ringmq serve` (tests/serve.py) on a temporary data dir; a pika publisher sends
persistent messages with publisher confirms at `--rate` msg/s (paced and pipelined, as a real
publisher: tests/integration/soakkit.py) into one durable queue while a consumer drains it, for
`--seconds`. Prints the broker's open descriptors (`/proc/PID/fd`), VmRSS and threads at every
`--every` seconds, then once the load has stopped and the clients have closed. Run an older
tree's broker by putting its src first on PYTHONPATH:

    .venv/bin/python -m benchmarks.fd_soak [--rate 500] [--seconds 15] [--every 5]
    PYTHONPATH=/tmp/old/src .venv/bin/python -m benchmarks.fd_soak
"""

from __future__ import annotations

import argparse
import tempfile
import threading
import time
from pathlib import Path

from tests.integration.soakkit import (
    Ledger,
    PikaConsumer,
    PikaPublisher,
    Sample,
    fd_targets,
    sample,
)
from tests.serve import Serve

import ringmq


def _row(label: str, s: Sample | None) -> str:
    if s is None:
        return f"{label:>12}  (broker gone)"
    return f"{label:>12}  {s.fds:>7}  {s.rss_kib / 1024:>8.1f}  {s.threads:>7}"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rate", type=float, default=500.0, help="publishes per second")
    ap.add_argument("--seconds", type=float, default=15.0, help="how long the load runs")
    ap.add_argument("--every", type=float, default=5.0, help="sample period (seconds)")
    ap.add_argument("--size", type=int, default=200, help="body bytes")
    args = ap.parse_args()
    print(f"ringmq from {Path(ringmq.__file__).parent}")
    with tempfile.TemporaryDirectory(prefix="fd-soak-") as tmp:
        serve = Serve(Path(tmp) / "data", Path(tmp) / "serve.log")
        pid = serve.proc.pid
        try:
            ledger = Ledger("amqp")
            stop = threading.Event()
            consumer = PikaConsumer(serve.amqp_url, "fd-soak", ledger, stop)
            consumer.start()
            consumer.ready.wait(30)
            publisher = PikaPublisher(
                serve.amqp_url,
                "fd-soak",
                ledger,
                rate_per_s=args.rate,
                count=int(args.rate * args.seconds),
                duration_s=args.seconds,
                size=args.size,
            )
            print(f"{'t (s)':>12}  {'fds':>7}  {'RSS MiB':>8}  {'threads':>7}")
            t0 = time.monotonic()
            publisher.start()
            at = 0.0
            while at <= args.seconds + 1e-9:
                time.sleep(max(0.0, t0 + at - time.monotonic()))
                print(_row(f"{at:.0f}", sample(pid)), flush=True)
                at += args.every
            publisher.join(timeout=60)
            deadline = time.monotonic() + 30
            while not ledger.complete() and time.monotonic() < deadline:
                time.sleep(0.05)
            stop.set()
            consumer.join(timeout=30)
            time.sleep(1.0)
            print(_row("after load", sample(pid)))
            print(ledger.row())
            if publisher.error or consumer.error:
                print(f"client errors: {publisher.error!r} {consumer.error!r}")
            print("most held:", fd_targets(pid, top=3))
        finally:
            serve.stop()


if __name__ == "__main__":
    main()
