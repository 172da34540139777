"""The `ringmq` source on stream queues: offsets in Spark's checkpoint, ranges read by offset.

A micro-batch is an offset range `[start, end)`; a replay reads the same range; nothing is
held or settled in the broker. The kills (the driver's, the broker's) end in an idempotent
sink: a queue with a de-duplication window, fed by the writer's deterministic message ids.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pika
import pytest

from ringmq.connector.client import StreamClient
from ringmq.connector.publisher import Publisher
from tests.serve import Serve

from .conftest import Env, python_env, wait_until
from .test_connector import DEDUP, _bodies, _wait_group_gone

pytestmark = [pytest.mark.spark, pytest.mark.timeout(600)]

STREAM = {"x-queue-type": "stream"}


def _declare(port: int, name: str, **arguments: Any) -> None:
    conn = pika.BlockingConnection(pika.ConnectionParameters("127.0.0.1", port))
    conn.channel().queue_declare(name, durable=True, arguments=arguments or None)
    conn.close()


def _collect(seen: list[tuple[int, list[int]]], bodies: dict[int, bytes]) -> Any:
    def sink(df: Any, batch_id: int) -> None:
        rows = df.select("position", "body").collect()
        seen.append((batch_id, sorted(r.position for r in rows)))
        bodies.update((r.position, bytes(r.body)) for r in rows)

    return sink


def test_micro_batches_are_offset_ranges_replayed_after_a_failure(
    env: Env, spark: Any, tmp_path: Path
) -> None:
    _declare(env.broker.port, "st-mb", **STREAM)
    env.publish("st-mb", _bodies(100))
    seen: list[tuple[int, list[int]]] = []
    bodies: dict[int, bytes] = {}
    collect = _collect(seen, bodies)
    fail = {"batch": 1}

    def sink(df: Any, batch_id: int) -> None:
        if batch_id == fail["batch"]:
            raise RuntimeError("injected sink failure")
        collect(df, batch_id)

    def run() -> Any:
        return (
            spark.readStream.format("ringmq")
            .options(**env.options(queue="st-mb"))
            .option("maxOffsetsPerTrigger", 30)
            .option("minMessagesPerPartition", 10)
            .load()
            .writeStream.foreachBatch(sink)
            .option("checkpointLocation", str(tmp_path / "ck"))
            .trigger(availableNow=True)
            .start()
        )

    q = run()
    with pytest.raises(Exception, match="injected sink failure"):
        q.awaitTermination(300)
    assert seen == [(0, list(range(30)))]
    fail["batch"] = -1
    run().awaitTermination(300)  # from the checkpoint: batch 1 is the same range again
    assert seen[1:] == [
        (1, list(range(30, 60))),
        (2, list(range(60, 90))),
        (3, list(range(90, 100))),
    ]
    env.publish("st-mb", _bodies(20, "n"))
    run().awaitTermination(300)  # a restart continues at the checkpoint's end
    assert seen[4:] == [(4, list(range(100, 120)))]
    assert bodies == dict(enumerate(_bodies(100) + _bodies(20, "n")))
    info = env.info("st-mb")
    assert info["leases"] == []  # nothing held in the broker
    assert info["first_offset"] == 0
    assert info["next_offset"] == 120  # reading removed nothing


def _starting(env: Env, spark: Any, ck: Path, **opts: Any) -> list[int]:
    seen: list[tuple[int, list[int]]] = []
    (
        spark.readStream.format("ringmq")
        .options(**env.options(queue="st-from", **opts))
        .load()
        .writeStream.foreachBatch(_collect(seen, {}))
        .option("checkpointLocation", str(ck))
        .trigger(availableNow=True)
        .start()
        .awaitTermination(300)
    )
    return sorted(p for _, ps in seen for p in ps)


def test_starting_offsets_each_form(env: Env, spark: Any, tmp_path: Path) -> None:
    _declare(env.broker.port, "st-from", **STREAM)
    env.publish("st-from", _bodies(10, "a"))
    time.sleep(0.05)
    t = int(time.time() * 1000)  # the broker stamps chunks with this machine's wall clock
    time.sleep(0.05)
    env.publish("st-from", _bodies(10, "b"))
    assert _starting(env, spark, tmp_path / "e") == list(range(20))  # default: earliest
    assert _starting(env, spark, tmp_path / "e2", startingOffsets="earliest") == list(range(20))
    assert _starting(env, spark, tmp_path / "o", startingOffsets="5") == list(range(5, 20))
    ts = _starting(env, spark, tmp_path / "t", startingOffsets=f"timestamp:{t}")
    assert ts == list(range(10, 20))
    assert _starting(env, spark, tmp_path / "t2", startingTimestamp=str(t)) == ts
    # latest: only what arrives after the query planned its start.
    seen: list[tuple[int, list[int]]] = []
    q = (
        spark.readStream.format("ringmq")
        .options(**env.options(queue="st-from", startingOffsets="latest"))
        .load()
        .writeStream.foreachBatch(_collect(seen, {}))
        .option("checkpointLocation", str(tmp_path / "l"))
        .trigger(processingTime="200 milliseconds")
        .start()
    )
    try:
        wait_until(lambda: str(q.status["message"]).startswith("Waiting"), 120)
        env.publish("st-from", _bodies(5, "c"))
        wait_until(lambda: sum(len(ps) for _, ps in seen) >= 5, 120)
    finally:
        q.stop()
    assert sorted(p for _, ps in seen for p in ps) == list(range(20, 25))


def test_batch_read_of_an_offset_range(env: Env, spark: Any) -> None:
    _declare(env.broker.port, "st-range", **STREAM)
    env.publish("st-range", _bodies(40))
    df = (
        spark.read.format("ringmq")
        .options(**env.options(queue="st-range", startingOffsets="5", endingOffsets="15"))
        .option("minMessagesPerPartition", 3)
        .load()
    )
    for _ in range(2):  # a range reads the same messages every time
        rows = df.orderBy("position").collect()
        assert [r.position for r in rows] == list(range(5, 15))
        assert [bytes(r.body) for r in rows] == _bodies(40)[5:15]
    whole = spark.read.format("ringmq").options(**env.options(queue="st-range")).load()
    assert whole.count() == 40  # earliest to latest


@pytest.mark.slow  # two driver JVMs, one killed: minutes on a loaded 2-core machine
def test_kill9_driver_mid_batch_then_restart(env: Env, tmp_path: Path) -> None:
    n, per_batch = 120, 40
    _declare(env.broker.port, "sk-in", **STREAM)
    env.declare("sk-out", **DEDUP)
    env.publish("sk-in", _bodies(n, "k"))
    before = env.call(lambda b: b.dedup.ids.duplicates)
    job = [
        sys.executable,
        str(Path(__file__).with_name("pipe_job.py")),
        *(env.amqp, env.http, "sk-in", "sk-out", "-", str(tmp_path / "ck")),
        *("15", str(per_batch), "0", "stream"),
    ]
    p = subprocess.Popen(job, env=python_env(), start_new_session=True, stdout=subprocess.DEVNULL)
    try:
        # Kill as soon as part of the output is published, i.e. inside a batch.
        wait_until(lambda: env.info("sk-out")["ready"] > 0 or p.poll() is not None, 300)
        assert p.poll() is None, "job finished before it could be killed"
        os.kill(p.pid, signal.SIGKILL)
        p.wait(30)
    finally:
        _wait_group_gone(p.pid, 60)
    assert 0 < env.info("sk-out")["ready"] < n
    out = subprocess.run(job, env=python_env(), capture_output=True, timeout=400, check=False)
    assert out.returncode == 0, out.stderr.decode()[-3000:]
    assert sorted(env.bodies("sk-out")) == _bodies(n, "k")  # nothing lost, no duplicate left
    dropped = env.call(lambda b: b.dedup.ids.duplicates) - before
    assert 0 <= dropped <= per_batch  # duplicates came only from the replayed batch
    assert env.info("sk-in")["leases"] == []


@pytest.mark.slow  # a broker subprocess killed and restarted under a running query
def test_broker_kill_mid_query_is_exactly_once(spark: Any, tmp_path: Path) -> None:
    from pyspark.errors import StreamingQueryException

    n, persistent = 1500, b"\x10\x00\x02"
    serve = Serve(tmp_path / "data", tmp_path / "serve-1.log", http=True)
    assert serve.http_port is not None
    amqp_port, http_port = serve.port, serve.http_port
    amqp, http = serve.amqp_url, serve.http_url
    current = [serve]

    def sink_count() -> int:
        with StreamClient(http) as c:
            return int(c.info("sb-out")["messages"])

    kills: list[int] = []

    def killer(stop: threading.Event) -> None:
        while not stop.is_set():
            with contextlib.suppress(OSError, ValueError):
                got = sink_count()
                if got >= n // 3:
                    current[0].kill()
                    kills.append(got)
                    current[0] = Serve(
                        tmp_path / "data",
                        tmp_path / "serve-2.log",
                        http=True,
                        amqp_port=amqp_port,
                        http_port=http_port,
                    )
                    return
            time.sleep(0.05)

    try:
        _declare(serve.port, "sb-in", **STREAM)
        _declare(serve.port, "sb-out", **DEDUP)
        with Publisher(amqp) as pub:
            pub.publish_many(("", "sb-in", persistent, b) for b in _bodies(n, "b"))
        opts = {"url": amqp, "httpUrl": http}
        stop = threading.Event()
        t = threading.Thread(target=killer, args=(stop,), daemon=True)
        t.start()
        try:
            for _ in range(8):  # bounded: a kill costs a query restart or two
                q = (
                    spark.readStream.format("ringmq")
                    .options(**opts, queue="sb-in", maxOffsetsPerTrigger="150")
                    .option("minMessagesPerPartition", 50)
                    .load()
                    .select("body")
                    .writeStream.format("ringmq")
                    .options(**opts, routingKey="sb-out", persistent="true")
                    .option("checkpointLocation", str(tmp_path / "ck"))
                    .trigger(availableNow=True)
                    .start()
                )
                try:
                    q.awaitTermination(300)
                except StreamingQueryException:
                    time.sleep(1)
                    continue
                if kills:
                    break
                time.sleep(0.5)  # ended before the kill: the next run finds nothing new
        finally:
            stop.set()
            t.join(timeout=120)
        assert kills, "the broker was never killed"
        assert kills[0] < n, kills  # the broker died mid-job
        with StreamClient(http) as c:
            bodies = sorted(r.body for r in c.browse_all("sb-out"))
            assert c.info("sb-in")["next_offset"] == n  # the stream lost nothing either
        assert bodies == _bodies(n, "b")  # every message exactly once
    finally:
        current[0].kill()
