"""Committed reads (storage/streamdirs.py): with `hide` on, a stream's readers see a chunk
only once `show` was given a shard-log position at or past the write-out that handed it to
the OS; every read (messages, columns; chunks and stored records alike) and the log's `end` stop
there, and `hidden_after` says when a release is still needed."""

from __future__ import annotations

from pathlib import Path

from ringmq.core.message import Message
from ringmq.core.queue.columns import Columns
from ringmq.core.streamlog import StreamSpec
from ringmq.storage.shardlog import ShardLog
from ringmq.storage.store import FileStore

SPEC = StreamSpec(max_segment_bytes=600, max_bytes=None)


def _msg(i: int) -> Message:
    return Message("", "s", b"", f"m{i}".encode() * 10)


def _store(root: Path) -> FileStore:
    store = FileStore.open(root)
    store.recover()
    return store


def _offsets(store: FileStore, key: str) -> list[int]:
    log = store.open_stream(key, SPEC, "s")
    return [o for o, _ in log.read(0, 1000)]


def test_readers_see_only_what_a_release_covered(tmp_path: Path) -> None:
    store = _store(tmp_path)
    log = store.open_stream("/|s", SPEC, "s")
    log.append([_msg(0), _msg(1)], 1)  # before: committed once hidden reads start
    shard = ShardLog(tmp_path, "s0", epoch=1)
    store.attach_log(shard)
    streams = store.streams
    streams.hide()
    assert log.end == 2
    assert _offsets(store, "/|s") == [0, 1]
    assert not streams.hidden_after(shard.position)

    log.append([_msg(2)], 2)
    assert streams.hidden_after(shard.position)  # appended, not written out yet
    point = store.flush()  # what a group commit takes: its log position covers the append
    assert not streams.hidden_after(point.log_position)
    log.append([_msg(3), _msg(4)], 3)
    store.write_out()
    assert streams.hidden_after(point.log_position)
    for _ in range(40):  # many chunks: segments roll, reads cross them
        log.append([_msg(9)], 4)
    store.write_out()
    assert log.index.next_offset == 45
    assert log.end == 2
    assert _offsets(store, "/|s") == [0, 1]

    assert streams.show(point.log_position)  # the first group released
    assert log.end == 3
    assert _offsets(store, "/|s") == [0, 1, 2]
    cols = Columns()
    log.read_columns(0, 45, cols)
    assert list(cols.seqs) == [0, 1, 2]
    assert not streams.show(point.log_position)  # nothing more

    assert streams.show(shard.position)
    assert log.end == 45
    assert _offsets(store, "/|s") == list(range(45))
    assert not streams.hidden_after(shard.position)
    store.close()


def test_a_stream_opened_while_hidden_starts_committed_and_hide_off_shows_all(
    tmp_path: Path,
) -> None:
    store = _store(tmp_path)
    shard = ShardLog(tmp_path, "s0", epoch=1)
    store.attach_log(shard)
    store.streams.hide()
    log = store.open_stream("/|new", SPEC, "new")
    assert log.end == 0
    log.append([_msg(0)], 1)
    store.write_out()
    assert log.end == 0
    assert _offsets(store, "/|new") == []
    store.streams.hide(False)
    assert log.end == 1
    assert _offsets(store, "/|new") == [0]
    store.close()


def test_a_release_visits_only_the_streams_that_hold_hidden_chunks(tmp_path: Path) -> None:
    store = _store(tmp_path)
    logs = [store.open_stream(f"/|s{i}", SPEC, f"s{i}") for i in range(50)]
    shard = ShardLog(tmp_path, "s0", epoch=1)
    store.attach_log(shard)
    streams = store.streams
    streams.hide()
    assert streams.marked == set()
    logs[7].append([_msg(0)], 1)
    logs[9].append([_msg(0)], 1)
    point = store.flush()
    assert streams.marked == {logs[7], logs[9]}
    logs[9].append([_msg(1)], 2)
    store.write_out()
    assert streams.show(point.log_position)
    assert streams.marked == {logs[9]}  # its second write-out is not covered yet
    assert (logs[7].end, logs[9].end) == (1, 1)
    streams.drop_stream("/|s9")
    assert streams.marked == set()
    assert not streams.hidden_after(point.log_position)
