"""Shared message store: large bodies stored once, reference counted, files reclaimed.

Theory of operation
-------------------
Bodies at or above the store's `embed_below` threshold (RabbitMQ's
`queue_index_embed_msgs_below`, 4096 bytes by default) are written once here as BODY records
(`[ref u64][body]`) in a `Journal` of `.msg` files, however many queues the message was routed
to. Each queue's journal ENQUEUE record carries only the ref.

In memory: `ref -> [file, offset, length, refcount]` and per file the live byte count. The
refcount is not persisted: recovery rebuilds it from the queue journal's surviving ENQUEUE
records (`incref` per recovered entry), then `sweep()` forgets unreferenced refs.

Reclaiming space: a closed file with no live body is deleted; a closed file whose live bytes
fall below `compact_ratio` of its size has its live bodies copied forward into the current file,
and is deleted once the copies are durable (the owner passes the durable position to
`maintain()`). On replay the last copy of a ref wins.

This module does file I/O only through `Journal`; it never decides what is persistent.
"""

from __future__ import annotations

import logging
from array import array
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from ringmq.storage.journal import DEFAULT_SEGMENT_BYTES, Journal
from ringmq.storage.records import BODY_PREFIX, HEADER_SIZE, RecordType, decode_body_ref, scan
from ringmq.storage.records import encode_body as _encode_body

log = logging.getLogger(__name__)

DEFAULT_COMPACT_RATIO: Final = 0.5
_ROLL_DEAD_CURRENT_BYTES: Final = 1024 * 1024


@dataclass(slots=True)
class _Loc:
    file: int
    offset: int  # offset of the body bytes inside the file
    length: int
    refs: int


class MessageStore:
    """Reference-counted body store over a `Journal` of `.msg` files."""

    def __init__(
        self,
        directory: Path,
        *,
        segment_bytes: int = DEFAULT_SEGMENT_BYTES,
        compact_ratio: float = DEFAULT_COMPACT_RATIO,
    ) -> None:
        self.journal = Journal(directory, suffix=".msg", segment_bytes=segment_bytes)
        self.compact_ratio = compact_ratio
        self._locs: dict[int, _Loc] = {}
        self._live: dict[int, int] = {}  # file -> live body bytes
        self._next_ref = 1
        # files whose live bodies were copied forward: deletable once position >= value
        self._moved: dict[int, int] = {}

    # -- recovery ----------------------------------------------------------------------------

    def replay(self) -> None:
        """Index every body on disk (refcounts start at zero; see `incref`/`sweep`)."""
        for seg, rec in self.journal.replay():
            if rec.rtype != RecordType.BODY:
                continue
            ref = decode_body_ref(rec.payload)
            old = self._locs.get(ref)
            if old is not None:
                self._live[old.file] -= old.length
            offset = rec.offset + HEADER_SIZE + BODY_PREFIX
            length = len(rec.payload) - BODY_PREFIX
            self._locs[ref] = _Loc(seg, offset, length, 0)
            self._live[seg] = self._live.get(seg, 0) + length
            self._next_ref = max(self._next_ref, ref + 1)

    def reserve_refs_below(self, limit: int) -> None:
        """Make every future ref >= `limit` (refs named by surviving index records)."""
        if limit > self._next_ref:
            self._next_ref = limit

    def sweep(self) -> int:
        """After recovery: forget bodies no queue references; returns how many were dropped."""
        dead = [ref for ref, loc in self._locs.items() if loc.refs == 0]
        for ref in dead:
            loc = self._locs.pop(ref)
            self._live[loc.file] -= loc.length
        return len(dead)

    # -- references --------------------------------------------------------------------------

    def __contains__(self, ref: int) -> bool:
        return ref in self._locs

    def __len__(self) -> int:
        return len(self._locs)

    def put(self, body: bytes) -> int:
        """Store a body with one reference; returns its new ref."""
        ref = self._next_ref
        self._next_ref += 1
        seg, offset = self.journal.append(RecordType.BODY, _encode_body(ref, body))
        self._locs[ref] = _Loc(seg, offset + HEADER_SIZE + BODY_PREFIX, len(body), 1)
        self._live[seg] = self._live.get(seg, 0) + len(body)
        return ref

    def incref(self, ref: int) -> bool:
        """Add a reference to a stored body; False when the ref is unknown."""
        loc = self._locs.get(ref)
        if loc is None:
            return False
        loc.refs += 1
        return True

    def decref(self, ref: int) -> None:
        """Drop a reference; the body is forgotten (its space reclaimable) at zero."""
        loc = self._locs.get(ref)
        if loc is None:
            return
        loc.refs -= 1
        if loc.refs <= 0:
            del self._locs[ref]
            self._live[loc.file] -= loc.length

    def refcount(self, ref: int) -> int:
        """Current reference count (0 when unknown)."""
        loc = self._locs.get(ref)
        return loc.refs if loc is not None else 0

    def length(self, ref: int) -> int:
        """Byte length of a stored body. Raises KeyError for an unknown ref."""
        return self._locs[ref].length

    # -- clean-stop recovery terms -----------------------------------------------------------

    def export(self) -> list[array[Any]]:
        """The body index as columns: refs, files, offsets, lengths, refcounts."""
        locs = self._locs
        return [
            array("Q", locs.keys()),
            array("L", [loc.file for loc in locs.values()]),
            array("L", [loc.offset for loc in locs.values()]),
            array("L", [loc.length for loc in locs.values()]),
            array("L", [loc.refs for loc in locs.values()]),
        ]

    def export_meta(self) -> dict[str, Any]:
        """What `adopt` needs besides the columns."""
        return {"next_ref": self._next_ref, "moved": sorted(self._moved)}

    def adopt(self, meta: dict[str, Any], columns: list[array[Any]]) -> None:
        """Instead of `replay()`: take the index `export` saved at a clean stop (the files are
        known to be unchanged since). Copied-forward files are deleted at the next `maintain`.
        """
        refs, files, offsets, lengths, counts = columns
        live = self._live
        for ref, file, offset, length, count in zip(
            refs, files, offsets, lengths, counts, strict=True
        ):
            self._locs[ref] = _Loc(file, offset, length, count)
            live[file] = live.get(file, 0) + length
        self._next_ref = max(self._next_ref, int(meta["next_ref"]))
        self._moved = dict.fromkeys((int(f) for f in meta["moved"]), 0)

    def get(self, ref: int) -> bytes:
        """Read a body back. Raises KeyError for an unknown ref."""
        loc = self._locs[ref]
        return self.journal.read(loc.file, loc.offset, loc.length)

    # -- space reclamation -------------------------------------------------------------------

    def maintain(self, position: int, durable_position: int) -> None:
        """Delete dead files and compact sparse ones.

        Args:
            position: the owner's current write position (stamped on copied-forward files).
            durable_position: the highest position known to be fsynced.
        """
        current = self.journal.current
        if (
            current >= 0
            and self._live.get(current, 0) <= 0
            and self.journal.current_bytes >= (_ROLL_DEAD_CURRENT_BYTES)
        ):
            self.journal.roll()  # every body in it is gone: let it be deleted below
            current = -1
        for seg in self.journal.segments:
            if seg == current:
                continue
            moved_at = self._moved.get(seg)
            if moved_at is not None:
                if moved_at <= durable_position:
                    self._drop_file(seg)
                continue
            live = self._live.get(seg, 0)
            if live <= 0:
                self._drop_file(seg)
            elif live < self.journal.segment_bytes * self.compact_ratio:
                self._copy_forward(seg)
                self._moved[seg] = position

    def _drop_file(self, seg: int) -> None:
        self.journal.delete(seg)
        self._live.pop(seg, None)
        self._moved.pop(seg, None)

    def _copy_forward(self, seg: int) -> None:
        records, _ = scan(self.journal.read_segment(seg))
        for rec in records:
            if rec.rtype != RecordType.BODY:
                continue
            ref = decode_body_ref(rec.payload)
            loc = self._locs.get(ref)
            if loc is None or loc.file != seg:
                continue
            body = bytes(rec.payload[BODY_PREFIX:])
            new_seg, offset = self.journal.append(RecordType.BODY, _encode_body(ref, body))
            self._live[seg] -= loc.length
            loc.file = new_seg
            loc.offset = offset + HEADER_SIZE + BODY_PREFIX
            self._live[new_seg] = self._live.get(new_seg, 0) + loc.length

    def live_bytes(self) -> int:
        """Bytes of referenced bodies."""
        return sum(self._live.values())
