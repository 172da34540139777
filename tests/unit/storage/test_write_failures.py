"""Write and fsync failures (ENOSPC, EIO) injected into the store's file writes.

The fault is injected where bytes reach the OS (`journal.write_all`, `journal._datasync`): a
write may land partly and then fail, exactly as a filling disk does.
"""

from __future__ import annotations

import errno
import os
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ringmq.core.message import Message, SeqId
from ringmq.storage import definitions, journal
from ringmq.storage.store import FileStore, RecoveredState


def msg(body: bytes) -> Message:
    return Message("ex", "rk", b"\x80\x00\x02", body, persistent=True)


def bodies(state: RecoveredState, queue: str = "q") -> list[bytes]:
    return [m.message.body for m in state.queues.get(queue, [])]


def failure_of(store: FileStore) -> OSError | None:
    return store.failure


class Disk:
    """Fault switch for the store's writes: `full` fails writes (after `partial` bytes)."""

    def __init__(self) -> None:
        self.full = False
        self.partial = 0
        self.fsync_error: int | None = None
        self.failed_writes = 0

    def write_all(self, fd: int, data: bytes | bytearray) -> None:
        if not self.full:
            real_write_all(fd, data)
            return
        self.failed_writes += 1
        if self.partial:
            os.write(fd, bytes(data[: self.partial]))  # a torn record lands first
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    def datasync(self, fd: int) -> None:
        if self.fsync_error is not None:
            raise OSError(self.fsync_error, os.strerror(self.fsync_error))
        real_datasync(fd)


real_write_all = journal.write_all
real_datasync = journal._datasync


@pytest.fixture
def disk(monkeypatch: pytest.MonkeyPatch) -> Disk:
    d = Disk()
    monkeypatch.setattr(journal, "write_all", d.write_all)
    monkeypatch.setattr(definitions, "write_all", d.write_all)
    monkeypatch.setattr(journal, "_datasync", d.datasync)
    return d


def test_failed_write_is_cut_back_and_retried_at_the_same_offsets(
    tmp_path: Path, disk: Disk
) -> None:
    store = FileStore.open(tmp_path)
    store.recover()
    store.enqueue("q", SeqId(1), msg(b"confirmed"))
    store.sync()
    size_before = sum(p.stat().st_size for p in (tmp_path / "journal").iterdir())
    disk.full, disk.partial = True, 7
    store.enqueue("q", SeqId(2), msg(b"failed"))
    with pytest.raises(OSError) as info:
        store.flush()
    assert info.value.errno == errno.ENOSPC
    assert info.value.filename is not None
    assert "journal" in info.value.filename
    assert store.failure is not None
    assert not store.fenced
    # the torn bytes are gone: the files hold exactly what was written before
    assert sum(p.stat().st_size for p in (tmp_path / "journal").iterdir()) == size_before
    # appends (acks, publishes) while failing only buffer; reads still see them
    store.enqueue("q", SeqId(3), msg(b"x" * 10_000))
    assert [e.message.body for e in store.read_entries("q", [SeqId(2)])] == [b"failed"]
    with pytest.raises(OSError):
        store.flush()
    # the disk recovers: the same records are written where the index expects them
    disk.full = False
    store.sync()
    assert failure_of(store) is None
    assert store.durable_position == store.position
    store.ack("q", [SeqId(3)])
    store.close()
    reopened = FileStore.open(tmp_path)
    assert bodies(reopened.recover()) == [b"confirmed", b"failed"]
    reopened.close()


def test_failed_tail_never_recovered_and_confirmed_kept_after_crash(
    tmp_path: Path, disk: Disk
) -> None:
    store = FileStore.open(tmp_path)
    store.recover()
    for i in range(5):
        store.enqueue("q", SeqId(i), msg(b"ok%d" % i))
    store.sync()
    disk.full, disk.partial = True, 3
    for i in range(5, 9):
        store.enqueue("q", SeqId(i), msg(b"lost%d" % i))
    with pytest.raises(OSError):
        store.flush()
    store.abandon()  # the broker dies while the disk is full
    reopened = FileStore.open(tmp_path)
    state = reopened.recover()
    assert bodies(state) == [b"ok%d" % i for i in range(5)]
    reopened.close()


def test_fsync_failure_fences_the_store(tmp_path: Path, disk: Disk) -> None:
    store = FileStore.open(tmp_path)
    store.recover()
    store.enqueue("q", SeqId(1), msg(b"durable"))
    store.sync()
    store.enqueue("q", SeqId(2), msg(b"unsure"))
    point = store.flush()
    disk.fsync_error = errno.EIO
    with pytest.raises(OSError):
        store.fsync(point)
    assert store.fenced
    assert store.failure is not None
    assert store.durable_position < point.position  # never counted as durable
    disk.fsync_error = None
    # a later fsync must not "confirm" what the failed one lost: nothing is written any more
    store.enqueue("q", SeqId(3), msg(b"after"))
    with pytest.raises(OSError):
        store.flush()
    store.close()  # no recovery terms: the next start replays
    assert not (tmp_path / "CLEAN").exists()
    reopened = FileStore.open(tmp_path)
    state = reopened.recover()
    assert not state.clean
    got = bodies(state)
    assert got[0] == b"durable"
    assert b"after" not in got
    reopened.close()


def test_definition_write_failure_is_retried(tmp_path: Path, disk: Disk) -> None:
    store = FileStore.open(tmp_path)
    store.recover()
    store.put_definition("queue", "/|a", {"durable": True})
    store.sync()
    disk.full, disk.partial = True, 5
    store.put_definition("queue", "/|b", {"durable": True})
    with pytest.raises(OSError) as info:
        store.flush()
    assert info.value.filename is not None
    assert store.failure is not None
    disk.full = False
    store.sync()
    store.close()
    reopened = FileStore.open(tmp_path)
    assert set(reopened.recover().definitions["queue"]) == {"/|a", "/|b"}
    reopened.close()


@settings(max_examples=25, deadline=None)
@given(
    plan=st.lists(
        st.tuples(st.integers(1, 6), st.sampled_from(["ok", "full", "crash"])),
        min_size=1,
        max_size=8,
    ),
    partial=st.integers(0, 40),
)
def test_confirmed_survive_any_failure_pattern(
    tmp_path_factory: pytest.TempPathFactory,
    plan: list[tuple[int, str]],
    partial: int,
) -> None:
    """Rounds of publishes, each flushed on a healthy or full disk, sometimes a crash: every
    message of a round whose flush+fsync succeeded is recovered, in order."""
    path = tmp_path_factory.mktemp("wf")
    d = Disk()
    d.partial = partial
    mp = pytest.MonkeyPatch()
    mp.setattr(journal, "write_all", d.write_all)
    mp.setattr(journal, "_datasync", d.datasync)
    try:
        store = FileStore.open(path)
        store.recover()
        confirmed: list[bytes] = []
        seq = 0
        for n, mode in plan:
            d.full = mode == "full"
            batch = []
            for _ in range(n):
                seq += 1
                body = b"m%d" % seq
                store.enqueue("q", SeqId(seq), msg(body))
                batch.append(body)
            try:
                store.sync()
            except OSError:
                continue
            confirmed += batch  # acked to the publishers
            if mode == "crash":
                store.abandon()
                d.full = False
                store = FileStore.open(path)
                got = bodies(store.recover())
                assert [b for b in got if b in confirmed] == confirmed
        d.full = False
        store.abandon()
        store = FileStore.open(path)
        got = bodies(store.recover())
        assert [b for b in got if b in confirmed] == confirmed
        store.close()
    finally:
        mp.undo()
