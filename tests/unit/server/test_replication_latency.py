"""Nothing on either side of replication waits for a loop turn or a disk it need not wait for.

* The leader sends records from inside the store's write: when `write_out()` returns, what
  it wrote is already in the followers' sockets (before, a send loop took it on a later turn
  of the loop, and a busy loop's turn was added to every confirm the followers gate).
* The follower's periodic save (an fsync of a second's writes and of `SHARD`) runs off its
  loop: a slow disk does not hold back its acknowledgements (before, it ran on the loop, and
  every confirm of the leader waited for it). And the follower's `run` returns only once such
  a save is done: a promotion then opens the directory and writes `SHARD` itself, and a late
  save must not write over it.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from ringmq.core.message import Message, SeqId
from ringmq.server.options import ReplicationSettings
from ringmq.server.replication_follower import ReplicationFollower
from ringmq.server.replication_leader import ReplicationLeader
from ringmq.storage import journal
from ringmq.storage import replica as replica_module
from ringmq.storage.store import FileStore

SECRET = b"latency"


def _msg(n: int) -> Message:
    return Message("", "q", b"\x80\x00\x02", b"%06d" % n * 100, persistent=True)


class Pair:
    def __init__(self, store: FileStore, leader: ReplicationLeader, follower: ReplicationFollower):
        self.store, self.leader, self.follower = store, leader, follower
        self.seq = 0
        self.task: asyncio.Task[None] | None = None

    def write(self, n: int) -> int:
        for _ in range(n):
            self.seq += 1
            self.store.enqueue("q", SeqId(self.seq), _msg(self.seq))
        self.store.write_out()
        assert self.leader.log is not None
        return self.leader.log.position

    async def acked(self, position: int) -> None:
        # bounded against hanging, not a timing assertion
        async with asyncio.timeout(20):
            while self.leader.acked.get("f1", 0) < position:  # noqa: ASYNC110 - no event to wait on
                await asyncio.sleep(0.005)


@pytest.fixture
async def pair(tmp_path: Path, request: pytest.FixtureRequest) -> AsyncIterator[Pair]:
    store = FileStore.open(tmp_path / "leader")
    leader = ReplicationLeader(store, ReplicationSettings(secret=SECRET, port=0), "127.0.0.1")
    await leader.start()
    settings = ReplicationSettings(secret=SECRET, follow=("127.0.0.1", leader.port))
    save_every_s = getattr(request, "param", 1.0)
    follower = ReplicationFollower(
        tmp_path / "follower", settings, "f1", retry_s=0.05, save_every_s=save_every_s
    )
    task = asyncio.create_task(follower.run())
    p = Pair(store, leader, follower)
    p.task = task
    try:
        await p.acked(p.write(1))  # connected, synced and streaming
        yield p
    finally:
        follower.stop()
        await asyncio.wait_for(task, 20)
        await leader.stop()
        store.close()


async def test_records_are_in_the_socket_when_the_write_returns(pair: Pair) -> None:
    for _ in range(5):
        position = pair.write(20)
        # no await between the write and this check: the loop has not turned
        assert pair.leader.sent_to("f1") == position
        await pair.acked(position)


@pytest.mark.parametrize("pair", [0.0], indirect=True)  # a save after every batch
async def test_a_slow_save_on_the_follower_holds_back_no_acknowledgement(
    pair: Pair, monkeypatch: pytest.MonkeyPatch
) -> None:
    release = threading.Event()
    state = {"in_save": False, "acked_during_save": False}
    real = journal.fsync_fds

    def slow_fsync(fds: list[int]) -> None:
        # the periodic save's fsync: a disk that takes long (bounded: released below, or
        # after 10 s so that a loop it blocks gets going again and the test can fail)
        state["in_save"] = True
        release.wait(10)
        state["in_save"] = False
        real(fds)

    monkeypatch.setattr(replica_module, "fsync_fds", slow_fsync)
    pair.write(5)
    async with asyncio.timeout(20):
        while not state["in_save"] and not release.is_set():  # noqa: ASYNC110 - a thread sets it
            await asyncio.sleep(0.005)
    try:
        # while that save waits for the disk, the follower applies and acknowledges more
        position = pair.write(50)
        await pair.acked(position)
        state["acked_during_save"] = bool(state["in_save"])
    finally:
        release.set()
    assert state["acked_during_save"], "the acknowledgement waited for the save's fsync"


@pytest.mark.parametrize("pair", [0.0], indirect=True)  # a save after every batch
async def test_run_returns_only_once_a_save_off_the_loop_is_done(
    pair: Pair, monkeypatch: pytest.MonkeyPatch
) -> None:
    release = threading.Event()
    state = {"in_save": False}
    real = journal.fsync_fds

    def slow_fsync(fds: list[int]) -> None:
        if threading.current_thread() is not threading.main_thread():
            state["in_save"] = True
            release.wait(10)  # bounded: released below
            state["in_save"] = False
        real(fds)

    monkeypatch.setattr(replica_module, "fsync_fds", slow_fsync)
    pair.write(5)
    try:
        async with asyncio.timeout(20):
            while not state["in_save"]:  # noqa: ASYNC110 - a thread sets it
                await asyncio.sleep(0.005)
        pair.follower.stop()
        assert pair.task is not None
        for _ in range(50):  # turns of the loop, not a clock: `run` must still be waiting
            await asyncio.sleep(0)
        assert not pair.task.done(), "run returned while its save still ran"
    finally:
        release.set()
    async with asyncio.timeout(20):
        await pair.task
