"""A follower's store directory: the shard log's operations applied as they arrive.

Theory of operation
-------------------
A follower keeps a full copy of its leader's store directory (a warm standby): `Replica`
applies the leader's file operations (`shardlog.FileOp`) to the same paths under its own
store directory, and writes the files of a bulk sync. Since the operations are exactly the
leader's writes in the leader's order, the directory is at every record boundary what the
leader's was at that position: a `FileStore` opened on it (a promotion) recovers every
record applied, by replaying its own journal, as after a kill -9 of the leader.

`SHARD` (JSON, written to a temporary name, fsynced and renamed) holds the shard's id, the
epoch and position the files are known to have reached, and whether a bulk sync is under way
(`syncing`: the files are a mix of old and new; a promotion must not start from them). The
position is saved after a bulk sync, at an epoch change and now and then while streaming; it
may lag the files (operations are idempotent, so a restarted follower resumes from it).
The leader's process keeps the same file for its epoch (`ShardState`).

Opening removes `CLEAN` and `RECOVERY_TERMS`: the files change under them, so a promotion
must replay. Paths come from the network: only `<dir>/<name>` under the replicated
directories (`shardlog.REPLICATED_DIRS`) are accepted, and under `streams/` only
`streams/<stream>/<name>` (a stream's files; its directory is made by the first write) and,
for `DELETE_DIR`, `streams/<stream>`.

`flush()` hands out descriptors of the files written since the last one (and of their
directories), for `journal.fsync_fds` on another thread, as `FileStore.flush` does.

Saving (`save`, or `begin_save` / `persist` / `saved`, which lets the fsync and the `SHARD`
write run off the loop while writes go on): the descriptors are taken when the save begins,
so the state it records never claims more than its fsync covers; overlapping saves write
`SHARD` in the order they began (a late, older one is skipped).

Owner: the follower's loop thread; only `persist` (and `journal.fsync_fds`) runs elsewhere.
"""

from __future__ import annotations

import json
import os
import shutil
import threading
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Final

from ringmq.storage.journal import fsync_fds, write_all
from ringmq.storage.shardlog import (
    REPLICATED_DIRS,
    SHARD_FILE,
    STREAMS_DIR,
    FileEntry,
    FileOp,
    OpKind,
    file_index,
    replicated_files,
)

_MAX_OPEN: Final = 32  # cached write descriptors


@dataclass(frozen=True, slots=True)
class ShardState:
    """What `SHARD` says about a store directory."""

    shard: str
    epoch: int
    position: int
    syncing: bool = False


def read_state(root: Path) -> ShardState | None:
    """The directory's `SHARD`, or None when it has none."""
    try:
        raw = json.loads((root / SHARD_FILE).read_text("utf-8"))
    except FileNotFoundError:
        return None
    return ShardState(
        str(raw["shard"]), int(raw["epoch"]), int(raw["position"]), bool(raw.get("syncing"))
    )


def write_state(root: Path, state: ShardState) -> None:
    """Replace `SHARD` durably (tmp, fsync, rename, fsync dir)."""
    tmp = root / (SHARD_FILE + ".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        write_all(fd, json.dumps(asdict(state)).encode())
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, root / SHARD_FILE)
    dir_fd = os.open(root, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)


@dataclass(frozen=True, slots=True)
class PendingSave:
    """A save begun on the owner's thread (`Replica.begin_save`), to be persisted."""

    seq: int
    fds: list[int]
    state: ShardState


class Replica:
    """A follower's copy of a shard's store directory (see the module docstring)."""

    def __init__(self, root: Path) -> None:
        self.root = root
        root.mkdir(parents=True, exist_ok=True)
        for sub in REPLICATED_DIRS:
            (root / sub).mkdir(exist_ok=True)
        for stale in ("CLEAN", "RECOVERY_TERMS"):
            (root / stale).unlink(missing_ok=True)
        self.state = read_state(root)
        self._saves = 0  # saves begun (their order)
        self._persisted = 0  # the latest save whose state reached `SHARD`
        self._state_lock = threading.Lock()  # `persist` may run on a thread of its own
        self._fds: dict[str, int] = {}
        self._dirty: set[str] = set()  # written since the last flush()
        self._dirs_dirty: set[str] = set()  # entries created or removed since then

    def _path(self, name: str, *, directory: bool = False) -> Path:
        # `<dir>/<name>`, or `streams/<stream>/<name>` (`streams/<stream>` for a directory)
        parts = name.split("/")
        depth = 2 if parts[0] == STREAMS_DIR else 1
        if (
            parts[0] not in REPLICATED_DIRS
            or len(parts) != depth + (0 if directory else 1)
            or len(parts) < 2
            or any(not p or p in (".", "..") or "\x00" in p for p in parts)
        ):
            raise ValueError(f"not a replicated {'directory' if directory else 'file'}: {name!r}")
        return self.root.joinpath(*parts)

    def _fd(self, name: str) -> int:
        fd = self._fds.pop(name, None)
        if fd is None:
            path = self._path(name)
            if not path.exists():
                parent = name.rpartition("/")[0]
                if not path.parent.is_dir():  # a stream's first file: its directory too
                    path.parent.mkdir()
                    self._dirs_dirty.add(parent.rpartition("/")[0])
                self._dirs_dirty.add(parent)
            fd = os.open(path, os.O_WRONLY | os.O_CREAT, 0o644)
            if len(self._fds) >= _MAX_OPEN:
                old = next(iter(self._fds))
                if old in self._dirty:  # keep it for the fsync: flush() reopens nothing
                    self._dirty.discard(old)
                    os.fsync(self._fds[old])
                os.close(self._fds.pop(old))
        self._fds[name] = fd  # most recently used last
        return fd

    def _close(self, name: str) -> None:
        fd = self._fds.pop(name, None)
        if fd is not None:
            os.close(fd)
        self._dirty.discard(name)

    # -- applying ---------------------------------------------------------------------------

    def apply(self, op: FileOp) -> None:
        """Apply one operation of the leader's log (idempotent)."""
        match op.kind:
            case OpKind.APPEND:
                self.write_chunk(op.path, op.offset, op.data)
            case OpKind.DELETE:
                self.remove(op.path)
            case OpKind.REPLACE:
                self.truncate(op.path, 0)
                self.write_chunk(op.path, 0, op.data)
            case OpKind.DELETE_DIR:
                self.remove_dir(op.path)

    def write_chunk(self, name: str, offset: int, data: bytes) -> None:
        """Write `data` at `offset` of `name` (created when missing)."""
        fd = self._fd(name)
        with memoryview(data) as view:
            done = 0
            while done < len(view):
                with view[done:] as rest:
                    done += os.pwrite(fd, rest, offset + done)
        self._dirty.add(name)

    def truncate(self, name: str, size: int) -> None:
        """Cut `name` to `size` bytes (created empty when missing)."""
        os.ftruncate(self._fd(name), size)
        self._dirty.add(name)

    def remove(self, name: str) -> None:
        """Delete `name` (nothing when it is already gone)."""
        path = self._path(name)
        self._close(name)
        try:
            path.unlink()
        except FileNotFoundError:
            return
        self._dirs_dirty.add(name.rpartition("/")[0])

    def remove_dir(self, name: str) -> None:
        """Delete the directory `name` and its files (nothing when it is already gone)."""
        path = self._path(name, directory=True)
        inside = name + "/"
        for open_name in [n for n in self._fds if n.startswith(inside)]:
            self._close(open_name)
        self._dirs_dirty = {d for d in self._dirs_dirty if d != name}
        if path.is_dir():
            shutil.rmtree(path)
            self._dirs_dirty.add(name.rpartition("/")[0])

    # -- bulk sync --------------------------------------------------------------------------

    def index(self) -> list[FileEntry]:
        """This copy's files with sizes and crc32s (compared with the leader's index)."""
        return file_index(self.root)

    def finish_sync(self, entries: list[FileEntry]) -> None:
        """End of a bulk sync: every file is cut to the leader's size and files the leader's
        index does not name are deleted."""
        keep = {e.path: e.size for e in entries}
        for name in replicated_files(self.root):
            if name not in keep:
                self.remove(name)
        streams = {e.path.split("/")[1] for e in entries if e.path.startswith(STREAMS_DIR + "/")}
        for p in sorted((self.root / STREAMS_DIR).iterdir()):
            if p.name not in streams:  # a stream the leader no longer has
                if p.is_dir():
                    self.remove_dir(f"{STREAMS_DIR}/{p.name}")
                else:
                    p.unlink()
        for name, size in keep.items():
            path = self._path(name)
            if not path.exists() or path.stat().st_size != size:
                self.truncate(name, size)

    # -- state and durability ---------------------------------------------------------------

    def save(self, state: ShardState) -> None:
        """Make what was applied durable, then record `state` in `SHARD` (on this thread)."""
        pending = self.begin_save(state)
        self.persist(pending)
        self.saved(pending)

    def begin_save(self, state: ShardState) -> PendingSave:
        """A save of `state` to run with `persist` on another thread: the descriptors taken
        now cover every write so far (what `state` claims), not the writes after."""
        self._saves += 1
        return PendingSave(self._saves, self.flush(), state)

    def persist(self, pending: PendingSave) -> None:
        """Fsync what `pending` covers, then write its state unless a later save's state is
        already in `SHARD` (any thread; saves may overlap)."""
        fsync_fds(pending.fds)
        with self._state_lock:
            if pending.seq > self._persisted:
                write_state(self.root, pending.state)
                self._persisted = pending.seq

    def saved(self, pending: PendingSave) -> None:
        """`persist(pending)` completed (the owner's thread): `state` is what `SHARD` holds."""
        if pending.seq >= self._persisted:
            self.state = pending.state

    def flush(self) -> list[int]:
        """Descriptors to fsync (`journal.fsync_fds` closes them) covering every write so far."""
        fds = [os.dup(self._fds[name]) for name in self._dirty if name in self._fds]
        fds += [
            os.open(self.root / sub, os.O_RDONLY)
            for sub in self._dirs_dirty
            if (self.root / sub).is_dir()
        ]
        self._dirty.clear()
        self._dirs_dirty.clear()
        return fds

    def close(self) -> None:
        """Close every descriptor (nothing is fsynced: `save` first when that matters)."""
        for name in list(self._fds):
            self._close(name)
