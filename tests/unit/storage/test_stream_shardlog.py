"""Stream queues' files in the shard log: segment appends, new segments, retention, the
tracking file and a deleted stream are file operations; a `Replica` fed by them (after a bulk
copy of what was there before) holds streams that a promoted `FileStore` recovers exactly as
the leader's directory after a crash, offsets and stored offsets included."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from ringmq.core.message import Message
from ringmq.core.streamlog import StreamSpec
from ringmq.storage.replica import Replica, ShardState
from ringmq.storage.shardlog import FileEntry, FileOp, OpKind, ShardLog, file_index
from ringmq.storage.store import FileStore

SPEC = StreamSpec(max_segment_bytes=600, max_bytes=2400)
"""Small segments and a size limit: segments roll and retention removes the oldest."""


def _msg(i: int) -> Message:
    return Message("", "s", b"", f"m{i}".encode() * 20)


def _read_all(store: FileStore, key: str) -> tuple[int, int, list[tuple[int, bytes]], object]:
    log = store.open_stream(key, SPEC, "s")
    got = [(o, m.body) for o, m in log.read(0, 10_000)]
    return log.index.first_offset, log.index.next_offset, got, log.tracking.snapshot()


def _index(root: Path) -> list[FileEntry]:
    return [e for e in file_index(root) if e.size]


def test_a_replica_fed_by_the_log_holds_the_streams_a_promotion_recovers(tmp_path: Path) -> None:
    leader_dir, copy_dir = tmp_path / "leader", tmp_path / "copy"
    store = FileStore.open(leader_dir)
    store.recover()
    before = store.open_stream("/|before", SPEC, "before")  # written before the log starts
    before.append([_msg(0), _msg(1)], 1)
    before.tracking.store_offset("app", 1)
    store.sync()
    # the bulk copy of what is there when the log starts covers the streams' files
    replica = Replica(copy_dir)
    copied = file_index(leader_dir)
    assert {e.path.split("/")[0] for e in copied} >= {"streams"}
    for entry in copied:
        replica.write_chunk(entry.path, 0, (leader_dir / entry.path).read_bytes())
    log = ShardLog(leader_dir, "s0", epoch=1)
    store.attach_log(log)
    s = store.open_stream("/|s", SPEC, "s")
    gone = store.open_stream("/|gone", SPEC, "gone")
    gone.append([_msg(0)], 1)
    for i in range(120):
        s.append([_msg(i)], 10 + i)
        before.append([_msg(i)], 10 + i)
        if i % 10 == 0:
            s.tracking.store_offset("reader", i)
            s.tracking.set_writer("pub", i)
            s.enforce(10 + i)
            before.enforce(10 + i)
            store.sync()
        elif i % 3 == 0:
            store.write_out()
    gone.delete()  # the stream's queue went (the core deletes through its port)
    store.sync()
    ops = log.since(0) or []
    assert {op.kind for op in ops} >= {
        OpKind.APPEND,
        OpKind.DELETE,
        OpKind.REPLACE,
        OpKind.DELETE_DIR,
    }
    names = {op.path.rsplit("/", 1)[-1] for op in ops if op.path.startswith("streams/")}
    assert {"KEY", "tracking.json"} <= names
    assert any(n.endswith(".seg") for n in names)
    for op in ops:
        replica.apply(op)
    replica.save(ShardState("s0", 1, log.position))
    replica.close()
    assert _index(copy_dir) == _index(leader_dir)
    s.tracking.store_offset("reader", 999)  # never handed to the OS: neither side has it
    store.abandon()  # kill -9 of the leader
    on_leader = FileStore.open(leader_dir)
    on_copy = FileStore.open(copy_dir)  # the promotion
    try:
        on_leader.recover()
        on_copy.recover()
        for key in ("/|s", "/|before"):
            want = _read_all(on_leader, key)
            assert want[0] > 0  # retention removed segments: the copy removed them too
            assert _read_all(on_copy, key) == want
        assert _read_all(on_copy, "/|s")[3] == {"offsets": {"reader": 110}, "writers": {"pub": 110}}
        assert not (copy_dir / "streams" / gone.directory.name).exists()
    finally:
        on_leader.abandon()
        on_copy.abandon()


def test_a_new_segment_is_in_the_log_before_its_first_chunk(tmp_path: Path) -> None:
    # A segment's name holds the next offset when retention removed the others and a crash
    # cut its first chunk (tests/unit/storage/test_streamfiles.py): a copy must have it too.
    store = FileStore.open(tmp_path / "leader")
    store.recover()
    log = ShardLog(tmp_path / "leader", "s0", epoch=1)
    store.attach_log(log)
    s = store.open_stream("/|s", StreamSpec(max_segment_bytes=100, max_age_ms=1000), "s")
    s.append([_msg(0)], 0)
    s.append([_msg(1)], 10)  # rolls: the second segment, its chunk only buffered
    assert s.enforce(1011) == 1
    ops = log.since(0) or []
    seg1 = f"streams/{s.directory.name}/{1:020d}.seg"
    assert FileOp(OpKind.APPEND, seg1, 0, b"") in ops
    store.abandon()
    copy = Replica(tmp_path / "copy")
    for op in ops:
        copy.apply(op)
    copy.close()
    promoted = FileStore.open(tmp_path / "copy")
    try:
        promoted.recover()
        again = promoted.open_stream("/|s", StreamSpec(max_segment_bytes=100), "s")
        assert again.index.next_offset == 1  # offset 0 is never given again
    finally:
        promoted.abandon()


def test_a_stored_offset_is_logged_before_its_rename_and_again_for_a_bulk_sync(
    tmp_path: Path,
) -> None:
    store = FileStore.open(tmp_path)
    store.recover()
    log = ShardLog(tmp_path, "s0", epoch=1)
    store.attach_log(log)
    s = store.open_stream("/|s", SPEC, "s")
    tracking = f"streams/{s.directory.name}/tracking.json"

    def replaces() -> list[dict[str, object]]:
        return [json.loads(op.data) for op in log.since(0) or [] if op.path == tracking]

    s.tracking.store_offset("reader", 5)
    point = store.flush()  # the snapshot goes to the temporary copy, its fsync not yet done
    assert replaces() == [{"offsets": {"reader": 5}, "writers": {}}]
    assert point.log_position == log.position  # a confirm of this point covers it
    s.tracking.store_offset("reader", 7)
    point2 = store.flush()  # the temporary copy still waits: logged all the same
    assert replaces()[-1] == {"offsets": {"reader": 7}, "writers": {}}
    assert not (tmp_path / tracking).exists()  # on disk: nothing yet
    at = log.position
    store.relog_pending()  # a bulk sync copying the files now would miss it
    assert log.position == at + 1
    assert replaces()[-1] == {"offsets": {"reader": 7}, "writers": {}}
    store.fsync(point)
    store.fsync(point2)
    store.sync()  # the newer snapshot's own copy and rename
    assert json.loads((tmp_path / tracking).read_bytes())["offsets"] == {"reader": 7}
    at = log.position
    store.relog_pending()  # the file is level with the log: nothing to add
    assert log.position == at
    store.close()


@pytest.mark.parametrize(
    ("kind", "path"),
    [
        (OpKind.APPEND, "streams/abc"),
        (OpKind.APPEND, "streams/abc/def/x.seg"),
        (OpKind.APPEND, "streams/../KEY"),
        (OpKind.APPEND, "streams/abc/.."),
        (OpKind.APPEND, "journal/abc/x.seg"),
        (OpKind.DELETE_DIR, "streams"),
        (OpKind.DELETE_DIR, "journal/x"),
        (OpKind.DELETE_DIR, "streams/abc/x"),
        (OpKind.DELETE_DIR, "streams/.."),
    ],
)
def test_a_replica_refuses_paths_outside_the_stream_layout(
    tmp_path: Path, kind: OpKind, path: str
) -> None:
    replica = Replica(tmp_path)
    with pytest.raises(ValueError, match="not a replicated"):
        replica.apply(FileOp(kind, path, 0, b"x"))
    replica.close()


def test_the_end_of_a_bulk_sync_removes_streams_the_leader_no_longer_has(tmp_path: Path) -> None:
    replica = Replica(tmp_path)
    replica.apply(FileOp(OpKind.APPEND, "streams/old/00000000000000000000.seg", 0, b"x"))
    replica.apply(FileOp(OpKind.APPEND, "streams/kept/00000000000000000000.seg", 0, b"abc"))
    replica.apply(FileOp(OpKind.APPEND, "streams/kept/00000000000000000009.seg", 0, b"x"))
    replica.finish_sync([FileEntry("streams/kept/00000000000000000000.seg", 2, 0)])
    for fd in replica.flush():
        os.close(fd)
    replica.close()
    assert sorted(
        p.relative_to(tmp_path).as_posix() for p in (tmp_path / "streams").rglob("*")
    ) == [
        "streams/kept",
        "streams/kept/00000000000000000000.seg",
    ]
    assert (tmp_path / "streams/kept/00000000000000000000.seg").read_bytes() == b"ab"
