"""MQTT and STOMP side by side: ringmq, RabbitMQ's plugins and mosquitto, in one run.

Usage (docs/benchmarks.md, "MQTT and STOMP"):

    python -m benchmarks.proto_bench                       # every scenario, 3 rounds
    python -m benchmarks.proto_bench --quick --rounds 1 --scenarios mqtt-fanin-q0,stomp-1p1c

Theory of operation: the same load generator (`benchmarks/proto_load.py`) drives each broker in
turn, scenario by scenario, round by round (interleaved, so a slow minute of the shared machine
hits every broker alike); the table shows medians and ringmq's ratio to each other broker.

* ringmq: started here (`ringmq serve` on free loopback ports, a temporary data dir), stopped
  at the end; or `--ringmq-mqtt-port` / `--ringmq-stomp-port` to use one already running.
* RabbitMQ: never started here; used when its `rabbitmq_mqtt` / `rabbitmq_stomp` listeners
  answer on loopback (`--rabbitmq-mqtt-port 1883`, `--rabbitmq-stomp-port 61613`;
  docs/benchmarks.md says how to start it with those plugins); skipped otherwise.
* mosquitto: started here when the `mosquitto` binary exists (Debian's package), on a free
  loopback port with `max_queued_messages 0` (no drops) and no persistence; MQTT only.

Broker CPU per delivered message comes from /proc (`amqp_brokers.ProcessStats`). Every run is
bounded by its count and timeout; a run that fails is reported, never retried silently.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import shutil
import socket
import statistics
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

from benchmarks import amqp_brokers as brokers
from benchmarks import proto_load as load
from tests.ports import free_port  # never in the kernel's ephemeral range


@dataclasses.dataclass(slots=True)
class Target:
    name: str
    ports: dict[str, int]
    pid: int | None


def listening(port: int) -> bool:
    """Something accepts connections on loopback `port`."""
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=1):
            return True
    except OSError:
        return False


class Mosquitto:
    """A mosquitto on a free loopback port, stopped by `stop`."""

    def __init__(self) -> None:
        self._dir = Path(tempfile.mkdtemp(prefix="mosquitto-bench-"))
        self.port = free_port()
        conf = self._dir / "mosquitto.conf"
        conf.write_text(
            f"listener {self.port} 127.0.0.1\nallow_anonymous true\n"
            "max_queued_messages 0\npersistence false\n"
        )
        self.proc = subprocess.Popen(
            ["mosquitto", "-c", str(conf)],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + 10
        while not listening(self.port):
            if time.monotonic() > deadline or self.proc.poll() is not None:
                self.stop()
                raise RuntimeError("mosquitto did not start")
            time.sleep(0.05)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
        shutil.rmtree(self._dir, ignore_errors=True)


def _parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--quick", action="store_true", help="a fifth of the message counts")
    p.add_argument("--scenarios", default=",".join(load.SCENARIOS))
    p.add_argument("--json", type=Path, help="write every run here")
    p.add_argument("--ringmq-mqtt-port", type=int)
    p.add_argument("--ringmq-stomp-port", type=int)
    p.add_argument("--rabbitmq-mqtt-port", type=int, default=1883)
    p.add_argument("--rabbitmq-stomp-port", type=int, default=61613)
    p.add_argument("--no-rabbitmq", action="store_true")
    p.add_argument("--no-mosquitto", action="store_true")
    return p.parse_args(argv)


def _run_one(target: Target, sc: load.Scenario) -> dict[str, Any]:
    stats = brokers.ProcessStats(target.pid)
    before = stats.sample()
    result = load.run(load.Endpoint(sc.protocol, target.ports[sc.protocol]), sc)
    after = stats.sample()
    row: dict[str, Any] = {
        "broker": target.name,
        "scenario": sc.name,
        "error": result.error,
        "published": result.published,
        "received": result.received,
        "expected": result.expected,
        "e2e_msg_s": result.e2e_rate,
        "publish_msg_s": result.publish_rate,
    }
    if before is not None and after is not None and result.received:
        row["broker_us_per_msg"] = (after.cpu_s - before.cpu_s) / result.received * 1e6
    return row


def _median(rows: list[dict[str, Any]], key: str) -> float | None:
    values = [r[key] for r in rows if r.get(key) is not None and not r["error"]]
    return statistics.median(values) if values else None


def _report(rows: list[dict[str, Any]], targets: list[Target], scenarios: list[str]) -> str:
    names = [t.name for t in targets]
    head = ["scenario", *(f"{n} msg/s" for n in names), *(f"{n} us/msg" for n in names)]
    others = [n for n in names if n != "ringmq"]
    head += [f"ringmq/{n}" for n in others]
    lines = [" | ".join(head), " | ".join("---" for _ in head)]
    for sc in scenarios:
        rates: dict[str, float | None] = {}
        cpu: dict[str, float | None] = {}
        for n in names:
            mine = [r for r in rows if r["broker"] == n and r["scenario"] == sc]
            rates[n] = _median(mine, "e2e_msg_s") if mine else None
            cpu[n] = _median(mine, "broker_us_per_msg") if mine else None
        cells = [sc]
        cells += [f"{rates[n]:,.0f}" if rates[n] else "-" for n in names]
        cells += [f"{cpu[n]:.1f}" if cpu[n] else "-" for n in names]
        for n in others:
            mine, theirs = rates.get("ringmq"), rates.get(n)
            cells.append(f"{mine / theirs:.2f}" if mine and theirs else "-")
        lines.append(" | ".join(cells))
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    args = _parse_args(argv)
    scenarios = [s for s in args.scenarios.split(",") if s]
    unknown = [s for s in scenarios if s not in load.SCENARIOS]
    if unknown:
        raise SystemExit(f"unknown scenario(s): {', '.join(unknown)}")
    protocols = sorted({load.SCENARIOS[s].protocol for s in scenarios})
    targets: list[Target] = []
    ringmq: brokers.RingmqProcess | None = None
    mosquitto: Mosquitto | None = None
    try:
        if args.ringmq_mqtt_port or args.ringmq_stomp_port:
            ports = {
                k: v
                for k, v in (("mqtt", args.ringmq_mqtt_port), ("stomp", args.ringmq_stomp_port))
                if v
            }
            targets.append(
                Target("ringmq", ports, brokers.listening_pid(next(iter(ports.values()))))
            )
        else:
            ringmq = brokers.RingmqProcess(protocols=tuple(protocols))
            ringmq.start()
            targets.append(Target("ringmq", ringmq.ports, ringmq.pid))
        if not args.no_rabbitmq:
            ports = {
                k: v
                for k, v in (
                    ("mqtt", args.rabbitmq_mqtt_port),
                    ("stomp", args.rabbitmq_stomp_port),
                )
                if k in protocols and listening(v)
            }
            if ports:
                pid = brokers.listening_pid(next(iter(ports.values())))
                targets.append(Target("rabbitmq", ports, pid))
            else:
                print("RabbitMQ: no MQTT/STOMP listener on loopback; skipped")
        if not args.no_mosquitto and "mqtt" in protocols and shutil.which("mosquitto"):
            mosquitto = Mosquitto()
            targets.append(Target("mosquitto", {"mqtt": mosquitto.port}, mosquitto.proc.pid))
        for t in targets:
            print(f"{t.name}: ports {t.ports}, pid {t.pid}")
        rows: list[dict[str, Any]] = []
        for rnd in range(args.rounds):
            for name in scenarios:
                sc = load.SCENARIOS[name]
                if args.quick:
                    sc = dataclasses.replace(sc, messages=max(sc.messages // 5, 1000))
                for t in targets:
                    if sc.protocol not in t.ports:
                        continue
                    row = _run_one(t, sc)
                    row["round"] = rnd
                    rows.append(row)
                    status = row["error"] or (
                        f"{row['e2e_msg_s']:,.0f} msg/s, {row['received']}/{row['expected']}"
                    )
                    print(f"round {rnd + 1} {name:<15} {t.name:<10} {status}", flush=True)
        print()
        print(_report(rows, targets, scenarios))
        if args.json:
            args.json.write_text(json.dumps(rows, indent=1))
        ok = all(not r["error"] and r["received"] == r["expected"] for r in rows)
        return 0 if ok else 1
    finally:
        if ringmq is not None:
            ringmq.stop()
        if mosquitto is not None:
            mosquitto.stop()


if __name__ == "__main__":
    raise SystemExit(main())
