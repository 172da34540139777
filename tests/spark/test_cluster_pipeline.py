"""The example pipeline (`make pipeline MASTER=spark://...`) on the standalone cluster.

A module of its own: the cluster's two cores go to one application at a time, so the
connector tests' session (test_cluster.py) is stopped before this one submits.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from .conftest import SparkCluster, python_env

pytestmark = [pytest.mark.spark, pytest.mark.slow, pytest.mark.timeout(900)]

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "stock_pipeline.py"


def test_stock_pipeline_on_the_cluster(spark_cluster: SparkCluster) -> None:
    cmd = [sys.executable, str(EXAMPLE), "--ticks", "600", "--ring-size", "400"]
    cmd += ["--per-batch", "150", "--json", "--master", spark_cluster.url]
    out = subprocess.run(cmd, env=python_env(), capture_output=True, timeout=800, check=False)
    text = out.stdout.decode()
    assert out.returncode == 0, text[-2000:] + out.stderr.decode()[-3000:]
    report = json.loads(text.strip().splitlines()[-1])
    assert report["published"] == 600
    assert report["ring_evicted"] == 200
    assert report["processed"] == 400
    assert report["symbols"] == 6
