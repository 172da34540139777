"""Descriptors the commit path holds stay bounded (defects issue, item 3).

A `flush()` hands out descriptors that only the fsync of its point closes; everything else
(`write_out()`, segment rolls, failed flushes and their retries) must take none or a bounded
number, whatever the disk's speed. Counts are the process's (`/proc/self/fd`) relative to the
start of each test.
"""

from __future__ import annotations

import errno
import os
from pathlib import Path

import pytest

from ringmq.core.message import Message, SeqId
from ringmq.storage import journal
from ringmq.storage.appendlog import AppendLog
from ringmq.storage.dedup import DedupLog
from ringmq.storage.journal import MAX_UNSYNCED_SEGMENTS, Journal, fsync_fds
from ringmq.storage.records import frame
from ringmq.storage.store import FileStore, SyncPoint

pytestmark = pytest.mark.skipif(not os.path.isdir("/proc/self/fd"), reason="needs /proc")

JOURNAL_BOUND = MAX_UNSYNCED_SEGMENTS + 1  # closed segments waiting + the current one
POINT_BOUND = MAX_UNSYNCED_SEGMENTS + 2  # what one flush() hands out: + a dup and the dir


def open_fds(where: Path) -> int:
    """Descriptors of this process open on `where` or on a file under it: only the store's
    own (a thread of an earlier test in the same process may open or close others meanwhile)."""
    root = str(where)
    n = 0
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:  # closed since the listing (the listing's own descriptor among them)
            continue
        n += target == root or target.startswith(root + "/")
    return n


def emfile(*_args: object) -> int:
    raise OSError(errno.EMFILE, os.strerror(errno.EMFILE))


def payloads(directory: Path) -> list[bytes]:
    j = Journal(directory)
    got = [bytes(rec.payload) for _, rec in j.replay()]
    j.abandon()
    return got


def msg(body: bytes) -> Message:
    return Message("ex", "rk", b"\x80\x00\x02", body, persistent=True)


# -- Journal -----------------------------------------------------------------------------------


def test_write_out_and_rolls_without_any_fsync_hold_a_bounded_number(tmp_path: Path) -> None:
    # fsync never called: closed segments wait for a flush, at most MAX_UNSYNCED_SEGMENTS of
    # them; past that the current segment grows instead
    base = open_fds(tmp_path)
    j = Journal(tmp_path, segment_bytes=1024)
    written = []
    peak = 0
    for i in range(4000):
        rec = b"r%06d" % i + b"." * 90
        j.append(1, rec)
        written.append(rec)
        if i % 7 == 0:
            j.write_out()
            peak = max(peak, open_fds(tmp_path) - base)
    assert peak <= JOURNAL_BOUND
    assert len(j.segments) == MAX_UNSYNCED_SEGMENTS + 1
    assert j.current_bytes > 100 * 1024  # ~400 KiB of records went on in the last segment
    fds = j.flush()  # one flush hands over every closed segment's descriptor
    assert len(fds) <= POINT_BOUND
    fsync_fds(fds)
    assert open_fds(tmp_path) - base == 1  # the current segment's own descriptor
    j.append(1, b"next")  # the backlog is synced: segments roll again
    assert len(j.segments) == MAX_UNSYNCED_SEGMENTS + 2
    j.abandon()  # a crash after the fsync: everything written out was covered by it
    assert open_fds(tmp_path) == base
    assert payloads(tmp_path) == written


def test_a_slow_fsync_makes_segments_longer_not_descriptors_more_numerous(
    tmp_path: Path,
) -> None:
    # the group commit's shape: one point in flight, fsynced only after many more batches
    # were written out
    base = open_fds(tmp_path)
    j = Journal(tmp_path, segment_bytes=2048)
    in_flight: list[int] | None = None
    written = []
    peak = 0
    for batch in range(1500):
        for k in range(5):
            rec = b"b%05d.%d" % (batch, k) + b"-" * 150
            j.append(1, rec)
            written.append(rec)
        j.write_out()
        if batch % 60 == 0:  # the fsync in flight completes; the next group starts
            if in_flight is not None:
                fsync_fds(in_flight)
            in_flight = j.flush()
        peak = max(peak, open_fds(tmp_path) - base)
    assert peak <= JOURNAL_BOUND + POINT_BOUND
    assert in_flight is not None
    fsync_fds(in_flight)
    j.sync()
    j.abandon()
    assert open_fds(tmp_path) == base
    assert payloads(tmp_path) == written


def test_a_flush_refused_a_descriptor_keeps_its_descriptors_for_the_next(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    base = open_fds(tmp_path)
    j = Journal(tmp_path, segment_bytes=256)
    written = [b"w%03d" % i + b"." * 60 for i in range(20)]  # several closed segments
    for rec in written:
        j.append(1, rec)
    j.write_out()
    held = open_fds(tmp_path)
    monkeypatch.setattr(os, "dup", emfile)
    for _ in range(3):
        with pytest.raises(OSError) as info:
            j.flush()
        assert info.value.errno == errno.EMFILE
        assert open_fds(tmp_path) == held  # nothing leaked, nothing of the closed segments lost
    monkeypatch.undo()
    fds = j.flush()
    assert len(fds) == len(j.segments) + 1  # every segment written, and the directory
    fsync_fds(fds)
    j.abandon()
    assert open_fds(tmp_path) == base
    assert payloads(tmp_path) == written


def test_a_flush_refused_the_directory_takes_no_more_descriptors_on_each_retry(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # at the descriptor limit the segment's dup may get the last free one and the directory's
    # open fail: a retry (every sweep while the alarm is on) must not keep the dup each time
    j = Journal(tmp_path, segment_bytes=1 << 20)
    j.append(1, b"first")
    fsync_fds(j.flush())
    j.roll()  # the directory is dirty again with the next segment
    j.append(1, b"second")
    real_open = os.open

    def open_(path: str | os.PathLike[str], flags: int, *args: int) -> int:
        if Path(path) == tmp_path:
            raise OSError(errno.EMFILE, os.strerror(errno.EMFILE), str(path))
        return real_open(path, flags, *args)

    monkeypatch.setattr(os, "open", open_)
    before = open_fds(tmp_path)
    for _ in range(50):
        with pytest.raises(OSError):
            j.flush()
    assert open_fds(tmp_path) == before  # the closed segment's descriptor still waits, nothing more
    monkeypatch.undo()
    fsync_fds(j.flush())
    j.abandon()
    assert payloads(tmp_path) == [b"first", b"second"]


# -- AppendLog (definitions, dedup) ------------------------------------------------------------


def test_appendlog_records_written_out_are_covered_by_the_next_flush(tmp_path: Path) -> None:
    log = AppendLog(tmp_path / "log")
    base = open_fds(tmp_path)
    log.buf += frame(1, b"one")
    log.write_out()
    assert not log.buf
    assert open_fds(tmp_path) == base  # write_out takes no descriptor
    fds = log.flush()  # the buffer is empty, yet the written record needs an fsync
    assert len(fds) == 1
    assert os.fstat(fds[0]).st_ino == os.stat(tmp_path / "log").st_ino
    fsync_fds(fds)
    assert log.flush() == []  # nothing written since: nothing to fsync
    assert open_fds(tmp_path) == base
    log.close()


def test_appendlog_flush_refused_a_descriptor_hands_one_out_next_time(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    d = DedupLog(tmp_path)
    base = open_fds(tmp_path)
    d.record("s", "a", 1)
    d.write_out()
    monkeypatch.setattr(os, "dup", emfile)
    with pytest.raises(OSError):
        d.flush()
    assert open_fds(tmp_path) == base
    monkeypatch.undo()
    fds = d.flush()
    assert len(fds) == 1
    fsync_fds(fds)
    d.abandon()
    reopened = DedupLog(tmp_path)
    assert {s: list(ids) for s, ids in reopened.recovered().items()} == {"s": ["a"]}
    reopened.close()


# -- FileStore ---------------------------------------------------------------------------------


def _store(path: Path) -> FileStore:
    store = FileStore.open(path, segment_bytes=4096, msg_segment_bytes=8192, embed_below=512)
    store.recover()
    return store


def test_filestore_group_commits_with_a_lagging_fsync_hold_a_bounded_number(
    tmp_path: Path,
) -> None:
    # writes arrive while an fsync is in flight (write_out at every batch's end), rolls in both
    # journals (small and large bodies), acks so that segments die and are deleted
    base = open_fds(tmp_path)
    store = _store(tmp_path / "data")
    in_flight: SyncPoint | None = None
    seq = 0
    peak = 0
    for batch in range(600):
        for _ in range(4):
            seq += 1
            body = b"%06d" % seq * (150 if seq % 3 == 0 else 10)  # 900 B or 60 B
            store.enqueue("q", SeqId(seq), msg(body))
        if seq > 40:  # the 40 newest stay
            store.ack("q", [SeqId(s) for s in range(seq - 43, seq - 39)])
        store.write_out()
        if batch % 25 == 0:
            if in_flight is not None:
                store.fsync(in_flight)
            in_flight = store.flush()
        peak = max(peak, open_fds(tmp_path) - base)
    # per journal (queue records, bodies): its own waiting ones and one point's; + the logs
    assert peak <= 2 * (JOURNAL_BOUND + POINT_BOUND) + 4
    assert in_flight is not None
    store.fsync(in_flight)
    store.sync()
    assert store.durable_position == store.position
    store.abandon()
    assert open_fds(tmp_path) == base
    reopened = FileStore.open(tmp_path / "data")
    state = reopened.recover()
    assert [m.seq for m in state.queues["q"]] == list(range(seq - 39, seq + 1))
    reopened.close()


def test_filestore_flush_refused_a_descriptor_recovers_and_covers_the_writes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = _store(tmp_path / "data")
    base = open_fds(tmp_path)
    for seq in range(1, 60):
        store.enqueue("q", SeqId(seq), msg(b"%04d" % seq * 50))
        store.write_out()
    monkeypatch.setattr(os, "dup", emfile)
    for _ in range(10):  # the sweep's probes while no descriptor is free
        with pytest.raises(OSError) as info:
            store.flush()
        assert info.value.errno == errno.EMFILE
    assert store.durable_position < store.position
    assert open_fds(tmp_path) - base <= 2 * JOURNAL_BOUND
    monkeypatch.undo()  # descriptors are free again: the next flush covers every write
    store.sync()
    assert store.durable_position == store.position
    store.abandon()
    reopened = FileStore.open(tmp_path / "data")
    assert [m.seq for m in reopened.recover().queues["q"]] == list(range(1, 60))
    reopened.close()


def test_filestore_failing_probes_take_no_more_descriptors_each_time(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # the disk is full: the queue journal's write fails while the bodies journal (nothing
    # buffered) hands its descriptor out; each retry must not keep one more
    store = _store(tmp_path / "data")
    store.enqueue("q", SeqId(1), msg(b"L" * 4000))  # a body in the bodies journal
    store.sync()
    before = open_fds(tmp_path)
    store.enqueue("q", SeqId(2), msg(b"small"))

    def full(fd: int, data: bytes | bytearray) -> None:
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(journal, "write_all", full)
    for _ in range(50):  # fifty seconds of the sweep's probes
        with pytest.raises(OSError):
            store.flush()
    assert open_fds(tmp_path) - before <= 2
    monkeypatch.undo()
    store.sync()
    assert store.durable_position == store.position
    assert open_fds(tmp_path) == before
    store.abandon()
    reopened = FileStore.open(tmp_path / "data")
    assert [m.seq for m in reopened.recover().queues["q"]] == [1, 2]
    reopened.close()
