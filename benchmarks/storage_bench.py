"""Storage benchmark: the segmented journal against sqlite3 (WAL) and LMDB.

Workloads (bounded in count; every backend does the same work):

* publish: N persistent 1 KiB enqueues, group commit (fsync) every `--batch` records; then
  ack them all in batches of `--batch`, each batch followed by a group commit. Reports rates,
  the mean and p99 time of one group commit, and disk usage after the acks.
* recover: write R persistent 1 KiB messages, stop without a clean close, then time the open
  and the full recovery (every message back in memory, in order).

For fairness the alternatives store and decode the same entry encoding as the journal's ENQUEUE
record (`records.encode_message` / `decode_entry`); the journal side goes through the whole
`FileStore` (index, refcounts, segment bookkeeping), the alternatives through a bare table.

Usage: python benchmarks/storage_bench.py [--messages 100000] [--recover 200000]
                                          [--backends journal,sqlite,lmdb] [--dir /tmp/x]
LMDB is measured only when the `lmdb` package is importable (it is not a ringmq dependency).
"""

from __future__ import annotations

import argparse
import itertools
import os
import resource
import shutil
import sqlite3
import struct
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol

from ringmq.core.message import Message, SeqId
from ringmq.storage.records import decode_entry, encode_message
from ringmq.storage.store import FileStore

BODY = bytes(range(256)) * 4  # 1 KiB
PROPS = b"\x10\x00\x02"  # delivery_mode=2


def du(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


def rss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


class Backend(Protocol):
    def enqueue(self, seq: int, body: bytes) -> None: ...
    def ack(self, seqs: list[int]) -> None: ...
    def commit(self) -> None: ...
    def crash(self) -> None: ...
    def recover(self) -> int: ...


class JournalBackend:
    def __init__(self, path: Path) -> None:
        self.path = path
        self.store = FileStore.open(path)
        self.store.recover()

    def enqueue(self, seq: int, body: bytes) -> None:
        self.store.enqueue("q", SeqId(seq), Message("", "q", PROPS, body, persistent=True))

    def ack(self, seqs: list[int]) -> None:
        self.store.ack("q", [SeqId(s) for s in seqs])

    def commit(self) -> None:
        self.store.sync()

    def crash(self) -> None:
        self.store.sync()
        self.store.abandon()

    def recover(self) -> int:
        self.store = FileStore.open(self.path)
        state = self.store.recover()
        msgs = state.queues.get("q", [])
        assert all(a.seq < b.seq for a, b in itertools.pairwise(msgs))
        return len(msgs)


class SqliteBackend:
    """A reasonable sqlite design: one table keyed by (queue, seq), WAL, synchronous=FULL."""

    def __init__(self, path: Path) -> None:
        path.mkdir(parents=True, exist_ok=True)
        self.file = path / "store.db"
        self.db = self._connect()
        self.db.execute(
            "CREATE TABLE IF NOT EXISTS msg (queue TEXT, seq INTEGER, entry BLOB,"
            " PRIMARY KEY (queue, seq)) WITHOUT ROWID"
        )
        self.db.execute("BEGIN")

    def _connect(self) -> sqlite3.Connection:
        db = sqlite3.connect(self.file, isolation_level=None)
        db.execute("PRAGMA journal_mode=WAL")
        db.execute("PRAGMA synchronous=FULL")
        return db

    def enqueue(self, seq: int, body: bytes) -> None:
        self.db.execute("INSERT INTO msg VALUES ('q', ?, ?)", (seq, _encoded(seq, body)))

    def ack(self, seqs: list[int]) -> None:
        self.db.executemany("DELETE FROM msg WHERE queue='q' AND seq=?", [(s,) for s in seqs])

    def commit(self) -> None:
        self.db.execute("COMMIT")
        self.db.execute("BEGIN")

    def crash(self) -> None:
        self.db.execute("COMMIT")
        self.db.close()

    def recover(self) -> int:
        self.db = self._connect()
        n = 0
        last = -1
        for queue, seq, raw in self.db.execute("SELECT * FROM msg ORDER BY queue, seq"):
            entry = decode_entry(raw)
            assert seq > last
            assert queue == entry.queue == "q"
            last = seq
            n += 1
        self.db.execute("BEGIN")
        return n


class LmdbBackend:
    """LMDB with one sync per commit: key = queue NUL seq (big endian), value = record."""

    def __init__(self, path: Path) -> None:
        import lmdb

        self.lmdb: Any = lmdb
        self.path = path
        path.mkdir(parents=True, exist_ok=True)
        self.env = lmdb.open(str(path), map_size=8 << 30, sync=True, metasync=True)
        self.txn = self.env.begin(write=True)

    def enqueue(self, seq: int, body: bytes) -> None:
        self.txn.put(b"q\x00" + struct.pack(">Q", seq), _encoded(seq, body))

    def ack(self, seqs: list[int]) -> None:
        for s in seqs:
            self.txn.delete(b"q\x00" + struct.pack(">Q", s))

    def commit(self) -> None:
        self.txn.commit()
        self.txn = self.env.begin(write=True)

    def crash(self) -> None:
        self.txn.commit()
        self.env.close()

    def recover(self) -> int:
        self.env = self.lmdb.open(str(self.path), map_size=8 << 30)
        n = 0
        with self.env.begin() as txn:
            for key, value in txn.cursor():
                entry = decode_entry(value)
                assert key[:2] == b"q\x00"
                assert entry.queue == "q"
                n += 1
        self.txn = self.env.begin(write=True)
        return n


def _encoded(seq: int, body: bytes) -> bytes:
    # the alternatives store exactly what the journal's ENQUEUE record holds
    return encode_message("q", seq, Message("", "q", PROPS, body, persistent=True))


BACKENDS: dict[str, Callable[[Path], Backend]] = {
    "journal": JournalBackend,
    "sqlite": SqliteBackend,
    "lmdb": LmdbBackend,
}


def publish_ack(name: str, root: Path, n: int, batch: int) -> None:
    path = root / f"{name}-publish"
    backend = BACKENDS[name](path)
    commits: list[float] = []

    def commit() -> None:
        t = time.perf_counter()
        backend.commit()
        commits.append(time.perf_counter() - t)

    t0 = time.perf_counter()
    for seq in range(n):
        backend.enqueue(seq, BODY)
        if (seq + 1) % batch == 0:
            commit()
    commit()
    t_pub = time.perf_counter() - t0
    disk_full = du(path)
    t1 = time.perf_counter()
    for start in range(0, n, batch):
        backend.ack(list(range(start, min(n, start + batch))))
        commit()
    commit()  # reclamation runs at the next group commit
    t_ack = time.perf_counter() - t1
    commits.sort()
    p99 = commits[int(len(commits) * 0.99) - 1]
    mean = sum(commits) / len(commits)
    print(
        f"{name:8s} publish {n / t_pub:9.0f} msg/s  ack {n / t_ack:9.0f} msg/s  "
        f"commit mean {mean * 1e3:6.2f} ms p99 {p99 * 1e3:6.2f} ms  "
        f"disk full {disk_full / 2**20:7.1f} MiB  after acks {du(path) / 2**20:6.2f} MiB"
    )
    backend.crash()
    shutil.rmtree(path, ignore_errors=True)


def recovery(name: str, root: Path, n: int, batch: int) -> None:
    path = root / f"{name}-recover"
    backend = BACKENDS[name](path)
    t0 = time.perf_counter()
    for seq in range(n):
        backend.enqueue(seq, BODY)
        if (seq + 1) % batch == 0:
            backend.commit()
    backend.crash()
    t_write = time.perf_counter() - t0
    disk = du(path)
    rss0 = rss_mib()
    t1 = time.perf_counter()
    got = backend.recover()  # reopens from the files only
    t_rec = time.perf_counter() - t1
    assert got == n, (name, got, n)
    print(
        f"{name:8s} recover {n} msgs ({disk / 2**20:.0f} MiB) in {t_rec:6.2f} s "
        f"= {n / t_rec:8.0f} msg/s  (write {t_write:5.1f} s; "
        f"max RSS {rss0:.0f} -> {rss_mib():.0f} MiB)"
    )
    backend.crash()
    del backend
    shutil.rmtree(path, ignore_errors=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else "")
    parser.add_argument("--messages", type=int, default=100_000)
    parser.add_argument("--recover", type=int, default=200_000)
    parser.add_argument("--batch", type=int, default=1000)
    parser.add_argument("--backends", default="journal,sqlite,lmdb")
    parser.add_argument("--dir", type=Path, default=None)
    args = parser.parse_args()
    names = [b for b in args.backends.split(",") if b]
    if "lmdb" in names:
        try:
            import lmdb  # noqa: F401
        except ImportError:
            print("lmdb not installed: skipped")
            names.remove("lmdb")
    root = Path(tempfile.mkdtemp(prefix="ringmq-storage-bench-", dir=args.dir))
    print(f"dir {root} (fs free {shutil.disk_usage(root).free / 2**30:.0f} GiB), pid {os.getpid()}")
    try:
        print(f"-- publish+ack: {args.messages} x 1 KiB, group commit every {args.batch}")
        for name in names:
            publish_ack(name, root, args.messages, args.batch)
        if args.recover:
            print(f"-- recovery of {args.recover} x 1 KiB after a dirty stop")
            for name in names:
                recovery(name, root, args.recover, args.batch)
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
