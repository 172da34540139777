"""The example pipeline (`make pipeline`) end to end on a small input (marked `spark`)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from .conftest import python_env

pytestmark = [pytest.mark.spark, pytest.mark.timeout(600)]

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "stock_pipeline.py"


def test_stock_pipeline_small() -> None:
    cmd = [sys.executable, str(EXAMPLE), "--ticks", "600", "--ring-size", "400"]
    cmd += ["--per-batch", "150", "--json"]
    out = subprocess.run(cmd, env=python_env(), capture_output=True, timeout=500, check=False)
    text = out.stdout.decode()
    assert out.returncode == 0, text[-2000:] + out.stderr.decode()[-3000:]
    report = json.loads(text.strip().splitlines()[-1])
    assert report["published"] == 600
    assert report["ring_evicted"] == 200  # the ring kept the newest 400 ticks
    assert report["processed"] == 400
    assert report["symbols"] == 6
    assert report["settled"] + report["held"] == 400
    lines = [ln for ln in text.splitlines() if ln.startswith("dashboard:")]
    assert len(lines) == 6
    assert "spark: batch" in text
