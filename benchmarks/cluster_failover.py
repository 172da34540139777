"""Leader failover times of a 3-node ringmq cluster on one etcd, on this machine.

Unplanned: kill -9 of the leader, then the time until another node says it leads (polled every
20 ms on /api/cluster); the killed node is restarted before the next round. Planned: POST
/api/cluster/step-down on the leader, then the time until another node leads. Clean stop
(`--term`): SIGTERM of the leader (what systemd's stop sends), then the time until another
node leads (and, apart, until the stopped process has exited); it is restarted before the next
round. Needs Debian's etcd-server (`etcd` on PATH).

    .venv/bin/python benchmarks/cluster_failover.py --rounds 20 --planned 20 --ttl 5
    .venv/bin/python benchmarks/cluster_failover.py --rounds 0 --planned 0 --term 10 --ttl 5
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx
from tests.ports import free_port  # never in the kernel's ephemeral range

_HTTP = re.compile(rb"HTTP listening on [0-9.]+:(\d+)")
AUTH = ("guest", "guest")


class Node:
    def __init__(self, name: str, etcd: str, root: Path, ttl_s: int) -> None:
        self.name, self.etcd, self.root, self.ttl_s = name, etcd, root, ttl_s
        self.proc: subprocess.Popen[bytes] | None = None
        self.http = 0
        self.start()

    def start(self) -> None:
        cfg = self.root / f"{self.name}.toml"
        cfg.write_text(f'[cluster]\nlease_ttl_s = {self.ttl_s}\nname = "bench"\n')
        log = self.root / f"{self.name}.log"
        log.write_bytes(b"")
        self.proc = subprocess.Popen(
            [
                sys.executable, "-m", "ringmq", "serve", "--host", "127.0.0.1",
                "--amqp-port", "0", "--http-port", "0", "--stomp-port", "off",
                "--mqtt-port", "off", "--stream-port", "off",
                "--data-dir", str(self.root / self.name),
                "--config", str(cfg), "--cluster-etcd", self.etcd,
                "--node-name", self.name, "--cluster-port", "0",
            ],
            stdout=log.open("ab"),
            stderr=subprocess.STDOUT,
        )  # fmt: skip
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            m = _HTTP.search(log.read_bytes())
            if m:
                self.http = int(m.group(1))
                return
            time.sleep(0.02)
        raise RuntimeError(f"{self.name} did not start")

    def role(self) -> str | None:
        try:
            r = httpx.get(f"http://127.0.0.1:{self.http}/api/cluster", auth=AUTH, timeout=1)
            role: str = r.json()["role"]
            return role
        except (httpx.HTTPError, ValueError, KeyError):
            return None

    def kill(self, sig: int = signal.SIGKILL) -> None:
        assert self.proc is not None
        os.kill(self.proc.pid, sig)
        self.proc.wait(timeout=120)


def leader(nodes: list[Node], exclude: Node | None = None, timeout_s: float = 60) -> Node:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        for n in nodes:
            alive = n is not exclude and n.proc is not None and n.proc.poll() is None
            if alive and n.role() == "leader":
                return n
        time.sleep(0.02)
    raise RuntimeError("no leader")


def summary(label: str, times: list[float]) -> str:
    times = sorted(times)
    p99 = times[min(len(times) - 1, int(len(times) * 0.99))]
    return (
        f"| {label} | {len(times)} | {times[0]:.2f} | {statistics.median(times):.2f} | "
        f"{p99:.2f} | {times[-1]:.2f} |"
    )


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=20, help="kill -9 rounds")
    ap.add_argument("--planned", type=int, default=20, help="step-down rounds")
    ap.add_argument("--term", type=int, default=0, help="SIGTERM (clean stop) rounds")
    ap.add_argument("--ttl", type=int, default=5, help="lease TTL in seconds")
    args = ap.parse_args()
    etcd_bin = shutil.which("etcd")
    if etcd_bin is None:
        sys.exit("no etcd on PATH (Debian's etcd-server)")
    root = Path(tempfile.mkdtemp(prefix="ringmq-failover-"))
    client, peer = free_port(), free_port()
    etcd = subprocess.Popen(
        [
            etcd_bin, "--name", "e0", "--data-dir", str(root / "etcd"),
            "--listen-client-urls", f"http://127.0.0.1:{client}",
            "--advertise-client-urls", f"http://127.0.0.1:{client}",
            "--listen-peer-urls", f"http://127.0.0.1:{peer}",
            "--initial-advertise-peer-urls", f"http://127.0.0.1:{peer}",
            "--initial-cluster", f"e0=http://127.0.0.1:{peer}",
        ],
        stdout=(root / "etcd.log").open("ab"),
        stderr=subprocess.STDOUT,
    )  # fmt: skip
    nodes: list[Node] = []
    try:
        endpoint = f"http://127.0.0.1:{client}"
        nodes = [Node(f"n{i}", endpoint, root, args.ttl) for i in (1, 2, 3)]
        unplanned: list[float] = []
        for _ in range(args.rounds):
            old = leader(nodes)
            time.sleep(args.ttl / 2)  # all nodes registered and in the ISR
            t0 = time.monotonic()
            old.kill()
            leader(nodes, exclude=old)
            unplanned.append(time.monotonic() - t0)
            old.start()
        planned: list[float] = []
        for _ in range(args.planned):
            old = leader(nodes)
            time.sleep(0.5)
            t0 = time.monotonic()
            httpx.post(
                f"http://127.0.0.1:{old.http}/api/cluster/step-down", json={}, auth=AUTH
            ).raise_for_status()
            leader(nodes, exclude=old)
            planned.append(time.monotonic() - t0)
        term: list[float] = []
        exited: list[float] = []
        stuck = 0
        for _ in range(args.term):
            old = leader(nodes)
            time.sleep(args.ttl / 2)  # all nodes registered and in the ISR
            assert old.proc is not None
            t0 = time.monotonic()
            os.kill(old.proc.pid, signal.SIGTERM)
            leader(nodes, exclude=old)
            term.append(time.monotonic() - t0)
            try:
                old.proc.wait(timeout=60)
                exited.append(time.monotonic() - t0)
            except subprocess.TimeoutExpired:
                stuck += 1
                if os.environ.get("RINGMQ_BENCH_DUMP"):  # a sitecustomize that dumps tasks
                    os.kill(old.proc.pid, signal.SIGUSR1)
                    time.sleep(1)
                tail = (old.root / f"{old.name}.log").read_text(errors="replace")[-3000:]
                print(f"{old.name} had not exited 60 s after SIGTERM; killed; log:\n{tail}")
                old.kill()
            old.start()
        print(f"lease TTL {args.ttl} s, 3 nodes, 1 etcd member; seconds")
        print("| failover | rounds | min | p50 | p99 | max |")
        print("|---|---|---|---|---|---|")
        if unplanned:
            print(summary("kill -9 of the leader", unplanned))
        if planned:
            print(summary("planned step-down", planned))
        if term:
            print(summary("SIGTERM of the leader (clean stop)", term))
            if exited:
                print(summary("... until the stopped process exited", exited))
            print(f"stopped processes that had not exited after 60 s (killed): {stuck}")
    finally:
        for n in nodes:
            if n.proc is not None and n.proc.poll() is None:
                n.kill()
        etcd.kill()
        etcd.wait()
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
