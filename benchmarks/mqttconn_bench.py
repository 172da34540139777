"""20,000 MQTT connections at 1 message a second: broker CPU and RSS, side by side.

Usage (docs/benchmarks.md, "20,000 MQTT connections at 1 message a second"):

    flock /tmp/bench.lock .venv/bin/python -m benchmarks.mqttconn_bench --rounds 2
    .venv/bin/python -m benchmarks.mqttconn_bench --quick --rounds 1      # 2,000 connections
    .venv/bin/python -m benchmarks.mqttconn_bench --ringmq-args "--shards 2" --brokers ringmq
    .venv/bin/python -m benchmarks.mqttconn_bench --ringmq-mqtt-port 1884 --brokers ringmq

Theory of operation: one load generator (`mqttconn_load`, several forked processes) drives each
broker in turn, round by round (interleaved, so a slow minute of the shared machine hits every
broker alike). A run has four phases, stepped by this driver over pipes:

1. ramp: every process connects its share of the connections (and one subscriber each); the
   connect time runs from the driver's go to the last process's last CONNACK. Broker RSS is read
   before and once every connection is held (RSS per held connection is the difference).
2. idle (`--idle-s`): connections held, only PINGREQs: the broker's CPU for holding them.
3. steady (`--steady-s`): every connection publishes 1 message a second (jittered over the
   second); broker CPU over the window gives CPU %, and from the window's start to the end
   of the subscribers' drain (a broker behind the load works off its backlog then) CPU µs
   per published message; RSS is read at the window's end; the subscribers' counts give lost
   messages, their sampled send-to-delivery times the latency and its trend by 10 s (flat
   when the broker keeps up, growing when it falls behind).
4. close: DISCONNECT everywhere; the next run waits until the broker is quiet again. A broker
   started here that exited during the run fails it, with its exit status and a copy of its log.

`--report` runs nothing and prints the medians of earlier `--json` files (rounds run as
separate invocations, e.g. with RabbitMQ restarted between them).

Brokers: ringmq is started here for each run (`ringmq serve` on free loopback ports, a fresh
temporary data dir; `--ringmq-args` adds options, `--ringmq-src` runs another tree's src) or
used where it already listens (`--ringmq-mqtt-port`). Its CPU and RSS are those of the
`ringmq serve` process and its descendants, so a broker that forks shard processes is measured
whole. RabbitMQ is never started here: used when its `rabbitmq_mqtt` listener answers on
loopback (`--rabbitmq-mqtt-port`, docs/benchmarks.md says how to start it). mosquitto is
started here for each run when the binary exists (`proto_bench.Mosquitto`).

Descriptors: the driver raises its soft RLIMIT_NOFILE to the hard limit, so the brokers it
starts and the generator processes inherit it; each run records the broker's own limit (from
/proc/PID/limits) and warns when it is below the connections asked for. Every loop and wait is
bounded; a run that fails is reported, never retried silently.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import datetime as dt
import json
import multiprocessing as mp
import shlex
import shutil
import statistics
import subprocess
import tempfile
import time
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

from benchmarks import amqp_brokers as brokers
from benchmarks import mqttconn_load as load
from benchmarks.proto_bench import Mosquitto, listening

BROKERS = ("ringmq", "rabbitmq", "mosquitto")


@dataclasses.dataclass(frozen=True, slots=True)
class Options:
    connections: int
    processes: int
    steady_s: float
    idle_s: float
    drain_s: float
    qos: int
    sub_qos: int
    keepalive_s: int
    concurrency: int
    connect_timeout_s: float
    ramp_timeout_s: float
    spread_sources: bool


def fd_limit(pid: int) -> int | None:
    """The soft "Max open files" of a process (None when it cannot be read)."""
    try:
        for line in Path(f"/proc/{pid}/limits").read_text().splitlines():
            if line.startswith("Max open files"):
                return int(line.split()[3])
    except (OSError, ValueError, IndexError):
        pass
    return None


def _loadavg() -> str:
    return " ".join(Path("/proc/loadavg").read_text().split()[:3])


def _mib(n: float) -> float:
    return n / (1 << 20)


def _settle(stats: brokers.ProcessStats, budget_s: float = 60.0) -> None:
    """Wait (bounded) until the broker uses under 5% of a CPU: the last run's closes done."""
    deadline = time.monotonic() + budget_s
    prev = stats.sample()
    while prev is not None and time.monotonic() < deadline:
        time.sleep(1.0)
        cur = stats.sample()
        if cur is None or cur.cpu_s - prev.cpu_s < 0.05:
            return
        prev = cur


def _recv(pipe: Connection, timeout_s: float, what: str) -> dict[str, Any]:
    try:
        if not pipe.poll(timeout_s):
            return {"error": f"no answer to {what} in {timeout_s:.0f} s"}
        answer: dict[str, Any] = pipe.recv()
    except (EOFError, OSError) as exc:
        return {"error": f"generator gone during {what}: {exc!r}"}
    return answer


def _percentile(values: list[int], q: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] / 1e6


def run_once(name: str, port: int, pid: int | None, opts: Options, seed: int) -> dict[str, Any]:
    """One run against the MQTT listener on `port` (the four phases of the docstring)."""
    # ringmq's descendants are its own (shard processes, later); RabbitMQ's and mosquitto's
    # helpers come and go, and a vanished pid would void every sample.
    others = brokers.descendants(pid) if pid is not None and name == "ringmq" else ()
    stats = brokers.ProcessStats(pid, others)
    _settle(stats)
    row: dict[str, Any] = {
        "broker": name,
        "connections": opts.connections,
        "broker_fd_limit": fd_limit(pid) if pid is not None else None,
        "started_utc": dt.datetime.now(dt.UTC).strftime("%H:%M:%S"),
        "loadavg_start": _loadavg(),
        "error": None,
    }
    limit = row["broker_fd_limit"]
    if limit is not None and limit < opts.connections + opts.processes + 64:
        print(f"  warning: {name}'s descriptor limit is {limit}: fewer connections will fit")
    shares = [
        opts.connections // opts.processes + (1 if i < opts.connections % opts.processes else 0)
        for i in range(opts.processes)
    ]
    ctx = mp.get_context("fork")
    pipes: list[Connection] = []
    procs = []
    for i, share in enumerate(shares):
        plan = load.Plan(
            index=i,
            host="127.0.0.1",
            port=port,
            connections=share,
            qos=opts.qos,
            sub_qos=opts.sub_qos,
            keepalive_s=opts.keepalive_s,
            source=f"127.0.0.{2 + i}" if opts.spread_sources else None,
            concurrency=opts.concurrency,
            connect_timeout_s=opts.connect_timeout_s,
            seed=seed,
        )
        mine, theirs = ctx.Pipe()
        proc = ctx.Process(target=load.process_main, args=(plan, theirs), daemon=True)
        proc.start()
        pipes.append(mine)
        procs.append(proc)
    try:
        _phases(row, pipes, stats, opts)
    finally:
        for pipe in pipes:
            with contextlib.suppress(OSError):  # a generator that died
                pipe.send(("close", 15.0))
        closes = [_recv(p, 30, "close") for p in pipes]
        row["aborted_at_close"] = sum(c.get("aborted", 0) for c in closes)
        for proc in procs:
            proc.join(10)
            if proc.is_alive():
                proc.kill()
                proc.join(5)
        row["loadavg_end"] = _loadavg()
        _settle(stats)  # a broker still closing connections would weigh on the next run
    return row


def _phases(
    row: dict[str, Any], pipes: list[Connection], stats: brokers.ProcessStats, opts: Options
) -> None:
    before = stats.sample()
    row["rss_before_mib"] = _mib(before.rss_bytes) if before else None
    # 1. ramp
    t0 = time.monotonic_ns()
    deadline = time.monotonic() + opts.ramp_timeout_s
    for pipe in pipes:
        pipe.send(("ramp", deadline))
    ramps = [_recv(p, opts.ramp_timeout_s + 60, "ramp") for p in pipes]
    errors = [r["error"] for r in ramps if "error" in r]
    if errors:
        row["error"] = "; ".join(errors)
        return
    held_at = stats.sample()
    row["held"] = sum(r["held"] for r in ramps)
    row["failed"] = sum(r["failed"] for r in ramps)
    row["not_tried"] = sum(r["not_tried"] for r in ramps)
    row["connect_errors"] = _merge([r["errors"] for r in ramps])
    # connect time: to the last CONNACK (a broker that lets connects hang past its limit
    # would otherwise be charged for our connect timeout); the ramp: to the last attempt's end
    row["connect_s"] = (max(r["last_held_ns"] for r in ramps) - t0) / 1e9
    row["ramp_s"] = (max(r["ramp_end_ns"] for r in ramps) - t0) / 1e9
    row["connect_per_s"] = row["held"] / row["connect_s"] if row["connect_s"] > 0 else None
    row["generator_ramp_cpu_s"] = sum(r["ramp_cpu_s"] for r in ramps)
    if before and held_at:
        row["broker_ramp_cpu_s"] = held_at.cpu_s - before.cpu_s
        row["rss_held_mib"] = _mib(held_at.rss_bytes)
        if row["held"]:
            row["kib_per_conn"] = (held_at.rss_bytes - before.rss_bytes) / 1024 / row["held"]
    # 2. idle
    time.sleep(opts.idle_s)
    idle_end = stats.sample()
    if held_at and idle_end:
        row["idle_cpu_pct"] = (idle_end.cpu_s - held_at.cpu_s) / opts.idle_s * 100
    # 3. steady
    start = time.monotonic() + 1.0
    for pipe in pipes:
        pipe.send(("steady", start, opts.steady_s, opts.drain_s, 3.0))
    time.sleep(max(0.0, start - time.monotonic()))
    s0 = stats.sample()
    time.sleep(max(0.0, start + opts.steady_s - time.monotonic()))
    s1 = stats.sample()
    steadies = [_recv(p, opts.drain_s + 30, "steady") for p in pipes]
    drained = stats.sample()  # a broker that fell behind works off its backlog until here
    errors = [r["error"] for r in steadies if "error" in r]
    if errors:
        row["error"] = "; ".join(errors)
        return
    for key in ("published", "acked", "skipped", "received", "dropped", "late_slots"):
        row[key] = sum(r[key] for r in steadies)
    row["held_at_end"] = sum(r["held_at_end"] for r in steadies)
    row["drain_s"] = max(r["drain_s"] for r in steadies)
    row["subscribers_open"] = all(r["subscriber_open"] for r in steadies)
    row["lost"] = max(0, row["published"] - row["received"])
    row["generator_cpu_pct"] = sum(r["steady_cpu_s"] for r in steadies) / opts.steady_s * 100
    latencies = [x for r in steadies for x in r["latencies_ns"]]
    row["latency_p50_ms"] = _percentile(latencies, 0.50)
    row["latency_p99_ms"] = _percentile(latencies, 0.99)
    row["latency_max_ms"] = _percentile(latencies, 1.0)
    row["latency_p50_by_10s_ms"] = _trend(steadies, start, opts.steady_s)
    if s0 and s1 and drained:
        row["broker_cpu_pct"] = (s1.cpu_s - s0.cpu_s) / opts.steady_s * 100
        # per published message, with the CPU of the drain: what a broker behind the load
        # spends after the window belongs to the window's messages (not per delivered: a
        # broker that loses them would look expensive per survivor)
        cpu = drained.cpu_s - s0.cpu_s
        row["us_per_msg"] = cpu / row["published"] * 1e6 if row["published"] else None
        row["rss_end_mib"] = _mib(s1.rss_bytes)
        row["hwm_end_mib"] = _mib(s1.hwm_bytes)
        row["runq_wait_s"] = s1.runq_wait_s - s0.runq_wait_s


def _trend(steadies: list[dict[str, Any]], start: float, steady_s: float) -> list[float | None]:
    """Median latency of the messages sent in each 10 s of the window: flat when the broker
    keeps up, growing when it falls behind (a backlog in its sockets or queues)."""
    buckets: list[list[int]] = [[] for _ in range(max(1, int(steady_s // 10)))]
    start_ns = int(start * 1e9)
    for r in steadies:
        for sent, latency in zip(r["sent_ns"], r["latencies_ns"], strict=True):
            i = int((sent - start_ns) // 10_000_000_000)
            if 0 <= i < len(buckets):
                buckets[i].append(latency)
    return [_percentile(b, 0.5) for b in buckets]


def _merge(counters: list[dict[str, int]]) -> dict[str, int]:
    out: dict[str, int] = {}
    for c in counters:
        for k, v in c.items():
            out[k] = out.get(k, 0) + v
    return out


# -- the table --------------------------------------------------------------------------------

_COLUMNS = (
    ("held", "held", "{:,.0f}"),
    ("connect_s", "connect s", "{:.1f}"),
    ("connect_per_s", "conn/s", "{:,.0f}"),
    ("rss_held_mib", "RSS held MiB", "{:.0f}"),
    ("kib_per_conn", "KiB/conn", "{:.1f}"),
    ("idle_cpu_pct", "idle CPU %", "{:.1f}"),
    ("broker_cpu_pct", "CPU %", "{:.1f}"),
    ("us_per_msg", "µs/msg", "{:.1f}"),
    ("rss_end_mib", "RSS end MiB", "{:.0f}"),
    ("lost", "lost", "{:,.0f}"),
    ("dropped", "dropped", "{:,.0f}"),
    ("latency_p50_ms", "p50 ms", "{:.1f}"),
    ("latency_p99_ms", "p99 ms", "{:.1f}"),
    ("generator_cpu_pct", "gen CPU %", "{:.1f}"),
)
_RATIOS = ("broker_cpu_pct", "us_per_msg", "rss_end_mib", "connect_s")


def _median(rows: list[dict[str, Any]], key: str) -> float | None:
    values = [r[key] for r in rows if r.get(key) is not None and not r["error"]]
    return statistics.median(values) if values else None


def report(rows: list[dict[str, Any]], names: list[str]) -> str:
    head = ["broker", *(title for _k, title, _f in _COLUMNS)]
    lines = [" | ".join(head), " | ".join("---" for _ in head)]
    medians: dict[str, dict[str, float | None]] = {}
    for n in names:
        mine = [r for r in rows if r["broker"] == n]
        medians[n] = {k: _median(mine, k) for k, _t, _f in _COLUMNS}
        cells = [n] + [
            fmt.format(medians[n][k]) if medians[n][k] is not None else "-"
            for k, _t, fmt in _COLUMNS
        ]
        lines.append(" | ".join(cells))
    if "ringmq" in names and len(names) > 1:
        lines += ["", "ringmq / other (medians): " + ", ".join(_RATIOS)]
        for n in names:
            if n == "ringmq":
                continue
            parts = []
            for k in _RATIOS:
                ours, theirs = medians["ringmq"][k], medians[n][k]
                parts.append(f"{ours / theirs:.2f}" if ours and theirs else "-")
            lines.append(f"  ringmq/{n}: " + " | ".join(parts))
    return "\n".join(lines)


# -- main -------------------------------------------------------------------------------------


def _parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--connections", type=int, help="publishing connections (default 20,000)")
    p.add_argument("--quick", action="store_true", help="2,000 connections, 30 s steady phase")
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--brokers", default=",".join(BROKERS))
    p.add_argument("--processes", type=int, default=4, help="generator processes")
    p.add_argument("--steady-s", type=float, help="steady phase (default 60 s, 30 s quick)")
    p.add_argument("--idle-s", type=float, help="idle phase (default 10 s, 5 s quick)")
    p.add_argument("--drain-s", type=float, default=30.0, help="bound on the drain")
    p.add_argument("--qos", type=int, choices=(0, 1), default=1, help="QoS of the publishes")
    p.add_argument("--sub-qos", type=int, choices=(0, 1), default=0)
    p.add_argument("--keepalive-s", type=int, default=60)
    p.add_argument("--concurrency", type=int, default=100, help="connects in flight a process")
    p.add_argument("--connect-timeout-s", type=float, default=15.0, help="per connection")
    p.add_argument("--ramp-timeout-s", type=float, default=240.0)
    p.add_argument("--no-source-spread", action="store_true", help="connect from 127.0.0.1 only")
    p.add_argument("--ringmq-args", default="", help='more `ringmq serve` options ("--x y")')
    p.add_argument("--ringmq-src", type=Path, help="run this tree's src (PYTHONPATH)")
    p.add_argument("--ringmq-mqtt-port", type=int, help="a ringmq already listening there")
    p.add_argument("--rabbitmq-mqtt-port", type=int, default=1883)
    p.add_argument("--json", type=Path, help="write every run here")
    p.add_argument(
        "--report",
        type=Path,
        nargs="+",
        help="run nothing: the table of these --json files' runs (rounds run separately, e.g. "
        "with a broker restarted between them)",
    )
    return p.parse_args(argv)


def _options(args: argparse.Namespace) -> Options:
    return Options(
        connections=args.connections or (2_000 if args.quick else 20_000),
        processes=args.processes,
        steady_s=args.steady_s or (30.0 if args.quick else 60.0),
        idle_s=args.idle_s or (5.0 if args.quick else 10.0),
        drain_s=args.drain_s,
        qos=args.qos,
        sub_qos=args.sub_qos,
        keepalive_s=args.keepalive_s,
        concurrency=args.concurrency,
        connect_timeout_s=args.connect_timeout_s,
        ramp_timeout_s=args.ramp_timeout_s,
        spread_sources=not args.no_source_spread,
    )


def _one(name: str, args: argparse.Namespace, opts: Options, seed: int) -> dict[str, Any]:
    """Start (when it is ours), run once, stop."""
    if name == "ringmq" and args.ringmq_mqtt_port:
        port = args.ringmq_mqtt_port
        return run_once(name, port, brokers.listening_pid(port), opts, seed)
    if name == "ringmq":
        ringmq = brokers.RingmqProcess(
            protocols=("mqtt",),
            src=args.ringmq_src.resolve() if args.ringmq_src else None,
            extra_args=tuple(shlex.split(args.ringmq_args)),
        )
        ringmq.start()
        try:
            row = run_once(name, ringmq.ports["mqtt"], ringmq.pid, opts, seed)
            if ringmq.returncode is not None:
                _exited(row, ringmq.returncode, ringmq.log_path)
            return row
        finally:
            ringmq.stop()  # removes its data dir and log: `_exited` kept a copy
    if name == "rabbitmq":
        port = args.rabbitmq_mqtt_port
        return run_once(name, port, brokers.listening_pid(port), opts, seed)
    mosquitto = Mosquitto()
    try:
        row = run_once(name, mosquitto.port, mosquitto.proc.pid, opts, seed)
        if mosquitto.proc.poll() is not None:
            _exited(row, mosquitto.proc.returncode, None)
        return row
    finally:
        mosquitto.stop()


def _exited(row: dict[str, Any], code: int, log: Path | None) -> None:
    """A broker started here exited during its run: say so, keep its log."""
    how = f"killed by signal {-code}" if code < 0 else f"exit status {code}"
    row["error"] = f"{row['broker']} exited during the run ({how})"
    if log is not None and log.exists():
        kept = Path(tempfile.gettempdir()) / f"mqttconn-{row['broker']}-{int(time.time())}.log"
        shutil.copyfile(log, kept)
        row["error"] += f"; log kept at {kept}"
        row["log_tail"] = log.read_text(errors="replace")[-3000:]


def _available(name: str, args: argparse.Namespace) -> bool:
    if name == "rabbitmq" and not listening(args.rabbitmq_mqtt_port):
        print(f"RabbitMQ: nothing answers on 127.0.0.1:{args.rabbitmq_mqtt_port}; skipped")
        return False
    if name == "mosquitto" and not shutil.which("mosquitto"):
        print("mosquitto: no binary (apt-get install mosquitto); skipped")
        return False
    return name in BROKERS


def _line(rnd: int, row: dict[str, Any]) -> str:
    if row["error"]:
        return f"round {rnd + 1} {row['broker']:<10} FAILED: {row['error']}"
    errors = "; ".join(f"{n} x {e}" for e, n in row.get("connect_errors", {}).items())
    trend = "/".join(f"{x:.0f}" if x is not None else "-" for x in row["latency_p50_by_10s_ms"])
    return (
        f"round {rnd + 1} {row['broker']:<10} held {row['held']:,}/{row['connections']:,} "
        f"in {row['connect_s']:.1f} s (ramp {row['ramp_s']:.1f} s), "
        f"idle CPU {row.get('idle_cpu_pct', 0):.1f}%, "
        f"CPU {row.get('broker_cpu_pct', 0):.1f}%, {row.get('us_per_msg') or 0:.1f} µs/msg, "
        f"RSS {row.get('rss_held_mib', 0):.0f}->{row.get('rss_end_mib', 0):.0f} MiB, "
        f"received {row['received']:,}/{row['published']:,} (skipped {row['skipped']:,}, "
        f"dropped {row['dropped']:,}, held at end {row['held_at_end']:,}), "
        f"latency p50 by 10 s {trend} ms, "
        f"gen CPU {row['generator_cpu_pct']:.1f}%, "
        f"load {row['loadavg_start']} -> {row['loadavg_end']}"
        + (f"; connect errors: {errors}" if errors else "")
    )


def main(argv: list[str] | None = None) -> int:
    args = _parse_args(argv)
    if args.report:
        runs = [r for f in args.report for r in json.loads(f.read_text())["runs"]]
        print(report(runs, list(dict.fromkeys(r["broker"] for r in runs))))
        return 0
    opts = _options(args)
    soft, hard = load.raise_fd_limit()
    print(f"descriptors: soft {soft}, hard {hard} (inherited by the brokers started here)")
    names = [n for n in args.brokers.split(",") if n and _available(n, args)]
    rows: list[dict[str, Any]] = []
    for rnd in range(args.rounds):
        for name in names:
            row = _one(name, args, opts, seed=rnd)
            row["round"] = rnd
            rows.append(row)
            print(_line(rnd, row), flush=True)
    print()
    print(report(rows, names))
    if args.json:
        meta = {
            "options": dataclasses.asdict(opts),
            "rabbitmq": brokers.rabbitmq_version(),
            "mosquitto": _mosquitto_version(),
        }
        args.json.write_text(json.dumps({"meta": meta, "runs": rows}, indent=1))
    ok = all(
        not r["error"] and r["held"] == r["held_at_end"] == r["connections"] and r["lost"] == 0
        for r in rows
    )
    return 0 if ok else 1


def _mosquitto_version() -> str:
    if not shutil.which("mosquitto"):
        return ""
    out = subprocess.run(["mosquitto", "-h"], capture_output=True, text=True, check=False)
    return (out.stdout or out.stderr).splitlines()[0] if (out.stdout or out.stderr) else ""


if __name__ == "__main__":
    raise SystemExit(main())
