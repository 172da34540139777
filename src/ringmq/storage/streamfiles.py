"""Stream queues on disk: one directory per stream, segment files of framed chunks.

Theory of operation
-------------------
`StreamFiles` (`streamdirs.py`, owned by `FileStore`, under `<data>/streams/`) opens one
`FileStreamLog` per stream queue, in a directory named by the SHA-256 of its store key (a `KEY`
file holds the key itself). The pure rules (offsets, segments, index points, retention,
offset specifications) are `ringmq.core.streamlog`'s; this module is their I/O.

A segment file is named by its first offset (`00000000000000000042.seg`) and holds chunks, each
one record in the store's framing (`records.frame`: length, CRC-32, type `STREAM_CHUNK`)::

    payload = [u64 first offset][i64 timestamp ms][u32 count] ([u32 n][entry: n bytes])*

where each entry is `records.encode_message` of one message (its seq is its offset). Chunks are
kept as written: a reader decodes them, nothing rewrites them.

Writes: `append` frames the chunk into the active segment's buffer; `write_out` hands buffers
to the OS (readers call it before reading the active segment, so they see every append);
`flush` returns descriptors (dup'ed, or of sealed segments) for the store's group fsync, so a
stream append is confirmed by the same fsync as the journal's records. Retention unlinks whole
segment files. The tracking file (`tracking.json`: stored offsets, publisher sequences) is
replaced whole, by a temporary copy renamed only once an fsync covered it (`_save_tracking`).

Replication (`tap`, set by `FileStore.attach_log`): every hand-over to the OS is recorded in
the shard log as the same file operation (`shardlog.py`): an append to a segment, a segment
unlinked by retention, a new segment (created empty: its name holds the next offset), the
`KEY` file, the stream's directory removed; the tracking file as a REPLACE of its new content
when the snapshot is taken, even while an older temporary copy waits for its rename (a
follower needs no temporary copy: its position says what its files hold). `relog` records again the
content of a tracking file whose rename is still to come, for a bulk sync (`shardlog.py`).

Reads decode chunks (`read`, `read_columns`), send them as stored (`read_chunks`), or hand
out the records themselves (`read_stored`: a byte range per segment found by the index alone,
the Spark stream source's wire); all stop before `readable` when it is set (committed reads,
`streamdirs.py`).

Recovery (`FileStreamLog.__init__`): segment files in offset order; every chunk header is read
to rebuild the index (without reading payloads, except for the last segment, whose chunks are
CRC-checked: a torn tail left by a crash is cut off there). RSS stays bounded: the index keeps
one point per `INDEX_STRIDE` bytes, and reads go through fixed-size blocks.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import zlib
from collections import deque
from collections.abc import Generator, Iterable, Sequence
from pathlib import Path
from typing import Final

from ringmq.core.message import Message
from ringmq.core.queue.columns import Columns
from ringmq.core.streamchunk import decode_chunk, gather, osiris_header
from ringmq.core.streamlog import Segment, SegmentIndex, StreamSpec, Tracking
from ringmq.storage.journal import write_all
from ringmq.storage.records import (
    HEADER,
    HEADER_SIZE,
    TYPE_CRC,
    RecordType,
    decode_entry_at,
    encode_message,
    entry_row_at,
    frame,
)
from ringmq.storage.shardlog import ShardLog
from ringmq.storage.streamscan import (
    BLOCK,
    CHUNK,
    CHUNK_HEAD,
    ENTRY_LEN,
    chunk_entries,
    point_at_or_after,
    scan_chunks,
)

INDEX_STRIDE: Final = 64 * 1024
"""Bytes of chunks between two index points (a read scans at most this much to its offset)."""
SMALL_BLOCK: Final = 32 * 1024
"""Bytes read at once for a few chunks from a known position (a consumer's next chunk)."""
_READERS: Final = 4
"""Sealed segments kept open for reading, per stream."""
_HINTS: Final = 1024
"""Most read positions remembered (`FileStreamLog._hints`)."""
_SUFFIX: Final = ".seg"
_TRACKING: Final = "tracking.json"
_TRACKING_TMP: Final = _TRACKING + ".tmp"
_OSIRIS_TYPE_CRC: Final = TYPE_CRC[RecordType.STREAM_OSIRIS]


def _fsync_path(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _seg_name(first_offset: int) -> str:
    return f"{first_offset:020d}{_SUFFIX}"


class FileStreamLog:
    """One stream's segment files (see the module docstring); a `StreamLog`.

    Args:
        directory: the stream's directory (created if needed; its segments are recovered).
        spec: segment size and retention.
    """

    def __init__(
        self,
        directory: Path,
        spec: StreamSpec,
        name: str = "",
        appended: set[FileStreamLog] | None = None,
        marked: set[FileStreamLog] | None = None,
    ) -> None:
        self.directory = directory
        self._appended = appended if appended is not None else set()
        """Where this log notes it has appends to hand to the OS (`StreamFiles.appended`)."""
        self._marked = marked if marked is not None else set()
        """Where this log notes it holds chunks a `show` must release (`StreamFiles.marked`)."""
        self.name = name
        """The stream's name (the routing key of its stream-protocol chunks' messages)."""
        directory.mkdir(parents=True, exist_ok=True)
        self.index = SegmentIndex(spec, INDEX_STRIDE)
        self._fd = -1  # the active segment's descriptor
        self._active = directory  # the active segment's path (once there is one)
        self._size = 0  # bytes of the active segment handed to the OS
        self._buf = bytearray()  # appended, not yet handed to the OS
        self._dirty = False  # written since the last flush
        self._dir_dirty = False  # a segment created or removed since the last flush
        self._sealed: list[int] = []  # rolled segments' descriptors, fsynced by the next flush
        self.deleted = False
        self.tracking = Tracking()
        self.tracking_pending = False
        """A temporary copy of the tracking file waits for its fsync and rename."""
        self.tap: ShardLog | None = None
        """The shard log that records every write (replication on; module docstring)."""
        self._readable: int | None = None
        """Readers stop before this offset (None: they read every chunk; `hide`)."""
        self._marks: deque[tuple[int, int]] = deque()
        """While hidden: (shard-log position, next offset) of each write-out since `show`."""
        self._latest: bytes | None = None  # the newest tracking snapshot taken (and logged)
        self._pending: bytes | None = None  # the snapshot in the temporary copy
        self._saved: bytes | None = None  # the tracking file's content on disk
        self._readers: dict[int, tuple[int, int]] = {}
        """Sealed segments open for reading: first offset -> (descriptor, size)."""
        self._hints: dict[int, tuple[int, int]] = {}
        """offset -> (its segment's first offset, position of the chunk starting there): where
        the last reads stopped, so a consumer's next read starts at its chunk instead of the
        index point before it (a scan of up to `INDEX_STRIDE` bytes per read)."""
        self._recover()

    # -- recovery --------------------------------------------------------------------------
    def _recover(self) -> None:
        tracking = self.directory / _TRACKING
        if tracking.exists():
            with contextlib.suppress(ValueError, OSError):
                self._saved = tracking.read_bytes()
                self.tracking.load(json.loads(self._saved))
        files = sorted(p for p in self.directory.iterdir() if p.name.endswith(_SUFFIX))
        index = self.index
        for n, path in enumerate(files):
            last = n == len(files) - 1
            first_offset = int(path.name[: -len(_SUFFIX)])
            if not index.segments:
                index.restart_at(first_offset)
            fd = os.open(path, os.O_RDWR)
            try:
                end = os.fstat(fd).st_size
                seg = index.open_segment()
                good = 0
                for pos, first, ts, count, _rec, size, _raw in scan_chunks(
                    fd, 0, end, payloads=False, verify=last
                ):
                    if first != index.next_offset:
                        break  # not this stream's next chunk: a damaged file ends here
                    index.add_chunk(count, ts, pos, size)
                    good = pos + size
                if good < end:
                    os.ftruncate(fd, good)  # a torn tail (the crash cut the last write)
                if seg.nbytes == 0:
                    index.segments.pop()
                    if not last:
                        path.unlink()
                    # else kept, empty: its name is the next offset, which nothing else may
                    # hold (retention removed the older segments; offsets are never reused)
            finally:
                os.close(fd)
        if index.segments:  # the last segment kept is the active one again
            active = self._active = self.directory / _seg_name(index.segments[-1].first_offset)
            self._fd = os.open(active, os.O_RDWR | os.O_APPEND)
            self._size = os.fstat(self._fd).st_size

    # -- writes ----------------------------------------------------------------------------
    def append(self, messages: Sequence[Message], now_ms: int) -> int:
        index = self.index
        first = index.next_offset
        parts = [CHUNK.pack(first, now_ms, len(messages))]
        for i, m in enumerate(messages):
            entry = encode_message("", first + i, m)
            parts += (ENTRY_LEN.pack(len(entry)), entry)
        record = frame(RecordType.STREAM_CHUNK, b"".join(parts))
        if index.should_roll(len(record)):
            self._roll()
        pos = self._size + len(self._buf)
        self._buf += record
        self._dirty = True
        self._appended.add(self)
        return index.add_chunk(len(messages), now_ms, pos, len(record))

    def append_chunk(self, data: bytes, entries: int, records: int, now_ms: int) -> int:
        # `records.frame` of the chunk, put in the buffer piece by piece: the data is copied
        # once (into the buffer), not joined to its headers first
        index = self.index
        first = index.next_offset
        head = osiris_header(first, now_ms, entries, records, data)
        length = len(head) + len(data)
        crc = zlib.crc32(data, zlib.crc32(head, _OSIRIS_TYPE_CRC))
        size = HEADER_SIZE + length
        if index.should_roll(size):
            self._roll()
        buf = self._buf
        pos = self._size + len(buf)
        buf += HEADER.pack(length, crc, RecordType.STREAM_OSIRIS)
        buf += head
        buf += data
        self._dirty = True
        self._appended.add(self)
        return index.add_chunk(records, now_ms, pos, size)

    def _roll(self) -> None:
        # A new active segment at the next offset; the old one is fsynced by the next flush.
        self.write_out()
        if self._fd >= 0:
            if self._dirty:
                self._sealed.append(self._fd)
            else:
                os.close(self._fd)
        seg = self.index.open_segment()
        self._active = self.directory / _seg_name(seg.first_offset)
        self._fd = os.open(self._active, os.O_RDWR | os.O_CREAT | os.O_APPEND)
        self._size = 0
        self._dir_dirty = True
        if self.tap is not None:
            # the new segment exists before its first chunk is written: its name alone keeps
            # the next offset once retention removed the others (offsets are never reused)
            self.tap.append(self._active, 0, b"")

    @property
    def unsynced(self) -> bool:
        """Appends, a segment change or offsets that no flush has taken for an fsync yet."""
        return bool(
            self._dirty or self._buf or self._sealed or self._dir_dirty or self.tracking.dirty
        )

    def write_out(self) -> None:
        """Hand the buffered appends to the OS."""
        if self._buf:
            write_all(self._fd, self._buf)
            if self.tap is not None:
                self.tap.append(self._active, self._size, bytes(self._buf))
                if self._readable is not None:
                    self._marks.append((self.tap.position, self.index.next_offset))
                    self._marked.add(self)
            self._size += len(self._buf)
            self._buf.clear()

    def _save_tracking(self, fds: list[int]) -> bool:
        # Offsets and publisher sequences: a small file replaced whole, and only by a copy
        # already on disk (else a crash just after the rename could leave it empty or cut).
        # Two steps, neither an fsync on this thread: the snapshot goes to the temporary file,
        # whose descriptor this flush's fsync covers; once that fsync is done, the store's
        # fsync thread renames it and fsyncs the directory (`tracking_synced`). One temporary
        # at a time: a newer snapshot waits for the rename (the file stays `dirty`), but is
        # in the shard log at once (`_snapshot`).
        if not self.tracking.dirty:
            return False
        data = self._snapshot()
        if self.tracking_pending:
            return False
        fd = os.open(self.directory / _TRACKING_TMP, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        try:
            write_all(fd, data)
        except OSError:
            os.close(fd)
            raise
        fds.append(fd)
        self._pending = data
        self.tracking_pending = True
        self.tracking.dirty = False
        return True

    def _snapshot(self) -> bytes:
        # The tracking's content now; recorded in the shard log when it changed, so that a
        # confirm released after a stored offset covers it on the followers.
        data = json.dumps(self.tracking.snapshot()).encode()
        if data != self._latest:
            self._latest = data
            if self.tap is not None:
                self.tap.replace(self.directory / _TRACKING, data)
        return data

    def relog(self) -> None:
        """Record the newest tracking snapshot again when the file on disk is older (its
        rename waits for an fsync): a bulk sync copying the file now gets it from the log."""
        latest = self._latest
        if self.tap is not None and latest is not None and latest != self._saved:
            self.tap.replace(self.directory / _TRACKING, latest)

    def tracking_synced(self) -> None:
        """The fsync covering the tracking file's temporary copy is done: put it in place
        (rename, fsync the directory). Runs on the store's fsync thread."""
        try:
            (self.directory / _TRACKING_TMP).replace(self.directory / _TRACKING)
            _fsync_path(self.directory)
        except FileNotFoundError:
            pass  # the stream was deleted meanwhile
        else:
            self._saved = self._pending
        self.tracking_pending = False

    def _save_tracking_now(self) -> None:
        # At close: the same replacement with its fsyncs done here.
        if not self.tracking.dirty and not self.tracking_pending:
            return
        fds: list[int] = []
        self.tracking_pending = False
        self._save_tracking(fds)
        if not fds:  # a copy a flush wrote, its fsync not known to be done
            fds.append(os.open(self.directory / _TRACKING_TMP, os.O_RDONLY))
        try:
            os.fsync(fds[0])
        finally:
            os.close(fds[0])
        self.tracking_synced()

    def flush(self) -> list[int]:
        """Write out, and return the descriptors an fsync must cover (the caller closes them,
        then calls `tracking_synced` when `tracking_pending`)."""
        self.write_out()
        fds, self._sealed = self._sealed, []
        self._save_tracking(fds)
        if self._dirty and self._fd >= 0:
            fds.append(os.dup(self._fd))
        self._dirty = False
        if self._dir_dirty:
            fds.append(os.open(self.directory, os.O_RDONLY))
            self._dir_dirty = False
        return fds

    # -- reads -----------------------------------------------------------------------------
    def _open(self, seg: Segment) -> tuple[int, int]:
        # (descriptor, size) to read `seg` through: the active segment's own, or a sealed
        # one's kept open (`_readers`: a consumer reads the same segment call after call).
        if seg is self.index.segments[-1] and self._fd >= 0:
            self.write_out()
            return self._fd, self._size
        got = self._readers.get(seg.first_offset)
        if got is None:
            if len(self._readers) >= _READERS:
                os.close(self._readers.pop(next(iter(self._readers)))[0])
            fd = os.open(self.directory / _seg_name(seg.first_offset), os.O_RDONLY)
            got = self._readers[seg.first_offset] = (fd, os.fstat(fd).st_size)
        return got

    def _close_readers(self, firsts: Iterable[int]) -> None:
        for first in firsts:
            got = self._readers.pop(first, None)
            if got is not None:
                os.close(got[0])

    def _walk(
        self, offset: int, block: int = BLOCK
    ) -> Generator[tuple[int, int, int, memoryview | bytes, bool], None, None]:
        # Every chunk from the one holding `offset` on: (first, timestamp, count, record, raw).
        # Where it stops is remembered (`_hints`): the reader's next call starts there.
        index = self.index
        offset = max(offset, index.first_offset)
        hints = self._hints
        limit = self._readable
        while (seg := index.segment_of(offset)) is not None:
            fd, end = self._open(seg)
            hint = hints.pop(offset, None)
            if hint is not None and hint[0] == seg.first_offset:
                pos = hint[1]
            else:
                _, pos = seg.point_before(offset)
                block = BLOCK  # a scan from an index point
            for p, first, ts, count, rec, size, raw in scan_chunks(
                fd, pos, end, payloads=True, block=block
            ):
                if limit is not None and first >= limit:
                    return
                if first + count > offset:
                    assert rec is not None  # a core chunk is decoded: bytes, not a view
                    if len(hints) >= _HINTS:
                        hints.clear()
                    hints[first + count] = (seg.first_offset, p + size)
                    yield first, ts, count, rec if raw else bytes(rec), raw
            offset = seg.next_offset

    def read(self, offset: int, max_count: int) -> list[tuple[int, Message]]:
        offset = max(offset, self.index.first_offset)
        out: list[tuple[int, Message]] = []
        for first, _ts, count, rec, raw in self._walk(offset):
            skip = max(0, offset - first)
            if raw:
                got = decode_chunk(rec[HEADER_SIZE:], skip, self.name)
            else:
                got = list(chunk_entries(bytes(rec), first, count, skip))
            out += got[: max_count - len(out)]
            if len(out) >= max_count:
                break
        return out

    def read_chunks(self, offset: int, max_chunks: int) -> list[tuple[int, int, bytes]]:
        return gather(
            (
                (
                    first, ts, count,
                    bytes(rec[HEADER_SIZE:]) if raw  # as stored: the record's payload
                    else [m for _, m in chunk_entries(bytes(rec), first, count, 0)],
                )
                for first, ts, count, rec, raw in self._walk(
                    offset, SMALL_BLOCK if max_chunks <= 4 else BLOCK
                )
            ),
            max_chunks,
        )  # fmt: skip

    def read_columns(self, offset: int, stop: int, out: Columns) -> None:
        # An offset range read: the fields go from the entries to the columns as stored
        # (`entry_row_at`), no message built, as a browse reads page records.
        offset = max(offset, self.index.first_offset)
        stop = min(stop, self.end)  # only what the index has taken in, and readers may see
        if stop <= offset:
            return
        seqs, flags, stamps = out.seqs, out.redelivered, out.timestamps
        exchanges, keys = out.exchanges.rows(), out.routing_keys.rows()
        props, bodies = out.properties.rows(), out.bodies.rows()
        unpack = ENTRY_LEN.unpack_from
        with contextlib.closing(self._walk(offset)) as chunks:
            for first, _ts, count, rec, raw in chunks:
                if first >= stop:
                    return
                if raw:  # a stream-protocol chunk, as stored: its messages decoded
                    for o, m in decode_chunk(rec[HEADER_SIZE:], max(0, offset - first), self.name):
                        if o >= stop:
                            return
                        out.add_rows(((o, o, False, m),))
                    continue
                assert isinstance(rec, bytes)  # a core chunk is yielded as bytes
                p = CHUNK_HEAD
                for i in range(count):
                    (n,) = unpack(rec, p)
                    p += 4
                    o = first + i
                    if o >= stop:
                        return
                    if o >= offset:
                        row = entry_row_at(rec, p, p + n)
                        if row is None:  # another protocol's form: from the message
                            out.add_rows(((o, o, False, decode_entry_at(rec, p, p + n).message),))
                        else:
                            seqs.append(o)
                            flags.append(0)
                            stamps.append(row[2])
                            exchanges.append(row[3])
                            keys.append(row[4])
                            props.append(row[5])
                            bodies.append(row[6])
                    p += n

    def read_stored(self, offset: int, stop: int) -> list[bytes]:
        # Whole records as the segments hold them, located by the index alone: from the index
        # point at or before `offset` to the first one at or after `stop` (or the segment's
        # end), so the range is one `pread` per segment and no chunk is looked at here; the
        # reader trims what lies outside `[offset, stop)` (at most `INDEX_STRIDE` bytes at
        # either side).
        index = self.index
        offset = max(offset, index.first_offset)
        stop = min(stop, self.end)  # only what the index has taken in, and readers may see
        out: list[bytes] = []
        while offset < stop and (seg := index.segment_of(offset)) is not None:
            fd, end = self._open(seg)
            _, pos = seg.point_before(offset)
            if stop < seg.next_offset:
                end = point_at_or_after(seg, stop, end)
            if end > pos:
                out.append(os.pread(fd, end - pos, pos))
            offset = seg.next_offset
        return out

    @property
    def end(self) -> int:
        """The offset after the last one readers may see."""
        limit = self._readable
        return self.index.next_offset if limit is None else limit

    # -- committed reads (streamdirs.py) ----------------------------------------------------
    def hide(self, on: bool = True) -> None:
        """From now on readers see what is here now and what `show` releases (off: every
        chunk again)."""
        self.write_out()
        self._readable = self.index.next_offset if on else None
        self._marks.clear()

    def show(self, log_position: int) -> bool:
        """Readers may see every chunk written out by shard-log position `log_position`;
        True when that is more than they saw."""
        marks = self._marks
        if not marks or marks[0][0] > log_position:
            return False
        while marks and marks[0][0] <= log_position:
            self._readable = marks.popleft()[1]
        return True

    def hidden_after(self, log_position: int) -> bool:
        """Chunks were written out after shard-log position `log_position` that readers may
        not see yet."""
        return bool(self._marks) and self._marks[-1][0] > log_position

    def offset_at(self, ts_ms: int) -> int:
        seg = self.index.segment_at_time(ts_ms)
        if seg is None:
            return self.index.next_offset
        fd, end = self._open(seg)
        _, pos = seg.point_before_time(ts_ms)
        for _pos, first, ts, _c, _rec, _size, _raw in scan_chunks(fd, pos, end, payloads=False):
            if ts >= ts_ms:
                return first
        return seg.next_offset

    # -- retention and lifetime ------------------------------------------------------------
    def enforce(self, now_ms: int) -> int:
        gone = self.index.expired(now_ms)
        self._close_readers(seg.first_offset for seg in gone)
        for seg in gone:
            path = self.directory / _seg_name(seg.first_offset)
            with contextlib.suppress(FileNotFoundError):
                path.unlink()
            if self.tap is not None:
                self.tap.delete(path)
        if gone:
            self._dir_dirty = True
        return len(gone)

    def set_spec(self, spec: StreamSpec) -> None:
        self.index.spec = spec

    def close(self) -> None:
        """Write out and close (the store's close fsyncs first through `flush`)."""
        self.write_out()
        self._save_tracking_now()
        self.abandon()

    def abandon(self) -> None:
        """Close without writing what is buffered (a simulated crash)."""
        self._close_readers(list(self._readers))
        for fd in self._sealed:
            os.close(fd)
        self._sealed = []
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1
        self._buf.clear()

    def delete(self) -> None:
        self.abandon()
        self.deleted = True
        self._marks.clear()  # nothing left to show
        self._marked.discard(self)
        self._dirty = self._dir_dirty = False
        shutil.rmtree(self.directory, ignore_errors=True)
        if self.tap is not None:
            self.tap.delete_dir(self.directory)
