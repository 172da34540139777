"""Queue engine micro-benchmark: microseconds per publish -> fetch -> ack cycle.

Run with `make bench` (or `python benchmarks/engine_bench.py [--cycles N] [--runs R]`).
Each scenario keeps a small standing backlog (so fetch never sees an empty queue), runs
`cycles` cycles `runs` times and prints the median of the process CPU time per cycle.
Targets: <= 2 us for a plain queue, <= 3 us for the others, on one core.

The cyclic garbage collector runs with the thresholds of a serving broker process
(`ringmq.server.runtime.GC_THRESHOLDS`), as the engine does inside `ringmq serve`.

A last row times publishing alone into a full drop-head queue (`x-max-length=1000`, no
consumer): every publish evicts the head, the engine's share of benchmark scenario (d).

To compare machines, it also prints the cost of a calibration loop (creating one small slotted
object per iteration): the engine's cycle costs are best read as multiples of it.
"""

from __future__ import annotations

import argparse
import gc
import statistics
import time
from collections.abc import Callable
from typing import Any

from ringmq.core.message import Message
from ringmq.core.queue import Queue
from ringmq.core.settings import resolve_queue_settings
from ringmq.server.runtime import GC_THRESHOLDS

SCENARIOS: dict[str, dict[str, Any]] = {
    "plain": {},
    "ring (x-ring-size=1000)": {"x-ring-size": 1000},
    "reject (x-max-length=1000, reject-publish)": {
        "x-max-length": 1000,
        "x-overflow": "reject-publish",
    },
    "lvq (x-last-value-key, 100 keys)": {"x-last-value-key": "k"},
}


def _messages(lvq: bool) -> list[Message]:
    if lvq:
        return [
            Message("", "q", b"", b"x" * 64, headers={"k": f"key-{i % 100}"}) for i in range(1000)
        ]
    return [Message("", "q", b"", b"x" * 64) for _ in range(1000)]


def _run_once(args: dict[str, Any], cycles: int) -> float:
    queue = Queue("bench", resolve_queue_settings("bench", args))
    msgs = _messages("x-last-value-key" in args)
    publish: Callable[[Message, int], Any] = queue.publish
    fetch = queue.fetch
    ack = queue.ack
    for m in msgs[:10]:  # a standing backlog of 10
        publish(m, 0)
    n = len(msgs)
    # CPU time of this process: on a shared machine wall time also counts other processes.
    start = time.process_time()
    for i in range(cycles):
        publish(msgs[i % n], 0)
        d = fetch(0)
        assert d is not None
        ack((d.seq,))
    elapsed = time.process_time() - start
    return elapsed / cycles * 1e6


def _run_full_drop_head(cycles: int) -> float:
    queue = Queue("bench", resolve_queue_settings("bench", {"x-max-length": 1000}))
    msgs = _messages(False)
    publish = queue.publish
    for m in msgs:  # full: from here on every publish drops the head
        publish(m, 0)
    n = len(msgs)
    start = time.process_time()
    for i in range(cycles):
        publish(msgs[i % n], 0)
    elapsed = time.process_time() - start
    if queue.counters.maxlen_dropped != cycles:
        raise RuntimeError(f"dropped {queue.counters.maxlen_dropped} of {cycles}")
    return elapsed / cycles * 1e6


class _Probe:
    __slots__ = ("a", "b", "c")

    def __init__(self, a: int, b: int, c: int) -> None:
        self.a = a
        self.b = b
        self.c = c


def _calibrate(cycles: int) -> float:
    start = time.process_time()
    for i in range(cycles):
        _Probe(i, i, i)
    return (time.process_time() - start) / cycles * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--cycles", type=int, default=200_000)
    parser.add_argument("--runs", type=int, default=5)
    opts = parser.parse_args()
    gc.set_threshold(*GC_THRESHOLDS)
    print(f"queue engine: us per publish+fetch+ack, median of {opts.runs} x {opts.cycles} cycles")
    calib = statistics.median(_calibrate(opts.cycles) for _ in range(opts.runs))
    print(f"  {'calibration: one 3-slot object':45s} {calib:6.3f} us")
    for name, args in SCENARIOS.items():
        samples = [_run_once(args, opts.cycles) for _ in range(opts.runs)]
        median = statistics.median(samples)
        print(
            f"  {name:45s} {median:6.3f} us  (min {min(samples):.3f}; {median / calib:4.1f}x calib)"
        )
    samples = [_run_full_drop_head(opts.cycles) for _ in range(opts.runs)]
    median = statistics.median(samples)
    name = "publish only, full drop-head (max-len 1000)"
    print(f"  {name:45s} {median:6.3f} us  (min {min(samples):.3f}; {median / calib:4.1f}x calib)")


if __name__ == "__main__":
    main()
