"""The stream confirm rule at the group commit: under `written` a stream publish is confirmed
once its chunk is handed to the OS, with no fsync (a store whose fsync is held shut still
confirms it; the chunk is in the segment file when the confirm goes); under `fsynced` (the
default) only the fsync covering it releases it. Both for the stream protocol's publish and
for an AMQP 0-9-1 publish to a stream queue."""

from __future__ import annotations

import asyncio
import struct
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from ringmq.adapters.handler import HandlerContext, HandlerLimits, Peer, make_login
from ringmq.adapters.stream import StreamHandler
from ringmq.amqp import spec
from ringmq.core.broker import Broker
from ringmq.core.config import BrokerConfig
from ringmq.core.effects import Confirm, Effect
from ringmq.core.streamspec import ConfirmRule
from ringmq.core.throttle import LoginGuard
from ringmq.server.commit import GroupCommit
from ringmq.storage.store import FileStore, SyncPoint
from tests.unit.adapters.amqp091.kit import PERSISTENT, StoreKit, of_type

NOW = 1_700_000_000_000


class CountingStore:
    """The store's fsync of a sync point (`sync_files`: what the group commit runs for each
    group) counted, and held shut until `gate` opens."""

    def __init__(self, store: FileStore) -> None:
        self.store = store
        self.fsyncs = 0
        self.gate = threading.Event()
        real = store.sync_files

        def sync_files(point: SyncPoint) -> None:
            self.fsyncs += 1
            self.gate.wait(timeout=60)
            real(point)

        store.sync_files = sync_files  # type: ignore[method-assign]


async def until(pred: Callable[[], bool], timeout_s: float = 30.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not pred():
        if time.monotonic() > deadline:
            raise AssertionError("condition not reached in time")
        await asyncio.sleep(0.005)


def _frame(key: int, body: bytes) -> bytes:
    return struct.pack(">IHH", len(body) + 4, key, 1) + body


def _str(s: str) -> bytes:
    return struct.pack(">H", len(s)) + s.encode()


def _stream_client(broker: Broker) -> StreamHandler:
    peer = Peer("127.0.0.1", 40001, "127.0.0.1", 5552)
    ctx = HandlerContext(
        broker=broker,
        conn_id=1,
        peer=peer,
        limits=HandlerLimits(1 << 20, 1 << 20, 2047, 0),
        login=make_login(broker, LoginGuard(), peer, "stream"),
    )
    h = StreamHandler(ctx)
    for f in (
        _frame(17, struct.pack(">II", 1, 0)),
        _frame(18, struct.pack(">I", 2)),
        _frame(19, struct.pack(">I", 3) + _str("PLAIN") + struct.pack(">I", 12)
               + b"\0guest\0guest"),
        _frame(20, struct.pack(">II", 1 << 20, 0)),
        _frame(21, struct.pack(">I", 4) + _str("/")),
        _frame(13, struct.pack(">I", 5) + _str("s") + struct.pack(">I", 0)),
        _frame(1, struct.pack(">IB", 6, 1) + _str("") + _str("s")),
    ):  # fmt: skip
        h.receive_data(f, NOW)
    h.data_to_send()
    return h


def _publish(ids: range) -> bytes:
    body = b"\x00\x53\x75\xb0" + struct.pack(">I", 3) + b"abc"
    parts = [b"\x01", struct.pack(">I", len(ids))]
    for i in ids:
        parts += (struct.pack(">QI", i, len(body)), body)
    return _frame(2, b"".join(parts))


def _confirmed_ids(data: bytes) -> list[int]:
    # PublishConfirm frames: [size][key 3][version][publisher][count][ids]
    out: list[int] = []
    pos = 0
    while pos < len(data):
        size, key = struct.unpack_from(">IH", data, pos)
        if key == 3:
            (n,) = struct.unpack_from(">i", data, pos + 9)
            out += struct.unpack_from(f">{n}Q", data, pos + 13)
        pos += 4 + size
    return out


def _segment_bytes(data_dir: Path) -> bytes:
    return b"".join(p.read_bytes() for p in sorted((data_dir / "streams").rglob("*.seg")))


@pytest.mark.parametrize("rule", [ConfirmRule.WRITTEN, ConfirmRule.FSYNCED])
async def test_a_stream_protocol_confirm_waits_for_what_its_rule_says(
    tmp_path: Path, rule: ConfirmRule
) -> None:
    store = FileStore.open(tmp_path / "data")
    counting = CountingStore(store)
    broker = Broker(
        BrokerConfig(name_seed=1, delay_persistent_confirms=True, stream_confirm=rule),
        store=store,
        now_ms=NOW,
    )
    h = _stream_client(broker)
    sent = bytearray()

    def release(fn: Callable[[], list[Effect]]) -> None:
        for e in fn():
            if e.conn_id == 1:
                h.apply(e)
        sent.extend(h.data_to_send())

    commit = GroupCommit(broker, store, asyncio.get_running_loop(), release)
    body_marker = b"abc"
    try:
        for e in h.receive_data(_publish(range(1, 11)), NOW):
            h.apply(e)
        commit.after_batch()
        sent.extend(h.data_to_send())
        if rule is ConfirmRule.WRITTEN:
            # confirmed while no fsync can complete: none is needed, none is started
            await until(lambda: _confirmed_ids(bytes(sent)) == list(range(1, 11)))
            assert counting.fsyncs == 0
            assert _segment_bytes(tmp_path / "data").count(body_marker) == 10  # in the file
        else:
            await until(lambda: counting.fsyncs == 1)  # the group's fsync runs, held shut
            await asyncio.sleep(0.05)
            assert _confirmed_ids(bytes(sent)) == []
            counting.gate.set()
            await until(lambda: _confirmed_ids(bytes(sent)) == list(range(1, 11)))
    finally:
        counting.gate.set()
        await commit.close()
        broker.close()


@pytest.mark.parametrize("rule", [ConfirmRule.WRITTEN, ConfirmRule.FSYNCED])
def test_an_amqp091_publish_to_a_stream_is_held_by_its_rule(
    tmp_path: Path, rule: ConfirmRule
) -> None:
    store = FileStore.open(tmp_path / "data")
    kit = StoreKit(
        store, BrokerConfig(name_seed=7, delay_persistent_confirms=True, stream_confirm=rule)
    )
    pub = kit.open()
    kit.call(pub, spec.ConfirmSelect())
    kit.declare(pub, "s", durable=True, arguments={"x-queue-type": "stream"})
    kit.declare(pub, "d", durable=True)
    effects = kit.publish(pub, "s", b"one")
    assert of_type(effects, spec.BasicAck) == []  # held either way
    held, unwritten = kit.broker.drain_unconfirmed(), kit.broker.drain_unwritten()
    if rule is ConfirmRule.WRITTEN:
        assert (held, [seq for _, _, seq in unwritten]) == ([], [1])
    else:
        assert ([seq for _, _, seq in held], unwritten) == ([1], [])
    # a persistent message to a classic durable queue waits for the fsync under either rule
    kit.publish(pub, "d", b"two", props=PERSISTENT)
    assert [seq for _, _, seq in kit.broker.drain_unconfirmed()] == [2]
    assert kit.broker.drain_unwritten() == []
    acks = [e for e in kit.broker.confirm_stored(pub[0], pub[1], [1, 2]) if isinstance(e, Confirm)]
    assert [(a.seq, a.multiple) for a in acks] == [(2, True)]
    kit.broker.close()
