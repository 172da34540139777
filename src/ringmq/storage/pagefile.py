"""One page file of a `PageQueue` run: its bytes on disk, its write buffer, reading it back.

Theory of operation
-------------------
A `RunFile` is created open for appending (the queue's back run). Records are framed by the
page queue and appended to an in-memory buffer (`append`), which goes to the file in one write
when it is large enough or when the run is read or sealed (`write_out`); large records (page
runs) go straight to the file when nothing is buffered, without a copy into the buffer. A
write that fails (ENOSPC...) is cut back to the last good byte (`written`) before `append` or
`write_out` returns, its records stay in the buffer, and the error goes to the shared
`DiskHealth` (the disk alarm); a later `write_out` retries. If even the cut back fails the
file is `stuck`: never written again, its buffer kept. `seal` writes the buffer out and
closes the file once the run is full; `delete` closes and removes it once the run has been
read through.

Reading: `read(offset, n)` returns bytes from the file, stitched with the buffer when the
disk refused it; `view(offset)` maps the file read-only instead (one copy less for a
browse or a raw take, whose rows stay views of the mapping until their answer is joined).
Only `written` bytes are mapped, and `written` never shrinks, so a mapping never reaches past
the end of its file. Files only, no fsync (page files never outlive the process). One owner
thread.
"""

from __future__ import annotations

import mmap
import os
from pathlib import Path
from typing import Final

from ringmq.storage.journal import write_all

__all__ = ["DIRECT_BYTES", "DiskHealth", "RunFile"]

DIRECT_BYTES: Final = 64 * 1024
"""Records of at least this many bytes go straight to the file when nothing is buffered."""


class DiskHealth:
    """The last page-file write error of a paging directory, until a write succeeds."""

    def __init__(self) -> None:
        self.failure: OSError | None = None
        self.failures = 0

    def failed(self, exc: OSError) -> None:
        self.failure = exc
        self.failures += 1

    def ok(self) -> None:
        self.failure = None


class RunFile:
    """One page file (see the module docstring)."""

    __slots__ = ("buf", "fd", "path", "stuck", "written")

    def __init__(self, path: Path) -> None:
        self.path = path
        self.fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_APPEND, 0o644)
        self.buf: bytearray | None = bytearray()
        self.written = 0  # bytes on disk
        self.stuck = False  # a failed write could not be cut back: never write it again

    @property
    def appending(self) -> bool:
        """Whether records may still be appended (the back run, not sealed)."""
        return self.fd >= 0

    @property
    def size(self) -> int:
        """Bytes appended: on disk and still buffered."""
        return self.written + len(self.buf or b"")

    @property
    def buffered(self) -> int:
        """Bytes appended and not yet written."""
        return len(self.buf or b"")

    def append(self, parts: list[bytes], nbytes: int, health: DiskHealth) -> None:
        """Append framed records (`parts`, `nbytes` in all): a few large ones (run records)
        straight to the file when nothing is buffered and the disk is healthy (no copy into
        the buffer), anything else to the buffer."""
        buf = self.buf
        assert buf is not None, "append to a sealed page file"
        if (
            nbytes >= DIRECT_BYTES
            and len(parts) <= 8
            and not buf
            and not self.stuck
            and health.failure is None
        ):
            try:
                for part in parts:
                    write_all(self.fd, part)
            except OSError as exc:
                self._cut_back(exc, health)  # then kept in the buffer, as a failed write_out
            else:
                self.written += nbytes
                return
        if len(parts) > 8:  # many small records: one join is cheaper than many appends
            buf += b"".join(parts)
        else:  # a few large ones (run records): one copy each, not a join and a copy
            for part in parts:
                buf += part

    def write_out(self, health: DiskHealth) -> bool:
        """Write the buffer; False (records kept in memory) when the write fails."""
        if not self.buf:
            return True
        if self.stuck:
            return False
        try:
            write_all(self.fd, self.buf)
        except OSError as exc:
            self._cut_back(exc, health)
            return False
        health.ok()
        self.written += len(self.buf)
        self.buf.clear()
        return True

    def _cut_back(self, exc: OSError, health: DiskHealth) -> None:
        # A write failed, perhaps after landing partly: report it, drop what landed.
        if exc.filename is None:
            exc.filename = str(self.path)
        health.failed(exc)
        try:
            os.ftruncate(self.fd, self.written)
        except OSError:
            self.stuck = True

    def seal(self, health: DiskHealth) -> None:
        """Write the buffer out and close the file (it stays open, buffered, while the disk
        refuses the write)."""
        if not self.write_out(health):
            return
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1
        self.buf = None

    def read(self, offset: int, n: int | None, health: DiskHealth) -> bytes:
        """`n` bytes (None: all) from `offset`: the file, then what is still buffered."""
        if self.fd >= 0 and self.buf and not self.write_out(health):
            with open(self.path, "rb") as f:
                f.seek(offset)
                avail = max(0, self.written - offset)
                head = f.read(avail if n is None else min(n, avail))
            start = max(0, offset - self.written)
            buf = self.buf
            tail = buf[start:] if n is None else buf[start : start + n - len(head)]
            return head + bytes(tail)
        with open(self.path, "rb") as f:
            f.seek(offset)
            return f.read() if n is None else f.read(n)

    def view(self, offset: int, health: DiskHealth) -> memoryview:
        """Everything from `offset`, mapped rather than read (stitched files are read).

        Raises:
            OSError: no mapping to be had (`vm.max_map_count`, memory).
        """
        if self.fd >= 0 and self.buf and not self.write_out(health):
            return memoryview(self.read(offset, None, health))
        if self.written <= offset:
            return memoryview(b"")
        with open(self.path, "rb") as f:
            m = mmap.mmap(f.fileno(), self.written, access=mmap.ACCESS_READ)
        m.madvise(mmap.MADV_SEQUENTIAL)
        return memoryview(m)[offset:]

    def delete(self) -> None:
        """Close the file and remove it."""
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1
        try:
            self.path.unlink()
        except FileNotFoundError:
            pass
