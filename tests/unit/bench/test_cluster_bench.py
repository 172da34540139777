"""The cluster benchmark's report: medians per system and the issue's bars from the same run."""

from __future__ import annotations

from typing import Any

from benchmarks import cluster_bench as cb


def _run(system: str, msg_s: float, p50: float, p99: float) -> dict[str, Any]:
    metrics = {
        "confirmed_msg_s": msg_s,
        "confirm_p50_ms": p50,
        "confirm_p99_ms": p99,
        "broker_cpu_us_per_msg": 10.0,
        "broker_peak_rss_mib": 100.0,
        "broker_runq_wait_s": 1.0,
    }
    return {"system": system, "round": 0, "ok": True, "error": "", "metrics": metrics}


def test_report_takes_medians_and_judges_the_bars() -> None:
    runs = [
        _run(cb.SINGLE, 10_000, 10.0, 20.0),
        _run(cb.SINGLE, 30_000, 12.0, 22.0),
        _run(cb.SINGLE, 20_000, 11.0, 21.0),
        _run(cb.CLUSTER, 13_000, 12.5, 8.0),
        _run(cb.RABBIT, 6_000, 30.0, 16.0),
    ]
    text = cb.report(runs, [cb.SINGLE, cb.CLUSTER, cb.RABBIT])
    assert "| msg/s | 20,000 | 13,000 | 6,000 |" in text
    assert "cluster/single msg/s 0.65 (bar >= 0.6: met); confirm p50 +1.50 ms" in text
    assert "ringmq-3/rabbitmq-3 msg/s 2.17 (bar >= 2: met); confirm p99 0.50x" in text
    runs.append({**_run(cb.RABBIT, 0, 0, 0), "ok": False, "error": "boom", "metrics": {}})
    assert "FAILED rabbitmq-3 round 1: boom" in cb.report(runs, [cb.CLUSTER, cb.RABBIT])


def test_a_missed_bar_says_so_and_a_steady_rate_compares_latency_only() -> None:
    runs = [_run(cb.SINGLE, 20_000, 10.0, 20.0), _run(cb.CLUSTER, 10_000, 15.0, 30.0)]
    text = cb.report(runs, [cb.SINGLE, cb.CLUSTER])
    assert "0.50 (bar >= 0.6: MISSED)" in text
    assert "+5.00 ms (bar <= +2 ms: MISSED)" in text
    paced = cb.report(runs, [cb.SINGLE, cb.CLUSTER], paced=True)
    assert "at a steady rate: confirm p50 cluster - single +5.00 ms" in paced
    assert "bar >=" not in paced
