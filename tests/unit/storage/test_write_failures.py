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

from ringmq.amqp import spec
from ringmq.amqp.reply_codes import ReplyCode
from ringmq.core.config import BrokerConfig
from ringmq.core.message import Message, SeqId
from ringmq.core.queue.columns import Columns
from ringmq.storage import appendlog, journal, pagefile, paging
from ringmq.storage.records import Entry
from ringmq.storage.store import FileStore, RecoveredState
from tests.unit.adapters.amqp091.kit import PERSISTENT, StoreKit, of_type


def msg(body: bytes) -> Message:
    return Message("ex", "rk", b"\x80\x00\x02", body, persistent=True)


def bodies(state: RecoveredState, queue: str = "q") -> list[bytes]:
    return [m.message.body for m in state.queues.get(queue, [])]


def failure_of(store: FileStore) -> OSError | None:
    return store.failure


def failure_of_pages(health: pagefile.DiskHealth) -> OSError | None:
    return health.failure


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
    monkeypatch.setattr(appendlog, "write_all", d.write_all)
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


# -- the broker's side: nacks and tx.commit ----------------------------------------------------


def test_failed_group_is_nacked_and_later_confirms_stay_exact(tmp_path: Path, disk: Disk) -> None:
    store = FileStore.open(tmp_path / "data")
    kit = StoreKit(store, BrokerConfig(name_seed=7, delay_persistent_confirms=True))
    ch = kit.open()
    kit.call(ch, spec.ConfirmSelect())
    kit.declare(ch, "d", durable=True)
    for body in (b"a", b"b"):
        assert not of_type(kit.publish(ch, "d", body, props=PERSISTENT), spec.BasicAck)
    held = kit.broker.drain_unconfirmed()
    disk.full = True
    with pytest.raises(OSError):
        store.flush()
    nacks = of_type(
        kit.broker.fail_unconfirmed(ch[0], ch[1], [s for _c, _h, s in held]), spec.BasicNack
    )
    assert [(n.delivery_tag, n.multiple) for n in nacks] == [(1, False), (2, False)]
    disk.full = False
    kit.publish(ch, "d", b"c", props=PERSISTENT)
    ((_c, _h, seq),) = kit.broker.drain_unconfirmed()
    store.sync()
    acks = of_type(kit.broker.confirm_stored(ch[0], ch[1], [seq]), spec.BasicAck)
    assert [(a.delivery_tag, a.multiple) for a in acks] == [(3, False)]
    kit.broker.close()


def test_tx_commit_answers_a_channel_error_when_the_write_fails(tmp_path: Path, disk: Disk) -> None:
    store = FileStore.open(tmp_path / "data")
    kit = StoreKit(store)
    ch = kit.open()
    kit.declare(ch, "d", durable=True)
    kit.call(ch, spec.TxSelect())
    kit.publish(ch, "d", b"a", props=PERSISTENT)
    disk.full = True
    err = kit.error(ch, spec.TxCommit())  # the sync fails: no commit-ok
    assert err.code is ReplyCode.PRECONDITION_FAILED
    assert "disk" in err.explanation
    ch2 = kit.channel(ch[0], 2)
    kit.call(ch2, spec.TxSelect())
    kit.publish(ch2, "d", b"b", props=PERSISTENT)
    err = kit.error(ch2, spec.TxCommit())  # refused up front while the store is failing
    assert err.code is ReplyCode.PRECONDITION_FAILED
    assert "nothing was committed" in err.explanation


def test_a_commit_refused_while_the_store_fails_keeps_its_settles(
    tmp_path: Path, disk: Disk
) -> None:
    # The refused commit applies nothing, its buffered ack included: closing the channel
    # returns the message it took, as for any unacked delivery.
    store = FileStore.open(tmp_path / "data")
    kit = StoreKit(store)
    ch = kit.open()
    kit.declare(ch, "d", durable=True)
    kit.publish(ch, "d", b"m", props=PERSISTENT)
    store.sync()
    kit.call(ch, spec.TxSelect())
    (got,) = of_type(kit.call(ch, spec.BasicGet(queue="d")), spec.BasicGetOk)
    kit.call(ch, spec.BasicAck(delivery_tag=got.delivery_tag))
    other = kit.channel(ch[0], 2)
    kit.publish(other, "d", b"pending", props=PERSISTENT)
    disk.full = True
    with pytest.raises(OSError):
        store.flush()
    err = kit.error(ch, spec.TxCommit())
    assert "nothing was committed" in err.explanation
    kit.broker.channel_closed(ch[0], ch[1], kit.now)
    q = kit.broker.vhosts["/"].queues["d"].queue
    assert [m.body for m in q.ready_messages()] == [b"m", b"pending"]


# -- paging ------------------------------------------------------------------------------------


def test_page_writes_failing_keep_messages_in_memory_in_order(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    d = Disk()
    d.partial = 11
    monkeypatch.setattr(pagefile, "write_all", d.write_all)
    health = pagefile.DiskHealth()
    pq = paging.PageQueue(tmp_path / "p", run_bytes=4096, read_bytes=512, health=health)
    entries = [Entry("", SeqId(i), msg(b"%04d" % i * 20)) for i in range(1, 201)]
    pq.push_back(entries[:50])
    d.full = True
    pq.push_back(entries[50:150])
    pq.push_front([Entry("", SeqId(0), msg(b"front"))])
    assert health.failure is not None
    assert health.failure.errno == errno.ENOSPC
    got = [seq for seq, _, _ in pq.pop_front(30)]  # reads stitch files and buffers
    d.full = False
    pq.push_back(entries[150:])
    got += [seq for seq, _, _ in pq.pop_front(10_000)]
    assert got == list(range(201))
    assert failure_of_pages(health) is None  # a later write went through
    assert d.failed_writes > 0


def test_a_browse_of_mapped_pages_survives_failed_writes_after_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A browse maps the page file (`RunFile.view`) and its rows stay views of the mapping
    # until the answer is joined. A write that fails after landing partly is cut back to the
    # run's written length: the mapping covers only that, so it never reaches past the end of
    # the file (which would be SIGBUS, not an assertion). Browses while the disk refuses
    # writes read the file and the buffer stitched. The run records here (1.5 KB bodies, up to
    # 256 KiB a record) go straight to the file (`DIRECT_BYTES`), failing ones included.
    d = Disk()
    d.partial = 11
    monkeypatch.setattr(pagefile, "write_all", d.write_all)
    health = pagefile.DiskHealth()
    pq = paging.PageQueue(tmp_path / "p", run_bytes=4 << 20, health=health)

    def items(lo: int, hi: int) -> list[tuple[SeqId, Message, None]]:
        return [(SeqId(s), Message("", "q", b"", b"%05d" % s * 300), None) for s in range(lo, hi)]

    def browse(after: int | None, limit: int) -> list[tuple[int, bytes]]:
        cols = Columns()
        pq.peek_columns(after, limit, 0, cols)
        return list(zip(cols.seqs, cols.bodies.values(), strict=True))

    pq.push_back_spilled(items(1, 301))
    held = Columns()
    pq.peek_columns(None, 300, 0, held)  # written out, then mapped; rows are views
    d.full = True
    pq.push_back_spilled(items(301, 401))
    assert browse(250, 100) == [(s, b"%05d" % s * 300) for s in range(251, 351)]  # stitched
    assert d.failed_writes > 0
    assert health.failure is not None
    assert list(held.seqs) == list(range(1, 301))
    assert held.bodies.values() == [b"%05d" % s * 300 for s in range(1, 301)]
    d.full = False
    pq.push_back_spilled(items(401, 451))
    assert browse(None, 1000) == [(s, b"%05d" % s * 300) for s in range(1, 451)]
    assert failure_of_pages(health) is None
    assert [seq for seq, _, _ in pq.pop_front(10_000)] == list(range(1, 451))


# -- a segment that cannot be created (EMFILE, ENOSPC, EACCES on open) -------------------------


def test_a_segment_that_cannot_be_created_is_a_write_failure(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # no segment is open before the first append: its creation failing used to raise out of
    # the publish (541 and a traceback); now the records wait, flush() fails, the group is
    # nacked, and the retry creates the segment and writes them at their offsets
    real_open_segment = journal.open_segment
    refusals: list[Path] = []

    def no_descriptor(path: Path, flags: int) -> int:
        refusals.append(path)
        raise OSError(errno.EMFILE, os.strerror(errno.EMFILE))

    store = FileStore.open(tmp_path / "data")
    kit = StoreKit(store, BrokerConfig(name_seed=7, delay_persistent_confirms=True))
    ch = kit.open()
    kit.call(ch, spec.ConfirmSelect())
    kit.declare(ch, "d", durable=True)
    monkeypatch.setattr(journal, "open_segment", no_descriptor)
    for body in (b"a", b"b"):
        assert not of_type(kit.publish(ch, "d", body, props=PERSISTENT), spec.BasicAck)
    assert refusals  # the creation was tried
    failure = failure_of(store)
    assert failure is not None
    assert failure.errno == errno.EMFILE
    held = kit.broker.drain_unconfirmed()
    with pytest.raises(OSError) as info:
        store.flush()
    assert info.value.errno == errno.EMFILE
    nacks = of_type(
        kit.broker.fail_unconfirmed(ch[0], ch[1], [s for _c, _h, s in held]), spec.BasicNack
    )
    assert [(n.delivery_tag, n.multiple) for n in nacks] == [(1, False), (2, False)]
    # descriptors again: the retry creates the segment; later publishes are confirmed
    monkeypatch.setattr(journal, "open_segment", real_open_segment)
    store.sync()
    assert failure_of(store) is None
    kit.publish(ch, "d", b"c", props=PERSISTENT)
    ((_c, _h, seq),) = kit.broker.drain_unconfirmed()
    store.sync()
    acks = of_type(kit.broker.confirm_stored(ch[0], ch[1], [seq]), spec.BasicAck)
    assert [(a.delivery_tag, a.multiple) for a in acks] == [(3, False)]
    kit.broker.close()
    # the buffered records were written where the index said: all three recover
    state = FileStore.open(tmp_path / "data").recover()
    assert [bodies(state, q) for q in state.queues] == [[b"a", b"b", b"c"]]
