"""Several group fsyncs in flight (`server/commit.py`, `MAX_FSYNCS`), on a real event loop.

A batch that arrives while an fsync runs starts its own fsync at once instead of waiting for
that one (which covers none of its writes). The rule that stays: a confirm goes only after the
fsync of the point that covers its write *and* every earlier group's; a group whose fsync is
done waits for an older one still running, and an older group's failed fsync nacks it too.
Every fsync here is held (`HeldFsyncs`: the store's `fsync_fds`, one gate per call) and
opened by the test in the order it chooses; the publishes are the stream protocol's, under the
default `fsynced` rule.
"""

from __future__ import annotations

import asyncio
import errno
import os
import struct
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from ringmq.core.broker import Broker
from ringmq.core.config import BrokerConfig
from ringmq.core.effects import Effect
from ringmq.server.commit import MAX_FSYNCS, GroupCommit
from ringmq.storage import filestore, journal
from ringmq.storage.store import FileStore
from tests.unit.server.test_stream_confirm_rule import (
    NOW,
    _confirmed_ids,
    _publish,
    _stream_client,
    until,
)


@dataclass(slots=True)
class _Call:
    gate: threading.Event = field(default_factory=threading.Event)
    fail: bool = False


class HeldFsyncs:
    """Every `fsync_fds` of the store waits for its own gate; `fail` makes it raise EIO."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.calls: list[_Call] = []
        self.released = False
        """Set by `open_all`: later calls are not held (the store's close)."""
        self._lock = threading.Lock()
        real = journal.fsync_fds

        def fsync_fds(fds: list[int]) -> None:
            call = _Call()
            with self._lock:
                if self.released:
                    call.gate.set()
                self.calls.append(call)
            call.gate.wait(timeout=60)
            if call.fail:
                for fd in fds:
                    os.close(fd)
                raise OSError(errno.EIO, "Input/output error")
            real(fds)

        monkeypatch.setattr(filestore, "fsync_fds", fsync_fds)

    def open(self, n: int, *, fail: bool = False) -> None:
        call = self.calls[n]
        call.fail = fail
        call.gate.set()

    def open_all(self) -> None:
        with self._lock:
            self.released = True
            for call in self.calls:
                call.gate.set()


def _errored_ids(data: bytes) -> list[int]:
    # PublishError frames: [size][key 4][version][publisher][count]([id u64][code u16])*
    out: list[int] = []
    pos = 0
    while pos < len(data):
        size, key = struct.unpack_from(">IH", data, pos)
        if key == 4:
            (n,) = struct.unpack_from(">i", data, pos + 9)
            out += [struct.unpack_from(">Q", data, pos + 13 + 10 * i)[0] for i in range(n)]
        pos += 4 + size
    return out


class _Publisher:
    """A stream-protocol publisher on a file-store broker with its group commit."""

    def __init__(self, data: Path) -> None:
        self.store = FileStore.open(data)  # opened before the fsyncs are held
        self.broker = Broker(
            BrokerConfig(name_seed=1, delay_persistent_confirms=True),
            store=self.store,
            now_ms=NOW,
        )
        self.h = _stream_client(self.broker)
        self.sent = bytearray()
        self.commit = GroupCommit(
            self.broker, self.store, asyncio.get_running_loop(), self._release
        )

    def _release(self, fn: Callable[[], list[Effect]]) -> None:
        for e in fn():
            if e.conn_id == 1:
                self.h.apply(e)
        self.sent.extend(self.h.data_to_send())

    def batch(self, ids: range) -> None:
        """One read of one publish frame, and the end of its batch."""
        for e in self.h.receive_data(_publish(ids), NOW):
            self.h.apply(e)
        self.commit.after_batch()
        self.sent.extend(self.h.data_to_send())

    @property
    def confirmed(self) -> list[int]:
        return _confirmed_ids(bytes(self.sent))

    @property
    def errored(self) -> list[int]:
        return _errored_ids(bytes(self.sent))

    async def close(self) -> None:
        await self.commit.close()
        self.broker.close()


async def test_a_later_group_fsyncs_at_once_but_confirms_only_after_the_earlier(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    p = _Publisher(tmp_path / "data")
    held = HeldFsyncs(monkeypatch)
    try:
        p.batch(range(1, 11))
        await until(lambda: len(held.calls) == 1)
        p.batch(range(11, 21))  # while the first fsync runs: its own fsync starts now
        await until(lambda: len(held.calls) == 2, timeout_s=10)
        held.open(1)  # the second group's fsync is done, the first's is not
        await asyncio.sleep(0.05)
        assert p.confirmed == []  # neither: the second waits for the first
        assert p.store.durable_position == 0
        held.open(0)
        await until(lambda: p.confirmed == list(range(1, 21)))  # both, in order
        assert p.commit.syncs == 2
    finally:
        held.open_all()
        await p.close()


async def test_fsyncs_in_flight_are_bounded_and_the_rest_join_one_group(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    p = _Publisher(tmp_path / "data")
    held = HeldFsyncs(monkeypatch)
    try:
        for n in range(MAX_FSYNCS + 3):
            p.batch(range(1 + 10 * n, 11 + 10 * n))
            await asyncio.sleep(0.01)
        await until(lambda: len(held.calls) == MAX_FSYNCS)
        await asyncio.sleep(0.05)
        assert len(held.calls) == MAX_FSYNCS  # the last three batches wait together
        assert p.confirmed == []
        held.open(0)
        await until(lambda: len(held.calls) == MAX_FSYNCS + 1)  # the waiting ones' group
        assert p.confirmed == list(range(1, 11))
        everything = list(range(1, 10 * (MAX_FSYNCS + 3) + 1))

        def all_confirmed() -> bool:
            held.open_all()  # the fsyncs started meanwhile too
            return p.confirmed == everything

        await until(all_confirmed)
    finally:
        held.open_all()
        await p.close()


async def test_an_earlier_failed_fsync_nacks_a_later_group_whose_fsync_succeeded(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    p = _Publisher(tmp_path / "data")
    held = HeldFsyncs(monkeypatch)
    try:
        p.batch(range(1, 11))
        await until(lambda: len(held.calls) == 1)
        p.batch(range(11, 21))
        await until(lambda: len(held.calls) == 2, timeout_s=10)
        held.open(1)  # the later fsync succeeds...
        await asyncio.sleep(0.05)
        held.open(0, fail=True)  # ...the earlier one fails: its pages may be lost
        await until(lambda: sorted(p.errored) == list(range(1, 21)))
        assert p.confirmed == []
        assert p.store.fenced
        assert p.store.durable_position == 0
    finally:
        held.open_all()
        await p.close()
