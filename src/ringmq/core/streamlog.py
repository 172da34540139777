"""Stream queues' log: segments of chunks, stable offsets, retention by whole segments.

Theory of operation
-------------------
A stream queue (`x-queue-type: stream`, RabbitMQ's) is an append-only log, not a queue with
a flag: consuming removes nothing, every reader has its own position. This module holds the
pure part of it, the rules both log implementations share:

* **Offsets** are 64-bit, assigned in append order from 0, never reused: a message keeps its
  offset for life, across restarts and retention (RabbitMQ/Osiris offsets).
* **Chunks**: one append (a publish, or a batch of them) is one chunk, with the wall time of
  the append (`now_ms`) as its timestamp; a reader starting "at a time" starts at the first
  chunk whose timestamp is at or after it (Osiris' chunk timestamps).
* **Segments**: chunks go into the active segment until the next one would take it past
  `x-stream-max-segment-size-bytes`; then a new segment starts (named by its first offset).
* **Retention** (`x-max-length-bytes`, `x-max-age`) removes *whole* segments, oldest first,
  never the active one (RabbitMQ does the same: a stream keeps at least its last segment).
* **Offset specifications** (`x-stream-offset`: `first`, `last`, `next`, an offset, a
  timestamp, an interval such as `1h`) resolve against the index to the offset a reader
  starts at (`OffsetSpec`, `parse_offset_spec`: `ringmq.core.streamspec`, with the declare
  checks; re-exported here).

`SegmentIndex` is the bookkeeping: per segment its first and next offsets, first and last
chunk timestamps, its size, and *index points* (offset, position, timestamp) for some of its
chunks (every `stride` bytes: a reader seeks to the nearest point and scans forward, so the
index stays small whatever the stream's size). Positions mean what the implementation says:
byte offsets in a segment file (storage/streamfiles.py) or a chunk's ordinal in a segment
held in memory (`MemoryStreamLog`, here, for brokers without a data directory).

`StreamLog` is the port the core reads and appends through; `StreamStorePort` the store side
that opens them (the file store's streams). Pure: no I/O, no clock (time is `now_ms`).
"""

from __future__ import annotations

from array import array
from collections.abc import Iterator, Mapping, Sequence
from typing import Any, Protocol, runtime_checkable

from ringmq.core.message import Message
from ringmq.core.queue.columns import Columns
from ringmq.core.streamchunk import (
    HEADER_SIZE,
    chunk_info,
    decode_chunk,
    gather,
    osiris_chunk,
)
from ringmq.core.streamspec import (
    DEFAULT_MAX_SEGMENT_BYTES,
    MAX_SEGMENT_BYTES,
    NEXT,
    STREAM,
    STREAM_ARGUMENTS,
    OffsetKind,
    OffsetSpec,
    StreamSpec,
    check_stream_declare,
    parse_offset_spec,
    stream_spec,
)

__all__ = [
    "DEFAULT_MAX_SEGMENT_BYTES",
    "MAX_SEGMENT_BYTES",
    "NEXT",
    "STREAM",
    "STREAM_ARGUMENTS",
    "MemoryStreamLog",
    "OffsetKind",
    "OffsetSpec",
    "Segment",
    "SegmentIndex",
    "StreamLog",
    "StreamSpec",
    "StreamStorePort",
    "Tracking",
    "check_stream_declare",
    "parse_offset_spec",
    "start_offset",
    "stream_spec",
]

# --- the index ---------------------------------------------------------------------------------


class Segment:
    """One segment's bookkeeping (see the module docstring)."""

    __slots__ = (
        "first_offset",
        "first_ts",
        "last_chunk",
        "last_point_pos",
        "last_ts",
        "nbytes",
        "next_offset",
        "points",
    )

    def __init__(self, first_offset: int) -> None:
        self.first_offset = first_offset
        self.next_offset = first_offset
        self.last_chunk = first_offset
        self.first_ts = 0
        self.last_ts = 0
        self.nbytes = 0
        self.points = array("q")
        """Index points, flat: (first offset of a chunk, its position, its timestamp)*."""
        self.last_point_pos = -1

    def point_before(self, offset: int) -> tuple[int, int]:
        """(offset, position) of the last index point whose chunk starts at or before
        `offset` (the segment's first chunk when none does)."""
        pts = self.points
        lo, hi = 0, len(pts) // 3
        while hi - lo > 1:
            mid = (lo + hi) // 2
            if pts[mid * 3] <= offset:
                lo = mid
            else:
                hi = mid
        return pts[lo * 3], pts[lo * 3 + 1]

    def point_before_time(self, ts_ms: int) -> tuple[int, int]:
        """(offset, position) of the last index point whose timestamp is before `ts_ms`
        (the first chunk when none is): chunks from there on may be at or after it."""
        pts = self.points
        best = 0
        for i in range(len(pts) // 3):
            if pts[i * 3 + 2] < ts_ms:
                best = i
            else:
                break
        return pts[best * 3], pts[best * 3 + 1]


class SegmentIndex:
    """Segments, offsets, timestamps and retention of one stream (module docstring).

    Args:
        spec: the stream's settings (segment size, retention).
        stride: bytes of chunks between two index points (0: a point per chunk).
    """

    def __init__(self, spec: StreamSpec, stride: int = 0) -> None:
        self.spec = spec
        self.stride = stride
        self.segments: list[Segment] = []
        self._next = 0
        self._nbytes = 0

    @property
    def first_offset(self) -> int:
        """The first offset still kept (== `next_offset` when the stream is empty)."""
        return self.segments[0].first_offset if self.segments else self._next

    @property
    def next_offset(self) -> int:
        """The offset the next message gets."""
        return self._next

    @property
    def last_chunk_offset(self) -> int:
        """First offset of the last chunk (RabbitMQ's `last`); `next_offset` when empty."""
        return self.segments[-1].last_chunk if self.segments else self._next

    @property
    def nbytes(self) -> int:
        """Bytes of every segment kept."""
        return self._nbytes

    @property
    def count(self) -> int:
        """Messages kept."""
        return self._next - self.first_offset

    def restart_at(self, offset: int) -> None:
        """An empty stream continues at `offset` (recovery of a stream with no segment)."""
        assert not self.segments
        self._next = offset

    def should_roll(self, chunk_bytes: int) -> bool:
        """Whether a chunk of `chunk_bytes` starts a new segment (none yet, or the active one
        would grow past the segment size; an oversize chunk alone in a segment is fine)."""
        if not self.segments:
            return True
        active = self.segments[-1]
        return active.nbytes > 0 and active.nbytes + chunk_bytes > self.spec.max_segment_bytes

    def open_segment(self) -> Segment:
        """Start a new active segment at `next_offset`."""
        seg = Segment(self._next)
        self.segments.append(seg)
        return seg

    def add_chunk(self, count: int, ts_ms: int, pos: int, nbytes: int) -> int:
        """Record a chunk of `count` messages appended to the active segment at `pos`;
        returns its first offset."""
        assert count > 0
        assert self.segments
        seg = self.segments[-1]
        first = self._next
        if seg.nbytes == 0:
            seg.first_ts = ts_ms
        if seg.last_point_pos < 0 or pos - seg.last_point_pos >= self.stride:
            seg.points.extend((first, pos, ts_ms))
            seg.last_point_pos = pos
        seg.last_chunk = first
        seg.last_ts = max(seg.last_ts, ts_ms)
        seg.nbytes += nbytes
        seg.next_offset = first + count
        self._next = first + count
        self._nbytes += nbytes
        return first

    def expired(self, now_ms: int) -> list[Segment]:
        """Apply retention: remove and return the segments `x-max-length-bytes` and
        `x-max-age` no longer keep (oldest first, whole segments, never the active one)."""
        spec = self.spec
        gone: list[Segment] = []
        segs = self.segments
        while len(segs) > 1:
            oldest = segs[0]
            too_big = spec.max_bytes is not None and self._nbytes > spec.max_bytes
            too_old = spec.max_age_ms is not None and oldest.last_ts < now_ms - spec.max_age_ms
            if not (too_big or too_old):
                break
            segs.pop(0)
            self._nbytes -= oldest.nbytes
            gone.append(oldest)
        return gone

    def next_expiry_ms(self) -> int | None:
        """When `x-max-age` next removes a segment (the oldest, unless it is the active one),
        None when it never will as things stand: the broker's timer runs `expired` then."""
        age = self.spec.max_age_ms
        if age is None or len(self.segments) < 2:
            return None
        return self.segments[0].last_ts + age + 1

    def segment_of(self, offset: int) -> Segment | None:
        """The segment holding `offset` (None: before the first or at/after the next)."""
        segs = self.segments
        if not segs or offset < segs[0].first_offset or offset >= self._next:
            return None
        lo, hi = 0, len(segs)
        while hi - lo > 1:
            mid = (lo + hi) // 2
            if segs[mid].first_offset <= offset:
                lo = mid
            else:
                hi = mid
        return segs[lo]

    def segment_at_time(self, ts_ms: int) -> Segment | None:
        """The first segment with a chunk at or after `ts_ms` (None: none has one)."""
        for seg in self.segments:
            if seg.last_ts >= ts_ms:
                return seg
        return None

    def start_of(self, spec: OffsetSpec) -> int | None:
        """The offset a reader with `spec` starts at, when the index alone says it (None for
        a timestamp inside a segment: the log scans its chunks, `StreamLog.offset_at`)."""
        match spec.kind:
            case OffsetKind.FIRST:
                return self.first_offset
            case OffsetKind.LAST:
                return self.last_chunk_offset
            case OffsetKind.NEXT:
                return self._next
            case OffsetKind.OFFSET:
                # before the first kept: from the first (RabbitMQ/Osiris); past the end: waits
                return min(max(spec.value, self.first_offset), self._next)
            case OffsetKind.TIMESTAMP:
                return self._next if self.segment_at_time(spec.value) is None else None


# --- tracking ----------------------------------------------------------------------------------


class Tracking:
    """What a stream keeps besides its messages (RabbitMQ keeps it in the stream itself):
    consumers' stored offsets by reference (the stream protocol's store/query offset) and
    publishers' last publishing id by reference (de-duplication)."""

    __slots__ = ("dirty", "offsets", "writers")

    def __init__(self) -> None:
        self.offsets: dict[str, int] = {}
        self.writers: dict[str, int] = {}
        self.dirty = False
        """Changed since the owner last saved it."""

    def store_offset(self, reference: str, offset: int) -> None:
        self.offsets[reference] = offset
        self.dirty = True

    def set_writer(self, reference: str, publishing_id: int) -> None:
        if publishing_id > self.writers.get(reference, -1):
            self.writers[reference] = publishing_id
            self.dirty = True

    def snapshot(self) -> dict[str, dict[str, int]]:
        return {"offsets": dict(self.offsets), "writers": dict(self.writers)}

    def load(self, data: Mapping[str, Any]) -> None:
        self.offsets = {str(k): int(v) for k, v in dict(data.get("offsets", {})).items()}
        self.writers = {str(k): int(v) for k, v in dict(data.get("writers", {})).items()}


# --- the port ----------------------------------------------------------------------------------


class StreamLog(Protocol):
    """A stream's log as the core uses it (storage's file log and `MemoryStreamLog`)."""

    @property
    def index(self) -> SegmentIndex: ...

    @property
    def end(self) -> int:
        """The offset after the last one readers may see: `index.next_offset`, or less
        where the store shows only committed chunks (storage/streamdirs.py)."""

    @property
    def name(self) -> str:
        """The stream's name: the routing key of the messages it got as stream-protocol
        chunks, when read by the other protocols."""

    @property
    def tracking(self) -> Tracking:
        """Stored consumer offsets and publisher sequences (durable with the stream)."""

    def append(self, messages: Sequence[Message], now_ms: int) -> int:
        """Append `messages` as one chunk stamped `now_ms`; returns the first's offset."""

    def append_chunk(self, data: bytes, entries: int, records: int, now_ms: int) -> int:
        """Append the entries `data` (as a stream-protocol publish carried them) as one chunk
        stamped `now_ms`, kept as it is (core/streamchunk.py); returns its first offset."""

    def read(self, offset: int, max_count: int) -> list[tuple[int, Message]]:
        """Up to `max_count` (offset, message) from `offset` on (from the first kept when
        `offset` is older); [] at the end."""

    def read_chunks(self, offset: int, max_chunks: int) -> list[tuple[int, int, bytes]]:
        """Up to `max_chunks` whole chunks from the one holding `offset` on, each as (first
        offset, record count, the chunk in the stream protocol's format: as stored)."""

    def read_columns(self, offset: int, stop: int, out: Columns) -> None:
        """The messages at offsets `[offset, stop)` (from the first kept when `offset` is
        older) appended to `out` as rows whose seq is the offset (an offset reader's range)."""

    def read_stored(self, offset: int, stop: int) -> list[bytes] | None:
        """The records holding offsets `[offset, stop)` exactly as the log stores them, whole
        (some before `offset` and after `stop` may come too: a reader trims by offset), in
        pieces; None when the log keeps no stored form (`MemoryStreamLog`). The storage's
        record framing is then the reader's wire (docs/spark.md: the stream source)."""

    def offset_at(self, ts_ms: int) -> int:
        """The first offset of the first chunk stamped at or after `ts_ms` (next: none)."""

    def enforce(self, now_ms: int) -> int:
        """Apply retention; returns the number of segments removed."""

    def set_spec(self, spec: StreamSpec) -> None:
        """New settings (a policy changed the retention)."""

    def delete(self) -> None:
        """Remove the stream and everything it holds."""


@runtime_checkable
class StreamStorePort(Protocol):
    """A store that keeps streams (the file store: segment files under its directory)."""

    def open_stream(self, key: str, spec: StreamSpec, name: str) -> StreamLog:
        """Open (recover, or create empty) the stream `name` of store key `key`."""


def start_offset(log: StreamLog, spec: OffsetSpec) -> int:
    """The offset a reader with `spec` starts at in `log`."""
    at = log.index.start_of(spec)
    if at is None:
        return log.offset_at(spec.value)
    # `next`: after what readers see, so chunks not shown yet come once shown
    return min(at, log.end) if spec.kind is OffsetKind.NEXT else at


class MemoryStreamLog:
    """A `StreamLog` held in memory (a broker without a data directory): the same index and
    retention as the file log, chunks kept as message lists (a position is a chunk's ordinal
    in its segment)."""

    def __init__(self, spec: StreamSpec, name: str = "") -> None:
        self.index = SegmentIndex(spec)
        self.tracking = Tracking()
        self.name = name
        self._chunks: dict[int, list[tuple[int, int, list[Message] | bytes]]] = {}
        """segment first offset -> its chunks: (first offset, timestamp, messages or, for a
        chunk kept as it arrived, its bytes)."""

    @property
    def end(self) -> int:
        return self.index.next_offset

    def append(self, messages: Sequence[Message], now_ms: int) -> int:
        size = sum(len(m.body) + len(m.properties_bin) + 32 for m in messages)
        index = self.index
        if index.should_roll(size):
            self._chunks[index.open_segment().first_offset] = []
        chunks = self._chunks[index.segments[-1].first_offset]
        first = index.add_chunk(len(messages), now_ms, len(chunks), size)
        chunks.append((first, now_ms, list(messages)))
        return first

    def append_chunk(self, data: bytes, entries: int, records: int, now_ms: int) -> int:
        index = self.index
        size = HEADER_SIZE + len(data)
        if index.should_roll(size):
            self._chunks[index.open_segment().first_offset] = []
        chunks = self._chunks[index.segments[-1].first_offset]
        first = index.add_chunk(records, now_ms, len(chunks), size)
        chunks.append((first, now_ms, osiris_chunk(first, now_ms, entries, records, data)))
        return first

    def _chunk_index(self, seg: Segment, offset: int) -> int:
        _, pos = seg.point_before(offset)
        chunks = self._chunks[seg.first_offset]
        while pos + 1 < len(chunks) and chunks[pos + 1][0] <= offset:
            pos += 1
        return pos

    def _walk(self, offset: int) -> Iterator[tuple[int, int, list[Message] | bytes]]:
        # Every chunk from the one holding `offset` on.
        index = self.index
        offset = max(offset, index.first_offset)
        while (seg := index.segment_of(offset)) is not None:
            chunks = self._chunks[seg.first_offset]
            yield from chunks[self._chunk_index(seg, offset) :]
            offset = seg.next_offset

    def read(self, offset: int, max_count: int) -> list[tuple[int, Message]]:
        offset = max(offset, self.index.first_offset)
        out: list[tuple[int, Message]] = []
        for first, _ts, body in self._walk(offset):
            if isinstance(body, bytes):
                got = decode_chunk(body, max(0, offset - first), self.name)
            else:
                got = [(first + j, body[j]) for j in range(max(0, offset - first), len(body))]
            out += got[: max_count - len(out)]
            if len(out) >= max_count:
                break
        return out

    def read_chunks(self, offset: int, max_chunks: int) -> list[tuple[int, int, bytes]]:
        return gather(
            (
                (first, ts, chunk_info(b)[2] if isinstance(b, bytes) else len(b), b)
                for first, ts, b in self._walk(offset)
            ),
            max_chunks,
        )

    def read_columns(self, offset: int, stop: int, out: Columns) -> None:
        # `read` starts at the first kept offset when `offset` is older: bound by `stop` too
        offset = max(offset, self.index.first_offset)
        out.add_rows((o, o, False, m) for o, m in self.read(offset, max(0, stop - offset)))

    def read_stored(self, offset: int, stop: int) -> list[bytes] | None:
        return None  # chunks held as message lists: readers take the columns form

    def offset_at(self, ts_ms: int) -> int:
        seg = self.index.segment_at_time(ts_ms)
        if seg is None:
            return self.index.next_offset
        for first, ts, _body in self._chunks[seg.first_offset]:
            if ts >= ts_ms:
                return first
        return seg.next_offset

    def enforce(self, now_ms: int) -> int:
        gone = self.index.expired(now_ms)
        for seg in gone:
            del self._chunks[seg.first_offset]
        return len(gone)

    def set_spec(self, spec: StreamSpec) -> None:
        self.index.spec = spec

    def delete(self) -> None:
        self._chunks.clear()
