"""The data directory's lock: one broker per data directory.

Theory of operation: a broker takes an exclusive `flock` on `<data-dir>/.lock` before it opens
its store, and holds it (one open descriptor) until it stops; the kernel drops it when the
process dies, so a crash never leaves a stale lock behind. A second broker on the same directory
fails the non-blocking `flock` and refuses to start with `DataDirInUseError` before it has written
anything: the lock file is opened without truncation, and the pid of the holder is written only
by the broker that got the lock. Two brokers appending to one journal would corrupt it.

`flock` locks belong to the open file description, so a second lock taken by the same process
(two brokers in one test process) conflicts too.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
from pathlib import Path
from typing import Final

LOCK_NAME: Final = ".lock"


class DataDirInUseError(OSError):
    """Another broker holds the data directory's lock."""


class DataDirLock:
    """The held lock of one data directory; `release()` (or process exit) frees it."""

    def __init__(self, directory: Path, fd: int) -> None:
        self.directory = directory
        self._fd: int | None = fd

    @classmethod
    def acquire(cls, directory: Path) -> DataDirLock:
        """Create `directory` if needed and lock it.

        Raises:
            DataDirInUseError: another broker (this process or another) holds it.
            OSError: the directory cannot be created or the lock file opened.
        """
        path = directory / LOCK_NAME
        if not path.exists():
            directory.mkdir(parents=True, exist_ok=True)
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = _read_holder(fd)
            os.close(fd)
            who = f" (pid {holder})" if holder else ""
            raise DataDirInUseError(
                f"data directory {directory} is in use by another ringmq broker{who}; "
                "stop it or choose another directory with --data-dir"
            ) from None
        except OSError:
            os.close(fd)
            raise
        os.ftruncate(fd, 0)
        os.write(fd, f"{os.getpid()}\n".encode())
        return cls(directory, fd)

    def release(self) -> None:
        """Unlock (idempotent); the lock file stays, empty of meaning once unlocked."""
        if self._fd is None:
            return
        fd, self._fd = self._fd, None
        with contextlib.suppress(OSError):
            fcntl.flock(fd, fcntl.LOCK_UN)
        os.close(fd)


def _read_holder(fd: int) -> str:
    try:
        return os.pread(fd, 32, 0).decode(errors="replace").strip()
    except OSError:
        return ""
