"""Spark <-> ringmq throughput next to Spark doing the same with the same rows in local Parquet.

    python benchmarks/spark_bench.py [--messages 200000] [--sizes 100,1024] [--rounds 2]

Starts `ringmq serve` on free loopback ports in a subprocess (so the broker does not share the
driver's interpreter). For each message size it makes n distinct pseudo-random bodies (a fixed
seed: every run moves the same bytes), then runs every path at two sizes, `n/4` and `n`
messages (`--messages` is n), each next to its Parquet ceiling on the same rows:

* publish: the rows into queues with the bulk publish endpoint (setup, reported);
* ringmq -> Spark (browse): `read.format("ringmq")` into the `noop` sink (non-destructive);
  ceiling: `read.parquet` into `noop` of a file holding exactly the rows that browse returned
  (all eleven columns of the ringmq schema);
* ringmq -> Spark (stream): `readStream.format("ringmq")` with AvailableNow into `noop`
  (reserve, parallel columnar range reads, settle), one micro-batch per action
  (`maxMessagesPerBatch` = the action's message count); ceiling: `readStream.parquet` of the
  same file with AvailableNow into `noop`, with its own checkpoint;
* ringmq -> Spark (stream offsets): `readStream.format("ringmq")` on a stream queue
  (`x-queue-type: stream`, filled like the queues) with AvailableNow into `noop`: the offsets
  live in the checkpoint, executors read offset ranges from `/log`; nothing reserved or
  settled, so every round reads the same stream from `earliest` with a fresh checkpoint;
  path `offsets` (beside the stream's floor and ceiling);
* Spark -> ringmq (write, http): `df.write.format("ringmq")` with `httpUrl` (bulk publish,
  confirmed, message ids); ceiling: `df.write.parquet` of the same DataFrame;
* Spark -> ringmq (write, amqp): the same through AMQP publisher confirms;
* `parquet-constant` (not run by default): the ceiling of earlier versions of this benchmark,
  a constant body (`F.lit`) read from Parquet. Parquet stores it as a one-entry dictionary and
  Spark's vectorized reader decodes dictionaries lazily, so `noop` never touches the bytes: it
  measures Spark's fixed cost only (200 000 rows of 1 KiB in about 0.1 s, "12 GB/s").

Two figures per path, both from wall time of the Spark action (planning included):
*whole* = n / t(n), what one action of n messages sees, Spark's fixed start-up cost included;
*steady* = (n - n/4) / (t(n) - t(n/4)), the marginal rate once the fixed cost is paid (what a
long-running pipeline sees per extra message). Every path and every ceiling is measured the
same way; each timing is the best of `--rounds` (`--median`: their median), after one untimed
`n/4` run of the same path
(Python worker start-up and first imports are not a path's rate). The last column is the
ceiling's whole rate over the path's; the one after it the Python floor's whole rate over the
path's (`FLOOR_OF`; the issue's goal: at most 2).
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any

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
        "--stomp-port",
        "off",
        "--mqtt-port",
        "off",
        "--stream-port",
        "off",
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
    # The rest of its output goes on being read, into a log file: a pipe nobody reads fills
    # (64 KiB of connection log lines: a few hundred Spark tasks' connections) and the broker
    # then blocks in its next log write.
    threading.Thread(
        target=_drain, args=(p.stdout, data_dir.parent / "broker.log"), daemon=True
    ).start()
    return p, ports["AMQP"], ports["HTTP"]


def _drain(out: IO[bytes], path: Path) -> None:
    with path.open("ab") as log:
        for line in out:
            log.write(line)


def process_cpu_s(pid: int) -> float:
    """CPU seconds (user + system) used so far by process `pid` (Linux `/proc`; 0 elsewhere)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def machine_cpu_s() -> tuple[float, float]:
    """(busy, idle) CPU seconds of the whole machine so far, every core summed (Linux
    `/proc/stat`; iowait counts as idle; zeros elsewhere)."""
    try:
        fields = [int(v) for v in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    except OSError:
        return 0.0, 0.0
    tick = os.sysconf("SC_CLK_TCK")
    idle = fields[3] + fields[4]
    return (sum(fields[:8]) - idle) / tick, idle / tick


def best(
    fn: Callable[[int], None],
    rounds: int,
    warm: Callable[[], None] | None = None,
    *,
    median: bool = False,
) -> float:
    """Best (or with `median`, the median) wall time of `fn(round)` over `rounds` calls,
    after an untimed `warm()`."""
    if warm is not None:
        warm()  # first-use costs (Python workers, imports) are not the path's rate
    times = []
    for r in range(rounds):
        t = time.perf_counter()
        fn(r)
        times.append(time.perf_counter() - t)
    return statistics.median(times) if median else min(times)


def random_bodies(n: int, size: int, seed: int) -> Any:
    """An Arrow binary array of `n` distinct pseudo-random bodies of `size` bytes (one buffer)."""
    import numpy as np
    import pyarrow as pa

    data = np.random.default_rng(seed).bytes(n * size)
    offsets = (np.arange(n + 1, dtype=np.int32) * size).tobytes()
    return pa.Array.from_buffers(pa.binary(), n, [None, pa.py_buffer(offsets), pa.py_buffer(data)])


FLOOR_OF = {
    "ringmq -> Spark (browse)": "Python source floor (read)",
    "ringmq -> Spark (stream)": "Python source floor (stream)",
    "ringmq -> Spark (stream offsets)": "Python source floor (stream)",
    "Spark -> ringmq (write, http)": "Python sink floor (write)",
    "Spark -> ringmq (write, amqp)": "Python sink floor (write)",
}
"""The do-nothing Python data source doing each ringmq path's job (`spark_null.py`)."""


class Results:
    """Timings per (size, path), printed as whole/steady rates beside their ceilings and,
    for ringmq's paths, their Python floors (floor/x: the issue's goal is at most 2)."""

    def __init__(self, small: int, big: int) -> None:
        self.small = small
        self.big = big
        self.rows: list[tuple[int, str, float, float, str | None]] = []
        self.whole: dict[tuple[int, str], float] = {}

    def rate(self, size: int, path: str, rate: float) -> None:
        self.rows.append((size, path, rate, 0.0, None))

    def record(
        self, size: int, path: str, t_small: float, t_big: float, ceiling: str | None = None
    ) -> None:
        small, big = self.small, self.big
        steady = (big - small) / (t_big - t_small) if t_big > t_small else float("inf")
        self.rows.append((size, path, big / t_big, steady, ceiling))
        self.whole[(size, path)] = big / t_big
        print(
            f"  {size:>5} {path:36} t({small})={t_small:6.2f}s t({big})={t_big:6.2f}s", flush=True
        )

    def print(self, header: str) -> None:
        print(f"\n{header}")
        print(
            f"{'size':>6}  {'path':38} {'whole msg/s':>12} {'steady msg/s':>13} {'ceiling/x':>10}"
            f" {'floor/x':>8}"
        )
        for size, path, whole, steady, ceiling in self.rows:
            st = f"{steady:>13,.0f}" if steady else f"{'':>13}"
            c = self.whole.get((size, ceiling)) if ceiling else None
            ratio = f"{c / whole:>10.2f}" if c else f"{'':>10}"
            f = self.whole.get((size, FLOOR_OF.get(path, "")))
            floor = f"{f / whole:>8.2f}" if f else ""
            print(f"{size:>6}  {path:38} {whole:>12,.0f} {st} {ratio} {floor}".rstrip())


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="Spark <-> ringmq throughput")
    ap.add_argument("--messages", type=int, default=200_000)
    ap.add_argument("--sizes", default="100,1024")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument(
        "--median", action="store_true", help="report the median of the rounds, not the best"
    )
    ap.add_argument("--master", default="local[2]")
    ap.add_argument("--driver-memory", default="4g", help="JVM heap (the cached rows live there)")
    ap.add_argument(
        "--paths",
        default="browse,stream,offsets,write-http,write-amqp,floor",
        help="comma-separated: browse, stream, offsets (a stream queue read by offset), "
        "write-http, write-amqp, floor (a do-nothing "
        "Python data source beside each direction), parquet-constant "
        "(each ringmq path runs with its Parquet ceiling)",
    )
    args = ap.parse_args(argv)

    import pika
    import pyarrow as pa
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
    res = Results(small, big)
    runs = iter(range(1_000_000))  # fresh output and checkpoint directories

    def available_now(df: Any, n: int, what: str) -> None:
        """Run the streaming `df` into `noop` with AvailableNow (fresh checkpoint); n rows read."""
        query = (
            df.writeStream.format("noop")
            .option("checkpointLocation", str(work / f"ck-{next(runs)}"))
            .trigger(availableNow=True)
            .start()
        )
        query.awaitTermination()
        got = sum(p["numInputRows"] for p in query.recentProgress)
        assert got == n, f"{what} read {got} of {n}"

    def timed(
        size: int,
        path: str,
        run: Callable[[int, int], None],
        ceiling: str | None = None,
    ) -> None:
        """Best of rounds of `run(round, n)` for n/4 and n, after one untimed n/4 run; prints
        the broker's CPU time for the n-message runs (the least of the rounds)."""
        cpu: list[float] = []
        machine: list[tuple[float, float]] = []

        def run_big(r: int) -> None:
            before = process_cpu_s(broker.pid)
            busy, idle = machine_cpu_s()
            run(r, big)
            cpu.append(process_cpu_s(broker.pid) - before)
            busy2, idle2 = machine_cpu_s()
            machine.append((busy2 - busy, idle2 - idle))

        t_s = best(lambda r: run(r, small), args.rounds, lambda: run(-1, small), median=args.median)
        t_b = best(run_big, args.rounds, median=args.median)
        res.record(size, path, t_s, t_b, ceiling)
        if min(cpu) > 0:
            print(
                f"  {'':>5} {'':36} broker CPU {min(cpu):6.2f}s ({min(cpu) / big * 1e6:.2f} us/msg)"
            )
        busy, idle = min(machine)
        if busy + idle > 0:
            print(
                f"  {'':>5} {'':36} machine CPU busy {busy:6.2f}s ({busy / big * 1e6:.2f} us/msg),"
                f" idle {idle:.2f}s"
            )

    try:
        spark = session(
            "ringmq-spark-bench",
            args.master,
            **{"spark.ui.showConsoleProgress": "false", "spark.driver.memory": args.driver_memory},
        )
        if "floor" in paths:
            import spark_null  # beside this script
            from pyspark import cloudpickle

            cloudpickle.register_pickle_by_value(spark_null)  # type: ignore[no-untyped-call]
            spark.dataSource.register(spark_null.NullSource)
        # no heartbeats: this control connection idles through whole Spark actions
        conn = pika.BlockingConnection(pika.URLParameters(amqp + "?heartbeat=0"))
        ch = conn.channel()
        client = StreamClient(http)

        def one_size(size: int) -> None:  # closures below bind this size's data
            bodies = random_bodies(big, size, seed=size)
            frames = {
                n: spark.createDataFrame(pa.table({"body": bodies.slice(0, n)})).cache()
                for n in (small, big)
            }
            for df in frames.values():
                df.count()

            def fill(q: str, n: int, **arguments: Any) -> float:
                ch.queue_declare(q, durable=bool(arguments), arguments=arguments or None)
                t = time.perf_counter()
                for a in range(0, n, 10_000):
                    part = bodies.slice(a, min(10_000, n - a)).to_pylist()
                    client.publish("", encode_publish((q, b"\x00\x00", b) for b in part))
                return time.perf_counter() - t

            # Setup: queues `bench-<size>-<n>-browse` for browse (kept; browsing one builds its
            # browse index, which keeps it in memory) and `bench-<size>-<n>-<round>` for the
            # stream (consumed; paged as any queue past its in-memory head), round -1 the warm-up.
            t_pub = 0.0
            published = 0
            queues = []
            if paths & {"browse", "stream", "offsets"}:
                queues += [(f"bench-{size}-{n}-browse", n) for n in (small, big)]
            if "stream" in paths:
                queues += [(f"bench-{size}-{small}--1", small)]
                queues += [
                    (f"bench-{size}-{n}-{r}", n) for r in range(args.rounds) for n in (small, big)
                ]
            for q, n in queues:
                t_pub += fill(q, n)
                published += n
            if "offsets" in paths:  # stream queues, read again by every round
                for n in (small, big):
                    t_pub += fill(f"bench-{size}-{n}-log", n, **{"x-queue-type": "stream"})
                    published += n
            if published:
                res.rate(size, "publish (bulk http, confirmed)", published / t_pub)

            def null_source(n: int, *, stream: bool = False) -> Any:
                r = spark.readStream if stream else spark.read
                return r.format("nullsource").options(n=str(n), size=str(size))

            def ringmq_read(n: int) -> Any:
                return (
                    spark.read.format("ringmq")
                    .options(url=amqp, httpUrl=http, queue=f"bench-{size}-{n}-browse")
                    .option("minMessagesPerPartition", 1)
                    .load()
                )

            # The ceilings' input: exactly the rows a browse returns, every column.
            same = {n: str(work / f"same-{size}-{n}") for n in (small, big)}
            if paths & {"browse", "stream", "offsets"}:
                for n, path in same.items():
                    ringmq_read(n).write.mode("overwrite").parquet(path)

            if "browse" in paths:

                def browse(r: int, n: int) -> None:
                    ringmq_read(n).write.format("noop").mode("overwrite").save()

                def parquet_read(r: int, n: int) -> None:
                    spark.read.parquet(same[n]).write.format("noop").mode("overwrite").save()

                timed(size, "Parquet -> Spark (read)", parquet_read)
                timed(size, "ringmq -> Spark (browse)", browse, "Parquet -> Spark (read)")
                if "floor" in paths:

                    def null_read(r: int, n: int) -> None:
                        null_source(n).load().write.format("noop").mode("overwrite").save()

                    timed(size, "Python source floor (read)", null_read, "Parquet -> Spark (read)")

            if paths & {"stream", "offsets"}:

                def stream(r: int, n: int) -> None:
                    q = f"bench-{size}-{n}-{r}"
                    df = (
                        spark.readStream.format("ringmq")
                        .options(url=amqp, httpUrl=http, queue=q, consumerName=q)
                        .options(maxMessagesPerBatch=str(n), minMessagesPerPartition="1")
                        .load()
                    )
                    available_now(df, n, "stream")

                schema = spark.read.parquet(same[small]).schema

                def parquet_stream(r: int, n: int) -> None:
                    available_now(spark.readStream.schema(schema).parquet(same[n]), n, "parquet")

                def offsets(r: int, n: int) -> None:
                    df = (
                        spark.readStream.format("ringmq")
                        .options(url=amqp, httpUrl=http, queue=f"bench-{size}-{n}-log")
                        .options(stream="true", minMessagesPerPartition="1")
                        .load()
                    )
                    available_now(df, n, "stream offsets")

                timed(size, "Parquet -> Spark (stream)", parquet_stream)
                if "stream" in paths:
                    timed(size, "ringmq -> Spark (stream)", stream, "Parquet -> Spark (stream)")
                if "offsets" in paths:
                    timed(
                        size,
                        "ringmq -> Spark (stream offsets)",
                        offsets,
                        "Parquet -> Spark (stream)",
                    )
                if "floor" in paths:

                    def null_stream(r: int, n: int) -> None:
                        available_now(null_source(n, stream=True).load(), n, "null stream")

                    timed(
                        size,
                        "Python source floor (stream)",
                        null_stream,
                        "Parquet -> Spark (stream)",
                    )

            wq = f"bench-out-{size}"
            ch.queue_declare(wq)
            if paths & {"write-http", "write-amqp"}:

                def parquet_write(r: int, n: int) -> None:
                    out = str(work / f"out-{next(runs)}")
                    frames[n].write.parquet(out)

                timed(size, "Spark -> Parquet (write)", parquet_write)

            for via in ("http", "amqp"):
                if f"write-{via}" not in paths:
                    continue

                def write(r: int, n: int, via: str = via) -> None:
                    opts: dict[str, str] = {"url": amqp, "routingKey": wq, "publishVia": via}
                    if via == "http":
                        opts["httpUrl"] = http
                    frames[n].write.format("ringmq").options(**opts).mode("append").save()
                    assert client.info(wq)["ready"] == n, "write lost messages"
                    ch.queue_purge(wq)

                timed(size, f"Spark -> ringmq (write, {via})", write, "Spark -> Parquet (write)")
            if "floor" in paths and paths & {"write-http", "write-amqp"}:

                def null_write(r: int, n: int) -> None:
                    frames[n].write.format("nullsource").mode("append").save()

                timed(size, "Python sink floor (write)", null_write, "Spark -> Parquet (write)")

            if "parquet-constant" in paths:
                const = {}
                for n in (small, big):
                    const[n] = str(work / f"const-{size}-{n}")
                    spark.range(n).select(F.lit(b"x" * size).alias("body")).write.mode(
                        "overwrite"
                    ).parquet(const[n])

                def constant(r: int, n: int) -> None:
                    spark.read.parquet(const[n]).write.format("noop").mode("overwrite").save()

                timed(size, "Parquet constant body (old ceiling)", constant)
            for df in frames.values():
                df.unpersist()

        for size in (int(s) for s in args.sizes.split(",")):
            one_size(size)
        client.close()
        conn.close()
        spark.stop()
    finally:
        broker.terminate()
        broker.wait(30)

    load = os.getloadavg()
    res.print(
        f"{small} and {big} messages per action, master {args.master}, "
        f"{'median' if args.median else 'best'} of {args.rounds}, "
        f"load average {load[0]:.1f} {load[1]:.1f} {load[2]:.1f}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
