"""The Spark sink's AMQP write without Spark: `Publisher.publish_many` against `ringmq serve`.

Theory of operation
-------------------
Starts `ringmq serve` in a subprocess on loopback (as `spark_bench.py` does, paging on), then
runs `--tasks` client processes at once (Spark's `local[2]` runs two tasks), each publishing
`--messages / --tasks` prebuilt messages of `--size` bytes with a `message_id` (the sink's
properties) through one `connector.publisher.Publisher` with confirm window `--window`, into one
plain queue. Prints, per window, the wall time of the whole write and the broker process's CPU
per message (`/proc`), the medians of `--rounds` runs; windows are alternated round by round.
Each task builds its messages and connects before the clock starts (a barrier).

    .venv/bin/python -m benchmarks.amqp_write_bench [--messages 200000] [--windows 2000,8000]
"""

from __future__ import annotations

import argparse
import multiprocessing
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from benchmarks.spark_bench import process_cpu_s, start_broker

from ringmq.amqp.properties import BasicProperties, encode_properties
from ringmq.connector.publisher import Publisher

_QUEUE = "amqp-write-bench"


def _task(url: str, part: int, n: int, size: int, window: int, start: Any) -> None:
    body = b"x" * size
    msgs = [
        ("", _QUEUE, encode_properties(BasicProperties(message_id=f"t{part}:{i}")), body)
        for i in range(n)
    ]
    with Publisher(url, window=window) as pub:
        start.wait(60)  # connected, messages built: the timed part is the write alone
        if pub.publish_many(msgs) != n:
            raise RuntimeError("short write")


def _one(
    ports: tuple[int, int], n: int, tasks: int, size: int, window: int, pid: int
) -> tuple[float, float]:
    import pika

    from ringmq.connector.client import StreamClient

    amqp, http = ports
    url = f"amqp://guest:guest@127.0.0.1:{amqp}/"
    start = multiprocessing.Barrier(tasks + 1)
    procs = [
        multiprocessing.Process(target=_task, args=(url, k, n // tasks, size, window, start))
        for k in range(tasks)
    ]
    for p in procs:
        p.start()
    start.wait(60)
    cpu0 = process_cpu_s(pid)
    t0 = time.perf_counter()
    for p in procs:
        p.join(300)
        if p.exitcode != 0:
            raise RuntimeError(f"a task failed: {p.exitcode}")
    wall = time.perf_counter() - t0
    cpu = process_cpu_s(pid) - cpu0
    with StreamClient(f"http://guest:guest@127.0.0.1:{http}") as c:
        ready = c.info(_QUEUE)["ready"]
    if ready != n // tasks * tasks:
        raise RuntimeError(f"{ready} of {n} messages arrived")
    conn = pika.BlockingConnection(pika.ConnectionParameters("127.0.0.1", amqp))
    conn.channel().queue_purge(_QUEUE)
    conn.close()
    return wall, cpu / n * 1e6


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    ap.add_argument("--messages", type=int, default=200_000)
    ap.add_argument("--size", type=int, default=100)
    ap.add_argument("--tasks", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--windows", default="2000,8000")
    args = ap.parse_args(argv)
    windows = [int(w) for w in args.windows.split(",")]
    with tempfile.TemporaryDirectory(prefix="ringmq-amqp-write-") as d:
        proc, amqp, http = start_broker(Path(d) / "data")
        ports = (amqp, http)
        try:
            import pika

            conn = pika.BlockingConnection(pika.ConnectionParameters("127.0.0.1", amqp))
            conn.channel().queue_declare(_QUEUE)
            conn.close()
            _one(ports, args.messages // 4, args.tasks, args.size, windows[0], proc.pid)
            got: dict[int, list[tuple[float, float]]] = {w: [] for w in windows}
            for _ in range(args.rounds):
                for w in windows:
                    got[w].append(_one(ports, args.messages, args.tasks, args.size, w, proc.pid))
        finally:
            proc.terminate()
            proc.wait(30)
    for w in windows:
        walls = [a for a, _ in got[w]]
        cpus = [b for _, b in got[w]]
        print(
            f"window {w:6d}: {args.messages} x {args.size} B, {args.tasks} tasks: "
            f"{args.messages / statistics.median(walls):9,.0f} msg/s "
            f"(wall {min(walls):.2f}-{max(walls):.2f} s), broker "
            f"{statistics.median(cpus):.2f} us/msg ({min(cpus):.2f}-{max(cpus):.2f})"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
