"""The durable de-duplication window: accepted `message_id`s per scope, in their own log.

Theory of operation
-------------------
A queue or exchange declared with `x-message-deduplication-window-ms` remembers the
`message_id`s it accepted (`core.reservations.PublishDedup`). For a durable scope the broker
also hands each accepted id to the store (`record`), and each id it forgets because the publish
was refused after all (`discard`), so a publisher's write replayed after a restart, or after a
crash, is still recognised. The ids live apart from the message journal, in `dedup/log`, so
they never pin message segments (a window outlives the messages it let through), and the log's
records are framed like every other store record (`records.frame`: length, crc32, type): a torn
or corrupt tail is cut at open with a WARNING, as the definitions log does.

Records: DEDUP_ADD `>qH` (accepted at, in ms; scope length), the scope, the id; DEDUP_DISCARD
`>H` (scope length), the scope, the id. Scopes are strings chosen by the broker.

The log only grows while the broker runs (the core trims its window in memory); `rewrite`
replaces it with the live window (tmp file, fsync, rename, fsync dir). The broker rewrites it
once at recovery, after trimming by each scope's window, and again whenever the log has grown
by `size` bytes past twice the last rewrite (`due`). Writes are buffered; the owning store
includes `flush()`'s descriptors in its group commit, so an id is durable with the message it
let through (same fsync), and a confirm never precedes it.
"""

from __future__ import annotations

import logging
import os
import struct
from collections import OrderedDict
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Final

from ringmq.storage.appendlog import AppendLog
from ringmq.storage.journal import write_all
from ringmq.storage.records import RecordType, frame, scan

log = logging.getLogger(__name__)

_ADD: Final = struct.Struct(">qH")
_DISCARD: Final = struct.Struct(">H")
MIN_REWRITE_BYTES: Final = 16 * 1024 * 1024
"""The log is rewritten when it grew past this plus twice its size at the last rewrite."""

Window = dict[str, "OrderedDict[str, int]"]
"""scope -> message_id -> accepted at (ms), oldest first."""


def _add(scope: str, message_id: str, at_ms: int) -> bytes:
    s = scope.encode()
    return frame(RecordType.DEDUP_ADD, _ADD.pack(at_ms, len(s)) + s + message_id.encode())


def _discard(scope: str, message_id: str) -> bytes:
    s = scope.encode()
    return frame(RecordType.DEDUP_DISCARD, _DISCARD.pack(len(s)) + s + message_id.encode())


class DedupLog:
    """`dedup/log` of a store directory (see the module docstring)."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        directory.mkdir(parents=True, exist_ok=True)
        self._log = directory / "log"
        self._window = self._load()
        self._file = AppendLog(self._log)
        self._base = self._file.written  # size at the last rewrite (or open)

    def _load(self) -> Window:
        window: Window = {}
        if not self._log.exists():
            return window
        data = self._log.read_bytes()
        records, good = scan(data)
        if good < len(data):
            log.warning(
                "dedup log %s: torn or corrupt tail at %d (%d bytes dropped), truncating",
                self._log,
                good,
                len(data) - good,
            )
            os.truncate(self._log, good)
        for rec in records:
            p = rec.payload
            if rec.rtype == RecordType.DEDUP_ADD:
                at, n = _ADD.unpack_from(p, 0)
                at_s = _ADD.size
                scope = str(p[at_s : at_s + n], "utf-8")
                ids = window.setdefault(scope, OrderedDict())
                mid = str(p[at_s + n :], "utf-8")
                ids[mid] = at
                ids.move_to_end(mid)
            elif rec.rtype == RecordType.DEDUP_DISCARD:
                (n,) = _DISCARD.unpack_from(p, 0)
                at_s = _DISCARD.size
                scope = str(p[at_s : at_s + n], "utf-8")
                window.get(scope, OrderedDict()).pop(str(p[at_s + n :], "utf-8"), None)
        return window

    def recovered(self) -> Window:
        """The window found at open (scopes in first-seen order, ids oldest first); once."""
        window, self._window = self._window, {}
        return window

    def record(self, scope: str, message_id: str, at_ms: int) -> None:
        """`message_id` was accepted in `scope` at `at_ms`."""
        self._file.buf += _add(scope, message_id, at_ms)

    def discard(self, scope: str, message_id: str) -> None:
        """Forget one id (its publish was refused after all)."""
        self._file.buf += _discard(scope, message_id)

    def due(self) -> bool:
        """True when the log grew enough that the broker should `rewrite` it."""
        return (
            self._file.written + len(self._file.buf) - self._base > MIN_REWRITE_BYTES + self._base
        )

    def rewrite(self, window: Mapping[str, Iterable[tuple[str, int]]]) -> None:
        """Replace the log with `window` (scope -> (id, accepted at) oldest first), durably.

        Records still buffered are dropped: `window` is the whole truth (it holds them).
        """
        tmp = self.directory / "log.tmp"
        out = bytearray()
        for scope, ids in window.items():
            for mid, at in ids:
                out += _add(scope, mid, at)
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        try:
            write_all(fd, out)
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, self._log)
        if self._file.tap is not None:
            self._file.tap.replace(self._log, bytes(out))
        dir_fd = os.open(self.directory, os.O_RDONLY)
        try:
            os.fsync(dir_fd)
        finally:
            os.close(dir_fd)
        self._file.reopen()
        self._base = self._file.written

    @property
    def failure(self) -> OSError | None:
        """The last write error while buffered records wait for a retry (`flush`)."""
        return self._file.failure

    def flush(self) -> list[int]:
        """Write buffered records; return dup'd descriptors to fsync (empty when clean)."""
        return self._file.flush()

    @property
    def file(self) -> AppendLog:
        """The log file (the store attaches its shard log to it)."""
        return self._file

    def write_out(self) -> None:
        """Write buffered records to the OS without taking a descriptor (`AppendLog`)."""
        self._file.write_out()

    def abandon(self) -> None:
        """Close without writing buffered records (simulated crash; tests)."""
        self._file.abandon()

    def close(self) -> None:
        """Flush, fsync and close."""
        self._file.close()
