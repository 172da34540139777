"""The benchmark driver's table and report (no broker needed)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from benchmarks import run_all


def _run(broker: str, round_no: int, e2e: float, cpu: float) -> dict[str, object]:
    return {
        "scenario": "a",
        "round": round_no,
        "broker": broker,
        "ok": True,
        "error": "",
        "metrics": {"e2e_msg_s": e2e, "publish_msg_s": e2e, "broker_cpu_s": cpu},
    }


RUNS = [
    _run("ringmq", 0, 100.0, 2.0),
    _run("ringmq", 1, 300.0, 4.0),
    _run("ringmq", 2, 200.0, 3.0),
    _run("rabbitmq", 0, 100.0, 1.0),
    _run("rabbitmq", 1, 100.0, 1.0),
    {"scenario": "a", "round": 2, "broker": "rabbitmq", "ok": False, "error": "timeout",
     "metrics": {}},
]  # fmt: skip


def test_table_shows_medians_ratios_and_failures() -> None:
    table = run_all._table(RUNS, ["ringmq", "rabbitmq"], ["a"])
    rows = {line.split()[1]: line.split() for line in table.splitlines()[1:]}
    assert rows["e2e_msg_s"][2:] == ["200", "100", "2.000"]
    assert rows["broker_cpu_s"][-3:] == ["3.00", "1.00", "3.000"]
    assert "FAILED runs on rabbitmq: 1" in table
    assert "timeout" in table


def test_report_reprints_a_saved_run(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    saved = tmp_path / "bench.json"
    meta = {"date": "2026-11-22T04:00:00+00:00", "mode": "quick", "rounds": 3}
    saved.write_text(json.dumps({"meta": meta, "runs": RUNS}))
    assert run_all.main(["--report", str(saved)]) == 0
    out = capsys.readouterr().out
    assert "quick mode, medians over 3 round(s)" in out
    assert "ringmq/rabbitmq" in out


def test_unknown_scenarios_are_refused() -> None:
    with pytest.raises(SystemExit):
        run_all.main(["--scenarios", "a,z", "--no-ringmq", "--no-rabbitmq"])
