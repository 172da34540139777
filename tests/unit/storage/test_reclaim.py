"""Journal reclamation against history: dead segments chained behind a standing backlog.

Acks that straddle two segments make the newer one depend on the older; every start opens a new
segment. Behind a backlog that keeps its segment mostly live, the dead segments used to stay
forever, so the journal (and the replay after a crash) grew with the number of restarts and
with the traffic of other queues, not with what is live. `reclaim.py` copies the backlog forward
once those dead segments outweigh it; these tests check the files stay bounded, and that the
copies never lose or resurrect a message across crashes.
"""

from __future__ import annotations

import os
from pathlib import Path

from ringmq.core.message import Message, SeqId
from ringmq.storage.store import FileStore

BACKLOG = 300


def msg(body: bytes) -> Message:
    return Message("ex", "rk", b"\x80\x00\x02", body, persistent=True)


def backlog_body(i: int) -> bytes:
    return b"backlog-%05d" % i + b"." * 100


def journal_files(directory: Path) -> list[Path]:
    return sorted((directory / "journal").iterdir())


def _fill_backlog(s: FileStore) -> None:
    for i in range(BACKLOG):
        s.enqueue("backlog", SeqId(i), msg(backlog_body(i)))


def _check_backlog(s: FileStore) -> None:
    entries = s.read_entries("backlog", list(range(BACKLOG)))
    assert [e.message.body for e in entries] == [backlog_body(i) for i in range(BACKLOG)]


def test_kill_restart_cycles_behind_a_backlog_keep_the_journal_bounded(tmp_path: Path) -> None:
    # Each cycle: the previous cycle's leftovers of "work" are acked (in this start's segment,
    # so it depends on the previous one), 20 more are published and 15 of them acked, then the
    # process dies (no close). The backlog never moves.
    s = FileStore.open(tmp_path)
    s.recover()
    _fill_backlog(s)
    seq = 0
    sizes = []
    for _ in range(30):
        left = sorted(s.index.locations.get("work", {}))
        if left:
            s.ack("work", [SeqId(x) for x in left])
        batch = [SeqId(seq + i) for i in range(20)]
        seq += 20
        for x in batch:
            s.enqueue("work", x, msg(b"work-%d" % x))
        s.sync()
        s.ack("work", batch[:15])
        s.sync()
        s.abandon()  # kill -9
        s = FileStore.open(tmp_path)
        state = s.recover()
        assert [m.seq for m in state.queues["work"]] == batch[15:]
        assert len(state.queues["backlog"]) == BACKLOG
        files = journal_files(tmp_path)
        sizes.append((len(files), sum(f.stat().st_size for f in files)))
    # before: one more segment per restart (31 files at the end), each kept by the acks of
    # the next; now the backlog is copied forward once the dead segments outweigh it
    assert max(n for n, _ in sizes) <= 4, sizes
    assert max(b for _, b in sizes) < 4 * BACKLOG * 200, sizes
    _check_backlog(s)
    s.abandon()


def test_acks_straddling_segments_behind_a_backlog_do_not_pin_the_journal(
    tmp_path: Path,
) -> None:
    # No restart at all: "work" traffic whose acks lag behind by five messages, so every
    # segment depends on the one before, behind a backlog that stays above the live ratio of
    # its segments (the old copy-forward rule never applied to it) and that a slow consumer
    # acks from its head every fourth group commit (so its oldest segment is never quiet).
    s = FileStore.open(tmp_path, segment_bytes=16 * 1024)
    s.recover()
    _fill_backlog(s)
    seq = 0
    pending: list[SeqId] = []
    consumed = 0
    most = (0, 0)
    for step in range(600):
        for _ in range(5):
            s.enqueue("work", SeqId(seq), msg(b"w" * 100))
            pending.append(SeqId(seq))
            seq += 1
        s.ack("work", pending[:-5])
        pending = pending[-5:]
        if step % 4 == 0:
            s.ack("backlog", [SeqId(consumed)])
            consumed += 1
        s.sync()
        st = s.stats()
        most = (max(most[0], st["segments"]), max(most[1], st["journal_bytes"]))
    # The backlog is ~60 KiB (four segments) and shrinks to half. Before: 37 segments
    # (600 KiB) after these 600 group commits, growing with the traffic; now it stays within
    # about twice the backlog.
    assert most[0] <= 12, most
    assert most[1] < 200 * 1024, most
    s.abandon()
    state = FileStore.open(tmp_path).recover()
    assert [m.message.body for m in state.queues["backlog"]] == [
        backlog_body(i) for i in range(consumed, BACKLOG)
    ]
    assert [m.seq for m in state.queues["work"]] == pending


def _flush_unsynced(s: FileStore) -> None:
    # handed to the OS (survives the process) but not fsynced: the durable position stays
    for fd in s.flush().fds:
        os.close(fd)


OPTIONS = {"segment_bytes": 4 * 1024 * 1024}
BIG = 12_000  # ~3.4 MiB in the first 4 MiB segment: four copy windows


def big_body(i: int) -> bytes:
    return b"%06d" % i + b"." * 250


def _copy_started(tmp_path: Path) -> tuple[FileStore, Path, dict[Path, int]]:
    # A backlog segment, then kill/restart cycles that each ack what the previous one left of
    # "work" (each start's segment depends on the one before, back to the backlog's) until a
    # flush starts copying the backlog forward. Returns the store right after that flush (its
    # copies handed to the OS, not fsynced), the backlog's segment, and the journal's synced
    # file sizes.
    s = FileStore.open(tmp_path, **OPTIONS)
    s.recover()
    for i in range(BIG):
        s.enqueue("backlog", SeqId(i), msg(big_body(i)))
    first = journal_files(tmp_path)[0]
    seq = 0
    for cycle in range(40):
        if cycle:
            s = FileStore.open(tmp_path, **OPTIONS)
            state = s.recover()
            assert len(state.queues["backlog"]) == BIG
        synced = {f: f.stat().st_size for f in journal_files(tmp_path)}
        left = sorted(s.index.locations.get("work", {}))
        if left:
            s.ack("work", [SeqId(x) for x in left])
        for _ in range(3):
            s.enqueue("work", SeqId(seq), msg(bytes(3000)))
            seq += 1
        s.ack("work", [SeqId(seq - 3)])
        _flush_unsynced(s)  # reclamation runs; what it copies is never fsynced
        if s.index.seg_live.get(int(first.stem), 0) < BIG:  # some entries were copied
            return s, first, synced
        s.sync()
        s.abandon()  # kill -9
    raise AssertionError("the dead segments behind the backlog never started a copy")


def test_a_large_copy_goes_by_windows_and_the_original_waits_for_the_fsync(
    tmp_path: Path,
) -> None:
    # Once the dead segments outweigh the backlog it is copied forward, a window (1 MiB) per
    # flush; until an fsync covers every copy the original stays, and a crash at any point
    # loses nothing.
    s, first, _ = _copy_started(tmp_path)
    live = [s.index.seg_live[int(first.stem)]]  # the backlog segment's live entries by flush
    for _ in range(5):
        _flush_unsynced(s)
        live.append(s.index.seg_live.get(int(first.stem), 0))
        assert first.exists(), "the original went before its copies were durable"
    # one window per flush: ~3,600 entries each, then nothing live is left in it
    assert 0 < live[0] < BIG, live
    assert len([x for x in live if x > 0]) >= 2, live
    assert live == sorted(live, reverse=True), live
    assert live[-1] == 0, live
    s.abandon()  # a crash with the copies handed to the OS but not fsynced
    s = FileStore.open(tmp_path, **OPTIONS)
    state = s.recover()
    assert [m.message.body for m in state.queues["backlog"]] == [big_body(i) for i in range(BIG)]
    for _ in range(3):
        s.sync()
    assert not first.exists()  # dead after the restart (the copies won the replay): gone
    assert len(journal_files(tmp_path)) <= 3
    s.close()
    state = FileStore.open(tmp_path, **OPTIONS).recover()
    assert len(state.queues["backlog"]) == BIG


def test_acking_the_rest_mid_copy_keeps_the_original_until_the_copies_are_durable(
    tmp_path: Path,
) -> None:
    # The first window's copies are not fsynced when the consumer acks every entry still in
    # the original: the original is then dead, but must stay until an fsync covers the
    # copies. A power loss (unsynced bytes gone) then brings every message back from it (the
    # acks were not durable either).
    s, first, synced = _copy_started(tmp_path)
    seg = int(first.stem)
    locations = s.index.locations["backlog"]
    rest = [SeqId(q) for q, loc in locations.items() if loc >> 64 == seg]
    assert 0 < len(rest) < BIG  # part of it copied
    s.ack("backlog", rest)
    for _ in range(3):
        _flush_unsynced(s)
        assert first.exists(), "a dead original went before its copies were durable"
    s.abandon()
    for f in journal_files(tmp_path):  # power loss: only what an fsync covered is left
        if f in synced:
            os.truncate(f, synced[f])
        else:
            f.unlink()
    state = FileStore.open(tmp_path, **OPTIONS).recover()
    assert [m.message.body for m in state.queues["backlog"]] == [big_body(i) for i in range(BIG)]
