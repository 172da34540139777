"""Reading a stream's segment files: chunk records scanned in blocks, index points, entries.

The primitives `streamfiles.FileStreamLog` reads and recovers through (its module docstring
has the chunk format). Pure functions over a descriptor, no state of their own.
"""

from __future__ import annotations

import os
import struct
import zlib
from collections.abc import Iterator
from typing import Final

from ringmq.core.message import Message
from ringmq.core.streamchunk import HEADER_SIZE as OSIRIS_HEADER
from ringmq.core.streamchunk import chunk_info
from ringmq.core.streamlog import Segment
from ringmq.storage.records import (
    HEADER,
    HEADER_SIZE,
    MAX_RECORD,
    TYPE_CRC,
    RecordType,
    decode_entry_at,
)

CHUNK: Final = struct.Struct("<QqI")
"""A core chunk's header after the record's: first offset, timestamp ms, count."""
ENTRY_LEN: Final = struct.Struct("<I")
"""The length before each entry of a core chunk."""
CHUNK_HEAD: Final = HEADER_SIZE + CHUNK.size
_HEAD_OSIRIS: Final = HEADER_SIZE + OSIRIS_HEADER
BLOCK: Final = 256 * 1024
"""Bytes read at once when scanning a segment."""


def scan_chunks(
    fd: int, pos: int, end: int, *, payloads: bool, verify: bool = False, block: int = BLOCK
) -> Iterator[tuple[int, int, int, int, memoryview | None, int, bool]]:
    """Chunks of a segment from `pos` to `end`: (position, first offset, timestamp, count,
    the record's bytes when `payloads` else None, record size, kept as published). Stops at a
    bad record (a torn tail: `verify` checks each CRC). Reads go through blocks of `block`
    bytes (or one chunk's size), so a scan holds at most one block whatever the segment."""
    buf = memoryview(b"")
    base = pos
    while pos + CHUNK_HEAD <= end:
        at = pos - base
        if at + _HEAD_OSIRIS > len(buf) and base + len(buf) < end:
            buf = memoryview(os.pread(fd, min(block, end - pos), pos))
            base, at = pos, 0
            if len(buf) < CHUNK_HEAD:
                return
        length, crc, rtype = HEADER.unpack_from(buf, at)
        size = HEADER_SIZE + length
        if length > MAX_RECORD or pos + size > end:
            return
        if rtype == RecordType.STREAM_OSIRIS and length >= OSIRIS_HEADER:
            first, ts, count, _n = chunk_info(buf, at + HEADER_SIZE)
            raw = True
        elif rtype == RecordType.STREAM_CHUNK:
            first, ts, count = CHUNK.unpack_from(buf, at + HEADER_SIZE)
            raw = False
        else:
            return
        record: memoryview | None = None
        if payloads or verify:
            if at + size > len(buf):
                buf = memoryview(os.pread(fd, min(max(block, size), end - pos), pos))
                base, at = pos, 0
                if len(buf) < size:
                    return
            record = buf[at : at + size]
            if verify and zlib.crc32(record[HEADER_SIZE:], TYPE_CRC[rtype]) != crc:
                return
        yield pos, first, ts, count, record if payloads else None, size, raw
        pos += size


def point_at_or_after(seg: Segment, offset: int, end: int) -> int:
    # The position of the first index point of `seg` whose chunk starts at or after `offset`
    # (`end` when none does): every chunk before it starts before that point.
    pts = seg.points
    lo, hi = 0, len(pts) // 3
    while lo < hi:
        mid = (lo + hi) // 2
        if pts[mid * 3] < offset:
            lo = mid + 1
        else:
            hi = mid
    return pts[lo * 3 + 1] if lo < len(pts) // 3 else end


def chunk_entries(
    record: bytes, first: int, count: int, skip: int
) -> Iterator[tuple[int, Message]]:
    # The messages of a chunk record from its `skip`-th on.
    p = CHUNK_HEAD
    for i in range(count):
        (n,) = ENTRY_LEN.unpack_from(record, p)
        p += 4
        if i >= skip:
            yield first + i, decode_entry_at(record, p, p + n).message
        p += n
