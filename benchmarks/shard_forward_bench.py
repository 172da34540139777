"""The cost of forwarding a publish between shards, in broker CPU per message.

Usage (docs/benchmarks.md, "Forwarding between shards")::

    flock /tmp/bench.lock .venv/bin/python -m benchmarks.shard_forward_bench [--rounds 3]
        [--quick] [--cases p16,p1k,t16,t1k] [--publishers 4] [--timeout S] [--json FILE]

Theory of operation: three brokers are started first and stay up for the whole run, each a
process of its own on loopback with a temporary data dir:

* local: one `ringmq serve` (`amqp_brokers.RingmqProcess`);
* owner: `ringmq serve --shard-link-port 0 --shard-link-secret S --shard-index 1`, which holds
  the queues;
* origin: `python -m benchmarks.shard_origin` (shard 0), holding a copy of each of the
  owner's queues (nothing makes copies from metadata yet), forwarding on the shard link what
  its publishers send to them.

Each case is the pairs shape of `scenarios` (P publishers, one queue each, publisher confirms
with a window of 256 each, one consumer connection per queue with prefetch 1000), run with the
same forked load generator (`amqp_load`): once on `local` (publishers and consumer on it), once
`forwarded` (publishers on the origin, the consumer on the owner: a consumer on the origin of
a queue on the owner needs remote consumers through the link, which the server does not have
yet). The queues are declared fresh on the broker that holds them before each run. Broker CPU
comes from /proc (`amqp_brokers.ProcessStats`), per process, over the run: CPU per published
message of local, of origin and owner apart and summed; the forwarding cost of a round is
(origin + owner) - local of that round, and the table shows medians over the rounds. The two
runs of a case alternate their order between rounds. Every run is bounded by its message count
and `--timeout`; a run that fails (a timeout, a nack, a missing delivery) is reported as failed,
never retried. Before the rounds, 10 confirmed forwards must come back within `PROBE_S`, or the
run stops at once with the origin's log (a link that never confirms would otherwise cost every
forwarded run its whole timeout). At the end, `model` turns the measured costs into the
aggregate throughput of N shards (docs/benchmarks.md gives the formula and its assumptions).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import platform
import secrets
import statistics
import sys
import time
from datetime import UTC, datetime
from multiprocessing.process import BaseProcess
from pathlib import Path
from typing import Any, Final

if __package__ in (None, ""):  # run as a script: make `benchmarks` importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks import amqp_brokers as brokers
from benchmarks import amqp_client
from benchmarks import amqp_load as load
from benchmarks import scenarios as sc
from benchmarks.shard_origin import OriginProcess

_WINDOW: Final = 256


def _case(key: str, what: str, count: int, body: int, persistent: bool) -> sc.Scenario:
    return sc.Scenario(
        key,
        f"{what}, confirms ({_WINDOW} in flight per publisher)",
        sc.Shape.PAIRS,
        count,
        count // 10,
        body,
        queues=4,
        durable=persistent,
        persistent=persistent,
        confirm_window=_WINDOW,
    )


CASES: Final[dict[str, sc.Scenario]] = {
    c.key: c
    for c in (
        _case("p16", "16 B persistent, durable queues", 10_000, 16, persistent=True),
        _case("p1k", "1 KiB persistent, durable queues", 10_000, 1024, persistent=True),
        _case("t16", "16 B transient", 10_000, 16, persistent=False),
        _case("t1k", "1 KiB transient", 10_000, 1024, persistent=False),
    )
}
LOCAL, FORWARDED = "local", "forwarded"
MODEL_SHARDS: Final = (1, 2, 4, 8, 16)
PROBE_S: Final = 20.0
"""How long 10 confirmed forwards may take before the run gives up (a broken link)."""


def _loadavg() -> str:
    return " ".join(Path("/proc/loadavg").read_text().split()[:3])


def _queues(case: sc.Scenario) -> tuple[str, ...]:
    # Fixed names: the origin's copies are made once, at its start; each run declares the
    # owner's (or local's) queues fresh.
    return tuple(f"fwd.{case.key}.{i}" for i in range(case.queues))


def run_once(
    case: sc.Scenario,
    publish_url: str,
    consume_url: str,
    processes: dict[str, int | None],
    *,
    quick: bool,
    timeout_s: float,
) -> dict[str, float]:
    """One run: publishers on `publish_url`, the queues and their consumer on `consume_url`;
    CPU per published message of each of `processes` (name -> pid). RunFailedError on failure."""
    count = case.quick_count if quick else case.count
    names = _queues(case)
    published = count * len(names)
    topo = load.Topology(queues=tuple(load.QueueSpec(n, durable=case.durable) for n in names))
    load.setup_topology(consume_url, topo)
    stats = {name: brokers.ProcessStats(pid) for name, pid in processes.items()}
    before = {name: s.sample() for name, s in stats.items()}
    deadline = time.monotonic() + timeout_s
    procs: list[BaseProcess] = []
    results, ready = load.new_queue(), load.new_queue()
    metrics: dict[str, float] = {}
    try:
        spec = load.ConsumerSpec(consume_url, names, tuple(count for _ in names), prefetch=1000)
        procs.append(load.start_process(load.consumer_main, spec, ready, results))
        load.wait_result(ready, deadline, procs)
        specs = tuple(
            # no barrier queue: a basic.get on the origin's copy is refused, and every
            # message is confirmed (stored by its owner) before the producer ends anyway
            load.ProducerSpec(
                publish_url,
                "",
                name,
                case.body_size,
                count,
                persistent=case.persistent,
                confirm_window=case.confirm_window,
            )
            for name in names
        )
        procs.append(load.start_process(load.producers_main, specs, results))
        got = {r["role"]: r for r in (load.wait_result(results, deadline, procs) for _ in range(2))}
        prod, cons = got["producers"], got["consumer"]
        _check(prod["confirmed"], published, "confirms")
        _check(prod["nacked"], 0, "nacks")
        _check(cons["received"], published, "deliveries")
        after = {name: s.sample() for name, s in stats.items()}
        metrics["confirmed_msg_s"] = published / (prod["t_sent"] - prod["t_start"])
        metrics["e2e_msg_s"] = published / (cons["t_last"] - prod["t_start"])
        metrics["confirm_p50_ms"] = prod["confirm_p50_ms"]
        metrics["confirm_p99_ms"] = prod["confirm_p99_ms"]
        total = 0.0
        for name in processes:
            was, now = before[name], after[name]
            if was is None or now is None:
                raise load.RunFailedError(f"{name}: its process is gone")
            cpu_us = (now.cpu_s - was.cpu_s) / published * 1e6
            metrics[f"{name}_cpu_us_per_msg"] = cpu_us
            metrics[f"{name}_runq_wait_s"] = now.runq_wait_s - was.runq_wait_s
            total += cpu_us
        metrics["cpu_us_per_msg"] = total
        metrics["generator_cpu_s"] = prod["cpu_s"] + cons["cpu_s"]
        return metrics
    finally:
        load.stop_processes(procs)
        load.teardown_topology(consume_url, topo)


def _check(got: int, want: int, what: str) -> None:
    if got != want:
        raise load.RunFailedError(f"{what}: got {got}, expected {want}")


def _parse_args(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--quick", action="store_true", help="1/10 of the messages")
    ap.add_argument("--cases", default=",".join(CASES), help="e.g. p16,t16")
    ap.add_argument("--publishers", type=int, default=4, help="publishers (= queues) per run")
    ap.add_argument("--timeout", type=float, default=0.0, help="seconds per run (0: auto)")
    ap.add_argument("--json", type=Path, default=None, help="write every run here")
    args = ap.parse_args(argv)
    keys = [k.strip() for k in args.cases.split(",") if k.strip()]
    unknown = [k for k in keys if k not in CASES]
    if unknown:
        ap.error(f"unknown cases {unknown}; known: {','.join(CASES)}")
    if args.publishers < 1:
        ap.error("--publishers must be at least 1")
    args.cases = [dataclasses.replace(CASES[k], queues=args.publishers) for k in keys]
    if not args.timeout:
        args.timeout = 60.0 if args.quick else 300.0
    return args


def _fmt(value: float | None) -> str:
    if value is None:
        return "-"
    if abs(value) >= 100:
        return f"{value:,.0f}"
    return f"{value:.1f}" if abs(value) >= 10 else f"{value:.2f}"


def _median(values: list[float]) -> float | None:
    return statistics.median(values) if values else None


def summarize(runs: list[dict[str, Any]], keys: list[str]) -> dict[str, dict[str, float | None]]:
    """Per case: medians of each side's figures, and of the per-round cost and ratio (only
    rounds where both runs succeeded)."""
    out: dict[str, dict[str, float | None]] = {}
    for key in keys:
        mine = [r for r in runs if r["case"] == key and r["ok"]]
        local = {r["round"]: r["metrics"] for r in mine if r["setup"] == LOCAL}
        fwd = {r["round"]: r["metrics"] for r in mine if r["setup"] == FORWARDED}
        both = sorted(set(local) & set(fwd))

        def med(side: dict[int, dict[str, float]], metric: str) -> float | None:
            return _median([m[metric] for m in side.values() if metric in m])

        out[key] = {
            "local_cpu": med(local, "cpu_us_per_msg"),
            "origin_cpu": med(fwd, "origin_cpu_us_per_msg"),
            "owner_cpu": med(fwd, "owner_cpu_us_per_msg"),
            "fwd_cpu": med(fwd, "cpu_us_per_msg"),
            "cost": _median([fwd[r]["cpu_us_per_msg"] - local[r]["cpu_us_per_msg"] for r in both]),
            "ratio": _median([fwd[r]["cpu_us_per_msg"] / local[r]["cpu_us_per_msg"] for r in both]),
            "msg_s_ratio": _median(
                [fwd[r]["confirmed_msg_s"] / local[r]["confirmed_msg_s"] for r in both]
            ),
            **{
                f"{side}_{m}": med(data, m)
                for side, data in ((LOCAL, local), (FORWARDED, fwd))
                for m in ("confirmed_msg_s", "e2e_msg_s", "confirm_p50_ms", "confirm_p99_ms")
            },
        }
    return out


def report(summary: dict[str, dict[str, float | None]]) -> str:
    lines = [
        "| case | local µs/msg | origin µs/msg | owner µs/msg | origin+owner | forwarding cost"
        " µs/msg | fwd/local CPU | local msg/s | fwd msg/s | fwd/local msg/s |"
        " local confirm p50/p99 ms | fwd confirm p50/p99 ms |",
        "|---|" + "---:|" * 12,
    ]
    for key, s in summary.items():
        cells = [
            _fmt(s["local_cpu"]),
            _fmt(s["origin_cpu"]),
            _fmt(s["owner_cpu"]),
            _fmt(s["fwd_cpu"]),
            _fmt(s["cost"]),
            _fmt(s["ratio"]),
            _fmt(s["local_confirmed_msg_s"]),
            _fmt(s["forwarded_confirmed_msg_s"]),
            _fmt(s["msg_s_ratio"]),
            f"{_fmt(s['local_confirm_p50_ms'])} / {_fmt(s['local_confirm_p99_ms'])}",
            f"{_fmt(s['forwarded_confirm_p50_ms'])} / {_fmt(s['forwarded_confirm_p99_ms'])}",
        ]
        lines.append(f"| {key} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def model(summary: dict[str, dict[str, float | None]]) -> str:
    """Aggregate msg/s of N shards on N cores, N / (c_local + f * c_fwd) with f = (N-1)/N:
    the share of messages crossing shards under uniform placement and client spread."""
    header = "| case | c_local µs | c_fwd µs | " + " | ".join(f"N={n}" for n in MODEL_SHARDS)
    lines = [header + " |", "|---|---:|---:|" + "---:|" * len(MODEL_SHARDS)]
    for key, s in summary.items():
        c_local, c_fwd = s["local_cpu"], s["cost"]
        if c_local is None or c_fwd is None:
            continue
        cells = []
        for n in MODEL_SHARDS:
            f = (n - 1) / n
            cells.append(f"{n / ((c_local + f * c_fwd) / 1e6):,.0f}")
        lines.append(f"| {key} | {c_local:.1f} | {c_fwd:.1f} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def _idle_cpu(processes: dict[str, int | None], seconds: float = 5.0) -> dict[str, float]:
    """Each idle process's CPU in ms per second (timers, ticks): what a run's figures include."""
    stats = {n: brokers.ProcessStats(pid) for n, pid in processes.items()}
    before = {n: s.sample() for n, s in stats.items()}
    time.sleep(seconds)
    out: dict[str, float] = {}
    for n, s in stats.items():
        was, now = before[n], s.sample()
        if was is not None and now is not None:
            out[n] = (now.cpu_s - was.cpu_s) / seconds * 1e3
    return out


def main(argv: list[str] | None = None) -> int:
    args = _parse_args(argv)
    secret = secrets.token_hex(16)
    copies = tuple(name for case in args.cases for name in _queues(case))
    local = brokers.RingmqProcess(startup_timeout_s=120.0)
    owner = brokers.RingmqProcess(
        startup_timeout_s=120.0,
        extra_args=(
            "--shard-link-port", "0", "--shard-link-secret", secret, "--shard-index", "1",
        ),
    )  # fmt: skip
    origin: OriginProcess | None = None
    try:
        local_url = local.start()
        owner_url = owner.start()
        link_port = _link_port(owner)
        origin = OriginProcess(link_port, secret, copies)
        origin_url = origin.start()
        return _run(args, local, local_url, owner, owner_url, origin, origin_url)
    finally:
        for proc in (origin, owner, local):
            if proc is not None:
                proc.stop()


def _link_port(owner: brokers.RingmqProcess, timeout_s: float = 30.0) -> int:
    import re

    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        found = re.search(
            r"SHARD-LINK listening on [0-9.]+:(\d+)", owner.log_path.read_text(errors="replace")
        )
        if found:
            return int(found.group(1))
        time.sleep(0.05)
    raise RuntimeError("the owner did not report its shard link port")


def _run(
    args: argparse.Namespace,
    local: brokers.RingmqProcess,
    local_url: str,
    owner: brokers.RingmqProcess,
    owner_url: str,
    origin: OriginProcess,
    origin_url: str,
) -> int:
    setups = {
        LOCAL: (local_url, local_url, {"local": local.pid}),
        FORWARDED: (origin_url, owner_url, {"origin": origin.pid, "owner": owner.pid}),
    }
    meta = {
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "host": platform.node(),
        "cpus": len(os.sched_getaffinity(0)),
        "python": platform.python_version(),
        "mode": "quick" if args.quick else "full",
        "rounds": args.rounds,
        "publishers": args.publishers,
        "loadavg_before": _loadavg(),
        "pids": {"local": local.pid, "owner": owner.pid, "origin": origin.pid},
        "idle_cpu_ms_per_s": _idle_cpu(
            {"local": local.pid, "owner": owner.pid, "origin": origin.pid}
        ),
    }
    print(f"{meta['date']} {meta['cpus']} CPUs, load average {meta['loadavg_before']}")
    print(
        f"local {local_url} pid {local.pid}; owner {owner_url} pid {owner.pid};"
        f" origin {origin_url} pid {origin.pid}"
    )
    idle = ", ".join(f"{n} {v:.1f}" for n, v in meta["idle_cpu_ms_per_s"].items())
    print(f"idle CPU ms/s: {idle}")
    # A few confirmed forwards first, bounded: a link that never confirms fails the whole run
    # in seconds, not every forwarded run at its timeout.
    probe = dataclasses.replace(args.cases[0], count=10, quick_count=10, queues=1)
    try:
        run_once(probe, origin_url, owner_url, {}, quick=True, timeout_s=PROBE_S)
    except (load.RunFailedError, amqp_client.BrokerClosedError, OSError, TimeoutError) as exc:
        print(f"forwarding probe failed ({exc}); the origin's log says:", file=sys.stderr)
        print(origin.log_tail(), file=sys.stderr)
        return 2
    runs: list[dict[str, Any]] = []
    for case in args.cases:
        for round_no in range(args.rounds):
            order = (LOCAL, FORWARDED) if round_no % 2 == 0 else (FORWARDED, LOCAL)
            for setup in order:
                publish_url, consume_url, processes = setups[setup]
                run: dict[str, Any] = {
                    "case": case.key,
                    "round": round_no,
                    "setup": setup,
                    "load": _loadavg(),
                }
                t0 = time.monotonic()
                try:
                    run["metrics"] = run_once(
                        case,
                        publish_url,
                        consume_url,
                        processes,
                        quick=args.quick,
                        timeout_s=args.timeout,
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
                runs.append(run)
                shown = ", ".join(f"{k}={_fmt(v)}" for k, v in run["metrics"].items())
                status = shown if run["ok"] else f"FAILED: {run['error']}"
                print(
                    f"[{case.key} round {round_no + 1}/{args.rounds} {setup} load {run['load']}]"
                    f" {status}",
                    flush=True,
                )
    meta["loadavg_after"] = _loadavg()
    keys = [c.key for c in args.cases]
    summary = summarize(runs, keys)
    count = args.cases[0].quick_count if args.quick else args.cases[0].count
    print()
    print(
        f"{args.publishers} publishers x {count:,} messages, confirms, {meta['mode']} mode,"
        f" medians over {args.rounds} round(s); load average {meta['loadavg_before']} ->"
        f" {meta['loadavg_after']}"
    )
    print(report(summary))
    print()
    print("model: aggregate msg/s of N shards on N cores = N / (c_local + (N-1)/N * c_fwd)")
    print(model(summary))
    for r in runs:
        if not r["ok"]:
            print(f"FAILED {r['case']} {r['setup']} round {r['round'] + 1}: {r['error'][:200]}")
    if not all(r["ok"] for r in runs):
        print(f"origin log tail:\n{origin.log_tail()}")
        print(f"owner log tail:\n{owner.log_path.read_text(errors='replace')[-2000:]}")
    if args.json:
        args.json.write_text(json.dumps({"meta": meta, "runs": runs, "summary": summary}, indent=2))
        print(f"wrote {args.json}")
    return 0 if all(r["ok"] for r in runs) else 1


if __name__ == "__main__":
    sys.exit(main())
