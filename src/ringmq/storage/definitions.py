"""Durable definitions: vhosts, users, permissions, exchanges, queues, bindings, policies.

Theory of operation
-------------------
Definitions change rarely and must never pin message segments, so they live apart from the
message journal, in `definitions/`: a compacted snapshot `snapshot.json` plus an append-only
`log` of framed records (`records.py`; DEFINITION_PUT / DEFINITION_DELETE with a JSON payload
`{"kind": ..., "key": ..., "value": ...}`).

The in-memory view is `kind -> key -> value` (values are JSON objects chosen by the broker;
kinds are free strings, conventionally those of `KINDS`). Opening loads the snapshot, replays the
log (a torn tail is truncated with a WARNING) and, when the log has grown past
`compact_after` records, writes a new snapshot (tmp file, fsync, rename, fsync dir) and
truncates the log. Writes are buffered; the owning store includes `flush()`'s descriptors in its
group commit.
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Final

from ringmq.storage.appendlog import AppendLog
from ringmq.storage.records import RecordType, frame, scan

log = logging.getLogger(__name__)

KINDS: Final = (
    "vhost",
    "user",
    "permission",
    "topic_permission",
    "exchange",
    "queue",
    "binding",
    "policy",
    "parameter",
    "global_parameter",
)
DEFAULT_COMPACT_AFTER: Final = 1000


class DefinitionLog:
    """Snapshot + log of durable definitions (see the module docstring)."""

    def __init__(self, directory: Path, *, compact_after: int = DEFAULT_COMPACT_AFTER) -> None:
        self.directory = directory
        self.compact_after = compact_after
        directory.mkdir(parents=True, exist_ok=True)
        self._snapshot = directory / "snapshot.json"
        self._log = directory / "log"
        self._defs: dict[str, dict[str, Any]] = {}
        self._load()
        self._file = AppendLog(self._log)
        # make the log's directory entry durable before anything relies on it
        dir_fd = os.open(self.directory, os.O_RDONLY)
        try:
            os.fsync(dir_fd)
        finally:
            os.close(dir_fd)

    def _load(self) -> None:
        if self._snapshot.exists():
            raw = json.loads(self._snapshot.read_text("utf-8"))
            self._defs = {kind: dict(items) for kind, items in raw.items()}
        n_records = 0
        if self._log.exists():
            data = self._log.read_bytes()
            records, good = scan(data)
            if good < len(data):
                log.warning(
                    "definitions log %s: torn or corrupt tail at %d (%d bytes dropped), truncating",
                    self._log,
                    good,
                    len(data) - good,
                )
                os.truncate(self._log, good)
            for rec in records:
                doc = json.loads(bytes(rec.payload))
                self._apply(rec.rtype, doc["kind"], doc["key"], doc.get("value"))
            n_records = len(records)
        if n_records > self.compact_after:
            self._compact()

    def _apply(self, rtype: int, kind: str, key: str, value: Any) -> None:
        if rtype == RecordType.DEFINITION_PUT:
            self._defs.setdefault(kind, {})[key] = value
        elif rtype == RecordType.DEFINITION_DELETE:
            self._defs.get(kind, {}).pop(key, None)

    def _compact(self) -> None:
        tmp = self.directory / "snapshot.json.tmp"
        with open(tmp, "w", encoding="utf-8") as f:
            json.dump(self._defs, f, separators=(",", ":"), sort_keys=True)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, self._snapshot)
        dir_fd = os.open(self.directory, os.O_RDONLY)
        try:
            os.fsync(dir_fd)
        finally:
            os.close(dir_fd)
        os.truncate(self._log, 0)

    # -- the view ----------------------------------------------------------------------------

    def all(self) -> dict[str, dict[str, Any]]:
        """A copy of every definition: kind -> key -> value."""
        return {kind: dict(items) for kind, items in self._defs.items() if items}

    def get(self, kind: str, key: str) -> Any:
        """One definition, or None."""
        return self._defs.get(kind, {}).get(key)

    # -- changes -----------------------------------------------------------------------------

    def put(self, kind: str, key: str, value: Mapping[str, Any] | Any) -> None:
        """Create or replace a definition (value must be JSON-serialisable)."""
        value = dict(value) if isinstance(value, Mapping) else value
        doc = json.dumps({"kind": kind, "key": key, "value": value}, separators=(",", ":"))
        self._file.buf += frame(RecordType.DEFINITION_PUT, doc.encode())
        self._defs.setdefault(kind, {})[key] = value

    def delete(self, kind: str, key: str) -> None:
        """Remove a definition (no-op when absent, still journaled)."""
        doc = json.dumps({"kind": kind, "key": key}, separators=(",", ":"))
        self._file.buf += frame(RecordType.DEFINITION_DELETE, doc.encode())
        self._defs.get(kind, {}).pop(key, None)

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
