"""Every stream queue of a store: the directories under `<data>/streams/`.

Theory of operation
-------------------
`StreamFiles` (owned by `FileStore`) opens one `streamfiles.FileStreamLog` per stream queue,
in a directory named by the SHA-256 of its store key (a `KEY` file holds the key itself), and
drives them together: the store's group commit (`flush` hands out every stream's descriptors
for one fsync; `synced`, on the fsync thread, puts the tracking files that fsync covered in
place), and replication (`attach` hands every stream the shard log; `relog` when a bulk sync
starts). A stream deleted and declared again starts empty.

Committed reads (`hide`, `show`): on a leader whose confirms wait for followers, a reader sees
a chunk only once the group commit released it (fsynced, or written under the `written`
rule, and acknowledged by the followers it waits for), as RabbitMQ's stream readers see only
committed chunks and Kafka's consumers read below the high watermark: a chunk the followers
never got is lost with the leader, and its offsets are then given to other messages, so no
reader may have had it. `hide` starts this (everything in the files counts as committed:
recovered, or replicated before this epoch); each stream's write-outs are marked with their
shard-log position, and `show(log_position)` lets each stream's readers past what the release
covers (`FileStreamLog.hide`, `show`, `hidden_after`).

Owner: the store's thread (the loop); only `synced` runs on the fsync thread.
"""

from __future__ import annotations

import hashlib
import shutil
from collections import deque
from pathlib import Path

from ringmq.core.streamlog import StreamSpec
from ringmq.storage.shardlog import ShardLog
from ringmq.storage.streamfiles import FileStreamLog


class StreamFiles:
    """Every stream of a store (the `StreamStorePort` side of `FileStore`)."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self._open: dict[str, FileStreamLog] = {}
        self.tap: ShardLog | None = None
        """The shard log (replication on): handed to every stream (`attach`)."""
        self.appended: set[FileStreamLog] = set()
        """Logs appended to since the last `write_out` (each log adds itself)."""
        self.marked: set[FileStreamLog] = set()
        """Logs with chunks written out that readers may not see yet (each log adds itself
        with its first mark; `show` drops it once it shows them all): a release visits
        these, not every open stream."""
        self._renames: deque[tuple[int, FileStreamLog]] = deque()
        """(sync point, log) whose tracking file waits for that point's fsync."""
        self.committed_reads = False
        """Readers see only released chunks (`hide`; module docstring)."""

    def attach(self, tap: ShardLog) -> None:
        """Record every later write of every stream in `tap` (`FileStore.attach_log`)."""
        self.tap = tap
        for log in self._open.values():
            log.tap = tap

    def hide(self, on: bool = True) -> None:
        """From now on readers see only what `show` released (off: every chunk again)."""
        self.committed_reads = on
        self.marked.clear()
        for log in self._open.values():
            log.hide(on)

    def show(self, log_position: int) -> bool:
        """A release covered the shard log up to `log_position`: readers may see every chunk
        written out by then. True when some stream's readers may see more."""
        moved = False
        for log in list(self.marked):
            moved = log.show(log_position) or moved
            if not log.hidden_after(-1):  # every mark shown
                self.marked.discard(log)
        return moved

    def hidden_after(self, log_position: int) -> bool:
        """Some stream holds chunks its readers may not see yet that a release up to
        `log_position` would not show either: appended since the last write-out, or written
        out after that position."""
        if not self.committed_reads:
            return False
        if self.appended:
            return True
        return any(log.hidden_after(log_position) for log in self.marked)

    def relog(self) -> None:
        """`FileStreamLog.relog` of every stream (a bulk sync starts)."""
        for log in self._open.values():
            if not log.deleted:
                log.relog()

    def _dir(self, key: str) -> Path:
        return self.directory / hashlib.sha256(key.encode()).hexdigest()

    def open_stream(self, key: str, spec: StreamSpec, name: str = "") -> FileStreamLog:
        log = self._open.get(key)
        if log is None or log.deleted:  # a stream deleted and declared again starts empty
            path = self._dir(key)
            log = self._open[key] = FileStreamLog(path, spec, name, self.appended, self.marked)
            log.tap = self.tap
            if self.committed_reads:
                log.hide()
            (path / "KEY").write_bytes(key.encode())
            if self.tap is not None:
                self.tap.replace(path / "KEY", key.encode())
        else:
            log.set_spec(spec)
            log.name = name or log.name
        return log

    def drop_stream(self, key: str) -> None:
        log = self._open.pop(key, None)
        if log is not None:
            log.delete()
        else:
            path = self._dir(key)
            shutil.rmtree(path, ignore_errors=True)
            if self.tap is not None:
                self.tap.delete_dir(path)

    def flush(self, position: int) -> list[int]:
        """Every stream's `FileStreamLog.flush`, for the store's sync point `position`."""
        self.appended.clear()  # each log's flush writes its appends out
        fds: list[int] = []
        for key, log in list(self._open.items()):
            if log.deleted:  # deleted through the core's port (its queue went)
                del self._open[key]
            else:
                pending = log.tracking_pending
                fds += log.flush()
                if log.tracking_pending and not pending:
                    self._renames.append((position, log))
        return fds

    def synced(self, position: int) -> None:
        """The fsync of sync point `position` is done: put the tracking files it covered in
        place (on the store's fsync thread; a deque, so the loop thread may append meanwhile)."""
        renames = self._renames
        while renames and renames[0][0] <= position:
            renames.popleft()[1].tracking_synced()

    def write_out(self) -> None:
        """Hand every stream's appends to the OS (only the logs appended to since the last
        call have any: a broker with many streams pays for the ones written)."""
        appended = self.appended
        while appended:
            log = appended.pop()
            if not log.deleted:
                log.write_out()

    def unsynced(self) -> bool:
        """Some stream has appends, a segment change or offsets no fsync covered yet (stream
        appends do not move the store's position, which says the same of its other files)."""
        return any(log.unsynced for log in self._open.values() if not log.deleted)

    def close(self) -> None:
        for log in self._open.values():
            log.close()
        self._open.clear()

    def abandon(self) -> None:
        for log in self._open.values():
            log.abandon()
        self._open.clear()
