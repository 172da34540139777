"""Spark <-> ringmq throughput next to Spark reading the same rows from local Parquet.

    python benchmarks/spark_bench.py [--messages 200000] [--sizes 100,1024] [--rounds 1]

Starts `ringmq serve` on free loopback ports in a subprocess (so the broker does not share the
driver's interpreter), then for each message size runs every path at two sizes, `n/4` and `n`
messages (`--messages` is n):

* publish: the rows into queues with the bulk publish endpoint (setup, reported);
* ringmq -> Spark (browse): `read.format("ringmq")` into the `noop` sink (non-destructive);
* ringmq -> Spark (stream): `readStream.format("ringmq")` with AvailableNow into `noop`
  (reserve, parallel columnar range reads, settle), one micro-batch per action
  (`maxMessagesPerBatch` = the action's message count);
* Spark -> ringmq (write, http): `df.write.format("ringmq")` with `httpUrl` (bulk publish,
  confirmed, message ids);
* Spark -> ringmq (write, amqp): the same through AMQP publisher confirms;
* Parquet ceiling: the same rows read from a local Parquet file into `noop`.

Two figures per path, both from wall time of the Spark action (planning included):
*whole* = n / t(n), what one action of n messages sees, Spark's fixed start-up cost included;
*steady* = (n - n/4) / (t(n) - t(n/4)), the marginal rate once the fixed cost is paid (what a
long-running pipeline sees per extra message). Every path, the Parquet ceiling included, is
measured the same way; each timing is the best of `--rounds`, after one untimed `n/4` run of
the same path (Python worker start-up and first imports are not a path's rate).
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
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


def best(fn: Callable[[int], None], rounds: int, warm: Callable[[], None] | None = None) -> float:
    """Best wall time of `fn(round)` over `rounds` calls, after an untimed `warm()`."""
    if warm is not None:
        warm()  # first-use costs (Python workers, imports) are not the path's rate
    out = float("inf")
    for r in range(rounds):
        t = time.perf_counter()
        fn(r)
        out = min(out, time.perf_counter() - t)
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="Spark <-> ringmq throughput")
    ap.add_argument("--messages", type=int, default=200_000)
    ap.add_argument("--sizes", default="100,1024")
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument("--master", default="local[2]")
    ap.add_argument("--paths", default="browse,stream,write-http,write-amqp,parquet")
    args = ap.parse_args(argv)

    import pika
    from pyspark.sql import functions as F  # noqa: N812 - Spark's convention

    from ringmq.connector.client import StreamClient
    from ringmq.connector.records import encode_publish
    from ringmq.connector.spark import session

    work = Path(tempfile.mkdtemp(prefix="ringmq-spark-bench-"))
    broker, amqp_port, http_port = start_broker(work / "data")
    amqp = f"amqp://guest:guest@127.0.0.1:{amqp_port}/%2F"
    http = f"http://guest:guest@127.0.0.1:{http_port}"
    big = args.messages
    small = big // 4
    paths = set(args.paths.split(","))
    results: list[tuple[int, str, float, float]] = []  # size, path, whole, steady

    def record(size: int, path: str, t_small: float, t_big: float) -> None:
        steady = (big - small) / (t_big - t_small) if t_big > t_small else float("inf")
        results.append((size, path, big / t_big, steady))
        print(
            f"  {size:>5} {path:30} t({small})={t_small:6.2f}s t({big})={t_big:6.2f}s", flush=True
        )

    try:
        spark = session(
            "ringmq-spark-bench", args.master, **{"spark.ui.showConsoleProgress": "false"}
        )
        conn = pika.BlockingConnection(pika.URLParameters(amqp))
        ch = conn.channel()
        client = StreamClient(http)
        for size in (int(s) for s in args.sizes.split(",")):
            body = b"x" * size

            def fill(q: str, n: int, body: bytes = body) -> float:
                ch.queue_declare(q)
                t = time.perf_counter()
                for a in range(0, n, 10_000):
                    k = min(10_000, n - a)
                    client.publish("", encode_publish((q, b"\x00\x00", body) for _ in range(k)))
                return time.perf_counter() - t

            # Setup: queues `<size>-<n>-<round>` for browse (kept) and stream (consumed).
            t_pub = 0.0
            for r in range(args.rounds):
                for n in (small, big):
                    t_pub += fill(f"bench-{size}-{n}-{r}", n)
            results.append(
                (size, "publish (bulk http, confirmed)", (small + big) * args.rounds / t_pub, 0.0)
            )

            if "browse" in paths:

                def browse(r: int, n: int = 0, size: int = size) -> None:
                    (
                        spark.read.format("ringmq")
                        .options(url=amqp, httpUrl=http, queue=f"bench-{size}-{n}-0")
                        .option("minMessagesPerPartition", 1)
                        .load()
                        .write.format("noop")
                        .mode("overwrite")
                        .save()
                    )

                t_s = best(lambda r: browse(r, small), args.rounds, lambda: browse(0, small))
                t_b = best(lambda r: browse(r, big), args.rounds)
                record(size, "ringmq -> Spark (browse)", t_s, t_b)

            if "stream" in paths:

                def stream(r: int | str, n: int, size: int = size) -> None:
                    q = f"bench-{size}-{n}-{r}"
                    query = (
                        spark.readStream.format("ringmq")
                        .options(url=amqp, httpUrl=http, queue=q, consumerName=q)
                        .options(maxMessagesPerBatch=str(n), minMessagesPerPartition="1")
                        .load()
                        .writeStream.format("noop")
                        .option("checkpointLocation", str(work / f"ck-{q}"))
                        .trigger(availableNow=True)
                        .start()
                    )
                    query.awaitTermination()
                    got = sum(p["numInputRows"] for p in query.recentProgress)
                    assert got == n, f"stream read {got} of {n}"

                fill(f"bench-{size}-{small}-warm", small)
                t_s = best(lambda r: stream(r, small), args.rounds, lambda: stream("warm", small))
                t_b = best(lambda r: stream(r, big), args.rounds)
                record(size, "ringmq -> Spark (stream)", t_s, t_b)

            frames = {
                n: spark.range(n).select(F.lit(body).alias("body")).cache() for n in (small, big)
            }
            for df in frames.values():
                df.count()
            wq = f"bench-out-{size}"
            ch.queue_declare(wq)

            for via in ("http", "amqp"):
                if f"write-{via}" not in paths:
                    continue

                def write(
                    r: int, n: int, via: str = via, wq: str = wq, frames: Any = frames
                ) -> None:
                    opts: dict[str, str] = {"url": amqp, "routingKey": wq, "publishVia": via}
                    if via == "http":
                        opts["httpUrl"] = http
                    frames[n].write.format("ringmq").options(**opts).mode("append").save()
                    assert client.info(wq)["ready"] == n, "write lost messages"
                    ch.queue_purge(wq)

                t_s = best(
                    lambda r, write=write: write(r, small),
                    args.rounds,
                    lambda write=write: write(0, small),
                )
                t_b = best(lambda r, write=write: write(r, big), args.rounds)
                record(size, f"Spark -> ringmq (write, {via})", t_s, t_b)

            if "parquet" in paths:
                files = {}
                for n, df in frames.items():
                    files[n] = str(work / f"rows-{size}-{n}.parquet")
                    df.write.mode("overwrite").parquet(files[n])

                def ceiling(r: int, n: int, files: Any = files) -> None:
                    spark.read.parquet(files[n]).write.format("noop").mode("overwrite").save()

                t_s = best(lambda r: ceiling(r, small), args.rounds, lambda: ceiling(0, small))
                t_b = best(lambda r: ceiling(r, big), args.rounds)
                record(size, "Parquet -> Spark (ceiling)", t_s, t_b)
            for df in frames.values():
                df.unpersist()
        client.close()
        conn.close()
        spark.stop()
    finally:
        broker.terminate()
        broker.wait(30)

    load = os.getloadavg()
    print(
        f"\n{small} and {big} messages per action, master {args.master}, best of {args.rounds}, "
        f"load average {load[0]:.1f} {load[1]:.1f} {load[2]:.1f}"
    )
    print(f"{'size':>6}  {'path':34} {'whole msg/s':>12} {'steady msg/s':>13}")
    for size, path, whole, steady in results:
        st = f"{steady:>13,.0f}" if steady else f"{'':>13}"
        print(f"{size:>6}  {path:34} {whole:>12,.0f} {st}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
