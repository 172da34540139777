"""Append-only segmented journal: numbered segment files of framed records.

Theory of operation
-------------------
A `Journal` owns one directory of segment files named `<12-digit number><suffix>`, oldest first.
Records (see `records.py`) are appended to the *current* (highest-numbered) segment through an
in-memory buffer; when a segment reaches `segment_bytes` it is closed and a new one started.

Durability is split in two so the caller can group-commit and fsync off the event loop:

* `write_out()` (owner thread) writes the buffer to the OS and takes no descriptor: the caller
  will not fsync yet (writes that no confirm waits for, handed over at the end of a batch).
* `flush()` (owner thread) writes the buffer out and hands over the descriptors an fsync needs:
  a duplicate of the current segment's, the write descriptors of the segments closed since the
  previous `flush()`, and the directory when files were created or deleted. The caller owns
  them from then on and must pass them to `fsync_fds`, which closes them whatever happens.
* `fsync_fds(fds)` (any thread, e.g. an executor) fsyncs and closes them. It touches no journal
  state, so it is safe to run while the owner keeps appending.

Descriptors are bounded whatever the disk's speed: a closed segment keeps its write descriptor
only until the next `flush()` hands it over, and at most `MAX_UNSYNCED_SEGMENTS` closed segments
wait for one; past that the current segment grows beyond `segment_bytes` until a `flush()` takes
them (a slow fsync makes segments longer, never descriptors more numerous).

`replay()` must run once, before the first append: it scans every segment in order, truncates a
torn or corrupt tail (crc mismatch, short record) with a WARNING and goes on with the next
segment, then starts a fresh segment for new appends (so recovered files are never appended to).

Write failures (ENOSPC, EDQUOT, EIO from `write`): the file is cut back (`ftruncate`) to the
last byte known written, the records stay in the buffer, `failure` holds the error and
`flush()` raises it. Later appends only buffer (no roll, no write) until a `flush()` succeeds:
it writes the same bytes at the same offsets, so the in-memory index stays exact and no later
record ever sits behind a torn one. If even the cut fails the journal is `poisoned` and the
store stops writing (see docs/storage.md, "Write failures").

A new segment that cannot be created (no inode left, no descriptor: `open` fails) while the
current one is open and healthy is not an error: the current segment grows past
`segment_bytes` (one WARNING, then a retry every `_REOPEN_STEP` bytes) and a segment is started
again once creation succeeds. With no segment open at all (at start-up, after `roll()`) the
failed `open` is a write failure like any other: the segment number is taken (`_unopened`),
records are buffered at their offsets in it, `failure` holds the error and `flush()` retries
the `open` and raises while it fails, so the caller nacks and alarms exactly as for a failed
write.

The journal knows nothing about queues: the store decides when a segment is dead and calls
`delete()`. It imports nothing from core/ except through records.py.
"""

from __future__ import annotations

import errno
import logging
import os
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Final

from ringmq.storage.records import HEADER, HEADER_SIZE, TYPE_CRC, Record, scan

if TYPE_CHECKING:
    from ringmq.storage.shardlog import ShardLog

log = logging.getLogger(__name__)

_datasync = getattr(os, "fdatasync", os.fsync)
DEFAULT_SEGMENT_BYTES: Final = 16 * 1024 * 1024
_WRITE_CHUNK: Final = 1024 * 1024  # write the buffer out once it holds this much
_MAX_READERS: Final = 8  # cached read descriptors (`pread`)
_REOPEN_STEP: Final = 1024 * 1024  # after a failed segment creation, retry once per this much
MAX_UNSYNCED_SEGMENTS: Final = 16
"""Closed segments whose descriptors may wait for the next `flush()` (see the module doc)."""


def open_segment(path: Path, flags: int) -> int:
    """Create a segment file for appending (the one place segments are created; tests make it
    fail as a full descriptor table or inode table would)."""
    return os.open(path, flags, 0o644)


def write_all(fd: int, data: bytes | bytearray) -> None:
    """Write all of `data` to `fd` (os.write may be partial); leaves no buffer exported."""
    with memoryview(data) as view:
        off = 0
        while off < len(view):
            with view[off:] as chunk:
                off += os.write(fd, chunk)


def fsync_fds(fds: list[int]) -> None:
    """Fsync then close each descriptor (descriptors come from `Journal.flush`)."""
    try:
        for fd in fds:
            # fdatasync still persists the size of an appended file (and a directory's
            # entries) but skips pure timestamp updates
            _datasync(fd)
    finally:
        for fd in fds:
            os.close(fd)


class Journal:
    """A directory of append-only segment files (see the module docstring)."""

    def __init__(
        self, directory: Path, *, suffix: str = ".seg", segment_bytes: int = DEFAULT_SEGMENT_BYTES
    ) -> None:
        self.directory = directory
        self.suffix = suffix
        self.segment_bytes = segment_bytes
        directory.mkdir(parents=True, exist_ok=True)
        self._segments: list[int] = sorted(
            int(p.name[: -len(suffix)])
            for p in directory.iterdir()
            if p.name.endswith(suffix) and p.name[: -len(suffix)].isdigit()
        )
        # segment numbers are never reused (the store keys bookkeeping by them)
        self._next_seg = (self._segments[-1] + 1) if self._segments else 1
        self._current = -1  # no segment open for appending until replay()/first append
        self._fd = -1
        self._size = 0  # bytes of the current segment, buffered ones included
        self._flushed = 0  # bytes of the current segment already written to the OS
        self._buf = bytearray()
        self._unsynced: list[int] = []  # write fds of segments closed since the last flush()
        self._dir_dirty = False
        self._replayed = False
        self._readers: dict[int, int] = {}  # segment -> read-only fd (random reads, `pread`)
        self.bytes_written = 0
        self.failure: OSError | None = None
        """The last write error while it is not yet written out again (buffered records wait)."""
        self.poisoned = False
        """A failed write could not be cut back: the segment's tail is unknown (never append)."""
        self.open_failure: OSError | None = None
        """Why the last new segment could not be created (the current one grows meanwhile)."""
        self._reopen_at = 0  # current-segment size at which to try a new segment again
        self._unopened = False  # `_current` is taken but its file could not be created yet
        self.tap: ShardLog | None = None
        """The shard log that records every write and delete (replication on; `shardlog.py`)."""

    # -- paths and listing -------------------------------------------------------------------

    def path(self, seg: int) -> Path:
        """File path of segment `seg`."""
        return self.directory / f"{seg:012d}{self.suffix}"

    @property
    def segments(self) -> list[int]:
        """Segment numbers on disk (or being written), oldest first."""
        return list(self._segments)

    @property
    def current(self) -> int:
        """Number of the segment being appended to (-1 before the first append)."""
        return self._current

    @property
    def current_bytes(self) -> int:
        """Size of the current segment (0 when none is open)."""
        return self._size if self._fd >= 0 else 0

    def disk_bytes(self) -> int:
        """Total size of the segments (buffered bytes included)."""
        total = 0
        for seg in self._segments:
            if seg == self._current:
                total += self._size
            else:
                try:
                    total += self.path(seg).stat().st_size
                except FileNotFoundError:
                    pass
        return total

    # -- recovery ----------------------------------------------------------------------------

    def replay(self) -> Iterator[tuple[int, Record]]:
        """Yield `(segment, record)` for every good record, oldest first; truncate bad tails.

        Runs once, before any append. A segment whose tail fails its checksum is truncated to
        the last good record (logged at WARNING) and replay continues with the next segment.
        """
        assert not self._replayed, "replay() runs once"
        assert self._current == -1, "replay() runs before any append"
        self._replayed = True
        for seg in list(self._segments):
            path = self.path(seg)
            data = path.read_bytes()
            records, good = scan(data)
            if good < len(data):
                log.warning(
                    "journal %s: torn or corrupt tail at offset %d (%d bytes dropped), truncating",
                    path,
                    good,
                    len(data) - good,
                )
                os.truncate(path, good)
                self._dir_dirty = True
            for rec in records:
                yield seg, rec

    # -- appending ---------------------------------------------------------------------------

    def _open_next(self) -> None:
        if self._unopened:
            return  # records wait in the buffer for `flush()` to create the segment
        seg = self._next_seg
        path = self.path(seg)
        try:
            fd = open_segment(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_APPEND)
        except OSError as exc:
            if self._fd < 0 and self.failure is None and not self.poisoned:
                self._take_unopened(seg, exc)
                return
            if self._fd < 0 or self.failure is not None or self.poisoned:
                raise
            # Keep appending to the current segment (see the module docstring).
            if self.open_failure is None:
                log.warning(
                    "cannot create journal segment %s (%s); segment %s grows meanwhile",
                    path,
                    exc.strerror or exc,
                    self._current,
                )
            self.open_failure = exc
            self._reopen_at = self._size + _REOPEN_STEP
            return
        try:
            self._close_current()
        except BaseException:
            os.close(fd)
            os.unlink(path)
            raise
        if self.open_failure is not None:
            log.warning("journal segments are created again (%s)", path)
            self.open_failure = None
            self._reopen_at = 0
        self._next_seg += 1
        self._fd = fd
        self._segments.append(seg)
        self._current = seg
        self._size = 0
        self._flushed = 0
        self._dir_dirty = True

    def _take_unopened(self, seg: int, exc: OSError) -> None:
        # No segment open and none can be created: take its number anyway and buffer, as
        # after a failed write (see the module docstring).
        if exc.filename is None:
            exc.filename = str(self.path(seg))
        log.warning("cannot create journal segment %s (%s)", exc.filename, exc.strerror or exc)
        self.failure = exc
        self._unopened = True
        self._next_seg += 1
        self._segments.append(seg)
        self._current = seg
        self._size = 0
        self._flushed = 0

    def _create_unopened(self) -> None:
        # `flush()`'s retry of the segment `_take_unopened` could not create
        path = self.path(self._current)
        try:
            fd = open_segment(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_APPEND)
        except OSError as exc:
            if exc.filename is None:
                exc.filename = str(path)
            self.failure = exc
            raise
        log.warning("journal segment %s created", path)
        self._fd = fd
        self._unopened = False
        self._dir_dirty = True
        self.failure = None  # the buffered records are written next, as after a failed write

    def _close_current(self) -> None:
        if self._fd < 0:
            return
        self._write_out()
        # the write descriptor itself waits for the next flush(), which hands it to an fsync
        self._unsynced.append(self._fd)
        self._fd = -1

    def _write_out(self) -> None:
        if self._buf:
            if self.poisoned:
                raise OSError(
                    errno.EIO,
                    "journal tail unknown after a failed write",
                    str(self.path(self._current)),
                )
            try:
                write_all(self._fd, self._buf)
            except OSError as exc:
                if exc.filename is None:
                    exc.filename = str(self.path(self._current))
                self.failure = exc
                try:
                    os.ftruncate(self._fd, self._flushed)  # drop a partial write
                except OSError:
                    self.poisoned = True
                raise
            self.failure = None
            if self.tap is not None:
                self.tap.append(self.path(self._current), self._flushed, bytes(self._buf))
            self._flushed += len(self._buf)
            self.bytes_written += len(self._buf)
            self._buf.clear()

    def _try_write_out(self) -> bool:
        # opportunistic write-out (buffer full, roll, reads): a failure is kept in `failure`
        # for the next `flush()` to report; the records stay buffered
        if self.failure is not None or self.poisoned:
            return False
        try:
            self._write_out()
        except OSError:
            return False
        return True

    def append(self, rtype: int, payload: bytes | bytearray | memoryview) -> tuple[int, int]:
        """Append one record; returns `(segment, offset)` where it starts.

        Rolls over to a new segment first when the current one is full. Not durable until a
        `flush()` and the fsync of its descriptors.
        """
        if self._fd < 0 or (
            self._size >= self.segment_bytes
            and self._size >= self._reopen_at
            and len(self._unsynced) < MAX_UNSYNCED_SEGMENTS
            and self._try_write_out()
        ):
            self._open_next()
        offset = self._size
        n = len(payload)
        # inline `records.frame`: append header and payload to the buffer without a temp copy
        self._buf += HEADER.pack(n, zlib.crc32(payload, TYPE_CRC[rtype]), rtype)
        self._buf += payload
        self._size += HEADER_SIZE + n
        if len(self._buf) >= _WRITE_CHUNK:
            self._try_write_out()
        return self._current, offset

    def roll(self) -> None:
        """Close the current segment; the next append starts a new one (not while writes
        fail: the buffered records keep their offsets in the current segment)."""
        if self._fd >= 0 and (not self._buf or self._try_write_out()):
            # (while writes fail the current segment stays open: its records wait in the buffer)
            self._close_current()
            self._current = -1

    def write_out(self) -> None:
        """Write buffered records to the OS, taking no descriptor (no fsync follows yet).

        Raises the write's OSError (records stay buffered)."""
        if self._unopened:
            self._create_unopened()
        if self._fd >= 0 and self._buf:
            self._write_out()

    def flush(self) -> list[int]:
        """Write buffered records to the OS; hand over the descriptors an fsync needs.

        The caller owns the returned descriptors and must pass them to `fsync_fds` (which
        closes them). Raises the write's OSError, or EMFILE when no descriptor is left: then
        nothing is handed out and nothing more is held (records stay buffered, closed
        segments' descriptors wait for the next flush)."""
        self.write_out()
        taken: list[int] = []
        try:
            if self._fd >= 0:
                taken.append(os.dup(self._fd))
            if self._dir_dirty:
                taken.append(os.open(self.directory, os.O_RDONLY))
        except OSError:
            # no descriptor left (EMFILE): give back what this call took, so that a retry
            # (every sweep while the alarm is on) never holds more; the closed segments'
            # descriptors wait in `_unsynced` for the next flush
            for fd in taken:
                os.close(fd)
            raise
        self._dir_dirty = False
        fds = self._unsynced + taken
        self._unsynced = []
        return fds

    def sync(self) -> None:
        """Flush and fsync in the calling thread."""
        fsync_fds(self.flush())

    # -- reading and deleting ----------------------------------------------------------------

    def read(self, seg: int, offset: int, length: int) -> bytes:
        """Read `length` bytes of segment `seg` at `offset` (buffered bytes included)."""
        if seg == self._current and offset >= self._flushed:
            start = offset - self._flushed
            return bytes(self._buf[start : start + length])
        if seg == self._current and not self._try_write_out():
            return self._read_stitched(offset, length)
        with open(self.path(seg), "rb") as f:
            f.seek(offset)
            return f.read(length)

    def pread(self, seg: int, offset: int, length: int) -> bytes:
        """Read up to `length` bytes of segment `seg` at `offset` through a cached descriptor.

        Meant for many small random reads (paging in from the journal); buffered bytes of the
        current segment are written out first. Returns fewer bytes at the end of the segment.
        """
        if seg == self._current and offset + length > self._flushed and not self._try_write_out():
            return self._read_stitched(offset, length)
        fd = self._readers.get(seg)
        if fd is None:
            if len(self._readers) >= _MAX_READERS:
                old, old_fd = next(iter(self._readers.items()))
                del self._readers[old]
                os.close(old_fd)
            fd = self._readers[seg] = os.open(self.path(seg), os.O_RDONLY)
        return os.pread(fd, length, offset)

    def _read_stitched(self, offset: int, length: int) -> bytes:
        # the current segment while its buffer cannot be written: file part + buffered part
        head = b""
        if offset < self._flushed:
            with open(self.path(self._current), "rb") as f:
                f.seek(offset)
                head = f.read(min(length, self._flushed - offset))
        start = max(0, offset - self._flushed)
        return head + bytes(self._buf[start : start + length - len(head)])

    def _close_reader(self, seg: int) -> None:
        fd = self._readers.pop(seg, None)
        if fd is not None:
            os.close(fd)

    def read_segment(self, seg: int) -> bytes:
        """The whole content of a closed segment."""
        if seg == self._current and not self._try_write_out():
            return self._read_stitched(0, self._size)
        return self.path(seg).read_bytes()

    def delete(self, seg: int) -> None:
        """Delete segment `seg` (closing it first if it is the current one)."""
        if seg == self._current:
            self._buf.clear()
            if self._unopened:  # never created: nothing is pending for it any more
                self._unopened = False
                self.failure = None
                self._current = -1
            self.roll()
        self._close_reader(seg)
        try:
            self.path(seg).unlink()
        except FileNotFoundError:
            pass
        if self.tap is not None:
            self.tap.delete(self.path(seg))
        self._segments.remove(seg)
        self._dir_dirty = True

    def abandon(self) -> None:
        """Close descriptors, dropping buffered records (simulated crash; tests)."""
        self._buf.clear()
        for fd in self._unsynced:
            os.close(fd)
        self._unsynced = []
        for seg in list(self._readers):
            self._close_reader(seg)
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1
        self._current = -1

    def close(self) -> None:
        """Flush and fsync everything, then release descriptors."""
        fds = self.flush()
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1
        self._current = -1
        for seg in list(self._readers):
            self._close_reader(seg)
        fsync_fds(fds)

    def sizes(self) -> dict[int, int]:
        """Segment -> size in bytes as on disk (buffered bytes included)."""
        out: dict[int, int] = {}
        for seg in self._segments:
            if seg == self._current:
                out[seg] = self._size
            else:
                try:
                    out[seg] = self.path(seg).stat().st_size
                except FileNotFoundError:
                    out[seg] = -1
        return out

    def adopt(self) -> None:
        """Skip `replay()`: the caller knows the segments' content (clean-stop recovery
        terms). Appends start in a new segment, as after a replay."""
        assert not self._replayed, "adopt() instead of replay(), once"
        assert self._current == -1, "adopt() runs before any append"
        self._replayed = True
