"""Paging cost per message: the engine's spill store writing a backlog out and reading it back.

    python benchmarks/paging_bench.py [--messages 200000] [--sizes 100,1024] [--runs 5]

A queue past its in-memory head (16 384 messages / 8 MiB) hands every new message to its
`SpillStore` and reads it back when consumers (or Spark reservations) reach it. This drives
`storage.bodystore.DiskSpillStore` exactly as `core.queue.Queue` does: `push_back` in batches
of the queue's spill batch, then `pop_front` in read-ahead batches of half the head, all
transient messages with a `message_id` (what the Spark writer publishes). Prints CPU
microseconds per message for each direction, the median of `--runs` (page files in a fresh
temporary directory each run; the page cache is warm, as it is right after a publish).
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

from ringmq.core.message import Message, SeqId
from ringmq.core.queue import DEFAULT_HEAD_BYTES, DEFAULT_HEAD_COUNT, paging
from ringmq.storage.bodystore import DiskSpillStore

SPILL_BATCH = paging.SPILL_BATCH  # spilled publishes the queue hands over together


def one_run(n: int, size: int) -> tuple[float, float]:
    """(push µs/message, pop µs/message) for `n` messages of `size` bytes."""
    body = bytes(range(256)) * (size // 256) + bytes(size % 256)
    items = [
        (SeqId(i + 1), Message("", "q", b"", body, message_id=f"spark:0:{i}"), None)
        for i in range(n)
    ]
    with tempfile.TemporaryDirectory(prefix="ringmq-paging-bench-") as d:
        store = DiskSpillStore(Path(d))
        t = time.process_time()
        for a in range(0, n, SPILL_BATCH):
            store.push_back(items[a : a + SPILL_BATCH])
        push = time.process_time() - t
        got = 0
        t = time.process_time()
        while got < n:
            got += len(store.pop_front(DEFAULT_HEAD_COUNT // 2, DEFAULT_HEAD_BYTES // 2))
        pop = time.process_time() - t
        store.close()
    return push / n * 1e6, pop / n * 1e6


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="paging cost per message")
    ap.add_argument("--messages", type=int, default=200_000)
    ap.add_argument("--sizes", default="100,1024")
    ap.add_argument("--runs", type=int, default=5)
    args = ap.parse_args(argv)
    print(f"{'size':>6} {'push us/msg':>12} {'pop us/msg':>11}   ({args.messages} messages)")
    for size in (int(s) for s in args.sizes.split(",")):
        runs = [one_run(args.messages, size) for _ in range(args.runs)]
        push = statistics.median(r[0] for r in runs)
        pop = statistics.median(r[1] for r in runs)
        print(f"{size:>6} {push:>12.2f} {pop:>11.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
