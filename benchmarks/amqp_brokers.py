"""The brokers under test: finding their processes, reading their CPU and memory, and
starting ringmq when no URL is given.

Theory of operation: a ``BrokerTarget`` is a name, an AMQP URL and the pid of the process
listening on that URL's port (found through /proc/net/tcp and /proc/<pid>/fd, so RabbitMQ's
beam.smp and an already-running ringmq are found the same way), and, when asked, that
process's descendants as they are then (a broker that runs its shards as child processes counts
them all). ``ProcessStats`` samples
/proc/<pid>/stat and /proc/<pid>/status: CPU seconds (utime+stime), VmRSS and VmHWM; it can
reset VmHWM (``clear_refs`` 5) so a peak belongs to one scenario, and it sums the threads'
run-queue wait (schedstat), which shows how much a shared machine starved the broker.
``RingmqProcess`` starts ``ringmq serve`` on port 0 with a temporary data dir, learns the port
from its log, and is the only process this module ever stops. Linux only.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Final
from urllib.parse import urlsplit

_CLK_TCK: Final = os.sysconf("SC_CLK_TCK")
_LISTEN_PATTERNS: Final = (
    re.compile(r"AMQP listening on (\d+\.\d+\.\d+\.\d+):(\d+)"),
    re.compile(r"(?i)amqp\b[^\n]*?\b(\d+\.\d+\.\d+\.\d+):(\d+)"),
)


def listening_pid(port: int) -> int | None:
    """The pid of the process with a TCP socket listening on ``port`` (any address)."""
    inodes: set[str] = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            lines = Path(table).read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            cols = line.split()
            local, state, inode = cols[1], cols[3], cols[9]
            if state == "0A" and int(local.rsplit(":", 1)[1], 16) == port:
                inodes.add(f"socket:[{inode}]")
    if not inodes:
        return None
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            for fd in (entry / "fd").iterdir():
                with contextlib.suppress(OSError):
                    if os.readlink(fd) in inodes:
                        return int(entry.name)
        except OSError:
            continue
    return None


def descendants(pid: int) -> tuple[int, ...]:
    """The pids of the processes below ``pid`` (children, theirs, ...), as they are now."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue  # exited while we looked
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
        children.setdefault(ppid, []).append(int(entry.name))
    found: list[int] = []
    todo = [pid]
    while todo:
        below = children.get(todo.pop(), [])
        found += below
        todo += below
    return tuple(sorted(found))


def process_name(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip()
    except OSError:
        return "?"


@dataclass(frozen=True, slots=True)
class Sample:
    cpu_s: float
    rss_bytes: int
    hwm_bytes: int
    runq_wait_s: float  # time its threads were runnable but waited for a CPU (schedstat)


class ProcessStats:
    """CPU and memory of one broker process, sampled from /proc; with ``others``, of a group
    of processes (a cluster's nodes) summed: CPU, RSS, VmHWM and run-queue wait."""

    def __init__(self, pid: int | None, others: tuple[int, ...] = ()) -> None:
        self.pid = pid
        self.pids = (pid, *others) if pid is not None else ()
        self.peak_rss_bytes = 0

    def sample(self) -> Sample | None:
        if not self.pids:
            return None
        cpu_s, rss, hwm = 0.0, 0, 0
        for pid in self.pids:
            try:
                stat = Path(f"/proc/{pid}/stat").read_text()
                status = Path(f"/proc/{pid}/status").read_text()
            except OSError:
                return None
            fields = stat.rsplit(")", 1)[1].split()
            cpu_s += (int(fields[11]) + int(fields[12])) / _CLK_TCK  # utime, stime
            kib = {
                line.split(":")[0]: int(line.split()[1])
                for line in status.splitlines()
                if line.startswith(("VmRSS:", "VmHWM:"))
            }
            rss += kib.get("VmRSS", 0) * 1024
            hwm += kib.get("VmHWM", 0) * 1024
        self.peak_rss_bytes = max(self.peak_rss_bytes, rss)
        return Sample(cpu_s, rss, hwm, sum(self._runq_wait_s(pid) for pid in self.pids))

    @staticmethod
    def _runq_wait_s(pid: int) -> float:
        # /proc/<pid>/task/<tid>/schedstat: on-CPU ns, run-queue wait ns, timeslices.
        total = 0
        try:
            for task in Path(f"/proc/{pid}/task").iterdir():
                with contextlib.suppress(OSError, IndexError, ValueError):
                    total += int((task / "schedstat").read_text().split()[1])
        except OSError:
            return 0.0
        return total / 1e9

    def reset_peak(self) -> bool:
        """Reset VmHWM to the current RSS (Linux clear_refs 5); False when not permitted."""
        self.peak_rss_bytes = 0
        if not self.pids:
            return False
        try:
            for pid in self.pids:
                Path(f"/proc/{pid}/clear_refs").write_text("5")
        except OSError:
            return False
        return True


@dataclass(frozen=True, slots=True)
class BrokerTarget:
    name: str
    url: str
    pid: int | None
    others: tuple[int, ...] = ()  # the other processes of a cluster, counted with `pid`

    @classmethod
    def at(cls, name: str, url: str, *, with_descendants: bool = False) -> BrokerTarget:
        """The broker listening on ``url``'s port; ``with_descendants``: its child processes
        too, counted with it (a sharded ringmq), as they are when this is called."""
        port = urlsplit(url).port or 5672
        pid = listening_pid(port)
        others = descendants(pid) if with_descendants and pid is not None else ()
        return cls(name, url, pid, others)

    def describe(self) -> str:
        proc = f"pid {self.pid} ({process_name(self.pid)})" if self.pid else "pid unknown"
        more = f" + pids {', '.join(map(str, self.others))}" if self.others else ""
        return f"{self.name} at {self.url} - {proc}{more}"


def port_open(url: str, timeout_s: float = 1.0) -> bool:
    import socket

    parts = urlsplit(url)
    try:
        with socket.create_connection(
            (parts.hostname or "127.0.0.1", parts.port or 5672), timeout_s
        ):
            return True
    except OSError:
        return False


def rabbitmq_version() -> str:
    """The installed RabbitMQ package version, or '' when it cannot be told."""
    if shutil.which("dpkg-query"):
        out = subprocess.run(
            ["dpkg-query", "-W", "-f=${Version}", "rabbitmq-server"],
            capture_output=True,
            text=True,
            check=False,
        )
        if out.returncode == 0:
            return out.stdout.strip()
    return ""


class RingmqProcess:
    """``ringmq serve`` on ephemeral ports with a temporary data dir, stopped by ``stop``."""

    def __init__(
        self,
        *,
        startup_timeout_s: float = 30.0,
        profile_path: Path | None = None,
        protocols: tuple[str, ...] = (),
        src: Path | None = None,
        extra_args: tuple[str, ...] = (),
    ) -> None:
        self.extra_args = extra_args
        """More `ringmq serve` options (`--stream-confirm written`, ...)."""
        self.src = src
        """Another source tree's `src` to run instead of this one's (`run_all --baseline-src`:
        an older commit's, with this interpreter); None: the installed ringmq."""
        self._dir = Path(tempfile.mkdtemp(prefix="ringmq-bench-"))
        self.log_path = self._dir / "ringmq.log"
        self._timeout = startup_timeout_s
        self._profile = profile_path
        self._proc: subprocess.Popen[bytes] | None = None
        self.url = ""
        self.protocols = protocols
        """Other listeners to open ("stomp", "mqtt"), on free ports: `ports` says which."""
        self.ports: dict[str, int] = {}

    def start(self) -> str:
        """Start (or restart, on the same data dir) and return the AMQP URL it listens on."""
        # With a profile path the broker runs under cProfile, which writes the file when
        # `ringmq serve` returns after SIGTERM.
        prefix = ["-m", "cProfile", "-o", str(self._profile)] if self._profile else []
        cmd = [
            sys.executable, *prefix, "-m", "ringmq", "serve",
            "--amqp-port", "0", "--http-port", "0",
            "--stomp-port", "0" if "stomp" in self.protocols else "off",
            "--mqtt-port", "0" if "mqtt" in self.protocols else "off",
            "--stream-port", "0" if "stream" in self.protocols else "off",
            "--data-dir", str(self._dir / "data"), *self.extra_args,
        ]  # fmt: skip
        env = None
        if self.src is not None:
            env = {**os.environ, "PYTHONPATH": str(self.src)}
            serve = self.src / "ringmq" / "cli" / "serve.py"
            if "stream_port" not in serve.read_text(encoding="utf-8"):
                # a tree from before the stream protocol: it has no such listener to turn off
                at = cmd.index("--stream-port")
                del cmd[at : at + 2]
        offset = self.log_path.stat().st_size if self.log_path.exists() else 0
        with self.log_path.open("ab") as log:
            self._proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env)
        deadline = time.monotonic() + self._timeout
        while time.monotonic() < deadline:
            with self.log_path.open("rb") as log:
                log.seek(offset)
                text = log.read().decode(errors="replace")
            others = {
                p: re.search(rf"{p.upper()} listening on [0-9.]+:(\d+)", text)
                for p in self.protocols
            }
            for pattern in _LISTEN_PATTERNS:
                found = pattern.search(text)
                if found and all(others.values()):
                    self.ports = {p: int(m.group(1)) for p, m in others.items() if m}
                    self.url = f"amqp://guest:guest@{found.group(1)}:{found.group(2)}/"
                    return self.url
            if self._proc.poll() is not None:
                break
            time.sleep(0.02)
        tail = self.log_path.read_text(errors="replace")[-2000:]
        self.stop()
        raise RuntimeError(f"ringmq serve did not report its AMQP port; log tail:\n{tail}")

    def kill(self) -> None:
        """SIGKILL the broker, keeping its data dir for a restart (crash recovery)."""
        if self._proc is not None:
            self._proc.kill()
            self._proc.wait(timeout=10)
            self._proc = None

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc else None

    @property
    def returncode(self) -> int | None:
        """The exit status once the broker has exited on its own (None while it runs)."""
        return self._proc.poll() if self._proc else None

    def stop(self) -> None:
        proc = self._proc
        if proc is None:
            return
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=5)
        self._proc = None
        shutil.rmtree(self._dir, ignore_errors=True)  # data and log
