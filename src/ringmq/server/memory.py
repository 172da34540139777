"""The memory monitor: memory high watermark, paging pressure and the free-disk limit.

Theory of operation
-------------------
RabbitMQ raises a *memory alarm* when the node uses more than `vm_memory_high_watermark` (a
fraction of RAM, 0.4 in its older releases, or an absolute size) and a *disk alarm* when free
disk space falls under `disk_free_limit` (50 MB); while either is on, connections that publish
are blocked (connection.blocked) and consumers keep running. Below the watermark, past
`paging_ratio` of it, queues page out more aggressively.

`MemoryGovernor` is that decision, pure and synchronous: `assess(used_bytes, disk_free_bytes)`
returns a `Decision` (the per-queue in-memory head bound, the memory alarm reason or None, the
disk alarm reason or None). The memory alarm clears below 95% of the watermark so it does not
flap on every reading.

`MemoryMonitor` is the asyncio side (the only place here that reads the clock or the OS): every
`interval_s` it measures memory cheaply, as the broker's own accounting of body bytes held in
memory plus the declared sizes of publishes still being received (`in_flight`), on top of the
resident size measured at start-up, or the resident size read from
`/proc/self/statm` when that is larger (it counts everything: envelopes, buffers, the
interpreter). Free disk comes from `os.statvfs(data_dir)`. It feeds the governor and applies the
decision to the core `Broker`: `set_memory_bound` when the bound changes, `set_alarm` on
transitions; the Block/Unblock effects go to the server's `emit`. Per-message paths do nothing.

glibc keeps the heap pages that freed bodies leave (a 64 KiB or 1 MiB body is a malloc block,
and its dynamic mmap threshold soon serves such blocks from the heap too), so RSS would stay at
its peak after a queue is purged or drained. The monitor hands them back with `malloc_trim`
when the queues' bodies held in memory fell since the last reading and RSS stands at least
`TRIM_SLACK_BYTES` above what the last trim left (`trim_due`: a trim that frees nothing moves
that reference up, so a large working set is not trimmed on every reading), and on every
reading while the memory alarm is on.

The disk alarm is also on while page files cannot be written (ENOSPC...: `pagefile.DiskHealth`
of the broker's paging directory; the paged messages wait in memory meanwhile); it clears once a
page write succeeds again. Store (journal) write failures raise their own `disk_write` alarm
from the group commit (server/commit.py).

Owned by the loop thread; no locks.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import ctypes.util
import errno
import logging
import os
import re
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

from ringmq.core.effects import Effect
from ringmq.core.queue import DEFAULT_HEAD_BYTES, DEFAULT_HEAD_COUNT
from ringmq.core.throttle import LogLimiter
from ringmq.storage.pagefile import DiskHealth

if TYPE_CHECKING:
    from ringmq.core.broker import Broker
    from ringmq.storage.bodystore import SpillDirectory

__all__ = [
    "DEFAULT_DISK_FREE_LIMIT",
    "DEFAULT_HIGH_WATERMARK",
    "DEFAULT_PAGING_RATIO",
    "Decision",
    "MemoryGovernor",
    "MemoryLimits",
    "MemoryMonitor",
    "parse_size",
    "parse_watermark",
    "read_rss",
    "start_memory_monitor",
    "total_memory",
]

log = logging.getLogger(__name__)

DEFAULT_HIGH_WATERMARK: Final = 0.4
"""Fraction of RAM (RabbitMQ's `vm_memory_high_watermark` before 4.0)."""
DEFAULT_PAGING_RATIO: Final = 0.5
"""Past this fraction of the watermark queues page harder (RabbitMQ's older paging ratio)."""
DEFAULT_DISK_FREE_LIMIT: Final = 50_000_000
"""Bytes of free disk under which publishers are blocked (RabbitMQ's 50 MB)."""
ALARM_LOG_PERIOD_MS: Final = 5000
"""At most one alarm raised/cleared line per this period (the rest are counted)."""
CLEAR_RATIO: Final = 0.95
"""The memory alarm clears once usage is below this fraction of the watermark."""
PRESSURE_DIVISOR: Final = 8
"""Under paging pressure each queue keeps 1/8 of its normal in-memory head."""
TRIM_SLACK_BYTES: Final = 16 * 1024 * 1024
"""RSS this far above what the last `malloc_trim` left is worth trimming once bodies left."""
MIN_HEAD_COUNT: Final = 16
MIN_HEAD_BYTES: Final = 64 * 1024

_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([kmgt]?i?b?)?\s*$", re.IGNORECASE)
_UNITS: Final = {
    "": 1,
    "b": 1,
    "k": 1000,
    "kb": 1000,
    "kib": 1024,
    "ki": 1024,
    "m": 1000**2,
    "mb": 1000**2,
    "mib": 1024**2,
    "mi": 1024**2,
    "g": 1000**3,
    "gb": 1000**3,
    "gib": 1024**3,
    "gi": 1024**3,
    "t": 1000**4,
    "tb": 1000**4,
    "tib": 1024**4,
    "ti": 1024**4,
}


def parse_size(text: str) -> int:
    """Parse `"50MB"`, `"512MiB"`, `"1GB"`, `"1048576"` into bytes (RabbitMQ's units: MB is
    10^6, MiB is 2^20). Raises ValueError."""
    m = _SIZE.match(text)
    if m is None:
        raise ValueError(f"not a size: {text!r}")
    unit = (m.group(2) or "").lower()
    if unit not in _UNITS:
        raise ValueError(f"unknown size unit in {text!r}")
    return int(float(m.group(1)) * _UNITS[unit])


def parse_watermark(text: str) -> float | int:
    """A watermark as a fraction of RAM (`"0.4"`, below 1) or an absolute size (`"512MiB"`,
    `"2000000000"`). Raises ValueError."""
    text = text.strip()
    try:
        value = float(text)
    except ValueError:
        return parse_size(text)
    if 0 < value < 1:
        return value
    if value >= 1 and value.is_integer():
        return int(value)
    raise ValueError(f"watermark must be a fraction in (0, 1) or a size, not {text!r}")


@dataclass(frozen=True, slots=True)
class MemoryLimits:
    """Memory and disk settings of a server.

    Attributes:
        high_watermark: a float in (0, 1) is a fraction of RAM, an int an absolute byte size.
        paging_ratio: fraction of the watermark past which queues page harder.
        disk_free_limit: free bytes under which publishers are blocked (0 disables).
        head_count / head_bytes: each queue's in-memory head when there is no pressure.
        paging: page queues beyond their head to `<data-dir>/paging` (False keeps everything
            in memory, as before paging existed).
        interval_s: how often the monitor measures.
    """

    high_watermark: float | int = DEFAULT_HIGH_WATERMARK
    paging_ratio: float = DEFAULT_PAGING_RATIO
    disk_free_limit: int = DEFAULT_DISK_FREE_LIMIT
    head_count: int = DEFAULT_HEAD_COUNT
    head_bytes: int = DEFAULT_HEAD_BYTES
    paging: bool = True
    interval_s: float = 0.5


@dataclass(frozen=True, slots=True)
class Decision:
    """What the broker should do for one reading."""

    head_bound: tuple[int, int]
    memory_alarm: str | None
    disk_alarm: str | None


def _mib(n: int) -> str:
    return f"{n / 1024 / 1024:.1f} MiB"


class MemoryGovernor:
    """Pure decision from readings (see the module docstring)."""

    def __init__(self, limits: MemoryLimits, total_ram: int) -> None:
        self.limits = limits
        self.total_ram = total_ram
        self.memory_alarm: str | None = None
        self.disk_alarm: str | None = None

    @property
    def watermark_bytes(self) -> int:
        """The watermark as bytes."""
        wm = self.limits.high_watermark
        if isinstance(wm, float):
            return int(self.total_ram * wm)
        return wm

    def set_watermark(self, value: float | int) -> None:
        """Change the watermark at run time (RabbitMQ `set_vm_memory_high_watermark`)."""
        self.limits = _replace_watermark(self.limits, value)

    def head_bound(self, used: int) -> tuple[int, int]:
        """The per-queue in-memory bound for `used` bytes of memory."""
        lim = self.limits
        if used < self.watermark_bytes * lim.paging_ratio:
            return lim.head_count, lim.head_bytes
        return (
            max(MIN_HEAD_COUNT, lim.head_count // PRESSURE_DIVISOR),
            max(MIN_HEAD_BYTES, lim.head_bytes // PRESSURE_DIVISOR),
        )

    def assess(self, used: int, disk_free: int | None) -> Decision:
        """Decide for one reading; alarms keep their state between readings (hysteresis)."""
        wm = self.watermark_bytes
        if used >= wm:
            self.memory_alarm = f"memory alarm: {_mib(used)} used, high watermark {_mib(wm)}"
        elif used < wm * CLEAR_RATIO:
            self.memory_alarm = None
        limit = self.limits.disk_free_limit
        if disk_free is not None and limit > 0 and disk_free < limit:
            self.disk_alarm = (
                f"disk alarm: {_mib(disk_free)} free, limit {_mib(limit)} ({limit} bytes)"
            )
        elif disk_free is None or disk_free >= limit:
            self.disk_alarm = None
        return Decision(self.head_bound(used), self.memory_alarm, self.disk_alarm)


def _replace_watermark(limits: MemoryLimits, value: float | int) -> MemoryLimits:
    if isinstance(value, float) and not 0 < value < 1:
        raise ValueError("a fractional watermark must be in (0, 1)")
    if isinstance(value, int) and value <= 0:
        raise ValueError("an absolute watermark must be positive")
    return replace(limits, high_watermark=value)


def total_memory() -> int:
    """Physical RAM, or the cgroup (v2 or v1) limit when smaller."""
    total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    for path in ("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes"):
        with contextlib.suppress(OSError, ValueError):
            limit = int(Path(path).read_text().strip())
            if 0 < limit < total:
                total = limit
    return total


_PAGE: Final = os.sysconf("SC_PAGE_SIZE")


def read_rss() -> int | None:
    """Resident set size of this process from /proc/self/statm (None where unavailable)."""
    try:
        with open("/proc/self/statm", "rb") as f:
            return int(f.read().split()[1]) * _PAGE
    except (OSError, ValueError, IndexError):
        return None


def _load_malloc_trim() -> Callable[[int], int] | None:
    # glibc keeps freed heap pages; malloc_trim hands them back so RSS can fall after a drain.
    name = ctypes.util.find_library("c")
    if name is None:
        return None
    try:
        fn = ctypes.CDLL(name).malloc_trim
    except (OSError, AttributeError):
        return None
    fn.argtypes = [ctypes.c_size_t]
    fn.restype = ctypes.c_int
    trim: Callable[[int], int] = fn
    return trim


_MALLOC_TRIM: Final = _load_malloc_trim()


def trim_due(rss: int, trimmed_rss: int, held: int, last_held: int) -> bool:
    """Whether freed heap is worth handing back: the queues' bodies held in memory fell since
    the last reading (a purge, a drain, consumers catching up) and RSS is at least
    `TRIM_SLACK_BYTES` above what the last trim left (`trimmed_rss`)."""
    return held < last_held and rss >= trimmed_rss + TRIM_SLACK_BYTES


def _disk_free(path: Path) -> int | None:
    try:
        st = os.statvfs(path)
    except OSError:
        return None
    return st.f_bavail * st.f_frsize


class MemoryMonitor:
    """Periodic measurement applied to the broker (see the module docstring).

    Args:
        broker: the core `Broker` (`memory_held_bytes`, `set_memory_bound`, `set_alarm`).
        limits: the settings.
        data_dir: where free disk space is measured.
        emit: applies the broker's effects (the server's batch-and-flush).
        read_memory / read_disk: injectable readings (tests); default RSS and statvfs.
        trim: hands freed heap back to the OS (tests); default glibc's `malloc_trim`, None
            where there is none.
        in_flight: declared body bytes of publishes being received (the server's connections),
            counted on top of the bodies the queues hold.
    """

    def __init__(
        self,
        broker: Broker,
        limits: MemoryLimits,
        data_dir: Path,
        emit: Callable[[list[Effect]], None],
        *,
        total_ram: int | None = None,
        read_memory: Callable[[], int | None] = read_rss,
        read_disk: Callable[[], int | None] | None = None,
        paging_health: DiskHealth | None = None,
        in_flight: Callable[[], int] | None = None,
        trim: Callable[[int], int] | None = _MALLOC_TRIM,
    ) -> None:
        self.broker = broker
        self._in_flight = in_flight
        self.paging_health = paging_health
        self.governor = MemoryGovernor(limits, total_ram or total_memory())
        self.data_dir = data_dir
        self._emit = emit
        self._read_memory = read_memory
        self._read_disk = read_disk or (lambda: _disk_free(data_dir))
        self._handle: asyncio.TimerHandle | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._baseline = read_memory() or 0
        self._trim = trim
        self._trimmed_rss = self._baseline  # RSS the last trim left (lowered as RSS falls)
        self._last_held = 0  # the queues' bodies in memory at the last reading
        self.trims = 0
        """`malloc_trim` calls so far."""
        self.used = self._baseline
        self.disk_free: int | None = None
        self.in_flight = 0
        """Declared body bytes of partly received publishes at the last measurement."""
        self.rss: int | None = self._baseline or None
        self.peak_rss = self.rss or 0
        self._disk_reason: str | None = None  # the disk alarm in force (free space or writes)
        self._page_failure_logged: OSError | None = None
        self._alarm_log = LogLimiter(ALARM_LOG_PERIOD_MS)

    def page_write_failure(self) -> OSError | None:
        """The page-file write error in force, if any (the paging directory's `DiskHealth`)."""
        health = self.paging_health
        return health.failure if health is not None else None

    def start(self, loop: asyncio.AbstractEventLoop) -> None:
        """Measure now and then every `interval_s`."""
        self._loop = loop
        self.poll()

    def stop(self) -> None:
        if self._handle is not None:
            self._handle.cancel()
            self._handle = None
        self._loop = None

    def set_watermark(self, value: float | int) -> None:
        """Change the watermark and re-assess at once."""
        self.governor.set_watermark(value)
        self.check()

    def set_disk_free_limit(self, nbytes: int) -> None:
        """Change the free-disk limit and re-assess at once (0 disables the check)."""
        self.governor.limits = replace(self.governor.limits, disk_free_limit=nbytes)
        self.check()

    def poll(self) -> None:
        try:
            self.check()
        except Exception:
            log.exception("memory check failed")
        if self._loop is not None:
            self._handle = self._loop.call_later(self.governor.limits.interval_s, self.poll)

    def check_in_flight(self) -> None:
        """Check now: a large body was announced, and declared sizes can cross the watermark
        long before the next periodic check (the server calls this once per new header)."""
        try:
            self.check()
        except Exception:
            log.exception("memory check failed")

    def measure(self) -> int:
        """Memory in use: the larger of RSS and (start-up RSS + bodies the queues hold).
        Freed heap is handed back first while alarmed (so the alarm can clear), else when
        `trim_due` says so (module docstring)."""
        trim = self._trim
        alarmed = self.governor.memory_alarm is not None
        if alarmed and trim is not None:
            trim(0)
            self.trims += 1
        rss = self._read_memory()
        held: int = self.broker.memory_held_bytes()
        if rss is not None and trim is not None and not alarmed:
            if trim_due(rss, self._trimmed_rss, held, self._last_held):
                trim(0)
                self.trims += 1
                rss = self._read_memory()
                self._trimmed_rss = rss if rss is not None else self._trimmed_rss
            elif rss < self._trimmed_rss:
                self._trimmed_rss = rss
        self._last_held = held
        self.in_flight = self._in_flight() if self._in_flight is not None else 0
        # declared, not yet received: what those publishes will hold once complete
        used = self._baseline + held + self.in_flight
        if rss is not None:
            self.rss = rss
            self.peak_rss = max(self.peak_rss, rss)
            used = max(used, rss)
        return used

    def check(self) -> None:
        """One measurement, applied."""
        self.used = self.measure()
        self.disk_free = self._read_disk()
        was_mem, was_disk = self.governor.memory_alarm, self._disk_reason
        d = self.governor.assess(self.used, self.disk_free)
        page_failure = self.page_write_failure()
        disk_now = d.disk_alarm
        if page_failure is not None and disk_now is None:
            disk_now = f"disk alarm: page file write failed: {page_failure}"
        if (page_failure is None) != (self._page_failure_logged is None):
            if page_failure is not None:
                log.error(
                    "disk write failed on %s: errno %s (%s); paged messages stay in memory, "
                    "publishers blocked, retrying",
                    page_failure.filename,
                    errno.errorcode.get(page_failure.errno or 0, page_failure.errno),
                    page_failure.strerror,
                )
            self._page_failure_logged = page_failure
        self._disk_reason = disk_now
        broker = self.broker
        if d.head_bound != broker.memory_bound:
            paged = broker.set_memory_bound(*d.head_bound)
            log.info(
                "queue memory bound now %d messages / %d bytes (%d paged out)",
                d.head_bound[0],
                d.head_bound[1],
                paged,
            )
        effects: list[Effect] = []
        for resource, was, now in (
            ("memory", was_mem, d.memory_alarm),
            ("disk", was_disk, disk_now),
        ):
            if (was is None) != (now is None):
                # rate-limited: bodies in flight can make an alarm come and go every check
                suppressed = self._alarm_log.admit(int(time.monotonic() * 1000))
                if suppressed is not None:
                    more = f" ({suppressed} alarm changes not logged)" if suppressed else ""
                    if now is not None:
                        log.warning("%s; blocking publishers%s", now, more)
                    else:
                        log.warning("%s alarm cleared; unblocking publishers%s", resource, more)
                effects += broker.set_alarm(resource, now)
            elif now is not None and now != was:
                broker.set_alarm(resource, now)  # refresh the reason shown for new blocks
        if effects:
            self._emit(effects)

    def status(self) -> dict[str, Any]:
        """Readings and alarms (management, logs)."""
        g = self.governor
        return {
            "mem_used": self.used,
            "mem_content_in_flight": self.in_flight,
            "mem_rss": self.rss,
            "mem_peak_rss": self.peak_rss,
            "mem_limit": g.watermark_bytes,
            "mem_alarm": g.memory_alarm is not None,
            "disk_free": self.disk_free,
            "disk_free_limit": g.limits.disk_free_limit,
            "disk_free_alarm": g.disk_alarm is not None,
            "disk_alarm": self._disk_reason,
            "queue_head_bound": list(self.broker.memory_bound),
        }


def start_memory_monitor(
    broker: Broker,
    limits: MemoryLimits,
    data_dir: Path,
    emit: Callable[[list[Effect]], None],
    spill: SpillDirectory | None,
    in_flight: Callable[[], int],
    loop: asyncio.AbstractEventLoop,
) -> MemoryMonitor:
    """Paging under the one paging directory (wiped: paged data is transient) and the
    periodic memory/disk check that tightens queue heads and raises alarms, started."""
    if limits.paging and spill is not None:
        broker.enable_paging(spill, limits.head_count, limits.head_bytes, spill.body_store)
    monitor = MemoryMonitor(
        broker,
        limits,
        data_dir,
        emit,
        paging_health=spill.health if spill is not None else None,
        in_flight=in_flight,
    )
    monitor.start(loop)
    log.info(
        "memory high watermark %d bytes, free disk limit %d bytes, queue head %d / %d bytes",
        monitor.governor.watermark_bytes,
        limits.disk_free_limit,
        limits.head_count,
        limits.head_bytes,
    )
    return monitor
