"""How long an fsync on a helper thread takes to complete while the main thread runs Python.

A serving process's loop thread runs Python; the group commit's fsync runs on a helper
thread that needs the GIL to start the job and to report back. Each time it waits for the
GIL behind a busy thread, it waits up to the interpreter's switch interval. This measures
the fsync's completion latency (submit -> future done, the main thread spinning in Python
meanwhile) at CPython's default interval (5 ms) and at the one `ringmq serve` sets
(`server.loop.SWITCH_INTERVAL_S`), alternating, over a 64 KiB append each time.

    python -m benchmarks.gil_wait [--rounds 4] [--fsyncs 150] [--dir /var/tmp]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor

if __package__ in (None, ""):
    sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "src"))

from ringmq.server.loop import SWITCH_INTERVAL_S


def _median_ms(fd: int, fsyncs: int, pool: ThreadPoolExecutor) -> float:
    data = b"x" * 65536
    lat = []
    for _ in range(fsyncs):
        os.write(fd, data)
        t = time.perf_counter()
        fut = pool.submit(os.fdatasync, fd)
        spins = 0
        while not fut.done():  # the loop thread, busy in Python
            spins += 1
        fut.result()
        lat.append((time.perf_counter() - t) * 1000)
    return statistics.median(lat)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--fsyncs", type=int, default=150)
    ap.add_argument("--dir", default=None, help="where the file is written (default: tmp)")
    args = ap.parse_args(argv)
    before = sys.getswitchinterval()
    results: dict[float, list[float]] = {before: [], SWITCH_INTERVAL_S: []}
    with tempfile.TemporaryDirectory(dir=args.dir) as d, ThreadPoolExecutor(1) as pool:
        fd = os.open(os.path.join(d, "f"), os.O_WRONLY | os.O_CREAT, 0o644)
        try:
            for _ in range(args.rounds):
                for interval in results:
                    sys.setswitchinterval(interval)
                    results[interval].append(_median_ms(fd, args.fsyncs, pool))
        finally:
            sys.setswitchinterval(before)
            os.close(fd)
    for interval, medians in results.items():
        shown = ", ".join(f"{m:.2f}" for m in medians)
        print(
            f"switch interval {interval * 1000:g} ms: fsync completion median of rounds "
            f"{statistics.median(medians):.2f} ms ({shown})"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
