"""Time and memory to recover N persistent messages after a kill -9 or a clean stop (in process).

Usage (from the repository root)::

    .venv/bin/python -m benchmarks.recovery_bench [--count 1000000] [--body-size 1024]
        [--stop dirty|clean|both] [--json FILE]

Theory of operation: a child process (fork) builds a `Broker` over a `FileStore` in a temporary
directory, declares one durable queue and sends `count` persistent messages through the same
calls the broker makes on publish (engine publish + `Durability.published`), flushed to the OS
every 1000 messages as the server's batches do. It then either abandons the store without
`close()` (buffers dropped, no CLEAN marker: what a SIGKILL leaves; `--stop dirty`) or closes
it (`--stop clean`: recovery terms written). The parent, which never held the messages, builds
a new `Broker` over `FileStore.open` of the same directory. Reported: fill rate, journal size,
the recovery time split into the store's part (`FileStore.open`: replay or recovery terms) and
the broker's rebuild (definitions + queue contents), the parent's peak RSS (ru_maxrss) and how
many messages the recovered queue holds in memory; the recovered count is checked, and the
queue is drained through fetch+ack (order checked) when `--drain` is given. End to end through
a real `ringmq serve` process, see `benchmarks/amqp_recovery.py`.
"""

from __future__ import annotations

import argparse
import gc
import json
import multiprocessing
import resource
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run as a script: make `benchmarks` importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from ringmq.amqp.properties import BasicProperties, encode_properties
from ringmq.core.broker import Broker
from ringmq.core.config import BrokerConfig
from ringmq.core.message import Message
from ringmq.storage import FileStore

_FLUSH_EVERY = 1000
_MAX_COUNT = 5_000_000
QUEUE = "bench.recovery"


def _dir_bytes(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


def _fill(data: Path, count: int, body_size: int, clean: bool, out: Any) -> None:
    store = FileStore.open(data)
    broker = Broker(BrokerConfig(), store=store, now_ms=0)
    q = broker.topology.create_queue("/", QUEUE, durable=True)
    broker.definitions_changed()
    dur = broker.durability
    assert dur is not None
    props = encode_properties(BasicProperties(delivery_mode=2))
    body = (b"r" * body_size)[:body_size]
    engine = q.queue
    started = time.perf_counter()
    for i in range(count):
        msg = Message("", QUEUE, props, body, persistent=True)
        dur.published(q, msg, engine.publish(msg, 0), 0)
        if i % _FLUSH_EVERY == _FLUSH_EVERY - 1:
            store.flush()
    store.sync()
    fill_s = time.perf_counter() - started
    t0 = time.perf_counter()
    if clean:
        broker.close()
    else:
        store.abandon()  # kill -9: no close(), no CLEAN marker
    out.put((fill_s, time.perf_counter() - t0))


def _rss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def run(count: int, body_size: int, stop: str, drain: bool) -> dict[str, Any]:
    """Fill (child), stop, recover (here); returns the measurements."""
    count = min(count, _MAX_COUNT)
    ctx = multiprocessing.get_context("fork")
    with tempfile.TemporaryDirectory(prefix="ringmq-recovery-") as tmp:
        data = Path(tmp) / "data"
        out = ctx.Queue()
        child = ctx.Process(target=_fill, args=(data, count, body_size, stop == "clean", out))
        child.start()
        fill_s, stop_s = out.get()
        child.join()
        disk = _dir_bytes(data)
        gc.collect()
        rss_before = _rss_mib()
        t0 = time.perf_counter()
        store = FileStore.open(data)
        t1 = time.perf_counter()
        broker = Broker(BrokerConfig(), store=store, now_ms=0)
        t2 = time.perf_counter()
        engine = broker.vhosts["/"].queues[QUEUE].queue
        recovered = engine.message_count
        in_memory = engine.counters.ready
        dur = broker.durability
        clean = dur.clean if dur is not None else True
        peak = _rss_mib()
        drained = -1
        if drain:
            drained, last = 0, 0
            while (d := engine.fetch(0, ack_required=True)) is not None:
                if d.seq <= last:
                    raise RuntimeError(f"order broken: {d.seq} after {last}")
                last = d.seq
                engine.ack([d.seq])
                drained += 1
        store.close()
    if recovered != count or (drain and drained != count):
        raise RuntimeError(f"recovered {recovered} (drained {drained}) of {count}")
    return {
        "count": count,
        "body_size": body_size,
        "stop": stop,
        "fill_msg_s": round(count / fill_s),
        "stop_s": round(stop_s, 2),
        "disk_mib": round(disk / 2**20, 1),
        "clean_marker": clean,
        "store_open_s": round(t1 - t0, 2),
        "rebuild_s": round(t2 - t1, 2),
        "recover_total_s": round(t2 - t0, 2),
        "recovered": recovered,
        "in_memory_after_recovery": in_memory,
        "rss_before_mib": round(rss_before, 1),
        "peak_rss_after_recovery_mib": round(peak, 1),
        "drained": drained,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--count", type=int, default=1_000_000, help=f"at most {_MAX_COUNT}")
    parser.add_argument("--body-size", type=int, default=1024)
    parser.add_argument("--stop", choices=("dirty", "clean", "both"), default="both")
    parser.add_argument("--drain", action="store_true", help="fetch+ack everything afterwards")
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args(argv)
    stops = ("dirty", "clean") if args.stop == "both" else (args.stop,)
    results = []
    for stop in stops:
        # a fresh interpreter per case would be fairer for RSS; a forked child per case keeps
        # the fill out of this process, and the dirty case (the larger) runs first
        result = run(args.count, args.body_size, stop, args.drain)
        results.append(result)
        sys.stdout.write(json.dumps(result) + "\n")
        sys.stdout.flush()
    if args.json is not None:
        args.json.write_text(json.dumps(results, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
