"""The benchmark scenarios (a)-(g), the many-queue ones (m16, m1k, mp16, mp1k), and how one
run of one scenario against one broker goes.

Theory of operation: a ``Scenario`` is data (counts for full and quick mode, body size,
queue arguments, shape). ``run_once`` declares a fresh topology, forks the consumer process
(live shapes) and waits until it has subscribed, forks the producer, samples the broker's
CPU and RSS every ~100 ms while it waits for both results, checks the counts, turns the
timings into metrics, and deletes the topology. Backlog shapes publish first with nobody
consuming, then drain what the queue holds. The pairs shape is that of the live one with one
publisher per queue through the default exchange (no fanout): independent 1P+1C pairs at once,
whose count is per pair, so that aggregate rates and CPU per message count every pair's
messages. Any failure, count mismatch or passing of the
deadline raises ``RunFailedError`` after the forked processes are killed.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field
from enum import Enum
from multiprocessing.process import BaseProcess
from typing import Final

from benchmarks import amqp_load as load
from benchmarks.amqp_brokers import BrokerTarget, ProcessStats
from benchmarks.amqp_wire import FieldValue

_MIB: Final = 1024 * 1024


class Shape(Enum):
    LIVE = "live"  # consumers subscribed before the producer starts
    CONFIRMS = "confirms"  # producer alone, publisher confirms with a window
    BACKLOG = "backlog"  # producer alone, then drain what the queue holds
    PACED = "paced"  # live, fixed publish rate, latency measured in the consumer
    PAIRS = "pairs"  # one publisher and one consumer per queue, consumers subscribed first


@dataclass(frozen=True, slots=True)
class Scenario:
    key: str
    title: str
    shape: Shape
    count: int  # per publisher (per pair in the pairs shape)
    quick_count: int
    body_size: int
    prefetch: int = 1000
    queues: int = 1
    durable: bool = False
    persistent: bool = False
    confirm_window: int = 0  # per publisher
    rate_per_s: float = 0.0
    arguments: dict[str, FieldValue] = field(default_factory=dict)
    expect_depth: int | None = None  # what a backlog queue must hold before the drain


_PAIRS: Final = 16


def _many_queues() -> tuple[Scenario, ...]:
    # 16 independent pairs, none sharing a queue with another: the load a second shard could
    # take half of without any message crossing between shards. Persistent ones confirm with
    # a window per publisher (16 x 256 in flight), so that group commits have enough to batch
    # without every publisher waiting out a whole scenario-c window.
    def pairs(key: str, what: str, count: int, body: int, persistent: bool) -> Scenario:
        return Scenario(
            key,
            f"{_PAIRS} queues, {_PAIRS} publishers + {_PAIRS} consumers (1P+1C each), {what}",
            Shape.PAIRS,
            count,
            count // 10,
            body,
            queues=_PAIRS,
            durable=persistent,
            persistent=persistent,
            confirm_window=256 if persistent else 0,
        )

    return (
        pairs("m16", "16 B transient", 50_000, 16, persistent=False),
        pairs("m1k", "1 KiB transient", 25_000, 1024, persistent=False),
        pairs("mp16", "16 B persistent, durable, confirms", 15_000, 16, persistent=True),
        pairs("mp1k", "1 KiB persistent, durable, confirms", 15_000, 1024, persistent=True),
    )


SCENARIOS: Final[dict[str, Scenario]] = {
    s.key: s
    for s in (
        Scenario("a", "1P+1C 16 B transient, prefetch 1000", Shape.LIVE, 200_000, 20_000, 16),
        Scenario("b", "1P+1C 1 KiB transient, prefetch 1000", Shape.LIVE, 200_000, 20_000, 1024),
        Scenario(
            "c",
            "persistent 1 KiB, durable queue, confirms (1000 in flight)",
            Shape.CONFIRMS,
            100_000,
            10_000,
            1024,
            durable=True,
            persistent=True,
            confirm_window=1000,
        ),
        Scenario(
            "d",
            "x-max-length=1000 drop-head, publish 16 B, no consumer, then drain",
            Shape.BACKLOG,
            500_000,
            50_000,
            16,
            arguments={"x-max-length": 1000, "x-overflow": "drop-head"},
            expect_depth=1000,
        ),
        Scenario(
            "e",
            "backlog of 1 KiB transient, no consumer, then drain",
            Shape.BACKLOG,
            1_000_000,
            100_000,
            1024,
        ),
        Scenario(
            "f",
            "fanout to 10 queues, 10 consumers, 16 B",
            Shape.LIVE,
            100_000,
            10_000,
            16,
            queues=10,
        ),
        Scenario(
            "g",
            "end-to-end latency at a steady 5,000 msg/s, 16 B",
            Shape.PACED,
            50_000,
            15_000,
            16,
            rate_per_s=5000.0,
        ),
        *_many_queues(),
    )
}

_PAIRS_METRICS: Final[dict[str, bool]] = {
    "e2e_msg_s": True,  # every pair's deliveries / (first publish - last delivery)
    "publish_msg_s": True,
    "slowest_pair_msg_s": True,
}
_CONFIRM_METRICS: Final[dict[str, bool]] = {"confirm_p50_ms": False, "confirm_p99_ms": False}

# Metrics each scenario reports: name -> True when higher is better (a throughput).
METRICS: Final[dict[str, dict[str, bool]]] = {
    "a": {"e2e_msg_s": True, "publish_msg_s": True},
    "b": {"e2e_msg_s": True, "publish_msg_s": True},
    "c": {"confirmed_msg_s": True, "confirm_p50_ms": False, "confirm_p99_ms": False},
    "d": {"publish_msg_s": True, "drain_msg_s": True},
    "e": {"publish_msg_s": True, "drain_msg_s": True, "peak_rss_mib": False},
    "f": {"deliveries_msg_s": True, "publish_msg_s": True},
    "g": {"latency_p50_ms": False, "latency_p99_ms": False, "achieved_msg_s": True},
    "m16": _PAIRS_METRICS,
    "m1k": _PAIRS_METRICS,
    "mp16": {**_PAIRS_METRICS, **_CONFIRM_METRICS},
    "mp1k": {**_PAIRS_METRICS, **_CONFIRM_METRICS},
}
COMMON_METRICS: Final[dict[str, bool]] = {
    "broker_cpu_s": False,
    "broker_cpu_us_per_msg": False,  # CPU per published message: the noise-robust figure
    "broker_runq_wait_s": False,  # runnable but no CPU free: the machine, not the broker
    "broker_peak_rss_mib": False,
}


def _topology(scenario: Scenario, tag: str) -> load.Topology:
    base = f"bench.{scenario.key}.{tag}"
    names = [base] if scenario.queues == 1 else [f"{base}.{i}" for i in range(scenario.queues)]
    return load.Topology(
        queues=tuple(
            load.QueueSpec(n, durable=scenario.durable, arguments=scenario.arguments) for n in names
        ),
        fanout_exchange=f"{base}.fanout"
        if scenario.queues > 1 and scenario.shape is not Shape.PAIRS
        else "",
    )


def run_once(
    scenario: Scenario, broker: BrokerTarget, *, quick: bool, timeout_s: float, tag: str
) -> dict[str, float]:
    """One run of ``scenario`` against ``broker``; the metrics, or ``RunFailedError``."""
    count = scenario.quick_count if quick else scenario.count
    pairs = scenario.queues if scenario.shape is Shape.PAIRS else 1
    published = count * pairs
    topo = _topology(scenario, f"{tag}.{os.getpid()}")
    stats = ProcessStats(broker.pid, broker.others)
    load.setup_topology(broker.url, topo)
    hwm_reset = stats.reset_peak()
    before = stats.sample()
    deadline = time.monotonic() + timeout_s
    procs: list[BaseProcess] = []
    exchange, routing_key = topo.publish_target
    names = tuple(q.name for q in topo.queues)
    results = load.new_queue()
    ready = load.new_queue()

    def tick() -> None:
        stats.sample()

    def consume(targets: tuple[int, ...], latency: bool = False) -> load.Result:
        spec = load.ConsumerSpec(
            broker.url, names, targets, prefetch=scenario.prefetch, measure_latency=latency
        )
        procs.append(load.start_process(load.consumer_main, spec, ready, results))
        return load.wait_result(ready, deadline, procs, tick)

    def produce() -> None:
        spec = load.ProducerSpec(
            broker.url,
            exchange,
            routing_key,
            scenario.body_size,
            count,
            persistent=scenario.persistent,
            confirm_window=scenario.confirm_window,
            rate_per_s=scenario.rate_per_s,
            barrier_queue=names[0],
        )
        procs.append(load.start_process(load.producer_main, spec, results))

    def produce_pairs() -> None:
        specs = tuple(
            load.ProducerSpec(
                broker.url,
                "",
                name,
                scenario.body_size,
                count,
                persistent=scenario.persistent,
                confirm_window=scenario.confirm_window,
                barrier_queue=name,
            )
            for name in names
        )
        procs.append(load.start_process(load.producers_main, specs, results))

    def collect(n: int) -> dict[str, load.Result]:
        got = [load.wait_result(results, deadline, procs, tick) for _ in range(n)]
        return {r["role"]: r for r in got}

    metrics: dict[str, float] = {}
    try:
        if scenario.shape is Shape.PAIRS:
            consume(tuple(count for _ in names))
            produce_pairs()
            got = collect(2)
            prod, cons = got["producers"], got["consumer"]
            _check(cons["received"], published, "deliveries")
            if scenario.confirm_window:
                _check(prod["confirmed"], published, "confirms")
                metrics["confirm_p50_ms"] = prod["confirm_p50_ms"]
                metrics["confirm_p99_ms"] = prod["confirm_p99_ms"]
            metrics["e2e_msg_s"] = published / (cons["t_last"] - prod["t_start"])
            metrics["publish_msg_s"] = published / (prod["t_end"] - prod["t_start"])
            metrics["slowest_pair_msg_s"] = min(
                count / (t_last - t_start)
                for t_start, t_last in zip(prod["t_starts"], cons["t_lasts"], strict=True)
            )
            metrics["generator_cpu_s"] = prod["cpu_s"] + cons["cpu_s"]
        elif scenario.shape in (Shape.LIVE, Shape.PACED):
            consume(tuple(count for _ in names), latency=scenario.shape is Shape.PACED)
            produce()
            got = collect(2)
            prod, cons = got["producer"], got["consumer"]
            _check(cons["received"], count * len(names), "deliveries")
            span = cons["t_last"] - prod["t_start"]
            if scenario.shape is Shape.PACED:
                metrics["achieved_msg_s"] = count / (prod["t_sent"] - prod["t_start"])
                metrics["latency_p50_ms"] = cons["latency_p50_ms"]
                metrics["latency_p99_ms"] = cons["latency_p99_ms"]
                metrics["latency_max_ms"] = cons["latency_max_ms"]
            elif len(names) > 1:
                metrics["deliveries_msg_s"] = count * len(names) / span
                metrics["publish_msg_s"] = count / (prod["t_end"] - prod["t_start"])
            else:
                metrics["e2e_msg_s"] = count / span
                metrics["publish_msg_s"] = count / (prod["t_end"] - prod["t_start"])
            metrics["generator_cpu_s"] = prod["cpu_s"] + cons["cpu_s"]
        elif scenario.shape is Shape.CONFIRMS:
            produce()
            prod = collect(1)["producer"]
            _check(prod["confirmed"], count, "confirms")
            metrics["confirmed_msg_s"] = count / (prod["t_sent"] - prod["t_start"])
            metrics["confirm_p50_ms"] = prod["confirm_p50_ms"]
            metrics["confirm_p99_ms"] = prod["confirm_p99_ms"]
            metrics["generator_cpu_s"] = prod["cpu_s"]
        else:
            produce()
            prod = collect(1)["producer"]
            depth = int(prod["queue_depth"])
            _check(
                depth, count if scenario.expect_depth is None else scenario.expect_depth, "depth"
            )
            metrics["publish_msg_s"] = count / (prod["t_end"] - prod["t_start"])
            stats.sample()
            metrics["rss_after_publish_mib"] = stats.peak_rss_bytes / _MIB
            consume((depth,))
            cons = collect(1)["consumer"]
            _check(cons["received"], depth, "drained")
            metrics["drain_msg_s"] = depth / (cons["t_last"] - cons["t_consume"])
            metrics["generator_cpu_s"] = prod["cpu_s"] + cons["cpu_s"]
        after = stats.sample()
        if before is not None and after is not None:
            metrics["broker_cpu_s"] = after.cpu_s - before.cpu_s
            # Per published message, whole life (routing, every delivery, ack): robust to noise.
            metrics["broker_cpu_us_per_msg"] = metrics["broker_cpu_s"] / published * 1e6
            metrics["broker_runq_wait_s"] = after.runq_wait_s - before.runq_wait_s
            peak = max(stats.peak_rss_bytes, after.hwm_bytes if hwm_reset else 0)
            metrics["broker_peak_rss_mib"] = peak / _MIB
            if scenario.key == "e":
                metrics["peak_rss_mib"] = peak / _MIB
        return metrics
    finally:
        load.stop_processes(procs)
        load.teardown_topology(broker.url, topo)


def _check(got: int, want: int, what: str) -> None:
    if got != want:
        raise load.RunFailedError(f"{what}: got {got}, expected {want}")
