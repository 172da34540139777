"""The store's persistent publish path alone, for callgrind: instructions per message.

N persistent 1 KiB enqueues into a `FileStore` (a sync every 200, as group commits do), then
their acks in batches of 200, each followed by a sync. `--shard-log` attaches a shard log
first (replication on: every write to the OS is recorded, storage/shardlog.py).

    valgrind --tool=callgrind python -m benchmarks.store_publish_cg 20000
    valgrind --tool=callgrind python -m benchmarks.store_publish_cg 1000
    # instructions per message: (Ir(20000) - Ir(1000)) / 19000

`benchmarks.hotpath_bench --mode publish` has no store (an in-memory broker), so this is the
figure for the store's share of scenario (c).
"""

from __future__ import annotations

import argparse
import shutil
import tempfile
from pathlib import Path

from ringmq.core.message import Message, SeqId
from ringmq.storage.store import FileStore

_BATCH = 200


def run(count: int, *, shard_log: bool) -> None:
    """Publish and ack `count` messages through a fresh store."""
    directory = Path(tempfile.mkdtemp(prefix="ringmq-store-cg-"))
    try:
        store = FileStore.open(directory / "store")
        store.recover()
        if shard_log:
            # imported here so that the script also runs against trees without shard logs
            from ringmq.storage.shardlog import ShardLog

            store.attach_log(ShardLog(store.directory, "0", 1))
        body = bytes(1024)
        for i in range(count):
            store.enqueue("q", SeqId(i), Message("", "q", b"\x10\x00\x02", body, persistent=True))
            if i % _BATCH == _BATCH - 1:
                store.sync()
        store.sync()
        for i in range(0, count, _BATCH):
            store.ack("q", [SeqId(j) for j in range(i, min(count, i + _BATCH))])
            store.sync()
        store.abandon()
    finally:
        shutil.rmtree(directory, ignore_errors=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    ap.add_argument("count", type=int)
    ap.add_argument("--shard-log", action="store_true", help="record writes in a shard log")
    args = ap.parse_args()
    run(args.count, shard_log=args.shard_log)


if __name__ == "__main__":
    main()
