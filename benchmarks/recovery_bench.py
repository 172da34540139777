"""Time to recover N persistent messages after a simulated kill -9 (in process, bounded).

Usage (from the repository root)::

    .venv/bin/python -m benchmarks.recovery_bench [--count 1000000] [--body-size 1024]
        [--json FILE]

Theory of operation: a `Broker` over a `FileStore` in a temporary directory gets one durable
queue, then `count` persistent messages through the same calls the broker makes on publish
(engine publish + `Durability.published`), flushed to the OS every 1000 messages as the
server's batches do. The store is then abandoned without `close()` (buffers dropped, no CLEAN
marker: what a SIGKILL leaves), and a new `Broker` is built over `FileStore.open` of the same
directory. Reported: fill rate, journal size, and the recovery time split into the store's
replay (`FileStore.open`) and the broker's rebuild (definitions + queue contents); the
recovered count is checked. End to end through a real `ringmq serve` process, see
`benchmarks/amqp_recovery.py`.
"""

from __future__ import annotations

import argparse
import gc
import json
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


def _dir_bytes(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


def run(count: int, body_size: int) -> dict[str, Any]:
    """Fill, abandon, recover; returns the measurements."""
    count = min(count, _MAX_COUNT)
    with tempfile.TemporaryDirectory(prefix="ringmq-recovery-") as tmp:
        data = Path(tmp) / "data"
        store = FileStore.open(data)
        broker = Broker(BrokerConfig(), store=store, now_ms=0)
        q = broker.declare_queue("/", "bench.recovery", durable=True)
        broker.definitions_changed()
        dur = broker.durability
        assert dur is not None
        props = encode_properties(BasicProperties(delivery_mode=2))
        body = (b"r" * body_size)[:body_size]
        engine = q.queue
        started = time.perf_counter()
        for i in range(count):
            msg = Message("", "bench.recovery", props, body, persistent=True)
            dur.published(q, msg, engine.publish(msg, 0), 0)
            if i % _FLUSH_EVERY == _FLUSH_EVERY - 1:
                store.flush()
        store.sync()
        fill_s = time.perf_counter() - started
        store.abandon()  # kill -9: no close(), no CLEAN marker
        del broker, q, engine, store, dur
        gc.collect()
        disk = _dir_bytes(data)

        t0 = time.perf_counter()
        store2 = FileStore.open(data)
        t1 = time.perf_counter()
        broker2 = Broker(BrokerConfig(), store=store2, now_ms=0)
        t2 = time.perf_counter()
        recovered = broker2.vhosts["/"].queues["bench.recovery"].queue.message_count
        clean = broker2.durability.clean if broker2.durability is not None else True
        store2.close()
    if recovered != count:
        raise RuntimeError(f"recovered {recovered} of {count}")
    return {
        "count": count,
        "body_size": body_size,
        "fill_msg_s": round(count / fill_s),
        "disk_mib": round(disk / 2**20, 1),
        "clean_marker": clean,
        "replay_s": round(t1 - t0, 2),
        "rebuild_s": round(t2 - t1, 2),
        "recover_total_s": round(t2 - t0, 2),
        "recovered": recovered,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--count", type=int, default=1_000_000, help=f"at most {_MAX_COUNT}")
    parser.add_argument("--body-size", type=int, default=1024)
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args(argv)
    result = run(args.count, args.body_size)
    text = json.dumps(result, indent=2)
    sys.stdout.write(text + "\n")
    if args.json is not None:
        args.json.write_text(text + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
