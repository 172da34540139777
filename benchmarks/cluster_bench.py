"""Scenario c on a 3-node ringmq cluster, one ringmq node and a 3-node RabbitMQ cluster.

Usage (from the repository root; needs Debian's etcd-server and rabbitmq-server)::

    .venv/bin/python -m benchmarks.cluster_bench [--quick] [--rounds 3] [--json FILE]
        [--no-single] [--no-cluster] [--no-rabbitmq] [--rate MSG_S] [--baseline-src DIR]

Theory of operation: every system is started first and stays up for the whole run: one
``ringmq serve`` (``amqp_brokers.RingmqProcess``); one etcd member and three ``ringmq serve
--cluster-etcd`` nodes on loopback (``RingmqCluster``, waited for until a leader leads and the
ISR in etcd names all three nodes); three RabbitMQ 3.10.8 nodes joined in one cluster
(``rabbitmq_cluster.RabbitCluster``). Each round then runs scenario c (1 KiB persistent,
durable queue, confirms with 1000 in flight, ``scenarios.run_once``: the same forked load
generator) once on each system, the order rotating between rounds so that no system always
runs first or last on a machine whose load drifts. The queue is declared ``x-queue-type:
quorum`` on every system (RabbitMQ's replicated queue; ringmq replicates per shard, so for it
the type changes no cost). The publisher talks to the ringmq leader and to RabbitMQ's first
node (where its quorum queue's leader is then placed). Broker CPU and RSS are summed over the
nodes of a cluster (``ProcessStats`` with ``others``; etcd is not counted). The table shows
medians over the rounds and the ratios the issue's bars are about, each ratio taken from the
medians of the same run. Everything started is stopped at the end, also on failure.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import os
import platform
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx

if __package__ in (None, ""):  # run as a script: make `benchmarks` importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks import amqp_brokers as brokers
from benchmarks import amqp_client
from benchmarks import amqp_load as load
from benchmarks import rabbitmq_cluster as rabbit
from benchmarks import scenarios as sc
from tests.ports import free_port

AUTH = ("guest", "guest")
METRICS = (
    ("confirmed_msg_s", "msg/s"),
    ("confirm_p50_ms", "confirm p50 ms"),
    ("confirm_p99_ms", "confirm p99 ms"),
    ("broker_cpu_us_per_msg", "broker CPU us/msg (all nodes)"),
    ("broker_peak_rss_mib", "broker peak RSS MiB (all nodes)"),
    ("broker_runq_wait_s", "broker run-queue wait s"),
)
SINGLE, CLUSTER, RABBIT, BASE = "ringmq-1", "ringmq-3", "rabbitmq-3", "ringmq-3-base"


class RingmqCluster:
    """One etcd member and three ringmq nodes on loopback; ``target`` is the leader."""

    def __init__(
        self,
        size: int = 3,
        timeout_s: float = 90.0,
        *,
        name: str = CLUSTER,
        src: Path | None = None,
        stream: bool = False,
    ) -> None:
        self.root = Path(tempfile.mkdtemp(prefix="ringmq-cluster-bench-"))
        self.size, self.timeout_s = size, timeout_s
        self.name = name
        self.env = dict(os.environ)
        if src is not None:  # another checkout's `src`, ahead of the installed ringmq
            self.env["PYTHONPATH"] = str(src.resolve())
        self.etcd: subprocess.Popen[bytes] | None = None
        self.nodes: dict[str, subprocess.Popen[bytes]] = {}
        self.amqp: dict[str, int] = {}
        self.http: dict[str, int] = {}
        self.stream: dict[str, int] = {}
        """Each node's stream protocol port (with `stream`; the leader's is open)."""
        self._stream = stream

    def start(self) -> brokers.BrokerTarget:
        etcd_bin = shutil.which("etcd")
        if etcd_bin is None:
            raise RuntimeError("no etcd on PATH (Debian's etcd-server)")
        client, peer = free_port(), free_port()
        self.etcd = subprocess.Popen(
            [
                etcd_bin, "--name", "e0", "--data-dir", str(self.root / "etcd"),
                "--listen-client-urls", f"http://127.0.0.1:{client}",
                "--advertise-client-urls", f"http://127.0.0.1:{client}",
                "--listen-peer-urls", f"http://127.0.0.1:{peer}",
                "--initial-advertise-peer-urls", f"http://127.0.0.1:{peer}",
                "--initial-cluster", f"e0=http://127.0.0.1:{peer}",
            ],
            stdout=(self.root / "etcd.log").open("ab"),
            stderr=subprocess.STDOUT,
        )  # fmt: skip
        for i in range(1, self.size + 1):
            name = f"n{i}"
            self.amqp[name], self.http[name] = free_port(), free_port()
            self.stream[name] = free_port() if self._stream else -1
            self.nodes[name] = subprocess.Popen(
                [
                    sys.executable, "-m", "ringmq", "serve", "--host", "127.0.0.1",
                    "--amqp-port", str(self.amqp[name]), "--http-port", str(self.http[name]),
                    "--stomp-port", "off", "--mqtt-port", "off",
                    "--stream-port", str(self.stream[name]) if self._stream else "off",
                    "--data-dir", str(self.root / name),
                    "--cluster-etcd", f"http://127.0.0.1:{client}",
                    "--node-name", name, "--cluster-port", str(free_port()),
                ],
                stdout=(self.root / f"{name}.log").open("ab"),
                stderr=subprocess.STDOUT,
                env=self.env,
            )  # fmt: skip
        leader = self._wait_in_sync()
        pid = self.nodes[leader].pid
        others = tuple(p.pid for n, p in self.nodes.items() if n != leader)
        url = f"amqp://guest:guest@127.0.0.1:{self.amqp[leader]}/"
        return brokers.BrokerTarget(self.name, url, pid, others)

    def _view(self, name: str) -> dict[str, Any] | None:
        try:
            r = httpx.get(f"http://127.0.0.1:{self.http[name]}/api/cluster", auth=AUTH, timeout=2)
            view: dict[str, Any] = r.json()
            return view
        except (httpx.HTTPError, ValueError):
            return None

    def _wait_in_sync(self) -> str:
        """The leader's name once it leads with every node in the ISR and its AMQP port open."""
        deadline = time.monotonic() + self.timeout_s
        while time.monotonic() < deadline:
            for name, proc in self.nodes.items():
                if proc.poll() is not None:
                    raise RuntimeError(f"{name} exited: {self._tail(name)}")
                view = self._view(name)
                if view is None or view.get("role") != "leader":
                    continue
                url = f"amqp://guest:guest@127.0.0.1:{self.amqp[name]}/"
                if len(view.get("isr", [])) == self.size and brokers.port_open(url):
                    return name
            time.sleep(0.2)
        raise RuntimeError(f"no leader with a full ISR in {self.timeout_s:.0f} s")

    def stream_port(self, leader_pid: int | None) -> int:
        """The stream protocol port of the node whose process is `leader_pid`."""
        name = next(n for n, p in self.nodes.items() if p.pid == leader_pid)
        return self.stream[name]

    def isr(self, leader_pid: int | None) -> list[str]:
        for name, proc in self.nodes.items():
            if proc.pid == leader_pid:
                view = self._view(name)
                return list(view.get("isr", [])) if view else []
        return []

    def _tail(self, name: str) -> str:
        return (self.root / f"{name}.log").read_text(errors="replace")[-1500:]

    def stop(self) -> None:
        # The nodes first (a clean stop resigns in etcd), then etcd; each bounded, then killed.
        for group in (list(self.nodes.values()), [self.etcd] if self.etcd else []):
            for proc in group:
                if proc.poll() is None:
                    proc.send_signal(signal.SIGTERM)
            deadline = time.monotonic() + 20
            for proc in group:
                try:
                    proc.wait(timeout=max(0.1, deadline - time.monotonic()))
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait()
        shutil.rmtree(self.root, ignore_errors=True)


def _parse_args(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--quick", action="store_true", help="10,000 messages a run, not 100,000")
    ap.add_argument("--timeout", type=float, default=0.0, help="seconds per run (0: auto)")
    ap.add_argument("--no-single", action="store_true", help="skip the single ringmq node")
    ap.add_argument("--no-cluster", action="store_true", help="skip the ringmq cluster")
    ap.add_argument("--no-rabbitmq", action="store_true", help="skip the RabbitMQ cluster")
    ap.add_argument("--json", type=Path, default=None, help="write every run here")
    ap.add_argument(
        "--rate",
        type=float,
        default=0.0,
        help="publish at this steady rate (msg/s) instead of as fast as the window allows:"
        " confirm latency below saturation (25,000 messages a run, 5,000 with --quick)",
    )
    ap.add_argument(
        "--baseline-src",
        type=Path,
        default=None,
        help="also a ringmq cluster running this `src` directory (e.g. a `git archive` of an"
        " older commit), as ringmq-3-base: an old/new comparison in the same run",
    )
    args = ap.parse_args(argv)
    if not args.timeout:
        args.timeout = 120.0 if args.quick else 400.0
    return args


def _fmt(value: float | None) -> str:
    if value is None:
        return "-"
    return f"{value:,.0f}" if abs(value) >= 100 else f"{value:.2f}"


def _medians(runs: list[dict[str, Any]], names: list[str]) -> dict[str, dict[str, float]]:
    out: dict[str, dict[str, float]] = {}
    for n in names:
        ok = [r["metrics"] for r in runs if r["system"] == n and r["ok"]]
        out[n] = {m: statistics.median(r[m] for r in ok) for m, _ in METRICS if ok}
    return out


def report(runs: list[dict[str, Any]], names: list[str], *, paced: bool = False) -> str:
    med = _medians(runs, names)
    lines = ["| metric (median) | " + " | ".join(names) + " |"]
    lines.append("|---" * (len(names) + 1) + "|")
    for metric, label in METRICS:
        cells = [_fmt(med[n].get(metric)) for n in names]
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
    c, s, r = med.get(CLUSTER, {}), med.get(SINGLE, {}), med.get(RABBIT, {})
    lines.append("")
    if c and med.get(BASE):
        b = med[BASE]
        lines.append(
            f"ringmq-3/ringmq-3-base msg/s {c['confirmed_msg_s'] / b['confirmed_msg_s']:.2f},"
            f" CPU/msg {c['broker_cpu_us_per_msg'] / b['broker_cpu_us_per_msg']:.2f}"
        )
    if paced and c and s:
        extra = c["confirm_p50_ms"] - s["confirm_p50_ms"]
        line = f"at a steady rate: confirm p50 cluster - single {extra:+.2f} ms"
        if r:
            line += f", p99 ringmq-3/rabbitmq-3 {c['confirm_p99_ms'] / r['confirm_p99_ms']:.2f}x"
        lines.append(line)
    if c and s and not paced:
        ratio = c["confirmed_msg_s"] / s["confirmed_msg_s"]
        extra = c["confirm_p50_ms"] - s["confirm_p50_ms"]
        met = ("met" if ratio >= 0.6 else "MISSED", "met" if extra <= 2 else "MISSED")
        lines.append(
            f"cluster/single msg/s {ratio:.2f} (bar >= 0.6: {met[0]});"
            f" confirm p50 {extra:+.2f} ms (bar <= +2 ms: {met[1]})"
        )
    if c and r and not paced:
        ratio = c["confirmed_msg_s"] / r["confirmed_msg_s"]
        p99 = c["confirm_p99_ms"] / r["confirm_p99_ms"]
        met = ("met" if ratio >= 2 else "MISSED", "met" if p99 <= 0.5 else "MISSED")
        lines.append(
            f"ringmq-3/rabbitmq-3 msg/s {ratio:.2f} (bar >= 2: {met[0]});"
            f" confirm p99 {p99:.2f}x (bar <= 0.5: {met[1]})"
        )
    lines.extend(
        f"FAILED {r['system']} round {r['round'] + 1}: {r['error'][:100]}"
        for r in runs
        if not r["ok"]
    )
    return "\n".join(lines)


def _per_node(
    nodes: list[brokers.ProcessStats],
    before: list[brokers.Sample | None],
    scenario: sc.Scenario,
    quick: bool,
) -> list[dict[str, float]]:
    """Each node's CPU per message over the run and its RSS at the end (the leader first)."""
    count = scenario.quick_count if quick else scenario.count
    out: list[dict[str, float]] = []
    for stats, was in zip(nodes, before, strict=True):
        now = stats.sample()
        if was is None or now is None:
            continue
        out.append(
            {
                "pid": float(stats.pid or 0),
                "cpu_us_per_msg": (now.cpu_s - was.cpu_s) / count * 1e6,
                "rss_mib": now.rss_bytes / (1024 * 1024),
            }
        )
    return out


def _load() -> str:
    return " ".join(Path("/proc/loadavg").read_text().split()[:3])


def main(argv: list[str] | None = None) -> int:
    args = _parse_args(argv)
    scenario = dataclasses.replace(sc.SCENARIOS["c"], arguments={"x-queue-type": "quorum"})
    if args.rate:
        scenario = dataclasses.replace(
            scenario, rate_per_s=args.rate, count=25_000, quick_count=5_000
        )
    targets: list[brokers.BrokerTarget] = []
    single: brokers.RingmqProcess | None = None
    cluster: RingmqCluster | None = None
    base: RingmqCluster | None = None
    rabbits: rabbit.RabbitCluster | None = None
    try:
        if not args.no_single:
            single = brokers.RingmqProcess()
            url = single.start()
            targets.append(brokers.BrokerTarget(SINGLE, url, single.pid))
        if not args.no_cluster:
            if shutil.which("etcd") is None:
                print("ringmq cluster: skipped (no etcd on PATH: Debian's etcd-server)")
            else:
                cluster = RingmqCluster()
                targets.append(cluster.start())
                if args.baseline_src is not None:
                    base = RingmqCluster(name=BASE, src=args.baseline_src)
                    targets.append(base.start())
        if not args.no_rabbitmq:
            why = rabbit.available()
            if why:
                print(f"rabbitmq: skipped ({why})")
            else:
                rabbits = rabbit.RabbitCluster()
                rabbits.start()
                pid, *others = rabbits.pids
                targets.append(brokers.BrokerTarget(RABBIT, rabbits.urls[0], pid, tuple(others)))
        if not targets:
            print("no system to benchmark", file=sys.stderr)
            return 2
        clusters = [c for c in (cluster, base) if c is not None]
        return _run(args, scenario, targets, clusters, rabbits)
    finally:
        for stoppable in (rabbits, base, cluster, single):
            if stoppable is not None:
                with contextlib.suppress(Exception):
                    stoppable.stop()


def _run(
    args: argparse.Namespace,
    scenario: sc.Scenario,
    targets: list[brokers.BrokerTarget],
    clusters: list[RingmqCluster],
    rabbits: rabbit.RabbitCluster | None,
) -> int:
    meta = {
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "host": platform.node(),
        "cpus": len(os.sched_getaffinity(0)),
        "python": platform.python_version(),
        "rabbitmq": rabbits.version() if rabbits else "",
        "mode": "quick" if args.quick else "full",
        "rounds": args.rounds,
        "systems": [t.describe() for t in targets],
        "loadavg_before": _load(),
    }
    print(f"{meta['date']} {meta['cpus']} CPUs, load average {meta['loadavg_before']}")
    for line in meta["systems"]:
        print("system:", line)
    runs: list[dict[str, Any]] = []
    for round_no in range(args.rounds):
        shift = round_no % len(targets)
        for target in targets[shift:] + targets[:shift]:
            t0 = time.monotonic()
            run: dict[str, Any] = {"system": target.name, "round": round_no, "load": _load()}
            nodes = [brokers.ProcessStats(pid) for pid in (target.pid, *target.others)]
            before = [n.sample() for n in nodes]
            try:
                run["metrics"] = sc.run_once(
                    scenario,
                    target,
                    quick=args.quick,
                    timeout_s=args.timeout,
                    tag=f"{target.name}.{round_no}",
                )
                run.update(ok=True, error="")
            except (
                load.RunFailedError,
                amqp_client.BrokerClosedError,
                OSError,
                TimeoutError,
            ) as exc:
                run.update(ok=False, error=str(exc).splitlines()[0] or repr(exc), metrics={})
            run["wall_s"] = round(time.monotonic() - t0, 2)
            run["per_node"] = _per_node(nodes, before, scenario, args.quick)
            for c in clusters:
                if target.name == c.name:
                    run["isr_after"] = c.isr(target.pid)
            runs.append(run)
            shown = ", ".join(f"{k}={_fmt(v)}" for k, v in run["metrics"].items())
            status = shown if run["ok"] else f"FAILED: {run['error']}"
            more = f" isr={run['isr_after']}" if "isr_after" in run else ""
            more += " per node (CPU us/msg, RSS MiB): " + ", ".join(
                f"{n['cpu_us_per_msg']:.1f}/{n['rss_mib']:.0f}" for n in run["per_node"]
            )
            print(
                f"[round {round_no + 1}/{args.rounds} {target.name} load {run['load']}] "
                f"{status}{more}",
                flush=True,
            )
    meta["loadavg_after"] = _load()
    print()
    paced = f" at a steady {scenario.rate_per_s:,.0f} msg/s" if scenario.rate_per_s else ""
    print(
        f"scenario c{paced}, x-queue-type quorum, {meta['mode']} mode, medians over {args.rounds} "
        f"round(s); load average {meta['loadavg_before']} -> {meta['loadavg_after']}"
    )
    print(report(runs, [t.name for t in targets], paced=bool(scenario.rate_per_s)))
    if args.json:
        args.json.write_text(json.dumps({"meta": meta, "runs": runs}, indent=2))
        print(f"wrote {args.json}")
    return 0 if all(r["ok"] for r in runs) else 1


if __name__ == "__main__":
    sys.exit(main())
