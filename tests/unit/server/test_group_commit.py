"""`GroupCommit` on a real event loop: writes that arrive while an fsync is in flight.

That is the path that leaked one descriptor per durable publish (defects issue, item 3): the
end-of-batch hand-over took `store.flush()` descriptors that no fsync ever closed. Here the
fsync blocks on an event while batches of confirmed persistent publishes (and a consumer's
acks) keep arriving; the process's descriptors must stay bounded and every publish be confirmed.
"""

from __future__ import annotations

import asyncio
import os
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from ringmq.amqp import spec
from ringmq.core.config import BrokerConfig
from ringmq.core.effects import Effect
from ringmq.server.commit import GroupCommit
from ringmq.storage import journal
from ringmq.storage.journal import MAX_UNSYNCED_SEGMENTS
from ringmq.storage.shardlog import ShardLog
from ringmq.storage.store import FileStore
from tests.unit.adapters.amqp091.kit import PERSISTENT, StoreKit, of_type

pytestmark = pytest.mark.skipif(not os.path.isdir("/proc/self/fd"), reason="needs /proc")

ROUNDS = 3
BATCHES = 150  # per round, all while one fsync is blocked
PER_BATCH = 4


def open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


async def until(pred: Callable[[], bool], timeout_s: float = 30.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not pred():
        if time.monotonic() > deadline:
            raise AssertionError("condition not reached in time")
        await asyncio.sleep(0.005)


def confirmed_tags(effects: list[Effect]) -> set[int]:
    tags: set[int] = set()
    for ack in of_type(effects, spec.BasicAck):
        if ack.multiple:
            tags.update(range(1, ack.delivery_tag + 1))
        else:
            tags.add(ack.delivery_tag)
    return tags


async def test_writes_during_a_blocked_fsync_keep_descriptors_bounded(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    gate = threading.Event()
    gate.set()  # open until the rounds start
    real_datasync = journal._datasync

    def slow_datasync(fd: int) -> None:
        gate.wait(timeout=60)  # the disk is slow: the fsync waits for the test to open the gate
        real_datasync(fd)

    monkeypatch.setattr(journal, "_datasync", slow_datasync)
    store = FileStore.open(tmp_path / "data", segment_bytes=8192)
    kit = StoreKit(store, BrokerConfig(name_seed=7, delay_persistent_confirms=True))
    pub = kit.open()
    kit.call(pub, spec.ConfirmSelect())
    kit.declare(pub, "d", durable=True)
    kit.consume(kit.channel(pub[0], 2), "d", no_ack=True)  # deliveries write acks meanwhile
    released: list[Effect] = []
    commit = GroupCommit(
        kit.broker, store, asyncio.get_running_loop(), lambda fn: released.extend(fn())
    )
    base = open_fds()
    peak = 0
    published = 0
    try:
        for _ in range(ROUNDS):
            gate.clear()
            for _ in range(BATCHES):
                for _ in range(PER_BATCH):
                    kit.publish(pub, "d", b"%08d" % published * 40, props=PERSISTENT)
                    published += 1
                commit.after_batch()
                await asyncio.sleep(0)
                peak = max(peak, open_fds() - base)
            assert commit.in_flight is not None  # the whole round ran during one fsync
            gate.set()
            await until(lambda: commit.in_flight is None and not commit.waiting)
        await until(lambda: confirmed_tags(released) == set(range(1, published + 1)))
    finally:
        gate.set()
        await commit.close()
    # one fsync's point, the closed segments waiting for the next, the current ones, the logs
    assert peak <= 2 * MAX_UNSYNCED_SEGMENTS + 8
    kit.broker.close()


async def test_an_fsync_in_flight_when_a_write_fails_does_not_clear_the_alarm(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Only an fsync started after a failed write (the probe) may say writes work again; the
    one in flight when the write failed covers older writes only. Else the alarm clears, the
    publisher is unblocked and its next publish is refused anyway."""
    gate = threading.Event()
    gate.set()  # open until the first publish
    real_datasync, real_write_all = journal._datasync, journal.write_all

    def slow_datasync(fd: int) -> None:
        gate.wait(timeout=60)
        real_datasync(fd)

    def full_write(fd: int, data: bytes | bytearray) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(journal, "_datasync", slow_datasync)
    store = FileStore.open(tmp_path / "data")
    kit = StoreKit(store, BrokerConfig(name_seed=7, delay_persistent_confirms=True))
    pub = kit.open()
    kit.call(pub, spec.ConfirmSelect())
    kit.declare(pub, "d", durable=True)
    released: list[Effect] = []
    commit = GroupCommit(
        kit.broker, store, asyncio.get_running_loop(), lambda fn: released.extend(fn())
    )
    try:
        gate.clear()
        kit.publish(pub, "d", b"first", props=PERSISTENT)
        commit.after_batch()  # its fsync starts and blocks
        assert commit.in_flight is not None
        monkeypatch.setattr(journal, "write_all", full_write)
        kit.publish(pub, "d", b"second", props=PERSISTENT)
        commit.after_batch()  # the write fails while the first fsync is in flight
        assert commit.failure is not None
        gate.set()
        await until(lambda: commit.in_flight is None)
        await asyncio.sleep(0.01)
        assert commit.failure is not None  # still failing: nothing cleared the alarm
        assert "disk_write" in kit.broker.alarms
        monkeypatch.setattr(journal, "write_all", real_write_all)
        commit.tick()  # the probe
        await until(lambda: commit.failure is None)
        assert "disk_write" not in kit.broker.alarms
    finally:
        gate.set()
        await commit.close()
    kit.broker.close()


class _Gate:
    """A replica gate whose followers acknowledged up to `acked`."""

    def __init__(self) -> None:
        self.acked = 0

    def covers(self, log_position: int) -> bool:
        return self.acked >= log_position


async def test_confirms_wait_for_the_replica_gate(tmp_path: Path) -> None:
    """With a replica gate (`--confirm-replicated`) an fsynced group is parked until the
    followers acknowledged its shard-log position; later groups wait behind it, in order."""
    store = FileStore.open(tmp_path / "data")
    kit = StoreKit(store, BrokerConfig(name_seed=7, delay_persistent_confirms=True))
    store.attach_log(ShardLog(store.directory, "0", 1))
    pub = kit.open()
    kit.call(pub, spec.ConfirmSelect())
    kit.declare(pub, "d", durable=True)
    released: list[Effect] = []
    commit = GroupCommit(
        kit.broker, store, asyncio.get_running_loop(), lambda fn: released.extend(fn())
    )
    gate = _Gate()
    commit.replica_gate = gate
    try:
        kit.publish(pub, "d", b"one", props=PERSISTENT)
        commit.after_batch()
        await until(lambda: commit.in_flight is None and bool(commit._parked))
        first = commit._parked[0][0]
        assert first > 0
        kit.publish(pub, "d", b"two", props=PERSISTENT)
        commit.after_batch()
        await until(lambda: commit.in_flight is None and len(commit._parked) == 2)
        assert confirmed_tags(released) == set()  # both fsynced, neither replicated
        gate.acked = first
        commit.replicated()
        assert confirmed_tags(released) == {1}
        gate.acked = commit._parked[0][0]
        commit.replicated()
        assert confirmed_tags(released) == {1, 2}
    finally:
        await commit.close()
    kit.broker.close()


async def test_a_stream_publish_confirm_waits_for_the_followers_to_have_its_chunk(
    tmp_path: Path,
) -> None:
    """A publish into a stream queue is released only once the followers acknowledged the
    shard-log position that holds its chunk (the segment's APPEND)."""
    store = FileStore.open(tmp_path / "data")
    kit = StoreKit(store, BrokerConfig(name_seed=7, delay_persistent_confirms=True))
    log = ShardLog(store.directory, "0", 1)
    store.attach_log(log)
    pub = kit.open()
    kit.call(pub, spec.ConfirmSelect())
    kit.declare(pub, "s", durable=True, arguments={"x-queue-type": "stream"})
    released: list[Effect] = []
    commit = GroupCommit(
        kit.broker, store, asyncio.get_running_loop(), lambda fn: released.extend(fn())
    )
    gate = _Gate()
    commit.replica_gate = gate
    try:
        kit.publish(pub, "s", b"chunk-body", props=PERSISTENT)
        commit.after_batch()
        await until(lambda: commit.in_flight is None and bool(commit._parked))
        parked_at = commit._parked[0][0]
        ops = log.since(0) or []
        chunk_at = next(
            i + 1
            for i, op in enumerate(ops)
            if op.path.startswith("streams/") and op.path.endswith(".seg") and op.data
        )
        assert b"chunk-body" in ops[chunk_at - 1].data
        assert chunk_at <= parked_at  # the confirm's position covers the chunk
        gate.acked = chunk_at - 1
        commit.replicated()
        assert confirmed_tags(released) == set()
        gate.acked = parked_at
        commit.replicated()
        assert confirmed_tags(released) == {1}
    finally:
        await commit.close()
    kit.broker.close()


async def test_until_durable_waits_for_the_replica_gate_without_more_fsyncs(
    tmp_path: Path,
) -> None:
    """The streams API's reserve and settle answer through `until_durable`: behind the
    followers' acknowledgement too, as a confirm; while it is parked no fsync is repeated."""
    store = FileStore.open(tmp_path / "data")
    kit = StoreKit(store, BrokerConfig(name_seed=7, delay_persistent_confirms=True))
    store.attach_log(ShardLog(store.directory, "0", 1))
    released: list[Effect] = []
    commit = GroupCommit(
        kit.broker, store, asyncio.get_running_loop(), lambda fn: released.extend(fn())
    )
    gate = _Gate()
    commit.replica_gate = gate
    try:
        store.put_definition("lease", "k", {"held": 1})
        waiter = commit.until_durable()
        await until(lambda: commit.in_flight is None and bool(commit._parked))
        syncs = commit.syncs
        await asyncio.sleep(0.05)
        assert not waiter.done()  # fsynced, not acknowledged
        assert commit.syncs == syncs  # and no fsync after fsync meanwhile
        again = commit.until_durable()  # nothing new written: parked behind the same group
        assert not again.done()
        gate.acked = commit._parked[0][0]
        commit.replicated()
        await asyncio.wait_for(asyncio.gather(waiter, again), 10)
    finally:
        await commit.close()
    kit.broker.close()
