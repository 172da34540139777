from __future__ import annotations

import errno
import logging
import os
from pathlib import Path

import pytest

from ringmq.storage.journal import Journal, fsync_fds


def _payloads(j: Journal) -> list[bytes]:
    return [bytes(rec.payload) for _, rec in j.replay()]


def test_append_replay_and_rollover(tmp_path: Path) -> None:
    j = Journal(tmp_path, segment_bytes=100)
    for i in range(20):
        j.append(1, f"record-{i:02d}".encode())
    j.close()
    assert len(Journal(tmp_path).segments) > 3
    j2 = Journal(tmp_path, segment_bytes=100)
    assert _payloads(j2) == [f"record-{i:02d}".encode() for i in range(20)]
    # appends after replay go to a fresh segment
    before = j2.segments
    seg, offset = j2.append(1, b"new")
    assert seg > max(before)
    assert offset == 0
    j2.close()


def test_flush_returns_descriptors_to_fsync(tmp_path: Path) -> None:
    j = Journal(tmp_path)
    j.append(1, b"a")
    fds = j.flush()
    assert fds  # segment (+ directory, since a file was created)
    fsync_fds(fds)
    for fd in fds:
        with pytest.raises(OSError):
            os.fstat(fd)
    assert _payloads(Journal(tmp_path)) == [b"a"]
    j.close()


def test_torn_tail_is_truncated_and_logged(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    j = Journal(tmp_path)
    for i in range(5):
        j.append(1, b"x" * 10 + bytes([i]))
    j.close()
    path = j.path(j.segments[-1])
    size = path.stat().st_size
    os.truncate(path, size - 3)
    with caplog.at_level(logging.WARNING):
        j2 = Journal(tmp_path)
        got = _payloads(j2)
    assert got == [b"x" * 10 + bytes([i]) for i in range(4)]
    assert "torn or corrupt tail" in caplog.text
    assert path.stat().st_size == 4 * (9 + 11)
    j2.append(1, b"after")
    j2.close()
    assert _payloads(Journal(tmp_path)) == [*got, b"after"]


def test_corrupt_record_in_middle_segment_truncates_that_segment_only(tmp_path: Path) -> None:
    j = Journal(tmp_path, segment_bytes=40)
    for i in range(6):
        j.append(1, bytes([i]) * 20)
    j.close()
    segs = j.segments
    assert len(segs) == 3
    first = j.path(segs[0])
    data = bytearray(first.read_bytes())
    data[-1] ^= 0xFF  # corrupt the second record of the first segment
    first.write_bytes(bytes(data))
    got = _payloads(Journal(tmp_path))
    assert got == [bytes([i]) * 20 for i in (0, 2, 3, 4, 5)]


def test_zero_filled_tail_is_dropped(tmp_path: Path) -> None:
    j = Journal(tmp_path)
    j.append(2, b"keep")
    j.close()
    path = j.path(j.segments[-1])
    with open(path, "ab") as f:
        f.write(b"\x00" * 64)  # preallocated-but-unwritten blocks after power loss
    assert _payloads(Journal(tmp_path)) == [b"keep"]
    assert path.stat().st_size == 9 + 4


def test_delete_and_read(tmp_path: Path) -> None:
    j = Journal(tmp_path, segment_bytes=30)
    locs = [j.append(1, bytes([i]) * 25) for i in range(3)]
    seg, off = locs[2]
    assert j.read(seg, off + 9, 25) == bytes([2]) * 25  # still buffered
    j.flush()
    assert j.read(locs[0][0], locs[0][1] + 9, 25) == bytes([0]) * 25
    j.delete(locs[0][0])
    assert not j.path(locs[0][0]).exists()
    j.delete(seg)  # deleting the current segment closes it
    j.append(1, b"z")
    j.close()
    assert _payloads(Journal(tmp_path)) == [bytes([1]) * 25, b"z"]


def _open_failure(j: Journal) -> OSError | None:
    return j.open_failure


def test_a_segment_that_cannot_be_created_lets_the_current_one_grow(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    # No inode left (ENOSPC from open(O_CREAT)): appends go on in the full segment, with one
    # WARNING; segments are created again once open() works.
    j = Journal(tmp_path, segment_bytes=100)
    j.append(1, b"first")
    real_open = os.open
    failing = True

    def open_(path: str | os.PathLike[str], flags: int, *args: int) -> int:
        if failing and flags & os.O_CREAT:
            raise OSError(errno.ENOSPC, "No space left on device", str(path))
        return real_open(path, flags, *args)

    monkeypatch.setattr(os, "open", open_)
    caplog.set_level(logging.WARNING, logger="ringmq.storage.journal")
    spots = [j.append(1, f"record-{i:02d}".encode()) for i in range(30)]
    assert {seg for seg, _ in spots} == {1}  # all in the first segment, far past 100 bytes
    failure = _open_failure(j)
    assert failure is not None
    assert failure.errno == errno.ENOSPC
    assert sum("cannot create journal segment" in r.message for r in caplog.records) == 1
    fsync_fds(j.flush())
    failing = False
    j._reopen_at = 0  # retry now rather than after another _REOPEN_STEP bytes
    seg, _ = j.append(1, b"after")
    assert seg == 2
    assert _open_failure(j) is None
    j.close()
    monkeypatch.setattr(os, "open", real_open)
    expected = [b"first", *(f"record-{i:02d}".encode() for i in range(30)), b"after"]
    assert _payloads(Journal(tmp_path, segment_bytes=100)) == expected


def test_an_append_with_no_segment_open_buffers_and_flush_raises_the_open_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    j = Journal(tmp_path, segment_bytes=100)
    j.append(1, b"first")
    j.roll()  # nothing open now
    real_open = os.open

    def open_(path: str | os.PathLike[str], flags: int, *args: int) -> int:
        if flags & os.O_CREAT:
            raise OSError(errno.ENOSPC, "No space left on device", str(path))
        return real_open(path, flags, *args)

    monkeypatch.setattr(os, "open", open_)
    seg, offset = j.append(1, b"second")  # a write failure: buffered at its offset
    assert (seg, offset) == (2, 0)
    failure = j.failure
    assert failure is not None
    assert failure.errno == errno.ENOSPC
    assert j.read(seg, offset, 64).endswith(b"second")  # reads see it meanwhile
    with pytest.raises(OSError) as info:
        j.flush()
    assert info.value.errno == errno.ENOSPC
    monkeypatch.setattr(os, "open", real_open)
    for fd in j.flush():  # the retry creates the segment and writes the record
        os.close(fd)
    assert j.failure is None
    j.append(1, b"third")
    j.close()
    assert _payloads(Journal(tmp_path)) == [b"first", b"second", b"third"]
