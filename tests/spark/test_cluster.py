"""The connector on a Spark standalone cluster: a master and two workers on 127.0.0.1.

Executors run in their own JVMs with their own Python workers, under the workers started by
the session-scoped `spark_cluster` fixture (tests/spark/conftest.py). Marked `spark` and
`slow`.
"""

from __future__ import annotations

import os
from typing import Any

import pytest

from .conftest import Env, SparkCluster

pytestmark = [pytest.mark.spark, pytest.mark.slow, pytest.mark.timeout(900)]

DEDUP = {"x-message-deduplication-window-ms": 600_000}


def _bodies(n: int, prefix: str) -> list[bytes]:
    return [f"{prefix}{i:05d}".encode() for i in range(n)]


def test_batch_browse_and_both_writers_on_the_cluster(
    env: Env, cspark: Any, spark_cluster: SparkCluster
) -> None:
    assert cspark.sparkContext.master == spark_cluster.url
    env.declare("c-in")
    env.publish("c-in", _bodies(2000, "c"))
    df = (
        cspark.read.format("ringmq")
        .options(**env.options(queue="c-in", minMessagesPerPartition="200"))
        .load()
    )
    assert df.rdd.getNumPartitions() >= 2
    pids = set(df.rdd.mapPartitions(lambda rows: [os.getpid()]).collect())
    assert os.getpid() not in pids  # read by executors' Python workers, not the driver
    assert len(spark_cluster.executor_pids()) == 2  # one executor JVM per worker
    assert sorted(r.body for r in df.select("body").collect()) == _bodies(2000, "c")
    env.declare("c-http", **DEDUP)
    df.select("body").write.format("ringmq").options(**env.options(routingKey="c-http")).mode(
        "append"
    ).save()
    env.declare("c-amqp")
    df.select("body").write.format("ringmq").options(
        url=env.amqp, routingKey="c-amqp", publishVia="amqp"
    ).mode("append").save()
    assert sorted(env.bodies("c-http")) == _bodies(2000, "c")
    assert sorted(env.bodies("c-amqp")) == _bodies(2000, "c")
    assert env.info("c-in")["ready"] == 2000  # browsing took nothing
