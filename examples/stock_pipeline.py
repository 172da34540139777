"""Stock ticks -> ring queue -> Spark windowed aggregates -> last-value queue -> dashboard.

Run with `make pipeline` (or `python examples/stock_pipeline.py --ticks 5000`). Without
`--amqp-url`, a broker is started in this process on free loopback ports.

1. A producer publishes ticks (JSON: symbol, price, ts_ms; header `symbol`) into the ring queue
   `ticks` (`x-ring-size`): when consumers fall behind, the oldest ticks go.
2. A Structured Streaming job reads `ticks` with the `ringmq` source (AvailableNow, so it
   stops when it has caught up), computes per-symbol aggregates over 1-second event-time
   windows (count, min, max, average, last price), and in every micro-batch writes the
   updated aggregates to the exchange `aggregates`, which routes them to the last-value queue
   `dashboard` (`x-last-value-key: symbol`): only each symbol's latest aggregate stays.
3. A dashboard consumer reads `dashboard` and prints one line per symbol, then a report.

`--chaos` runs the same pipeline through failures: the broker is a `ringmq serve` subprocess
(durable queues, persistent ticks and aggregates), SIGKILLed once mid-job and restarted on the
same ports, and one Spark executor (in local mode: one of Spark's Python workers) is
SIGKILLed mid-batch. The query, failing on the dead broker, is started again from its
checkpoint. Every window update of every batch also lands in the durable queue
`aggregates-log` (de-duplicated by message id), from which the end report reconciles: ticks
published, ticks evicted by the ring (the broker's counter), ticks aggregated (the final count
of every symbol window), duplicates and lost (aggregated minus, or short of, published minus
evicted).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import random
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

SYMBOLS = ("AAPL", "AMZN", "GOOG", "MSFT", "NVDA", "TSLA")


def start_broker(data_dir: Path) -> tuple[Any, str, str]:
    from ringmq.node import BrokerThread
    from ringmq.server.configfile import FileConfig
    from ringmq.server.runtime import ServerOptions

    b = BrokerThread(
        ServerOptions(
            host="127.0.0.1", amqp_port=0, http_port=0, data_dir=data_dir, config=FileConfig()
        )
    )
    b.start()
    return (
        b,
        f"amqp://guest:guest@127.0.0.1:{b.port}/%2F",
        f"http://guest:guest@127.0.0.1:{b.server.http_port}",
    )


class ServeProcess:
    """`ringmq serve` in a subprocess on fixed loopback ports (--chaos kills and restarts it)."""

    def __init__(self, data_dir: Path) -> None:
        self.data_dir = data_dir
        self.ports = (_free_port(), _free_port())
        self.amqp_url = f"amqp://guest:guest@127.0.0.1:{self.ports[0]}/%2F"
        self.http_url = f"http://guest:guest@127.0.0.1:{self.ports[1]}"
        self.proc = self._start()

    def _start(self) -> subprocess.Popen[bytes]:
        cmd = [sys.executable, "-m", "ringmq", "serve", "--host", "127.0.0.1"]
        cmd += ["--amqp-port", str(self.ports[0]), "--http-port", str(self.ports[1])]
        cmd += ["--stomp-port", "off", "--mqtt-port", "off"]
        cmd += ["--data-dir", str(self.data_dir)]
        log = (self.data_dir.parent / "broker.log").open("ab")
        proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT)
        log.close()
        deadline = time.monotonic() + 60
        for port in self.ports:
            while True:
                with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port)):
                    break
                if time.monotonic() > deadline or proc.poll() is not None:
                    raise RuntimeError("the broker did not start; see broker.log")
                time.sleep(0.05)
        return proc

    def kill_and_restart(self) -> None:
        self.proc.kill()  # SIGKILL: a crash
        self.proc.wait(30)
        self.proc = self._start()

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(60)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(30)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def declare(amqp_url: str, ring_size: int, *, durable: bool = False) -> None:
    import pika

    conn = pika.BlockingConnection(pika.URLParameters(amqp_url))
    ch = conn.channel()
    ch.queue_declare("ticks", durable=durable, arguments={"x-ring-size": ring_size})
    ch.exchange_declare("aggregates", "fanout", durable=durable)
    ch.queue_declare("dashboard", durable=durable, arguments={"x-last-value-key": "symbol"})
    ch.queue_bind("dashboard", "aggregates")
    if durable:  # every aggregate update, once: the reconciliation's source
        window = {"x-message-deduplication-window-ms": 3_600_000}
        ch.queue_declare("aggregates-log", durable=True, arguments=window)
    conn.close()


def produce(amqp_url: str, n: int, seed: int, base_ms: int, *, persistent: bool = False) -> int:
    """Publish `n` ticks, 10 ms of event time apart, with confirms; returns how many."""
    from ringmq.amqp.properties import BasicProperties, encode_properties
    from ringmq.connector.publisher import Publisher

    rng = random.Random(seed)
    price = dict.fromkeys(SYMBOLS, 100.0)

    def ticks() -> Any:
        for i in range(n):
            sym = SYMBOLS[i % len(SYMBOLS)]
            price[sym] = round(max(1.0, price[sym] * (1 + rng.uniform(-0.01, 0.01))), 2)
            body = json.dumps({"symbol": sym, "price": price[sym], "ts_ms": base_ms + 10 * i})
            props = encode_properties(
                BasicProperties(
                    headers={"symbol": sym},
                    content_type="application/json",
                    delivery_mode=2 if persistent else None,
                )
            )
            yield "", "ticks", props, body.encode()

    with Publisher(amqp_url) as pub:
        return pub.publish_many(ticks())


def run_job(
    spark: Any,
    amqp_url: str,
    http_url: str,
    checkpoint: str,
    per_batch: int,
    *,
    persistent: bool = False,
) -> Any:
    from pyspark.sql import functions as F  # noqa: N812 - Spark's convention
    from pyspark.sql.types import DoubleType, LongType, StringType, StructField, StructType

    tick = StructType(
        [
            StructField("symbol", StringType()),
            StructField("price", DoubleType()),
            StructField("ts_ms", LongType()),
        ]
    )
    ticks = (
        spark.readStream.format("ringmq")
        .options(url=amqp_url, httpUrl=http_url, queue="ticks", consumerName="tick-aggregator")
        .option("maxMessagesPerBatch", per_batch)
        .load()
        .select(F.from_json(F.col("body").cast("string"), tick).alias("t"))
        .select("t.*")
        .withColumn("event_time", F.timestamp_millis(F.col("ts_ms")))
    )
    aggregates = (
        ticks.withWatermark("event_time", "5 seconds")
        .groupBy(F.window("event_time", "1 second"), F.col("symbol"))
        .agg(
            F.count("*").alias("ticks"),
            F.min("price").alias("low"),
            F.max("price").alias("high"),
            F.round(F.avg("price"), 4).alias("avg"),
            F.max_by("price", "ts_ms").alias("last"),
        )
    )

    def publish_latest(batch: Any, batch_id: int) -> None:
        # Per symbol, the aggregate of its latest window updated in this batch.
        latest = (
            batch.withColumn("rank", F.row_number().over(_latest_window()))
            .where("rank = 1")
            .select(
                F.to_json(
                    F.struct(
                        "symbol",
                        F.col("window.start").cast("string").alias("window_start"),
                        "ticks",
                        "low",
                        "high",
                        "avg",
                        "last",
                    )
                )
                .cast("binary")
                .alias("body"),
                F.create_map(F.lit("symbol"), F.col("symbol")).alias("headers"),
                F.concat_ws(
                    ":", F.lit("agg"), "symbol", F.col("window.start").cast("long"), "ticks"
                ).alias("message_id"),
            )
        )
        latest.write.format("ringmq").options(
            url=amqp_url, exchange="aggregates", persistent=str(persistent).lower()
        ).mode("append").save()
        if persistent:  # --chaos: every window updated in this batch, for the reconciliation
            batch.select(
                F.to_json(
                    F.struct(
                        "symbol",
                        F.col("window.start").cast("string").alias("window_start"),
                        "ticks",
                    )
                )
                .cast("binary")
                .alias("body"),
                F.concat_ws(
                    ":", F.lit("log"), "symbol", F.col("window.start").cast("long"), "ticks"
                ).alias("message_id"),
            ).write.format("ringmq").options(
                url=amqp_url, routingKey="aggregates-log", persistent="true"
            ).mode("append").save()

    return (
        aggregates.writeStream.outputMode("update")
        .foreachBatch(publish_latest)
        .option("checkpointLocation", checkpoint)
        .trigger(availableNow=True)
        .start()
    )


def _latest_window() -> Any:
    from pyspark.sql import Window
    from pyspark.sql import functions as F  # noqa: N812

    return Window.partitionBy("symbol").orderBy(F.col("window.start").desc())


def dashboard(amqp_url: str) -> dict[str, dict[str, Any]]:
    """Drain the last-value queue: one current aggregate per symbol."""
    import pika

    conn = pika.BlockingConnection(pika.URLParameters(amqp_url))
    ch = conn.channel()
    board: dict[str, dict[str, Any]] = {}
    while True:
        method, _props, body = ch.basic_get("dashboard", auto_ack=True)
        if method is None:
            break
        agg = json.loads(body)
        board[agg["symbol"]] = agg
    conn.close()
    return board


def reconcile(http_url: str, published: int, evicted: int) -> dict[str, int]:
    """Ticks aggregated (the final count of every symbol window, from `aggregates-log`)
    against ticks published minus ticks the ring evicted."""
    from ringmq.connector.client import StreamClient

    final: dict[tuple[str, str], int] = {}
    with StreamClient(http_url) as c:
        for r in c.browse_all("aggregates-log"):
            a = json.loads(r.body)
            key = (a["symbol"], a["window_start"])
            final[key] = max(final.get(key, 0), int(a["ticks"]))
    aggregated = sum(final.values())
    expected = published - evicted
    return {
        "published": published,
        "ring_evicted": evicted,
        "aggregated": aggregated,
        "duplicates": max(0, aggregated - expected),
        "lost": max(0, expected - aggregated),
    }


def _descendants(root: int) -> dict[int, str]:
    """pid -> command line of every process below `root`."""
    children: dict[int, list[int]] = {}
    cmdlines: dict[int, str] = {}
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        with contextlib.suppress(OSError, IndexError):
            ppid = int((d / "stat").read_text().rsplit(")", 1)[1].split()[1])
            children.setdefault(ppid, []).append(int(d.name))
            cmdlines[int(d.name)] = (d / "cmdline").read_bytes().replace(b"\0", b" ").decode()
    out: dict[int, str] = {}
    todo = [root]
    while todo:
        for child in children.get(todo.pop(), []):
            out[child] = cmdlines.get(child, "")
            todo.append(child)
    return out


def kill_an_executor(spark: Any) -> str:
    """SIGKILL one executor of this application: an executor JVM on a cluster, one of the
    Python workers in local mode (there the executor lives in the driver's JVM)."""
    app = spark.sparkContext.applicationId
    if not spark.sparkContext.master.startswith("local"):
        for d in Path("/proc").iterdir():
            with contextlib.suppress(OSError):
                cmd = (d / "cmdline").read_bytes().replace(b"\0", b" ").decode()
                if "CoarseGrainedExecutorBackend" in cmd and app in cmd:
                    os.kill(int(d.name), signal.SIGKILL)
                    return f"executor JVM {d.name}"
        return "none found"
    for pid, cmd in sorted(_descendants(os.getpid()).items(), reverse=True):
        if "pyspark.daemon" in cmd or "pyspark.worker" in cmd:
            os.kill(pid, signal.SIGKILL)
            return f"Python worker {pid}"
    return "none found"


def run_chaos(args: argparse.Namespace, work: Path) -> int:
    """The pipeline through a broker crash and an executor crash, then the reconciliation."""
    from ringmq.connector.client import StreamClient
    from ringmq.connector.spark import session

    (work / "broker").mkdir(parents=True, exist_ok=True)
    broker = ServeProcess(work / "broker")
    try:
        amqp_url, http_url = broker.amqp_url, broker.http_url
        declare(amqp_url, args.ring_size, durable=True)
        published = produce(amqp_url, args.ticks, args.seed, 1_800_000_000_000, persistent=True)
        with StreamClient(http_url) as c:
            evicted = int(c.info("ticks")["evicted"]["ring_evicted"])
        print(f"producer: {published} ticks published, {evicted} evicted by the ring", flush=True)
        spark = session("ringmq-stock-pipeline-chaos", args.master)
        done: list[str] = []

        def chaos(query: Any) -> None:
            # An executor dies inside the second batch, the broker inside a later one.
            while query.isActive and "executor" not in done:
                p = query.lastProgress
                if p is not None and p["batchId"] >= 0:
                    done.append("executor")
                    print(f"chaos: killed {kill_an_executor(spark)}", flush=True)
                time.sleep(0.2)
            while query.isActive and "broker" not in done:
                p = query.lastProgress
                if p is not None and p["batchId"] >= 1:
                    broker.kill_and_restart()
                    done.append("broker")
                    print("chaos: killed the broker (SIGKILL), restarted it", flush=True)
                time.sleep(0.2)

        for run in range(8):  # bounded: a broker kill fails the query, which restarts
            query = run_job(
                spark,
                amqp_url,
                http_url,
                str(work / "checkpoint"),
                args.per_batch,
                persistent=True,
            )
            killer = threading.Thread(target=chaos, args=(query,), daemon=True)
            killer.start()
            try:
                query.awaitTermination()
                failed = False
            except Exception as exc:  # noqa: BLE001 - any failure: restart from the checkpoint
                failed = True
                print(f"spark: query run {run} failed ({type(exc).__name__}); restarting")
            killer.join(60)
            with StreamClient(http_url) as c:
                left = c.info("ticks")["messages"]
            if not failed and left == 0 and len(done) == 2:
                break
            time.sleep(1)
        spark.stop()
        report = reconcile(http_url, published, evicted)
        report["chaos"] = len(done)
        print(
            "reconciliation: {published} ticks published, {ring_evicted} evicted by the ring, "
            "{aggregated} aggregated, duplicates {duplicates}, lost {lost}".format(**report)
        )
        if args.json:
            print(json.dumps(report))
        ok = report["duplicates"] == 0 and report["lost"] == 0 and len(done) == 2
        return 0 if ok else 1
    finally:
        broker.stop()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ticks", type=int, default=5000)
    ap.add_argument("--ring-size", type=int, default=2000)
    ap.add_argument("--per-batch", type=int, default=1000)
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--amqp-url")
    ap.add_argument("--http-url")
    ap.add_argument("--master", default="local[2]")
    ap.add_argument("--json", action="store_true", help="print the report as JSON")
    ap.add_argument(
        "--chaos",
        action="store_true",
        help="kill the broker and a Spark executor mid-job, then reconcile the counts",
    )
    args = ap.parse_args(argv)

    from ringmq.connector.client import StreamClient
    from ringmq.connector.spark import session

    work = Path(tempfile.mkdtemp(prefix="ringmq-pipeline-"))
    if args.chaos:
        return run_chaos(args, work)
    broker = None
    if args.amqp_url:
        amqp_url, http_url = args.amqp_url, args.http_url or "http://127.0.0.1:15672"
    else:
        broker, amqp_url, http_url = start_broker(work / "broker")
    t0 = time.monotonic()
    try:
        declare(amqp_url, args.ring_size)
        published = produce(amqp_url, args.ticks, args.seed, base_ms=1_800_000_000_000)
        with StreamClient(http_url) as c:
            before = c.info("ticks")
        print(
            f"producer: {published} ticks published, ring kept {before['ready']}, "
            f"evicted {before['evicted']['ring_evicted']}",
            flush=True,
        )
        spark = session("ringmq-stock-pipeline", args.master)
        query = run_job(spark, amqp_url, http_url, str(work / "checkpoint"), args.per_batch)
        stop = threading.Event()

        def progress() -> None:
            seen = -1
            while not stop.wait(0.5):
                p = query.lastProgress
                if p is not None and p["batchId"] != seen:
                    seen = p["batchId"]
                    print(f"spark: batch {seen}: {p['numInputRows']} ticks", flush=True)

        watcher = threading.Thread(target=progress, daemon=True)
        watcher.start()
        query.awaitTermination()
        stop.set()
        watcher.join()
        processed = sum(p["numInputRows"] for p in query.recentProgress)
        spark.stop()
        board = dashboard(amqp_url)
        with StreamClient(http_url) as c:
            after = c.info("ticks")
        lease = after["leases"][0] if after["leases"] else {}
        for sym in sorted(board):
            a = board[sym]
            print(
                f"dashboard: {sym:5} window {a['window_start']} ticks {a['ticks']:4} "
                f"low {a['low']:8.2f} high {a['high']:8.2f} avg {a['avg']:9.4f} "
                f"last {a['last']:8.2f}"
            )
        report = {
            "published": published,
            "ring_evicted": after["evicted"]["ring_evicted"],
            "processed": processed,
            "symbols": len(board),
            "settled": lease.get("settled", 0),
            "held": lease.get("held", 0),
            "seconds": round(time.monotonic() - t0, 1),
        }
        if args.json:
            print(json.dumps(report))
        else:
            print(
                "report: {published} published, {ring_evicted} evicted by the ring, "
                "{processed} processed by Spark, {symbols} symbols on the dashboard, "
                "{settled} settled + {held} held by the reservation, {seconds}s".format(**report)
            )
        ok = report["published"] == report["ring_evicted"] + report["processed"]
        return 0 if ok and board else 1
    finally:
        if broker is not None:
            broker.stop()


if __name__ == "__main__":
    sys.exit(main())
