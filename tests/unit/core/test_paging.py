"""The broker's paging: once switched on every queue pages past its memory bound, which
tightens under pressure; Qpid flow_to_disk bodies go to disk and come back."""

from __future__ import annotations

from pathlib import Path

from ringmq.storage.bodystore import SpillDirectory
from tests.unit.core.corekit import Core


def test_broker_pages_every_queue_and_tightens_under_pressure(tmp_path: Path) -> None:
    kit = Core()
    ch = kit.open()
    kit.declare(ch, "before")
    kit.broker.enable_paging(SpillDirectory(tmp_path / "paging"), 10, 1 << 20)
    kit.declare(ch, "after")
    for name in ("before", "after"):
        for i in range(30):
            kit.publish(ch, name, b"%d" % i)
    vh = kit.broker.vhosts["/"]
    assert [vh.queues[n].queue.counters.paged for n in ("before", "after")] == [20, 20]
    assert kit.broker.memory_held_bytes() == 2 * sum(len(b"%d" % i) for i in range(10))
    assert kit.broker.set_memory_bound(2, 1 << 20) == 16
    assert kit.broker.memory_bound == (2, 1 << 20)
    taken = [kit.get(ch, "after", no_ack=True) for _ in range(31)]
    got = [t.message.body for t in taken if t is not None]
    assert got == [b"%d" % i for i in range(30)]


def test_qpid_flow_to_disk_writes_bodies_to_disk_and_reads_them_back(tmp_path: Path) -> None:
    kit = Core()
    spill = SpillDirectory(tmp_path / "paging")
    kit.broker.enable_paging(spill, 2048, 1 << 20, spill.body_store)
    ch = kit.open()
    kit.declare(ch, "ftd", {"qpid.policy_type": "flow_to_disk", "qpid.max_count": 3})
    for i in range(10):
        kit.publish(ch, "ftd", b"body-%d" % i)
    q = kit.broker.vhosts["/"].queues["ftd"].queue
    assert q.message_count == 10
    assert q.counters.paged == 7
    assert q.counters.memory_bytes == 3 * len(b"body-0")
    body_dirs = [p for p in (tmp_path / "paging").iterdir() if p.name.startswith("b")]
    assert len(body_dirs) == 1
    assert [p for p in body_dirs[0].iterdir() if p.suffix == ".msg"], "spill files exist"
    got = [d.message.body for d in iter(lambda: q.fetch(0, False), None)]
    assert got == [b"body-%d" % i for i in range(10)]
    kit.delete(ch, "ftd")
    assert not [p for p in (tmp_path / "paging").iterdir() if p.name.startswith("b")]
