"""The shard's log: every durable change of one store directory as one ordered sequence.

Theory of operation
-------------------
A *shard* is one store directory written by one process (today: one per node). Every durable
change it makes reaches the OS as a write to one of its files: journal segments
(`journal/*.seg`: enqueues, acks, delivery counts, purges, transactions), shared bodies
(`msgstore/*.msg`), the definitions log (`definitions/log`: vhosts, users, exchanges, queues,
bindings, policies, the streams API's leases, Spark reservations and settles), the
de-duplication log (`dedup/log`), and the stream queues' files (`streams/<key hash>/`: segment
files of chunks, the `KEY` file, `tracking.json` with the stored consumer offsets and publisher
sequences; `streamfiles.py`). The shard log sees those writes as they happen, in the order
they happen, as *file operations* (`FileOp`):

* `APPEND(path, offset, data)`: bytes written at `offset` (the file's end: every store file is
  append-only; a file starts with an append at offset 0);
* `DELETE(path)`: a file removed (a reclaimed segment, a stream segment dropped by retention);
* `REPLACE(path, data)`: a file's whole content replaced (the dedup log's rewrite, a stream's
  tracking file or `KEY`);
* `DELETE_DIR(path)`: a directory removed with everything in it (a deleted stream).

A stream's tracking file is replaced on disk by the leader only once an fsync covered its
temporary copy (`streamfiles.py`), but its REPLACE is recorded when the snapshot is taken, so
a confirm released after a consumer's stored offset covers it on the followers too. A bulk
sync copies the leader's files, which may then hold an older tracking file than the log:
`FileStore.relog_pending` records those files' content again right after the copy's position.

Each operation gets the next *position* (1, 2, ...), and the log carries the *epoch* (the
leader's activation sequence) of every record it appends: one epoch for the log's lifetime,
with `start` the position the epoch began after. Applying the operations up to position `p`,
in order, to a copy of the directory as it was at `start` gives the directory exactly as the
shard had handed it to the OS at `p`; a directory built that way is a valid store directory (a
`FileStore` opened on it recovers what the journal holds, as after a kill -9 of the shard).
Operations are idempotent (an append rewrites the same bytes at the same offset), so applying
some of them twice is harmless: a follower may resume from a position its files have passed.

A record is one write of a writer's buffer, i.e. a write batch (usually one per group commit
per file), not one journal record: the shard log costs nothing per message. Recording is off
until `FileStore.attach_log` hands the store a `ShardLog` (replication on); without one the
writers pay one `is None` test per write to the OS (once per group commit).

What is not in the log, on purpose: page files (`<data>/paging/`, wiped at every open: a
durable message paged out always keeps its journal copy), the recovery terms and the `CLEAN`
marker (written by a clean stop for its own restart; a replica replays its journal), and what
a store does while it opens (torn tails cut, the definitions snapshot compacted): a follower
of an earlier epoch is brought level by a bulk sync instead.

The log keeps a bounded *backlog* of recent records (`backlog_bytes`) so that a follower that
was briefly away resumes from its position; one further behind needs a bulk sync.

Owner: the store's thread (the loop). No locks.
"""

from __future__ import annotations

import zlib
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from enum import IntEnum
from pathlib import Path
from typing import Final

DEFAULT_BACKLOG_BYTES: Final = 64 * 1024 * 1024
SHARD_FILE: Final = "SHARD"
"""The shard's identity and replication state in a store directory (`shardstate.py`)."""
STREAMS_DIR: Final = "streams"
"""The sub-directory of stream queues: one directory per stream (`<dir>/<stream>/<file>`)."""
REPLICATED_DIRS: Final = ("journal", "msgstore", "definitions", "dedup", STREAMS_DIR)
"""The store's sub-directories whose files the log (and a bulk sync) covers: files directly
in them, and for `STREAMS_DIR` files one directory down."""


class OpKind(IntEnum):
    """What a log record does to a file."""

    APPEND = 1
    DELETE = 2
    REPLACE = 3
    DELETE_DIR = 4


@dataclass(frozen=True, slots=True)
class FileOp:
    """One change to one file of the shard (`path` relative to the store, `/`-separated)."""

    kind: OpKind
    path: str
    offset: int = 0
    data: bytes = b""


_TRIMMED: Final = FileOp(OpKind.DELETE, "")
"""What a record's slot holds once the backlog let it go (never read: below the head)."""


@dataclass(frozen=True, slots=True)
class FileEntry:
    """A file of a bulk sync's index: its size and the crc32 of its content."""

    path: str
    size: int
    crc: int


class ShardLog:
    """The ordered log of one shard's file operations (see the module docstring).

    Args:
        root: the store directory (operations name files relative to it).
        shard: the shard's id.
        epoch: the epoch every record of this log carries.
        start: the position this epoch begins after (its first record is `start + 1`).
        backlog_bytes: how much of the recent log is kept for followers to resume from.
    """

    def __init__(
        self,
        root: Path,
        shard: str,
        epoch: int,
        start: int = 0,
        *,
        backlog_bytes: int = DEFAULT_BACKLOG_BYTES,
    ) -> None:
        self.root = root
        self.shard = shard
        self.epoch = epoch
        self.start = start
        self.position = start
        """Position of the last record (`start` before any)."""
        self.backlog_bytes = backlog_bytes
        # the backlog: `_ops[_head:]` are the records `_base + 1 ...` (a list with a moving
        # head, compacted now and then, so that `since` slices instead of walking)
        self._ops: list[FileOp] = []
        self._head = 0
        self._base = start
        self._held = 0  # bytes of data in the backlog
        self.on_append: Callable[[], None] | None = None
        """Called after each record, or once after a `batch` of them (the server wakes its
        follower sessions)."""
        self._batch = 0  # nesting of `batch()`
        self._batch_from = start  # the position a batch began at

    # -- the writers' side ------------------------------------------------------------------

    def _name(self, path: Path) -> str:
        return path.relative_to(self.root).as_posix()

    def append(self, path: Path, offset: int, data: bytes) -> None:
        """`data` was written at `offset` of `path`."""
        self._add(FileOp(OpKind.APPEND, self._name(path), offset, data))

    def delete(self, path: Path) -> None:
        """`path` was deleted."""
        self._add(FileOp(OpKind.DELETE, self._name(path)))

    def replace(self, path: Path, data: bytes) -> None:
        """`path` now holds exactly `data`."""
        self._add(FileOp(OpKind.REPLACE, self._name(path), 0, data))

    def delete_dir(self, path: Path) -> None:
        """The directory `path` was removed with everything in it."""
        self._add(FileOp(OpKind.DELETE_DIR, self._name(path)))

    def _add(self, op: FileOp) -> None:
        self.position += 1
        self._ops.append(op)
        self._held += len(op.data)
        ops = self._ops
        while self._held > self.backlog_bytes and len(ops) - self._head > 1:
            self._held -= len(ops[self._head].data)
            # drop the data now, not at the next compaction: up to 4096 trimmed records of a
            # group commit's size each would otherwise stay alive past `backlog_bytes`
            ops[self._head] = _TRIMMED
            self._head += 1
            self._base += 1
        if self._head > 4096 and self._head * 2 > len(ops):
            del ops[: self._head]
            self._head = 0
        if self.on_append is not None and not self._batch:
            self.on_append()

    @contextmanager
    def batch(self) -> Iterator[None]:
        """Records added inside call `on_append` once, at the end: a write-out of several
        files (bodies, journal, definitions, streams) is one send to each follower, and one
        acknowledgement back, not one per file."""
        if not self._batch:
            self._batch_from = self.position
        self._batch += 1
        try:
            yield
        finally:
            self._batch -= 1
            if not self._batch and self.position > self._batch_from and self.on_append is not None:
                self.on_append()

    # -- the readers' side ------------------------------------------------------------------

    @property
    def first(self) -> int:
        """The oldest position still held, minus one: `since(p)` works for `p >= first`."""
        return self._base

    def since(self, position: int, limit: int = 1 << 30) -> list[FileOp] | None:
        """Up to `limit` records after `position` (`position + 1`, ...), oldest first; None
        when some of them are no longer held (or `position` is beyond the log)."""
        if position < self._base or position > self.position:
            return None
        at = self._head + position - self._base
        return self._ops[at : at + limit]


def file_index(root: Path) -> list[FileEntry]:
    """Every file a bulk sync copies, with its size and crc32 (reads them all: run it off the
    loop). Files deleted while it runs are left out (their DELETE follows in the log)."""
    out: list[FileEntry] = []
    for name in replicated_files(root):
        try:
            size, crc = _crc_of(root / name)
        except FileNotFoundError:
            continue
        out.append(FileEntry(name, size, crc))
    return out


def replicated_files(root: Path) -> list[str]:
    """The names (relative to `root`) of every file the log covers, sorted; temporary files
    (`*.tmp`) left out."""
    out: list[str] = []
    for sub in REPLICATED_DIRS:
        for p in _listing(root / sub):
            if sub == STREAMS_DIR and p.is_dir():
                out += (f"{sub}/{p.name}/{f.name}" for f in _listing(p) if _kept(f))
            elif _kept(p):
                out.append(f"{sub}/{p.name}")
    return out


def _listing(directory: Path) -> list[Path]:
    try:
        return sorted(directory.iterdir())
    except (FileNotFoundError, NotADirectoryError):  # removed meanwhile, or never made
        return []


def _kept(p: Path) -> bool:
    return not p.name.endswith(".tmp") and p.is_file()


def _crc_of(path: Path) -> tuple[int, int]:
    crc = 0
    size = 0
    with open(path, "rb") as f:
        while chunk := f.read(1 << 20):
            crc = zlib.crc32(chunk, crc)
            size += len(chunk)
    return size, crc
