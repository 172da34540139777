"""A small append-only log file with a write buffer: the definitions log and the writers'
de-duplication log both keep one.

Theory of operation: records are framed by the owner (`records.frame`) and appended to `buf`.
`write_out()` writes the buffer in one `write_all`; `flush()` writes it out too and, when
anything was written since the previous `flush()`, hands back a dup'd descriptor for the group
commit to fsync (the caller owns it: `journal.fsync_fds` closes it). A failed write is cut back
(`ftruncate` to the bytes known written) so that a retry appends the same records at the same
place, and the error is kept in `failure` until a write succeeds. `written` counts the bytes of
the file known written.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING

from ringmq.storage.journal import write_all

if TYPE_CHECKING:
    from ringmq.storage.shardlog import ShardLog


class AppendLog:
    """An append-only file and the records waiting to be written to it."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        self.buf = bytearray()
        self.written = os.fstat(self.fd).st_size
        self.failure: OSError | None = None
        """The last write error while buffered records wait for a retry (`flush`)."""
        self._unsynced = False  # written since the last `flush()` handed out a descriptor
        self.tap: ShardLog | None = None
        """The shard log that records every write (replication on; `shardlog.py`)."""

    def reopen(self) -> None:
        """Open the file again after it was replaced (a compaction), nothing buffered."""
        os.close(self.fd)
        self.fd = os.open(self.path, os.O_WRONLY | os.O_APPEND)
        self.written = os.fstat(self.fd).st_size
        self.buf.clear()
        self._unsynced = False  # the replacement was fsynced whole

    def flush(self) -> list[int]:
        """Write buffered records; return dup'd descriptors to fsync (empty when clean)."""
        self.write_out()
        if not self._unsynced:
            return []
        fd = os.dup(self.fd)  # may raise EMFILE: `_unsynced` stays set for the next flush
        self._unsynced = False
        return [fd]

    def write_out(self) -> None:
        """Write buffered records to the OS, taking no descriptor (no fsync follows yet)."""
        if not self.buf:
            return
        try:
            write_all(self.fd, self.buf)
        except OSError as exc:
            # cut a partial write back so a retry appends the same records at the same place
            if exc.filename is None:
                exc.filename = str(self.path)
            self.failure = exc
            os.ftruncate(self.fd, self.written)
            raise
        self.failure = None
        if self.tap is not None:
            self.tap.append(self.path, self.written, bytes(self.buf))
        self.written += len(self.buf)
        self.buf.clear()
        self._unsynced = True

    def abandon(self) -> None:
        """Close without writing buffered records (simulated crash; tests)."""
        self.buf.clear()
        os.close(self.fd)

    def close(self) -> None:
        """Flush, fsync and close."""
        for fd in self.flush():
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
        os.close(self.fd)
