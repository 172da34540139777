"""AMQP 1.0 side by side: ringmq's AMQP 1.0 path, its AMQP 0-9-1 path, RabbitMQ's AMQP 1.0 plugin.

Usage (docs/benchmarks.md, "AMQP 1.0"):

    python -m benchmarks.amqp10_bench                     # scenarios a, b, c, g; 3 rounds
    python -m benchmarks.amqp10_bench --quick --rounds 1 --scenarios a

Theory of operation: one run per scenario, broker and round, interleaved (the order reversed
every other round, as `run_all` does). ringmq is started here (`ringmq serve` on free ports) and
measured twice per round: over AMQP 1.0 (`amqp10_load`, address `/queues/q`) and over AMQP 0-9-1
(`scenarios.run_once`, the same scenario key). RabbitMQ is used when its AMQP port answers
(`--rabbitmq-url`) with the `rabbitmq_amqp1_0` plugin on (3.10: address `/amq/queue/q`); it is
never started here. The table shows medians: msg/s (e2e for a and b, confirmed for c; g shows
its latency), broker CPU per message, and the two ratios the issue asks for.
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path
from typing import Any

from benchmarks import amqp10_load as l10
from benchmarks import amqp_brokers as brokers
from benchmarks import amqp_load
from benchmarks import scenarios as sc091


def _args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--quick", action="store_true")
    p.add_argument("--scenarios", default="a,b,c,g")
    p.add_argument("--rabbitmq-url", default="amqp://guest:guest@127.0.0.1:5672/")
    p.add_argument("--no-rabbitmq", action="store_true")
    p.add_argument("--ringmq-url", help="an already running ringmq (default: start one)")
    p.add_argument("--json", type=Path)
    return p.parse_args(argv)


def _amqp10_run(target: l10.Target, key: str, quick: bool, pid: int | None) -> dict[str, Any]:
    stats = brokers.ProcessStats(pid)
    before = stats.sample()
    row = l10.run(target, l10.SCENARIOS[key], quick=quick)
    after = stats.sample()
    if before is not None and after is not None and row.get("received"):
        row["broker_us_per_msg"] = (after.cpu_s - before.cpu_s) / row["received"] * 1e6
    if "latency_ms" in row:
        row["latency_p50_ms"] = row["latency_ms"]["p50_ms"]
        row["latency_p99_ms"] = row["latency_ms"]["p99_ms"]
    return row


def _amqp091_run(target: brokers.BrokerTarget, key: str, quick: bool, rnd: int) -> dict[str, Any]:
    row: dict[str, Any] = {"scenario": key, "broker": "ringmq 0-9-1"}
    try:
        m = sc091.run_once(sc091.SCENARIOS[key], target, quick=quick, timeout_s=400, tag=f"r{rnd}")
    except (amqp_load.RunFailedError, OSError, TimeoutError) as exc:
        row["error"] = str(exc).splitlines()[0]
        return row
    row["error"] = None
    row["e2e_msg_s"] = m.get("e2e_msg_s") or m.get("confirmed_msg_s") or m.get("achieved_msg_s")
    row["broker_us_per_msg"] = m.get("broker_cpu_us_per_msg")
    row["latency_p50_ms"] = m.get("latency_p50_ms")
    row["latency_p99_ms"] = m.get("latency_p99_ms")
    return row


def _median(rows: list[dict[str, Any]], key: str) -> float | None:
    values = [r[key] for r in rows if not r.get("error") and r.get(key) is not None]
    return statistics.median(values) if values else None


def _report(rows: list[dict[str, Any]], names: list[str], keys: list[str]) -> str:
    head = ["scenario", *(f"{n} msg/s" for n in names), *(f"{n} us/msg" for n in names)]
    head += ["p99 ms (g)", "1.0 / 0-9-1"]
    if "rabbitmq 1.0" in names:
        head.append("ringmq 1.0 / rabbitmq 1.0")
    lines = [" | ".join(head), " | ".join("---" for _ in head)]
    for key in keys:
        mine = {n: [r for r in rows if r["broker"] == n and r["scenario"] == key] for n in names}
        rate = {n: _median(mine[n], "e2e_msg_s") for n in names}
        cpu = {n: _median(mine[n], "broker_us_per_msg") for n in names}
        cells = [key]
        cells += [f"{rate[n]:,.0f}" if rate[n] else "-" for n in names]
        cells += [f"{cpu[n]:.1f}" if cpu[n] else "-" for n in names]
        p99 = {n: _median(mine[n], "latency_p99_ms") for n in names}
        cells.append(" / ".join(f"{p99[n]:.2f}" if p99[n] else "-" for n in names))
        a, b = rate.get("ringmq 1.0"), rate.get("ringmq 0-9-1")
        cells.append(f"{a / b:.2f}" if a and b else "-")
        if "rabbitmq 1.0" in names:
            r = rate.get("rabbitmq 1.0")
            cells.append(f"{a / r:.2f}" if a and r else "-")
        lines.append(" | ".join(cells))
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    args = _args(argv)
    keys = [k for k in args.scenarios.split(",") if k]
    ringmq: brokers.RingmqProcess | None = None
    try:
        if args.ringmq_url:
            url = args.ringmq_url
        else:
            ringmq = brokers.RingmqProcess()
            url = ringmq.start()
        ring091 = brokers.BrokerTarget.at("ringmq", url)
        ring10 = l10.Target("ringmq 1.0", url, "/queues/")
        rabbit: l10.Target | None = None
        rabbit_pid: int | None = None
        if not args.no_rabbitmq and brokers.port_open(args.rabbitmq_url):
            rabbit = l10.Target("rabbitmq 1.0", args.rabbitmq_url, "/amq/queue/")
            rabbit_pid = brokers.BrokerTarget.at("rabbitmq", args.rabbitmq_url).pid
        elif not args.no_rabbitmq:
            print(f"RabbitMQ: nothing answers on {args.rabbitmq_url}; skipped")
        names = ["ringmq 1.0", "ringmq 0-9-1"] + (["rabbitmq 1.0"] if rabbit else [])
        rows: list[dict[str, Any]] = []
        for rnd in range(args.rounds):
            for key in keys:
                order = names if rnd % 2 == 0 else names[::-1]
                for name in order:
                    if name == "ringmq 1.0":
                        row = _amqp10_run(ring10, key, args.quick, ring091.pid)
                    elif name == "ringmq 0-9-1":
                        row = _amqp091_run(ring091, key, args.quick, rnd)
                    else:
                        assert rabbit is not None
                        row = _amqp10_run(rabbit, key, args.quick, rabbit_pid)
                    row["round"] = rnd
                    rows.append(row)
                    rate = row.get("e2e_msg_s")
                    shown = row.get("error") or (f"{rate:,.0f} msg/s" if rate else "?")
                    print(f"round {rnd + 1} {key} {name:<13} {shown}", flush=True)
        print()
        print(_report(rows, names, keys))
        if args.json:
            args.json.write_text(json.dumps(rows, indent=1, default=str))
        return 0 if all(not r.get("error") for r in rows) else 1
    finally:
        if ringmq is not None:
            ringmq.stop()


if __name__ == "__main__":
    raise SystemExit(main())
