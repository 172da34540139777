"""The memory governor and monitor with fake readings: watermark, paging pressure, disk limit."""

from __future__ import annotations

import errno
from pathlib import Path
from typing import Any

import pytest

from ringmq.core.effects import Block, Unblock
from ringmq.server.memory import (
    MIN_HEAD_COUNT,
    MemoryGovernor,
    MemoryLimits,
    MemoryMonitor,
    parse_size,
    parse_watermark,
)
from ringmq.storage.bodystore import SpillDirectory
from ringmq.storage.pagefile import DiskHealth
from tests.unit.adapters.amqp091.kit import Kit

MiB = 1024 * 1024


def test_parse_watermark_and_sizes() -> None:
    assert parse_watermark("0.4") == 0.4
    assert parse_watermark("512MiB") == 512 * MiB
    assert parse_watermark("2000000000") == 2_000_000_000
    assert parse_size("50MB") == 50_000_000
    assert parse_size("1GiB") == 1 << 30
    for bad in ("1.5", "abc", "-3", "10XB"):
        with pytest.raises(ValueError, match=r"."):
            parse_watermark(bad)


def test_governor_fraction_and_absolute_watermarks() -> None:
    g = MemoryGovernor(MemoryLimits(high_watermark=0.4), total_ram=1000 * MiB)
    assert g.watermark_bytes == 400 * MiB
    g.set_watermark(100 * MiB)
    assert g.watermark_bytes == 100 * MiB
    with pytest.raises(ValueError, match="fraction"):
        g.set_watermark(1.5)


def test_governor_pages_harder_past_the_paging_ratio_and_alarms_past_the_watermark() -> None:
    lim = MemoryLimits(high_watermark=100 * MiB, head_count=2048, head_bytes=8 * MiB)
    g = MemoryGovernor(lim, total_ram=1 << 40)
    d = g.assess(10 * MiB, None)
    assert d.head_bound == (2048, 8 * MiB)
    assert d.memory_alarm is None
    d = g.assess(60 * MiB, None)
    assert d.head_bound == (256, 1 * MiB)
    assert d.memory_alarm is None
    d = g.assess(100 * MiB, None)
    assert d.memory_alarm is not None
    assert "high watermark 100.0 MiB" in d.memory_alarm
    # hysteresis: stays on just below the watermark, clears under 95% of it
    assert g.assess(97 * MiB, None).memory_alarm is not None
    assert g.assess(90 * MiB, None).memory_alarm is None


def test_governor_minimum_head_and_disk_limit() -> None:
    lim = MemoryLimits(high_watermark=100, head_count=8, disk_free_limit=50_000_000)
    g = MemoryGovernor(lim, total_ram=1 << 40)
    d = g.assess(1000, 49_999_999)
    assert d.head_bound[0] == MIN_HEAD_COUNT
    assert d.disk_alarm is not None
    assert d.disk_alarm.startswith("disk alarm")
    assert g.assess(0, 50_000_000).disk_alarm is None
    assert g.assess(0, None).disk_alarm is None  # unknown: no alarm


class _Readings:
    def __init__(self) -> None:
        self.rss: int | None = 40 * MiB
        self.disk: int | None = 10**12


def _monitor(kit: Kit, limits: MemoryLimits, r: _Readings, emitted: list[Any]) -> MemoryMonitor:
    return MemoryMonitor(
        kit.broker,
        limits,
        Path("."),
        emitted.extend,
        total_ram=1 << 40,
        read_memory=lambda: r.rss,
        read_disk=lambda: r.disk,
    )


def test_monitor_blocks_publishers_and_tightens_heads(tmp_path: Path) -> None:
    kit = Kit()
    kit.broker.enable_paging(SpillDirectory(tmp_path / "paging"), 2048, 8 * MiB)
    pub = kit.open()
    kit.declare(pub, "q")
    for i in range(500):
        kit.publish(pub, "q", b"%d" % i)
    q = kit.broker.vhosts["/"].queues["q"].queue
    assert q.counters.paged == 0
    r = _Readings()
    emitted: list[Any] = []
    limits = MemoryLimits(high_watermark=100 * MiB, head_count=2048, head_bytes=8 * MiB)
    mon = _monitor(kit, limits, r, emitted)
    mon.check()
    assert kit.broker.memory_bound == (2048, 8 * MiB)
    r.rss = 70 * MiB  # past the paging ratio: heads shrink, the excess pages out now
    mon.check()
    assert kit.broker.memory_bound == (256, 1 * MiB)
    assert q.counters.ready == 256
    assert q.counters.paged == 244
    r.rss = 120 * MiB
    mon.check()
    assert emitted == []  # nobody published since: nobody blocked yet (RabbitMQ "blocking")
    assert kit.broker.alarms.keys() == {"memory"}
    blocks = [e for e in kit.publish(pub, "q", b"late") if isinstance(e, Block)]
    assert [b.conn_id for b in blocks] == [pub[0]]
    assert mon.status()["mem_alarm"] is True
    r.rss = 20 * MiB
    mon.check()
    assert emitted == [Unblock(pub[0])]
    assert kit.broker.memory_bound == (2048, 8 * MiB)
    assert mon.status()["mem_peak_rss"] == 120 * MiB


def test_monitor_accounts_bodies_held_when_rss_is_unknown() -> None:
    kit = Kit()
    r = _Readings()
    r.rss = None
    emitted: list[Any] = []
    mon = _monitor(kit, MemoryLimits(high_watermark=10_000), r, emitted)
    ch = kit.open()
    kit.declare(ch, "q")
    mon.check()
    assert kit.broker.alarms == {}
    kit.publish(ch, "q", b"x" * 20_000)
    mon.check()
    assert kit.broker.alarms.keys() == {"memory"}


def test_monitor_disk_alarm_and_runtime_limit_change() -> None:
    kit = Kit()
    r = _Readings()
    r.disk = 10
    emitted: list[Any] = []
    mon = _monitor(kit, MemoryLimits(), r, emitted)
    ch = kit.open()
    kit.declare(ch, "q")
    mon.check()
    assert [e for e in kit.publish(ch, "q") if isinstance(e, Block)] != []
    mon.set_disk_free_limit(0)
    assert emitted == [Unblock(ch[0])]


def test_monitor_raises_the_disk_alarm_while_page_files_cannot_be_written() -> None:
    # The paging directory's DiskHealth (set by a failed page-file write) blocks publishers
    # like a low free-disk reading, with the write error as the reason, until a write succeeds.
    kit = Kit()
    r = _Readings()
    emitted: list[Any] = []
    health = DiskHealth()
    mon = MemoryMonitor(
        kit.broker,
        MemoryLimits(),
        Path("."),
        emitted.extend,
        total_ram=1 << 40,
        read_memory=lambda: r.rss,
        read_disk=lambda: r.disk,
        paging_health=health,
    )
    ch = kit.open()
    kit.declare(ch, "q")
    mon.check()
    assert kit.broker.alarms == {}
    health.failed(OSError(errno.ENOSPC, "No space left on device", "paging/000001.run"))
    mon.check()
    assert "page file write failed" in kit.broker.alarms["disk"]
    assert [e for e in kit.publish(ch, "q") if isinstance(e, Block)] != []
    health.ok()
    mon.check()
    assert kit.broker.alarms == {}
    assert emitted == [Unblock(ch[0])]


def test_monitor_hands_freed_heap_back_once_bodies_left_memory() -> None:
    # glibc keeps the heap that freed bodies leave: after a purge or a drain the monitor
    # trims, once, when RSS stands well above what the last trim left; not while bodies
    # arrive, and not again and again for a working set that trimming cannot shrink.
    kit = Kit()
    pub = kit.open()
    kit.declare(pub, "q")
    r = _Readings()
    trims: list[int | None] = []
    freed = {"to": 0}
    emitted: list[Any] = []

    def trim(pad: int) -> int:
        trims.append(r.rss)
        r.rss = freed["to"] or r.rss
        return 1

    mon = MemoryMonitor(
        kit.broker,
        MemoryLimits(),
        Path("."),
        emitted.extend,
        total_ram=1 << 40,
        read_memory=lambda: r.rss,
        read_disk=lambda: r.disk,
        trim=trim,
    )
    q = kit.broker.vhosts["/"].queues["q"].queue
    for _ in range(40):
        kit.publish(pub, "q", b"x" * MiB)
        r.rss = (r.rss or 0) + MiB
        mon.check()
    assert trims == []  # bodies arrived: nothing to hand back
    q.purge()
    freed["to"] = 41 * MiB
    mon.check()
    assert trims == [80 * MiB]
    assert mon.rss == 41 * MiB
    mon.check()
    assert trims == [80 * MiB]  # nothing left memory since
    # a working set trimming cannot shrink: one trim, then the reference follows RSS up
    for _ in range(8):
        kit.publish(pub, "q", b"x" * MiB)
    r.rss = 70 * MiB
    mon.check()
    q.purge()
    freed["to"] = 0
    mon.check()
    assert trims == [80 * MiB, 70 * MiB]
    for _ in range(4):
        kit.publish(pub, "q", b"x" * MiB)
    mon.check()
    q.purge()
    mon.check()
    assert len(trims) == 2
    assert mon.trims == 2
