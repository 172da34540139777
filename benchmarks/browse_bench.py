"""The broker's side of Spark's batch read, in process: the columnar browse of a paged queue.

A broker over a `FileStore` in a temporary directory, paging on (its defaults), one plain queue
filled with N messages of SIZE bytes through the bulk publish (as `spark_bench.py` fills its
browse queues: not durable, not persistent, one routing key), then browsed as the connector's
batch reader browses it: pages of `--read` messages after the last seq seen, each encoded as
`format=columns` (`encode_column_set`). Prints the CPU microseconds a message of the fill and
of each whole browse (`time.process_time`), per round.

    python benchmarks/browse_bench.py --messages 200000 --size 100 --rounds 3
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path
from typing import Any

from ringmq.core.config import BrokerConfig
from ringmq.core.queue.records import DEFAULT_HEAD_BYTES, DEFAULT_HEAD_COUNT
from ringmq.management.admin import CoreAdmin
from ringmq.management.streamwire import encode_column_set
from ringmq.node import build_broker, spill_directory


class _Runtime:
    """The management port's minimum for in-process calls (no server: effects dropped)."""

    node = "bench"
    started_at_ms = 0

    def run_batch(self, fn: Any) -> Any:
        return fn()

    def apply_effects(self, effects: Any) -> None:
        pass


def run(n: int, size: int, read: int, rounds: int) -> None:
    with tempfile.TemporaryDirectory(prefix="ringmq-browse-bench-") as d:
        broker = build_broker(BrokerConfig(), Path(d), 0)
        spill = spill_directory(broker, Path(d) / "paging")
        broker.enable_paging(
            spill, DEFAULT_HEAD_COUNT, DEFAULT_HEAD_BYTES, body_store_factory=spill.body_store
        )
        admin = CoreAdmin(broker, _Runtime())  # type: ignore[arg-type]
        admin.declare_queue("/", "q", durable=False)
        conn = admin.open_publisher("guest", "/", now_ms=0)
        step = 2000
        msgs = [("q", b"\x00\x00", bytes([i % 251]) * size) for i in range(step)]
        t0 = time.process_time()
        for a in range(0, n, step):
            admin.publish_slice(conn, "", msgs, 0, min(step, n - a), now_ms=0)
        fill = time.process_time() - t0
        print(f"  {size:>5} B {n} msgs  fill: {fill / n * 1e6:.2f} us/msg")
        for r in range(rounds):
            t0 = time.process_time()
            after: int | None = None
            got = 0
            while True:
                cols = admin.browse_columns("/", "q", after, read, 1)
                if not len(cols):
                    break
                encode_column_set(cols)
                got += len(cols)
                after = cols.seqs[-1]
            dt = time.process_time() - t0
            assert got == n, (got, n)
            print(f"  {size:>5} B {n} msgs  round {r}: browse {dt / n * 1e6:.2f} us/msg")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--messages", type=int, default=200_000)
    p.add_argument("--size", type=int, default=100)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--read", type=int, default=50_000, help="messages a browse request")
    a = p.parse_args()
    run(a.messages, a.size, a.read, a.rounds)


if __name__ == "__main__":
    main()
