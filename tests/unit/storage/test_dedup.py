"""The store's de-duplication log: records, discards, torn tails, compaction, the store port."""

from __future__ import annotations

import logging
import os
from pathlib import Path

import pytest

from ringmq.core.message import SeqId
from ringmq.storage.dedup import DedupLog
from ringmq.storage.store import FileStore, MemoryStore


def _window(log: DedupLog) -> dict[str, list[tuple[str, int]]]:
    return {scope: list(ids.items()) for scope, ids in log.recovered().items()}


def test_record_discard_reopen(tmp_path: Path) -> None:
    d = DedupLog(tmp_path)
    d.record("queue\x1f/\x1fq", "a", 1)
    d.record("queue\x1f/\x1fq", "b", 2)
    d.record("exchange\x1f/\x1fx", "a", 3)
    d.discard("queue\x1f/\x1fq", "a")
    d.record("queue\x1f/\x1fq", "a", 4)  # accepted again: now the newest
    d.close()
    assert _window(DedupLog(tmp_path)) == {
        "queue\x1f/\x1fq": [("b", 2), ("a", 4)],
        "exchange\x1f/\x1fx": [("a", 3)],
    }


def test_unflushed_records_are_lost_flushed_ones_kept(tmp_path: Path) -> None:
    d = DedupLog(tmp_path)
    d.record("s", "kept", 1)
    for fd in d.flush():
        os.close(fd)
    d.record("s", "lost", 2)
    d.abandon()  # a crash: the buffer never reached the OS
    assert _window(DedupLog(tmp_path)) == {"s": [("kept", 1)]}


def test_torn_tail_is_cut(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    d = DedupLog(tmp_path)
    d.record("s", "one", 1)
    d.record("s", "two", 2)
    d.close()
    path = tmp_path / "log"
    os.truncate(path, path.stat().st_size - 1)
    with caplog.at_level(logging.WARNING):
        d2 = DedupLog(tmp_path)
    assert _window(d2) == {"s": [("one", 1)]}
    assert "truncating" in caplog.text
    d2.record("s", "three", 3)  # appends after the cut, readable next time
    d2.close()
    assert _window(DedupLog(tmp_path)) == {"s": [("one", 1), ("three", 3)]}


def test_rewrite_keeps_only_the_live_window(tmp_path: Path) -> None:
    d = DedupLog(tmp_path)
    for i in range(100):
        d.record("s", f"id{i}", i)
    for fd in d.flush():
        os.close(fd)
    before = (tmp_path / "log").stat().st_size
    d.record("s", "buffered", 100)  # dropped: the window given to rewrite is the whole truth
    d.rewrite({"s": [("id99", 99)], "t": [("x", 5)]})
    assert (tmp_path / "log").stat().st_size < before
    d.record("t", "y", 6)
    d.close()
    assert _window(DedupLog(tmp_path)) == {"s": [("id99", 99)], "t": [("x", 5), ("y", 6)]}


@pytest.mark.parametrize("kind", ["file", "memory"])
def test_store_port_recovers_the_window(tmp_path: Path, kind: str) -> None:
    store = FileStore.open(tmp_path) if kind == "file" else MemoryStore()
    store.recover()
    store.dedup_record("s", "a", 1)
    store.dedup_record("s", "b", 2)
    store.dedup_discard("s", "a")
    store.ack("q", [SeqId(1)])  # unrelated journal traffic
    store.sync()
    if isinstance(store, FileStore):
        store.abandon()  # kill -9 after the fsync
        store = FileStore.open(tmp_path)
    state = store.recover()
    assert {s: list(ids.items()) for s, ids in state.dedup.items()} == {"s": [("b", 2)]}
    store.close()
