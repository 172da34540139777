"""`BodySpill`: the Qpid `flow_to_disk` hand-off of message bodies to spill files.

Theory of operation
-------------------
Bodies go out to shared, reference-counted spill files (`put` -> handle holding one
reference), the queue keeps the envelope, and `get(handle)` reads the body back at delivery;
`retain` adds a reference (the same body in another queue), `release` drops one. The files
are a `MessageStore` of their own; every 1024 puts (and on `reclaim`) files with no live body
are deleted or compacted. Nothing here has to survive a crash: no fsync, and the owner
(`pager.Pager`) wipes the directory at start. One owner thread.
"""

from __future__ import annotations

from pathlib import Path

from ringmq.storage.msgstore import MessageStore


class BodySpill:
    """Qpid flow_to_disk body hand-off: bodies out to disk, read back on delivery."""

    def __init__(self, directory: Path, *, segment_bytes: int = 16 * 1024 * 1024) -> None:
        self._store = MessageStore(directory, segment_bytes=segment_bytes)
        self._puts = 0

    def put(self, body: bytes) -> int:
        """Write a body out; returns a handle holding one reference."""
        self._puts += 1
        if self._puts % 1024 == 0:
            self.reclaim()
        return self._store.put(body)

    def get(self, handle: int) -> bytes:
        """Read a body back (KeyError when released)."""
        return self._store.get(handle)

    def retain(self, handle: int) -> None:
        """Add a reference (the same body held by another queue)."""
        if not self._store.incref(handle):
            raise KeyError(handle)

    def release(self, handle: int) -> None:
        """Drop a reference; the space is reclaimed when none remain."""
        self._store.decref(handle)

    def reclaim(self) -> None:
        """Delete spill files with no live body (compaction needs no fsync here)."""
        big = 1 << 62
        self._store.maintain(big, big)

    def __len__(self) -> int:
        return len(self._store)

    def files(self) -> int:
        """Number of spill files."""
        return len(self._store.journal.segments)
