"""The `ringmq` data source in local Spark against a running broker (marked `spark`)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from .conftest import Env, python_env, wait_until

pytestmark = [pytest.mark.spark, pytest.mark.timeout(600)]

DEDUP = {"x-message-deduplication-window-ms": 600_000}


def _json(v: Any) -> Any:
    # Progress carries source offsets as JSON text.
    return json.loads(v) if isinstance(v, str) else v


def _bodies(n: int, prefix: str = "m") -> list[bytes]:
    return [f"{prefix}{i:05d}".encode() for i in range(n)]


def test_format_is_discovered_without_registration(spark: Any) -> None:
    # session() registers explicitly; the pyspark_ringmq module must also be importable for
    # Spark's own lookup (what users get with no code at all).
    import pyspark_ringmq

    assert pyspark_ringmq.DefaultSource.name() == "ringmq"


def test_batch_browse_is_repeatable_and_non_destructive(env: Env, spark: Any) -> None:
    env.declare("browse")
    env.publish("browse", _bodies(50))
    df = spark.read.format("ringmq").options(**env.options(queue="browse")).load()
    first = sorted(r.body for r in df.select("body").collect())
    again = df.orderBy("seq").collect()
    assert first == sorted(_bodies(50))
    assert [bytes(r.body) for r in again] == _bodies(50)
    assert [r.seq for r in again] == sorted(r.seq for r in again)
    assert {r.queue for r in again} == {"browse"}
    assert env.info("browse")["ready"] == 50


def test_stream_read_write_available_now(env: Env, spark: Any, tmp_path: Path) -> None:
    env.declare("s-in")
    env.declare("s-out", **DEDUP)
    env.publish("s-in", _bodies(120))
    reader = (
        spark.readStream.format("ringmq")
        .options(**env.options(queue="s-in", consumerName="rw"))
        .option("maxMessagesPerBatch", 50)
        .load()
    )
    q = (
        reader.selectExpr("body", "seq", "headers")
        .writeStream.format("ringmq")
        .options(url=env.amqp, routingKey="s-out", checkpointLocation=str(tmp_path / "ck"))
        .trigger(availableNow=True)
        .start()
    )
    q.awaitTermination(300)
    rows = [p["numInputRows"] for p in q.recentProgress if p["numInputRows"]]
    assert rows == [50, 50, 20]
    assert sorted(env.bodies("s-out")) == _bodies(120)
    info = env.info("s-in")
    assert info["ready"] == 0
    lease = info["leases"][0]
    # Settled up to the second batch at least; the last batch's commit may be one call late.
    assert lease["settled"] >= 100
    assert lease["settled"] + lease["held"] == 120
    src = q.lastProgress["sources"][0]
    assert _json(src["endOffset"]) == {"s-in": 120}
    assert _json(src["latestOffset"])["s-in"]["skipped"] == 0


def test_http_writer_batch_and_stream_dedup(env: Env, spark: Any, tmp_path: Path) -> None:
    # The bulk publish path (httpUrl given): batch ids hash the content, so writing the same
    # DataFrame again is dropped by a de-duplicating queue; a stream's ids follow the batch.
    env.declare("h-out", **DEDUP)
    env.declare("h-in")
    rows = [(b, "h-out", {"n": str(i)}) for i, b in enumerate(_bodies(30, "h"))]
    df = spark.createDataFrame(rows, "body binary, routing_key string, headers map<string,string>")
    for _ in range(2):
        df.write.format("ringmq").options(**env.options()).mode("append").save()
    assert sorted(env.bodies("h-out")) == _bodies(30, "h")
    env.publish("h-in", _bodies(70, "s"))
    q = (
        spark.readStream.format("ringmq")
        .options(**env.options(queue="h-in", consumerName="hw"))
        .option("maxMessagesPerBatch", 40)
        .load()
        .select("body")
        .writeStream.format("ringmq")
        .options(**env.options(routingKey="h-out", checkpointLocation=str(tmp_path / "ck")))
        .trigger(availableNow=True)
        .start()
    )
    q.awaitTermination(300)
    assert sorted(env.bodies("h-out")) == sorted(_bodies(30, "h") + _bodies(70, "s"))


def test_restart_from_checkpoint_replays_the_reserved_range(
    env: Env, spark: Any, tmp_path: Path
) -> None:
    env.declare("r-in")
    env.publish("r-in", _bodies(90))
    seen: list[tuple[int, list[int]]] = []
    fail = {"batch": 1}

    def sink(df: Any, batch_id: int) -> None:
        positions = sorted(r.position for r in df.select("position").collect())
        if batch_id == fail["batch"]:
            raise RuntimeError("injected sink failure")
        seen.append((batch_id, positions))

    def run() -> Any:
        return (
            spark.readStream.format("ringmq")
            .options(**env.options(queue="r-in", consumerName="restart"))
            .option("maxMessagesPerBatch", 30)
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
    # Batch 1 (positions 30..59) was reserved and planned, not committed: still held.
    lease = env.info("r-in")["leases"][0]
    assert lease["next"] >= 60
    fail["batch"] = -1
    q = run()
    q.awaitTermination(300)
    assert seen[1] == (1, list(range(30, 60)))
    assert [b for b, _ in seen] == [0, 1, 2]
    assert sorted(p for _, ps in seen for p in ps) == list(range(90))


def test_abandoned_job_lease_expires_to_other_consumers(
    env: Env, spark: Any, tmp_path: Path
) -> None:
    import pika

    env.declare("a-in")
    env.publish("a-in", _bodies(20))

    def sink(df: Any, batch_id: int) -> None:
        raise RuntimeError("job abandoned")

    q = (
        spark.readStream.format("ringmq")
        .options(**env.options(queue="a-in", consumerName="abandoned", leaseMs="1500"))
        .load()
        .writeStream.foreachBatch(sink)
        .option("checkpointLocation", str(tmp_path / "ck"))
        .start()
    )
    with pytest.raises(Exception, match="job abandoned"):
        q.awaitTermination(300)
    assert env.info("a-in")["unacked"] == 20
    # Nobody renews the lease: the messages return to the head for an ordinary consumer.
    conn = pika.BlockingConnection(pika.ConnectionParameters("127.0.0.1", env.broker.port))
    ch = conn.channel()
    got: list[tuple[bytes, bool]] = []
    for method, _, body in ch.consume("a-in", inactivity_timeout=30):
        assert method is not None, "lease did not expire"
        got.append((body, method.redelivered))
        ch.basic_ack(method.delivery_tag)
        if len(got) == 20:
            break
    conn.close()
    assert got == [(b, True) for b in _bodies(20)]
    assert env.info("a-in")["leases"][0]["expired"] == 1


def _wait_group_gone(pgid: int, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            os.killpg(pgid, 0)
        except ProcessLookupError:
            return
        time.sleep(0.2)
    os.killpg(pgid, signal.SIGKILL)  # our own child group: the JVM did not exit by itself


def test_kill9_driver_mid_batch_then_restart(env: Env, tmp_path: Path) -> None:
    n, per_batch = 120, 40
    env.declare("k-in")
    env.declare("k-out", **DEDUP)
    env.publish("k-in", _bodies(n, "k"))
    before = env.call(lambda b: b.dedup.ids.duplicates)
    job = [
        sys.executable,
        str(Path(__file__).with_name("pipe_job.py")),
        env.amqp,
        env.http,
        "k-in",
        "k-out",
        "kill-test",
        str(tmp_path / "ck"),
        "15",
        str(per_batch),
        "300000",  # lease long enough to outlive the kill: the replay reads the held range
    ]
    p = subprocess.Popen(job, env=python_env(), start_new_session=True, stdout=subprocess.DEVNULL)
    try:
        # Kill as soon as part of the output is published, i.e. inside a batch.
        wait_until(lambda: env.info("k-out")["ready"] > 0 or p.poll() is not None, 300)
        assert p.poll() is None, "job finished before it could be killed"
        os.kill(p.pid, signal.SIGKILL)
        p.wait(30)
    finally:
        _wait_group_gone(p.pid, 60)
    published = env.info("k-out")["ready"]
    assert 0 < published < n
    lease = env.info("k-in")["leases"][0]
    assert lease["held"] > 0  # the killed batch's range is still reserved
    held_before = (lease["settled"], lease["next"])
    out = subprocess.run(job, env=python_env(), capture_output=True, timeout=400, check=False)
    assert out.returncode == 0, out.stderr.decode()[-3000:]
    bodies = env.bodies("k-out")
    assert sorted(bodies) == _bodies(n, "k")  # nothing lost, no duplicate left
    dropped = env.call(lambda b: b.dedup.ids.duplicates) - before
    assert 0 <= dropped <= per_batch  # duplicates came only from the replayed batch
    info = env.info("k-in")
    assert info["ready"] == 0
    lease = info["leases"][0]
    assert lease["expired"] == 0
    assert lease["settled"] >= held_before[0]
    assert lease["settled"] + lease["held"] == n
