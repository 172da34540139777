"""Stream segment files across a crash, cases the stream log model found (its crash rule in
tests/model/test_stream_log_machine.py): offsets are never reused."""

from __future__ import annotations

from pathlib import Path

from ringmq.core.message import Message
from ringmq.core.streamlog import StreamSpec
from ringmq.storage.journal import fsync_fds
from ringmq.storage.streamfiles import FileStreamLog

SPEC = StreamSpec(max_segment_bytes=100, max_age_ms=1000)


def _msg() -> Message:
    return Message("", "s", b"", b"x" * 80)


def test_a_stream_whose_segments_all_went_keeps_its_next_offset(tmp_path: Path) -> None:
    log = FileStreamLog(tmp_path, SPEC)
    log.append([_msg()], 0)  # offset 0, written out when the next chunk rolls the segment
    log.append([_msg()], 10)  # offset 1: a second segment, its chunk only buffered
    assert log.enforce(1011) == 1  # retention removes the first segment
    log.abandon()  # a crash: the buffered chunk is lost, its segment file left empty
    log = FileStreamLog(tmp_path, SPEC)
    assert log.index.next_offset == 1  # named by the empty segment file
    fsync_fds(log.flush())
    log.abandon()  # and again: nothing on disk holds an offset but that file's name
    log = FileStreamLog(tmp_path, SPEC)
    try:
        assert log.index.next_offset == 1
        assert log.append([_msg()], 20) == 1  # offset 0 is never given again
    finally:
        log.abandon()
