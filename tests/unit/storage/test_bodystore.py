from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ringmq.core.message import Message, SeqId
from ringmq.storage.bodystore import DiskBodyStore


def full_message(i: int, size: int = 50) -> Message:
    return Message(
        "amq.direct",
        f"rk.{i}",
        b"\xa0\x00props",
        bytes([i % 256]) * size,
        headers={"x-key": f"k{i}", "n": i, "nested": {"ok": True}},
        priority=i % 10,
        expiration_ms=1000 + i,
        persistent=bool(i % 2),
        message_id=f"m-{i}",
        timestamp_ms=1_700_000_000_000 + i,
        store_ref=i * 3,
    )


def fields(m: Message) -> tuple[object, ...]:
    return (
        m.exchange,
        m.routing_key,
        m.properties_bin,
        m.body,
        m.headers,
        m.priority,
        m.expiration_ms,
        m.persistent,
        m.message_id,
        m.timestamp_ms,
        m.store_ref,
    )


def test_round_trip_keeps_every_field(tmp_path: Path) -> None:
    bs = DiskBodyStore(tmp_path / "spill")
    originals = {i: full_message(i) for i in range(20)}
    for i, m in originals.items():
        bs.page_out("q", SeqId(i), m)
    assert len(bs) == 20
    assert fields(bs.peek("q", SeqId(3))) == fields(originals[3])
    assert len(bs) == 20  # peek keeps it
    for i in (5, 0, 19, 3):
        assert fields(bs.page_in("q", SeqId(i))) == fields(originals[i])
    with pytest.raises(KeyError):
        bs.page_in("q", SeqId(5))
    bs.discard("q", SeqId(7))
    bs.discard("q", SeqId(7))  # idempotent
    assert ("q", 7) not in bs
    assert len(bs) == 15
    assert bs.discard_queue("q") == 15
    assert len(bs) == 0


def test_queues_are_separate_namespaces(tmp_path: Path) -> None:
    bs = DiskBodyStore(tmp_path / "spill")
    bs.page_out("a", SeqId(1), full_message(1))
    bs.page_out("b", SeqId(1), full_message(2))
    assert bs.page_in("b", SeqId(1)).routing_key == "rk.2"
    assert bs.page_in("a", SeqId(1)).routing_key == "rk.1"


def test_space_is_reclaimed_and_directory_wiped(tmp_path: Path) -> None:
    bs = DiskBodyStore(tmp_path / "spill", segment_bytes=8192, reclaim_every=10**9)
    for i in range(100):
        bs.page_out("q", SeqId(i), full_message(i, size=1000))
    assert bs.files() >= 10
    for i in range(100):
        if i % 10:
            bs.page_in("q", SeqId(i))
    bs.reclaim()
    bs.reclaim()  # compacted sources go once the copies exist
    assert bs.disk_bytes() < 3 * 8192
    assert [bs.page_in("q", SeqId(i)).body for i in range(0, 100, 10)] == [
        bytes([i]) * 1000 for i in range(0, 100, 10)
    ]
    again = DiskBodyStore(tmp_path / "spill")
    assert len(again) == 0
    assert again.files() == 0


def test_drives_the_queue_engine_flow_to_disk(tmp_path: Path) -> None:
    """The engine's BodyStore port, with a Qpid flow_to_disk queue paging past 3 messages."""
    queue_mod = pytest.importorskip("ringmq.core.queue")
    settings_mod = pytest.importorskip("ringmq.core.settings")
    settings = settings_mod.resolve_queue_settings(
        "ftd", {"qpid.max_count": 3, "qpid.policy_type": "flow_to_disk"}
    )
    bs = DiskBodyStore(tmp_path / "spill")
    q = queue_mod.Queue("ftd", settings, body_store=bs)
    for i in range(10):
        q.publish(Message("", "ftd", b"\x00\x00", f"m{i}".encode()), now_ms=0)
    assert len(bs) > 0  # bodies went to disk
    got = []
    while (d := q.fetch(now_ms=0, ack_required=False)) is not None:
        got.append(d.message.body)
    assert got == [f"m{i}".encode() for i in range(10)]
    assert len(bs) == 0


@settings(max_examples=30)
@given(
    ops=st.lists(
        st.tuples(st.sampled_from(["publish", "fetch", "ack", "requeue"]), st.integers(0, 5)),
        max_size=40,
    )
)
def test_engine_paging_to_disk_matches_paging_in_memory(
    tmp_path_factory: pytest.TempPathFactory, ops: list[tuple[str, int]]
) -> None:
    """Same engine, same operations: disk-backed paging delivers exactly what memory does."""
    queue_mod = pytest.importorskip("ringmq.core.queue")
    settings_mod = pytest.importorskip("ringmq.core.settings")
    cfg = settings_mod.resolve_queue_settings(
        "p", {"qpid.max_count": 2, "qpid.policy_type": "flow_to_disk"}
    )
    disk = DiskBodyStore(tmp_path_factory.mktemp("spill"), reclaim_every=7)
    real = queue_mod.Queue("p", cfg, body_store=disk)
    model = queue_mod.Queue("p", cfg, body_store=queue_mod.MemoryBodyStore())
    unacked: list[int] = []
    n = 0
    for op, arg in ops:
        if op == "publish":
            for q in (real, model):
                q.publish(full_message(n), now_ms=0)
            n += 1
        elif op == "fetch":
            a = real.fetch(now_ms=0, ack_required=True)
            b = model.fetch(now_ms=0, ack_required=True)
            assert (a is None) == (b is None)
            if a is not None and b is not None:
                assert (a.seq, a.redelivered) == (b.seq, b.redelivered)
                assert fields(a.message) == fields(b.message)
                unacked.append(a.seq)
        elif unacked:
            seq = unacked.pop(arg % len(unacked))
            for q in (real, model):
                if op == "ack":
                    q.ack([seq])
                else:
                    q.requeue([seq], now_ms=0)
    rest_real = []
    rest_model = []
    while (a := real.fetch(now_ms=0, ack_required=False)) is not None:
        rest_real.append((a.seq, fields(a.message)))
    while (b := model.fetch(now_ms=0, ack_required=False)) is not None:
        rest_model.append((b.seq, fields(b.message)))
    assert rest_real == rest_model
    assert len(disk) == 0
    if n > 2:  # more messages than the limit were held at once at some point
        assert disk.bytes_out > 0 or real.counters.paged == 0
