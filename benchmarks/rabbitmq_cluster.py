"""RabbitMQ nodes of our own on this machine: a 3-node cluster for benchmarks, or one node for
the differential tests (tests/differential): started, joined, stopped.

Theory of operation: Debian's ``rabbitmq-server`` (``/usr/lib/rabbitmq/bin``, run directly so
that the Debian wrapper does not switch to the ``rabbitmq`` user) is started ``size`` times,
each node with its own ``RABBITMQ_NODENAME`` (``<prefix>N@localhost``), AMQP and distribution
ports, ``RABBITMQ_MNESIA_BASE``, ``RABBITMQ_LOG_BASE`` and ``rabbitmq.conf`` under one temporary
directory, the ``plugins`` asked for (none for the benchmarks; with ``rabbitmq_management``
each node's HTTP API listens on a free loopback port of its own, ``http_urls``), the
``advanced.config`` given (Erlang terms: settings ``rabbitmq.conf`` has no key for), and a
shared Erlang cookie (``$HOME/.erlang.cookie`` with ``HOME`` that directory). Its own
``epmd`` runs on a free port (``ERL_EPMD_PORT``), so the cluster never meets another epmd on
the machine and stopping it leaves nothing behind. Nodes 2 and 3 join node 1 with
``rabbitmqctl stop_app; join_cluster; start_app``. ``stop`` runs ``rabbitmqctl stop`` on each
node, then kills whatever is left of the process groups this module started (each node and
the epmd run in a session of their own), and removes the directory, also after a failure.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Final

from benchmarks.amqp_brokers import listening_pid
from tests.ports import free_port  # never in the kernel's ephemeral range

_BIN: Final = Path("/usr/lib/rabbitmq/bin")
MANAGEMENT: Final = "rabbitmq_management"


def available() -> str:
    """'' when the Debian package's scripts and epmd are here, else why not."""
    if not (_BIN / "rabbitmq-server").exists():
        return "no /usr/lib/rabbitmq/bin/rabbitmq-server (Debian's rabbitmq-server package)"
    if shutil.which("epmd") is None:
        return "no epmd on PATH (erlang-base)"
    return ""


class RabbitCluster:
    """``size`` RabbitMQ nodes joined in one cluster (three by default); ``urls`` and ``pids``
    once ``start`` ran (see the module docstring for ``plugins`` and ``advanced``)."""

    def __init__(
        self,
        size: int = 3,
        *,
        prefix: str = "rbench",
        timeout_s: float = 180.0,
        plugins: Sequence[str] = (),
        advanced: str = "[].",
    ) -> None:
        self.size = size
        self.root = Path(tempfile.mkdtemp(prefix="ringmq-rabbit-"))
        self.timeout_s = timeout_s
        self.plugins = tuple(plugins)
        self.advanced = advanced
        self.names = [f"{prefix}{i}_{os.getpid()}@localhost" for i in range(1, size + 1)]
        self.ports = [free_port() for _ in range(size)]
        self.http_ports = [free_port() for _ in range(size)] if MANAGEMENT in self.plugins else []
        self.epmd_port = free_port()
        self._procs: list[subprocess.Popen[bytes]] = []
        self.urls = [f"amqp://guest:guest@127.0.0.1:{p}/" for p in self.ports]
        self.http_urls = [f"http://127.0.0.1:{p}" for p in self.http_ports]
        self.pids: list[int] = []

    def _env(self, i: int | None = None) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith("RABBITMQ_")}
        env.update(HOME=str(self.root), ERL_EPMD_PORT=str(self.epmd_port))
        env["RABBITMQ_CONF_ENV_FILE"] = str(self.root / "rabbitmq-env.conf")
        if i is not None:
            node = self.root / f"n{i}"
            env.update(
                RABBITMQ_NODENAME=self.names[i],
                RABBITMQ_NODE_IP_ADDRESS="127.0.0.1",
                RABBITMQ_NODE_PORT=str(self.ports[i]),
                RABBITMQ_DIST_PORT=str(free_port()),
                RABBITMQ_MNESIA_BASE=str(node / "mnesia"),
                RABBITMQ_LOG_BASE=str(node / "log"),
                RABBITMQ_PID_FILE=str(node / "pid"),
                RABBITMQ_ENABLED_PLUGINS_FILE=str(self.root / "enabled_plugins"),
                RABBITMQ_CONFIG_FILE=str(node / "rabbitmq"),  # its rabbitmq.conf
                RABBITMQ_ADVANCED_CONFIG_FILE=str(self.root / "advanced.config"),
                # Loopback only: the distribution listener too (it binds every address else).
                RABBITMQ_SERVER_ADDITIONAL_ERL_ARGS="-kernel inet_dist_use_interface {127,0,0,1}",
            )
        return env

    def ctl(self, i: int, *args: str, timeout_s: float = 60.0) -> str:
        out = subprocess.run(
            [str(_BIN / "rabbitmqctl"), "-n", self.names[i], *args],
            env=self._env(),
            capture_output=True,
            text=True,
            timeout=timeout_s,
            check=False,
        )
        if out.returncode != 0:
            raise RuntimeError(f"rabbitmqctl {' '.join(args)} on {self.names[i]}: {out.stderr}")
        return out.stdout

    def start(self) -> None:
        cookie = self.root / ".erlang.cookie"
        cookie.write_text(secrets.token_hex(16).upper())
        cookie.chmod(0o400)
        (self.root / "rabbitmq-env.conf").write_text("")
        (self.root / "enabled_plugins").write_text(f"[{','.join(self.plugins)}].\n")
        (self.root / "advanced.config").write_text(self.advanced + "\n")
        self._procs.append(
            subprocess.Popen(
                ["epmd", "-port", str(self.epmd_port), "-address", "127.0.0.1"],
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
                start_new_session=True,
            )
        )
        for i in range(self.size):
            node = self.root / f"n{i}"
            node.mkdir()
            conf = ""
            if self.http_ports:  # the HTTP API on loopback, on a port of its own
                conf = (
                    f"management.tcp.ip = 127.0.0.1\nmanagement.tcp.port = {self.http_ports[i]}\n"
                )
            (node / "rabbitmq.conf").write_text(conf)
            log = (node / "stdout.log").open("ab")
            self._procs.append(
                subprocess.Popen(
                    [str(_BIN / "rabbitmq-server")],
                    env=self._env(i),
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    start_new_session=True,
                )
            )
        for i in range(self.size):
            self._await_startup(i)
        for i in range(1, self.size):
            self.ctl(i, "stop_app")
            self.ctl(i, "join_cluster", self.names[0])
            self.ctl(i, "start_app", timeout_s=120)
        running = self.ctl(0, "cluster_status", "--formatter", "json")
        missing = [n for n in self.names if n not in running]
        if missing:
            raise RuntimeError(f"not in the cluster: {missing}")
        for port in self.ports:
            pid = listening_pid(port)
            if pid is None:
                raise RuntimeError(f"no process listens on {port}")
            self.pids.append(pid)

    def _await_startup(self, i: int) -> None:
        # `await_startup` fails at once while the node has not registered with epmd yet.
        deadline = time.monotonic() + self.timeout_s
        while True:
            try:
                self.ctl(i, "await_startup", "--timeout", "60", timeout_s=90)
                return
            except RuntimeError:
                if time.monotonic() > deadline or self._procs[i + 1].poll() is not None:
                    raise
                time.sleep(1.0)

    def version(self) -> str:
        with contextlib.suppress(RuntimeError, subprocess.TimeoutExpired):
            return self.ctl(0, "version").strip()
        return ""

    def stop(self) -> None:
        for i in range(self.size):
            with contextlib.suppress(RuntimeError, subprocess.TimeoutExpired, OSError):
                self.ctl(i, "stop", timeout_s=60)
        for proc in self._procs:  # epmd, and any node `stop` did not end
            if proc.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGTERM)
        deadline = time.monotonic() + 10
        for proc in self._procs:
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=max(0.1, deadline - time.monotonic()))
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)  # erl_child_setup and the like
            proc.wait()
        self._procs.clear()
        shutil.rmtree(self.root, ignore_errors=True)
