"""Spark <-> ringmq throughput next to Spark reading the same rows from local Parquet.

    python benchmarks/spark_bench.py [--messages 50000] [--sizes 100,1024] [--master local[2]]

Starts `ringmq serve` on free loopback ports in a subprocess (so the broker does not share the
driver's interpreter), then for each message size:

* publish: N messages into a queue with the connector's confirmed publisher (setup, reported);
* ringmq -> Spark (stream): `readStream.format("ringmq")` with AvailableNow into the `noop`
  sink (reserve, parallel range reads, settle);
* ringmq -> Spark (browse): `read.format("ringmq")` into `noop` (non-destructive);
* Spark -> ringmq: `df.write.format("ringmq")` of N rows (confirmed, message ids);
* Parquet ceiling: the same rows read from a local Parquet file into `noop`.

Every figure is messages per second of wall time of the Spark action (job planning included),
best of `--rounds`.
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

_PORT = re.compile(r"(AMQP|HTTP) listening on [\d.]+:(\d+)")


def start_broker(data_dir: Path) -> tuple[subprocess.Popen[bytes], int, int]:
    cmd = [
        sys.executable,
        "-m",
        "ringmq",
        "serve",
        "--amqp-port",
        "0",
        "--http-port",
        "0",
        "--data-dir",
        str(data_dir),
    ]
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    ports: dict[str, int] = {}
    deadline = time.monotonic() + 60
    assert p.stdout is not None
    while len(ports) < 2 and time.monotonic() < deadline:
        line = p.stdout.readline().decode(errors="replace")
        if not line and p.poll() is not None:
            raise RuntimeError("ringmq serve exited")
        m = _PORT.search(line)
        if m:
            ports[m.group(1)] = int(m.group(2))
    if len(ports) < 2:
        p.kill()
        raise RuntimeError("ringmq serve did not report its ports")
    return p, ports["AMQP"], ports["HTTP"]


def timed(fn: Any, rounds: int) -> float:
    best = float("inf")
    for _ in range(rounds):
        t = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t)
    return best


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="Spark <-> ringmq throughput")
    ap.add_argument("--messages", type=int, default=50_000)
    ap.add_argument("--sizes", default="100,1024")
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument("--master", default="local[2]")
    args = ap.parse_args(argv)

    import pika
    from pyspark.sql import functions as F  # noqa: N812 - Spark's convention

    from ringmq.connector.client import Publisher, StreamClient
    from ringmq.connector.spark import session

    work = Path(tempfile.mkdtemp(prefix="ringmq-spark-bench-"))
    broker, amqp_port, http_port = start_broker(work / "data")
    amqp = f"amqp://guest:guest@127.0.0.1:{amqp_port}/%2F"
    http = f"http://guest:guest@127.0.0.1:{http_port}"
    n = args.messages
    results: list[tuple[int, str, float]] = []
    try:
        spark = session("ringmq-spark-bench", args.master)
        conn = pika.BlockingConnection(pika.URLParameters(amqp))
        ch = conn.channel()
        for size in (int(s) for s in args.sizes.split(",")):
            body = b"x" * size
            for r in range(args.rounds):
                q = f"bench-{size}-{r}"
                ch.queue_declare(q)
                t = time.perf_counter()
                with Publisher(amqp) as pub:
                    pub.publish_many(("", q, b"\x00\x00", body) for _ in range(n))
                if r == 0:
                    results.append(
                        (size, "publish (connector, confirmed)", n / (time.perf_counter() - t))
                    )

            def browse(size: int = size) -> None:
                (
                    spark.read.format("ringmq")
                    .options(url=amqp, httpUrl=http, queue=f"bench-{size}-0")
                    .option("minMessagesPerPartition", 1)
                    .load()
                    .write.format("noop")
                    .mode("overwrite")
                    .save()
                )

            results.append((size, "ringmq -> Spark (browse)", n / timed(browse, args.rounds)))

            rnd = iter(range(args.rounds))

            def stream(size: int = size, rnd: Any = rnd) -> None:
                r = next(rnd)
                query = (
                    spark.readStream.format("ringmq")
                    .options(url=amqp, httpUrl=http, queue=f"bench-{size}-{r}")
                    .options(consumerName=f"bench-{size}-{r}", maxMessagesPerBatch=str(n))
                    .option("minMessagesPerPartition", 1)
                    .load()
                    .writeStream.format("noop")
                    .option("checkpointLocation", str(work / f"ck-{size}-{r}"))
                    .trigger(availableNow=True)
                    .start()
                )
                query.awaitTermination()
                got = sum(p["numInputRows"] for p in query.recentProgress)
                assert got == n, f"stream read {got} of {n}"

            results.append((size, "ringmq -> Spark (stream)", n / timed(stream, args.rounds)))

            rows = spark.range(n).select(F.lit(body).alias("body")).cache()
            rows.count()
            wq = f"bench-out-{size}"
            ch.queue_declare(wq)

            def write(rows: Any = rows, wq: str = wq) -> None:
                rows.write.format("ringmq").options(url=amqp, routingKey=wq).mode("append").save()

            results.append((size, "Spark -> ringmq (write)", n / timed(write, args.rounds)))
            with StreamClient(http) as c:
                assert c.info(wq)["ready"] == n * args.rounds

            parquet = str(work / f"rows-{size}.parquet")
            rows.write.mode("overwrite").parquet(parquet)

            def ceiling(parquet: str = parquet) -> None:
                spark.read.parquet(parquet).write.format("noop").mode("overwrite").save()

            results.append((size, "Parquet -> Spark (ceiling)", n / timed(ceiling, args.rounds)))
            rows.unpersist()
        conn.close()
        spark.stop()
    finally:
        broker.terminate()
        broker.wait(30)

    print(f"\n{n} messages per run, master {args.master}, best of {args.rounds}")
    print(f"{'size':>6}  {'path':34} {'msg/s':>10}")
    for size, path, rate in results:
        print(f"{size:>6}  {path:34} {rate:>10,.0f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
