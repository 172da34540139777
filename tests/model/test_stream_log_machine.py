"""The stream log (offsets, segments, retention, readers, recovery) against a list.

Both logs (`MemoryStreamLog` and the segment files of `FileStreamLog`) are driven by the same
rules as a naive model: a list of (offset, timestamp, body) per chunk, and retention checked
by what it must keep. The file log can also crash (its buffered appends are lost, the last
segment may be cut at any byte) and reopen: what a flush covered survives with its offsets.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from ringmq.core.message import Message
from ringmq.core.queue.columns import Columns
from ringmq.core.streamlog import (
    MemoryStreamLog,
    OffsetKind,
    OffsetSpec,
    StreamLog,
    StreamSpec,
    start_offset,
)
from ringmq.storage.journal import fsync_fds
from ringmq.storage.streamfiles import FileStreamLog

SPEC = StreamSpec(max_segment_bytes=300, max_bytes=900, max_age_ms=1000)


def _msg(body: bytes) -> Message:
    return Message("", "s", b"", body)


class StreamLogMachine(RuleBasedStateMachine):
    """Appends, reads, retention and (file log) crashes against a list of chunks."""

    def __init__(self) -> None:
        super().__init__()
        self.now = 0
        self.dir = Path(tempfile.mkdtemp(prefix="streamlog-"))
        self.file = FileStreamLog(self.dir, SPEC)
        self.mem = MemoryStreamLog(SPEC)
        self.chunks: list[tuple[int, int, list[bytes]]] = []  # (first offset, ts, bodies)
        self.next = 0
        self.flushed = 0  # offsets a flush covered: they survive a crash
        self.flushed_at: tuple[str, int] = ("", 0)  # (active segment file, its size) then

    def teardown(self) -> None:
        self.file.abandon()
        shutil.rmtree(self.dir, ignore_errors=True)

    def logs(self) -> tuple[StreamLog, ...]:
        return (self.mem, self.file)

    def kept(self, log: StreamLog) -> list[tuple[int, bytes]]:
        first = log.index.first_offset
        return [
            (o + i, b)
            for o, _ts, bodies in self.chunks
            for i, b in enumerate(bodies)
            if o + i >= first
        ]

    @rule(bodies=st.lists(st.binary(max_size=60), min_size=1, max_size=4))
    def append(self, bodies: list[bytes]) -> None:
        msgs = [_msg(b) for b in bodies]
        for log in self.logs():
            assert log.append(msgs, self.now) == self.next  # in order, never reused
        self.chunks.append((self.next, self.now, bodies))
        self.next += len(bodies)

    @rule(ms=st.integers(0, 600))
    def tick(self, ms: int) -> None:
        self.now += ms

    @rule()
    def enforce(self) -> None:
        for log in self.logs():
            before = log.index.segments[:]
            total = log.index.nbytes
            log.enforce(self.now)
            after = log.index.segments
            assert after == before[len(before) - len(after) :]  # oldest whole segments
            assert after or not before  # never the last one
            for seg in before[: len(before) - len(after)]:
                assert seg.last_ts < self.now - 1000 or total > 900
                total -= seg.nbytes
            if len(after) > 1:  # it stopped because the oldest left is kept by both rules
                assert log.index.nbytes <= 900
                assert after[0].last_ts >= self.now - 1000

    @rule(offset=st.integers(0, 80), count=st.integers(1, 20))
    def read(self, offset: int, count: int) -> None:
        for log in self.logs():
            want = [(o, b) for o, b in self.kept(log) if o >= offset][:count]
            assert [(o, m.body) for o, m in log.read(offset, count)] == want

    @rule(offset=st.integers(0, 80), count=st.integers(0, 20))
    def read_columns(self, offset: int, count: int) -> None:
        # An offset range [offset, offset + count) as columns: seq = offset, the bodies.
        for log in self.logs():
            want = [(o, b) for o, b in self.kept(log) if offset <= o < offset + count]
            cols = Columns()
            log.read_columns(offset, offset + count, cols)
            assert list(zip(cols.seqs, cols.bodies.values(), strict=True)) == want

    @rule(kind=st.sampled_from(list(OffsetKind)), value=st.integers(0, 4000))
    def resolve(self, kind: OffsetKind, value: int) -> None:
        for log in self.logs():
            first = log.index.first_offset
            live = [c for c in self.chunks if c[0] + len(c[2]) > first]
            match kind:
                case OffsetKind.FIRST:
                    want = first
                case OffsetKind.LAST:
                    want = live[-1][0] if live else self.next
                case OffsetKind.NEXT:
                    want = self.next
                case OffsetKind.OFFSET:
                    want = min(max(value, first), self.next)
                case OffsetKind.TIMESTAMP:
                    later = [o for o, ts, _b in live if ts >= value]
                    want = later[0] if later else self.next
            assert start_offset(log, OffsetSpec(kind, value)) == want

    @rule()
    def flush(self) -> None:
        fsync_fds(self.file.flush())
        self.flushed = self.next
        segs = self._segments()
        self.flushed_at = (segs[-1].name, segs[-1].stat().st_size) if segs else ("", 0)

    def _segments(self) -> list[Path]:
        return sorted(p for p in self.dir.iterdir() if p.name.endswith(".seg"))

    @precondition(lambda self: self.chunks)
    @rule(write_out=st.booleans(), cut=st.integers(0, 40))
    def crash(self, write_out: bool, cut: int) -> None:
        # Buffered appends are lost; what was written past the last flush may be cut short.
        if write_out:
            self.file.write_out()
        self.file.abandon()
        segs = self._segments()
        if segs and cut:
            last = segs[-1]
            size = last.stat().st_size
            name, durable = self.flushed_at
            keep = durable if last.name == name else 0
            os.truncate(last, max(keep, size - cut))
        self.file = FileStreamLog(self.dir, SPEC)
        survived = self.file.index.next_offset
        assert survived >= self.flushed  # nothing flushed is lost
        assert any(o == survived for o, _t, _b in self.chunks) or survived == self.next
        self.chunks = [c for c in self.chunks if c[0] < survived]  # whole chunks only
        self.next = survived
        # the memory log has no crash: rebuild it with what the file log kept
        self.mem = MemoryStreamLog(SPEC)
        for _o, ts, bodies in self.chunks:
            self.mem.append([_msg(b) for b in bodies], ts)

    @invariant()
    def agree(self) -> None:
        for log in self.logs():
            index = log.index
            assert index.next_offset == self.next
            assert index.count == self.next - index.first_offset
            assert index.count == len(self.kept(log))


TestStreamLog = StreamLogMachine.TestCase
