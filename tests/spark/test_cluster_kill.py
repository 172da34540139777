"""The streaming connector on the standalone cluster while an executor and a worker die.

Marked `spark` and `slow`; uses the session-scoped `spark_cluster` (tests/spark/conftest.py).
"""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path
from typing import Any

import pytest

from .conftest import Env, SparkCluster, wait_until

pytestmark = [pytest.mark.spark, pytest.mark.slow, pytest.mark.timeout(1200)]

DEDUP = {"x-message-deduplication-window-ms": 600_000}


def _bodies(n: int, prefix: str) -> list[bytes]:
    return [f"{prefix}{i:05d}".encode() for i in range(n)]


def test_stream_survives_an_executor_and_a_worker_killed_mid_batch(
    env: Env, cspark: Any, spark_cluster: SparkCluster, tmp_path: Path
) -> None:
    from pyspark.sql.functions import col, udf
    from pyspark.sql.types import BinaryType

    n = 1200
    env.declare("k-in")
    env.declare("k-out", **DEDUP)
    env.publish("k-in", _bodies(n, "k"))

    # No type hints on the UDF: Spark would try to read them as a pandas UDF's.
    slow = udf(
        lambda body: (time.sleep(0.01), body)[1],  # type: ignore[func-returns-value]
        BinaryType(),
    )

    q = (
        cspark.readStream.format("ringmq")
        .options(**env.options(queue="k-in", consumerName="cluster-kill"))
        .option("maxMessagesPerBatch", 200)
        .option("minMessagesPerPartition", 50)
        .option("leaseMs", 600_000)
        .load()
        .select(slow(col("body")).alias("body"))
        .writeStream.format("ringmq")
        .options(**env.options(routingKey="k-out"))
        .option("checkpointLocation", str(tmp_path / "ck"))
        .trigger(availableNow=True)
        .start()
    )
    try:
        # An executor dies while a batch is being written, then a whole worker.
        wait_until(lambda: env.info("k-out")["ready"] > 0, 600)
        executors = spark_cluster.executor_pids()
        assert executors, "no executor to kill"
        os.kill(executors[0], signal.SIGKILL)
        wait_until(lambda: env.info("k-out")["ready"] >= n // 2 or not q.isActive, 300)
        assert q.isActive, "the job finished before the worker could be killed"
        spark_cluster.kill("worker1")
        q.awaitTermination(600)
    finally:
        if q.isActive:
            q.stop()
        spark_cluster.start_worker("worker1")  # the next tests get two workers again
    assert q.exception() is None
    assert sorted(env.bodies("k-out")) == _bodies(n, "k")  # every message exactly once
    assert env.info("k-in")["messages"] == 0
