"""Page records decoded into spill items: the record loops of a page-in and of a peek.

`take_records` is the loop of `PageQueue.pop_front` (paging in: it removes the tombstones it
meets), `peek_entries` that of `PageQueue.peek_after` (a browse: nothing changes). Both check
each frame (length, CRC-32C: `records.page_crc`), decode records in place in the chunk read and
append what the spill store hands the queue: `(seq, message, expires_at)` items (`Spilled`;
the per-queue fields a page record also holds, delivery count and flags, are not used there):

* PAGED: one message entry, after the message's shared-store ref;
* PAGED_REF: a persistent message whose copy is in the journal: a placeholder item whose
  index and seq are returned, for the page queue to fill with one batched journal read;
* PAGED_RUN: a run of plain messages as columns (`pageruns.PageRun`), possibly entered at a
  row other than its first (`skip`: the rows an earlier page-in took), and left inside the
  record when the page-in's count or bytes are reached.

`take_runs` is the loop of `PageQueue.pop_raw` (a raw reservation): it takes the rows of the
PAGED_RUN records at the front as they are (`pageruns.RunRows`: no message built) and stops
at the first record of another type, which the ordinary page-in then reads.

Pure: no file access, no state of its own.
"""

from __future__ import annotations

import struct
from bisect import bisect_left
from dataclasses import dataclass, field
from itertools import accumulate
from typing import Final

from ringmq.core.message import Message, SeqId
from ringmq.core.queue.ports import Spilled
from ringmq.storage.pageruns import PageRun, RunRows
from ringmq.storage.records import (
    HEADER,
    HEADER_SIZE,
    MAX_RECORD,
    PAGE_TYPE_CRC,
    Entry,
    RecordType,
    decode_entry_at,
    decode_paged_ref,
    page_crc,
)

__all__ = [
    "PLACEHOLDER",
    "Taken",
    "item_of",
    "paged_item",
    "peek_entries",
    "take_records",
    "take_runs",
]

_PAGED_REF: Final = int(RecordType.PAGED_REF)
_PAGED_RUN: Final = int(RecordType.PAGED_RUN)
_STORE_REF: Final = struct.Struct("<Q")

PLACEHOLDER: Final[Spilled] = (SeqId(0), Message("", "", b"", b""), None)
"""What stands for a PAGED_REF record's item until the journal copy is read."""


def item_of(entry: Entry) -> Spilled:
    """The spill item of a decoded entry (a journal copy's, a PAGED record's)."""
    return entry.seq, entry.message, entry.expiry_ms


def paged_item(data: bytes, at: int, stop: int) -> Spilled:
    """The item of the PAGED record payload at `data[at:stop]`: the message's store ref,
    then the entry."""
    (ref,) = _STORE_REF.unpack_from(data, at)
    entry = decode_entry_at(data, at + _STORE_REF.size, stop)
    entry.message.store_ref = ref
    return entry.seq, entry.message, entry.expiry_ms


@dataclass(slots=True)
class Taken:
    """What one `take_records` call read.

    Attributes:
        pos: bytes of the chunk passed (whole records; the record at `pos` is where the next
            page-in starts).
        skip: rows of the record at `pos` already taken (a run record left inside).
        records: messages passed, tombstoned ones included (what leaves the page counts).
        passed: body bytes of those.
        took: body bytes of the entries appended.
        refs: (index in `out`, seq) of the PAGED_REF placeholders appended.
    """

    pos: int = 0
    skip: int = 0
    records: int = 0
    passed: int = 0
    took: int = 0
    refs: list[tuple[int, int]] = field(default_factory=list)


def take_records(
    data: bytes,
    skip: int,
    tombstones: dict[int, int],
    out: list[Spilled],
    max_count: int,
    max_bytes: int | None,
    got: int,
) -> Taken:
    """Decode the good records at the start of `data` (from row `skip` of the first) into
    `out`, stopping when `out` holds `max_count` or `got` plus the bodies taken reaches
    `max_bytes`; stops silently at a frame that fails its checks or that the chunk cuts (the
    caller reads on from `Taken.pos`, and calls a page that yields nothing corrupt)."""
    view = memoryview(data)
    end = len(data)
    unpack = HEADER.unpack_from
    crc32c = page_crc
    type_crc = PAGE_TYPE_CRC
    append = out.append
    t = Taken(skip=skip)
    refs = t.refs
    pos = records = passed = took = 0
    while pos + HEADER_SIZE <= end:
        length, crc, rtype = unpack(data, pos)
        at = pos + HEADER_SIZE
        stop = at + length
        if length > MAX_RECORD or stop > end or crc32c(view[at:stop], type_crc[rtype]) != crc:
            break
        if rtype == _PAGED_RUN:
            run = PageRun(data, at, stop)
            room = max_count - len(out)
            budget = None if max_bytes is None else max_bytes - got - took
            k = t.skip
            nxt, run_passed, run_took = run.collect(k, out, tombstones, room, budget)
            records += nxt - k
            passed += run_passed
            took += run_took
            if nxt < run.n:
                t.skip = nxt
                break
            t.skip = 0
            pos = stop
            if len(out) >= max_count or (max_bytes is not None and got + took >= max_bytes):
                break
            continue
        item: Spilled | None
        if rtype == _PAGED_REF:
            seq, size = decode_paged_ref(view[at:stop])
            item = None
        else:
            item = paged_item(data, at, stop)
            seq, size = item[0], len(item[1].body)
        pos = stop
        records += 1
        passed += size
        if tombstones and tombstones.pop(seq, None) is not None:
            continue
        if item is None:
            refs.append((len(out), seq))
            item = PLACEHOLDER
        append(item)
        took += size
        if len(out) >= max_count or (max_bytes is not None and got + took >= max_bytes):
            break
    t.pos = pos
    t.records = records
    t.passed = passed
    t.took = took
    return t


def take_runs(
    data: bytes | memoryview,
    skip: int,
    out: list[RunRows],
    max_count: int,
    max_bytes: int | None,
    first: bool,
) -> Taken:
    """Take the rows of the good PAGED_RUN records at the start of `data` (from row `skip` of
    the first) into `out` as `RunRows`, until `max_count` rows are taken or the bodies taken
    reach `max_bytes` (a row is taken while the bytes before it are below `max_bytes`; with
    `first`, the first row is taken whatever `max_bytes` is); stops before a record of another
    type, a frame that fails its checks or one the chunk cuts (`Taken.pos`, `Taken.skip`: where
    the next read starts). The caller has no tombstones (`PageQueue.pop_raw`)."""
    view = memoryview(data)
    end = len(data)
    unpack = HEADER.unpack_from
    crc32c = page_crc
    t = Taken(skip=skip)
    pos = rows = took = 0
    while pos + HEADER_SIZE <= end and rows < max_count:
        length, crc, rtype = unpack(data, pos)
        at = pos + HEADER_SIZE
        stop = at + length
        if (
            rtype != _PAGED_RUN
            or length > MAX_RECORD
            or stop > end
            or crc32c(view[at:stop], PAGE_TYPE_CRC[rtype]) != crc
        ):
            break
        run = PageRun(data, at, stop)
        k = t.skip
        m = min(run.n - k, max_count - rows)
        if max_bytes is not None:
            room = max_bytes - took
            if room > 0:
                # Row r is taken while the bodies before it are below `room`.
                sums = list(accumulate(run.body_lens[k : k + m]))
                m = min(m, bisect_left(sums, room) + 1)
            else:
                m = min(m, 1 if first and not rows else 0)
        if m <= 0:
            break
        got = RunRows(run, k, k + m, at, stop)
        out.append(got)
        rows += m
        took += got.nbytes
        if k + m < run.n:
            t.skip = k + m
            break
        t.skip = 0
        pos = stop
        if max_bytes is not None and took >= max_bytes:
            break
    t.pos = pos
    t.records = rows
    t.passed = t.took = took
    return t


def peek_entries(
    data: bytes, skip: int, low: int, tombstones: dict[int, int], out: list[Spilled], limit: int
) -> tuple[list[tuple[int, int]], int]:
    """Append to `out`, until it holds `limit`, the items of `data` (the unread rest of a
    run, from row `skip` of its first record) with a seq above `low`, tombstoned ones left
    out. Returns the PAGED_REF placeholders ((index in `out`, seq)) and the offset of a frame
    that failed its checks (-1: none)."""
    view = memoryview(data)
    end = len(data)
    unpack = HEADER.unpack_from
    crc32c = page_crc
    refs: list[tuple[int, int]] = []
    pos = 0
    while pos + HEADER_SIZE <= end and len(out) < limit:
        length, crc, rtype = unpack(data, pos)
        at = pos + HEADER_SIZE
        stop = at + length
        if length > MAX_RECORD or stop > end or crc32c(view[at:stop], PAGE_TYPE_CRC[rtype]) != crc:
            return refs, pos
        first = pos == 0
        pos = stop
        if rtype == _PAGED_RUN:
            run = PageRun(data, at, stop)
            run.collect(
                skip if first else 0, out, tombstones, limit - len(out), None, low=low, take=False
            )
            continue
        if rtype == _PAGED_REF:
            seq, _ = decode_paged_ref(view[at:stop])
        else:
            (seq,) = _STORE_REF.unpack_from(data, at + _STORE_REF.size)
        if seq <= low or seq in tombstones:
            continue
        if rtype == _PAGED_REF:
            refs.append((len(out), seq))
            out.append(PLACEHOLDER)
        else:
            out.append(paged_item(data, at, stop))
    return refs, -1
