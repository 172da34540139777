"""Side-by-side AMQP benchmark: ringmq against RabbitMQ, interleaved, several rounds.

Usage (from the repository root)::

    .venv/bin/python -m benchmarks.run_all [--quick] [--rounds 3] [--scenarios a,b,...]
        [--ringmq-url URL | --no-ringmq | --ringmq-args ARGS] [--ringmq-variant NAME=ARGS ...]
        [--rabbitmq-url URL | --no-rabbitmq] [--json FILE] [--baseline-src OLD/src]

Without ``--ringmq-url`` a ``ringmq serve`` subprocess is started on ephemeral ports (with the
extra ``serve`` options of ``--ringmq-args``) and stopped at the end. RabbitMQ is never
started or stopped: when nothing answers on its URL it is skipped. For every scenario and
round the brokers run one after the other, the order alternating between rounds; the table
shows medians and, for every two brokers, the ratio of the one to the left over the other.

``--ringmq-variant NAME=ARGS`` (repeatable) starts one more ringmq with the extra ``serve``
options ARGS, as broker NAME, in the columns before ``ringmq``: with
``--ringmq-variant "shards2=--shards 2"`` the table has shards2/ringmq and shards2/rabbitmq.
A ringmq's CPU and memory include its child processes (found when its port answers).

``--baseline-src`` compares two commits of ringmq instead of ringmq and RabbitMQ: the source
tree given (``git archive <commit> | tar -x -C OLD``, then ``OLD/src``) is started too, with
this interpreter, as broker ``baseline``, and the ratio column is ringmq/baseline.
"""

from __future__ import annotations

import argparse
import json
import platform
import shlex
import statistics
import sys
import time
from datetime import UTC, datetime
from itertools import combinations
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run as a script: make `benchmarks` importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks import amqp_brokers as brokers
from benchmarks import amqp_client
from benchmarks import amqp_load as load
from benchmarks import scenarios as sc

DEFAULT_RABBITMQ_URL = "amqp://guest:guest@127.0.0.1:5672/"
STARTUP_S = 120.0
"""How long a started ringmq may take to listen (a loaded machine compiling every module)."""


def _parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--rabbitmq-url", default=DEFAULT_RABBITMQ_URL)
    parser.add_argument("--no-rabbitmq", action="store_true", help="skip RabbitMQ")
    parser.add_argument("--ringmq-url", default="", help="a running ringmq (else one is started)")
    parser.add_argument("--no-ringmq", action="store_true", help="skip ringmq")
    parser.add_argument(
        "--ringmq-args",
        default="",
        help='more `ringmq serve` options for the ringmq started (e.g. "--shards 2")',
    )
    parser.add_argument(
        "--ringmq-variant",
        action="append",
        default=[],
        metavar="NAME=ARGS",
        help="also start a ringmq with these `serve` options, as broker NAME (repeatable)",
    )
    parser.add_argument(
        "--ringmq-profile",
        type=Path,
        default=None,
        help="run the ringmq it starts under cProfile, writing this file at the end",
    )
    parser.add_argument(
        "--baseline-src",
        type=Path,
        default=None,
        help="also start the ringmq of this source tree's src/ (an older commit, e.g. from "
        "`git archive`) as broker 'baseline', interleaved with this one: the ratio column is "
        "ringmq/baseline",
    )
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--quick", action="store_true", help="about 1/10 of the counts")
    parser.add_argument("--scenarios", default=",".join(sc.SCENARIOS), help="e.g. a,b,g")
    parser.add_argument("--timeout", type=float, default=0.0, help="seconds per run (0: auto)")
    parser.add_argument("--json", type=Path, default=None, help="write every run here")
    parser.add_argument(
        "--report", type=Path, default=None, help="print the table of a --json file and exit"
    )
    args = parser.parse_args(argv)
    keys = [k.strip() for k in args.scenarios.split(",") if k.strip()]
    unknown = [k for k in keys if k not in sc.SCENARIOS]
    if unknown:
        parser.error(f"unknown scenarios {unknown}; known: {','.join(sc.SCENARIOS)}")
    args.keys = keys
    if args.ringmq_args and (args.ringmq_url or args.no_ringmq):
        parser.error(
            "--ringmq-args is for the ringmq this starts: not with --ringmq-url/--no-ringmq"
        )
    args.variants = {}
    for spec in args.ringmq_variant:
        name, _, extra = spec.partition("=")
        if not name or name in ("ringmq", "rabbitmq", "baseline", *args.variants):
            parser.error(f"--ringmq-variant {spec!r}: NAME must be new and not empty")
        args.variants[name] = tuple(shlex.split(extra))
    if not args.timeout:
        args.timeout = 90.0 if args.quick else 400.0
    return args


def _fmt(value: float | None) -> str:
    if value is None:
        return "-"
    if abs(value) >= 100:
        return f"{value:,.0f}"
    if abs(value) >= 1:
        return f"{value:.2f}"
    return f"{value:.3f}"


def _median(runs: list[dict[str, Any]], metric: str) -> float | None:
    values = [r["metrics"][metric] for r in runs if r["ok"] and metric in r["metrics"]]
    return statistics.median(values) if values else None


def _table(results: list[dict[str, Any]], names: list[str], keys: list[str]) -> str:
    # Every column over every later one: with variants first, variant/ringmq and
    # variant/rabbitmq; above 1 is better for throughputs, worse otherwise.
    pairs = list(combinations(names, 2))
    header = ["scenario", "metric", *names, *(f"{a}/{b}" for a, b in pairs)]
    rows = [header]
    for key in keys:
        wanted = {**sc.METRICS[key], **sc.COMMON_METRICS}
        for metric, higher_better in wanted.items():
            medians = {
                n: _median(
                    [r for r in results if r["scenario"] == key and r["broker"] == n], metric
                )
                for n in names
            }
            row = [key, metric + ("" if higher_better else " (lower better)")]
            row += [_fmt(medians[n]) for n in names]
            for a, b in pairs:
                top, bottom = medians[a], medians[b]
                row.append(f"{top / bottom:.3f}" if top is not None and bottom else "-")
            rows.append(row)
        for n in names:
            failed = [
                r for r in results if r["scenario"] == key and r["broker"] == n and not r["ok"]
            ]
            if failed:
                rows.append([key, f"FAILED runs on {n}: {len(failed)}", failed[0]["error"][:60]])
    widths = [max(len(r[i]) if i < len(r) else 0 for r in rows) for i in range(len(header))]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(r, widths, strict=False)) for r in rows)


def main(argv: list[str] | None = None) -> int:
    args = _parse_args(argv)
    if args.report:
        saved = json.loads(args.report.read_text())
        runs, meta = saved["runs"], saved["meta"]
        names = list(dict.fromkeys(r["broker"] for r in runs))
        keys = list(dict.fromkeys(r["scenario"] for r in runs))
        print(f"{meta['date']}, {meta['mode']} mode, medians over {meta['rounds']} round(s)")
        print(_table(runs, names, keys))
        return 0
    targets: list[brokers.BrokerTarget] = []
    started: brokers.RingmqProcess | None = None
    baseline: brokers.RingmqProcess | None = None
    variants: list[brokers.RingmqProcess] = []
    try:
        for name, extra in args.variants.items():
            variant = brokers.RingmqProcess(extra_args=extra, startup_timeout_s=STARTUP_S)
            try:
                url = variant.start()
            except (RuntimeError, OSError) as exc:
                # Asked for by name: no run without it (its log tail says why).
                print(f"{name}: not started ({exc})", file=sys.stderr)
                return 2
            variants.append(variant)
            targets.append(_ringmq_target(name, url))
        if not args.no_ringmq:
            url = args.ringmq_url
            if not url:
                started = brokers.RingmqProcess(
                    profile_path=args.ringmq_profile,
                    startup_timeout_s=STARTUP_S,
                    extra_args=tuple(shlex.split(args.ringmq_args)),
                )
                try:
                    url = started.start()
                except (RuntimeError, OSError) as exc:
                    print(f"ringmq: not started ({exc}); skipping it", file=sys.stderr)
                    started = None
            if url:
                targets.append(_ringmq_target("ringmq", url))
        if args.baseline_src is not None:
            # The same scenarios against an older tree's broker, in the same run (alternating
            # per round), so that the machine's load weighs on both alike.
            baseline = brokers.RingmqProcess(
                src=args.baseline_src.resolve(), startup_timeout_s=STARTUP_S
            )
            targets.append(_ringmq_target("baseline", baseline.start()))
        elif not args.no_rabbitmq:
            if brokers.port_open(args.rabbitmq_url):
                targets.append(brokers.BrokerTarget.at("rabbitmq", args.rabbitmq_url))
            else:
                print(f"rabbitmq: nothing answers at {args.rabbitmq_url}; skipping it")
        if not targets:
            print("no broker to benchmark", file=sys.stderr)
            return 2
        return _run(args, targets)
    finally:
        for proc in (started, baseline, *variants):
            if proc is not None:
                proc.stop()


def _ringmq_target(name: str, url: str) -> brokers.BrokerTarget:
    """A ringmq to measure: its process and any children it runs (shards) count."""
    return brokers.BrokerTarget.at(name, url, with_descendants=True)


def _run(args: argparse.Namespace, targets: list[brokers.BrokerTarget]) -> int:
    meta = {
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "host": platform.node(),
        "cpus": len(__import__("os").sched_getaffinity(0)),
        "python": platform.python_version(),
        "rabbitmq_version": brokers.rabbitmq_version(),
        "mode": "quick" if args.quick else "full",
        "rounds": args.rounds,
        "brokers": [t.describe() for t in targets],
        "ringmq_args": args.ringmq_args,
        "ringmq_variants": {name: shlex.join(extra) for name, extra in args.variants.items()},
    }
    for line in meta["brokers"]:
        print("broker:", line)
    results: list[dict[str, Any]] = []
    for key in args.keys:
        scenario = sc.SCENARIOS[key]
        for round_no in range(args.rounds):
            order = targets if round_no % 2 == 0 else targets[::-1]
            for target in order:
                started = time.monotonic()
                run: dict[str, Any] = {"scenario": key, "round": round_no, "broker": target.name}
                try:
                    run["metrics"] = sc.run_once(
                        scenario,
                        target,
                        quick=args.quick,
                        timeout_s=args.timeout,
                        tag=f"{target.name}.{round_no}",
                    )
                    run["ok"] = True
                    run["error"] = ""
                except (
                    load.RunFailedError,
                    amqp_client.BrokerClosedError,
                    OSError,
                    TimeoutError,
                ) as exc:
                    run.update(
                        ok=False,
                        error=str(exc).splitlines()[0] if str(exc) else repr(exc),
                        metrics={},
                    )
                run["wall_s"] = round(time.monotonic() - started, 2)
                results.append(run)
                shown = ", ".join(f"{k}={_fmt(v)}" for k, v in run["metrics"].items())
                status = shown if run["ok"] else f"FAILED: {run['error']}"
                print(
                    f"[{key} round {round_no + 1}/{args.rounds} {target.name}] {status}", flush=True
                )
    names = [t.name for t in targets]
    print()
    print(f"medians over {args.rounds} round(s), {meta['mode']} mode")
    print(_table(results, names, args.keys))
    if args.json:
        args.json.write_text(json.dumps({"meta": meta, "runs": results}, indent=2))
        print(f"wrote {args.json}")
    return 0 if all(r["ok"] for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
