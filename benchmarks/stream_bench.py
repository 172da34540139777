"""The broker's side of Spark's streaming read, in process: reserve, columnar range reads, settle.

A broker over a `FileStore` in a temporary directory, paging on (its defaults), one plain queue
filled with N messages of SIZE bytes through the bulk publish (as the Spark benchmark fills its
stream queues: not durable, not persistent), then drained as the connector drains it: reserve
in calls of `--reserve` positions, read in ranges of `--read` encoded as `format=columns`,
settle, in micro-batches of `--batch` (default: all of it in one, as `spark_bench.py`'s
AvailableNow actions do). Prints the CPU microseconds a message of the drain
(`time.process_time`) and of its three steps, per round, with the serving process's cyclic-GC
settings (`server.loop.tune_gc`).

    python benchmarks/stream_bench.py --messages 200000 --size 100 --rounds 3
    valgrind --tool=callgrind python benchmarks/stream_bench.py --messages 20000 --rounds 1
    (and the same with --fill-only: the drain's instructions are the difference)
"""

from __future__ import annotations

import argparse
import random
import tempfile
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from ringmq.core.config import BrokerConfig
from ringmq.core.queue.records import DEFAULT_HEAD_BYTES, DEFAULT_HEAD_COUNT
from ringmq.management.admin import CoreAdmin
from ringmq.management.streamwire import MAX_READ, encode_column_set, encode_rows
from ringmq.node import build_broker, spill_directory
from ringmq.server.loop import tune_gc


class _Runtime:
    """The management port's minimum for in-process calls (no server: effects dropped)."""

    node = "bench"
    started_at_ms = 0

    def run_batch(self, fn: Callable[[], Any]) -> Any:
        return fn()

    def apply_effects(self, effects: Iterable[Any]) -> None:
        pass


def drain_once(
    n: int,
    size: int,
    reserve: int,
    read: int,
    seed: int,
    batch: int | None = None,
    *,
    paged: bool = True,
    drain: bool = True,
    head: int = DEFAULT_HEAD_COUNT,
) -> tuple[float, list[float], int]:
    """Fill a queue with `n` messages (paged past `head` unless not `paged`) and drain it.

    Returns the CPU us a message of the drain, of its (reserve, read, settle) steps, and how
    many messages were paged out when the drain began.
    """
    with tempfile.TemporaryDirectory() as d:
        broker = build_broker(BrokerConfig(), Path(d), 0)
        spill = spill_directory(broker, Path(d) / "paging")
        if paged:
            broker.enable_paging(
                spill, head, DEFAULT_HEAD_BYTES, body_store_factory=spill.body_store
            )
        admin = CoreAdmin(broker, _Runtime())  # type: ignore[arg-type]
        admin.declare_queue("/", "q", durable=False)
        conn = admin.open_publisher("guest", "/", now_ms=0)
        rnd = random.Random(seed)
        body = rnd.randbytes(size)
        step = 2000
        msgs = [("q", b"\x00\x00", body[i % size :] + body[: i % size]) for i in range(step)]
        for a in range(0, n, step):
            admin.publish_slice(conn, "", msgs, 0, min(step, n - a), now_ms=0)
        now = 1
        spilled = broker.vhosts["/"].queues["q"].queue.spilled
        if not drain:  # the fill alone (callgrind: subtract it from a whole run)
            return 0.0, [0.0, 0.0, 0.0], spilled
        batch = n if batch is None else batch
        columns_of = getattr(admin, "read_reserved_columns", None)
        t0 = time.process_time()
        start = 0
        clock = time.process_time
        phase = [0.0, 0.0, 0.0]
        while start < n:
            # One micro-batch: reserved in calls of `reserve` positions, read in ranges of
            # `read`, then settled (as the connector's AvailableNow batch of `batch` does).
            a0 = clock()
            end = start
            goal = min(n, start + batch)
            while end < goal:
                r = admin.reserve(
                    "/",
                    "q",
                    "c",
                    end,
                    min(reserve, goal - end),
                    lease_ms=60_000,
                    max_bytes=None,
                    now_ms=now,
                )
                if r["end"] == end:
                    break
                end = r["end"]
            a1 = clock()
            phase[0] += a1 - a0
            for lo in range(start, end, read):
                hi = min(end, lo + read)
                if columns_of is not None:  # the streams API's columnar read
                    cols, positions = columns_of(
                        "/", "q", "c", lo, hi, max_span=MAX_READ, now_ms=now
                    )
                    encode_column_set(cols, positions)
                else:  # older code (alternated runs): rows, then columns
                    rows = admin.read_reserved("/", "q", "c", lo, hi, max_span=MAX_READ, now_ms=now)
                    encode_rows(rows, columns=True)
            a2 = clock()
            phase[1] += a2 - a1
            admin.settle("/", "q", "c", end, now_ms=now)
            phase[2] += clock() - a2
            if end == start:
                break
            start = end
        t = time.process_time() - t0
        assert start == n, (start, n)
        return t * 1e6 / n, [x * 1e6 / n for x in phase], spilled


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--messages", type=int, default=200_000)
    p.add_argument("--size", type=int, default=100)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--reserve", type=int, default=100_000)
    p.add_argument("--read", type=int, default=50_000)
    p.add_argument("--batch", type=int, default=None, help="messages a micro-batch (all)")
    p.add_argument("--no-paging", action="store_true", help="the queue all in memory")
    p.add_argument("--fill-only", action="store_true", help="fill, do not drain")
    a = p.parse_args()
    tune_gc()  # as `ringmq serve` does
    for r in range(a.rounds):
        us, (res, read, settle), spilled = drain_once(
            a.messages,
            a.size,
            a.reserve,
            a.read,
            r,
            a.batch,
            paged=not a.no_paging,
            drain=not a.fill_only,
        )
        print(
            f"{a.size:>5} B  {a.messages} msgs ({spilled} paged)  round {r}: {us:.2f} us/msg"
            f"  (reserve {res:.2f}, read {read:.2f}, settle {settle:.2f})",
            flush=True,
        )


if __name__ == "__main__":
    main()
