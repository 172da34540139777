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
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

SYMBOLS = ("AAPL", "AMZN", "GOOG", "MSFT", "NVDA", "TSLA")


def start_broker(data_dir: Path) -> tuple[Any, str, str]:
    from ringmq.server.configfile import FileConfig
    from ringmq.server.runtime import BrokerThread, ServerOptions

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


def declare(amqp_url: str, ring_size: int) -> None:
    import pika

    conn = pika.BlockingConnection(pika.URLParameters(amqp_url))
    ch = conn.channel()
    ch.queue_declare("ticks", arguments={"x-ring-size": ring_size})
    ch.exchange_declare("aggregates", "fanout")
    ch.queue_declare("dashboard", arguments={"x-last-value-key": "symbol"})
    ch.queue_bind("dashboard", "aggregates")
    conn.close()


def produce(amqp_url: str, n: int, seed: int, base_ms: int) -> int:
    """Publish `n` ticks, 10 ms of event time apart, with confirms; returns how many."""
    from ringmq.amqp.properties import BasicProperties, encode_properties
    from ringmq.connector.client import Publisher

    rng = random.Random(seed)
    price = dict.fromkeys(SYMBOLS, 100.0)

    def ticks() -> Any:
        for i in range(n):
            sym = SYMBOLS[i % len(SYMBOLS)]
            price[sym] = round(max(1.0, price[sym] * (1 + rng.uniform(-0.01, 0.01))), 2)
            body = json.dumps({"symbol": sym, "price": price[sym], "ts_ms": base_ms + 10 * i})
            props = encode_properties(
                BasicProperties(headers={"symbol": sym}, content_type="application/json")
            )
            yield "", "ticks", props, body.encode()

    with Publisher(amqp_url) as pub:
        return pub.publish_many(ticks())


def run_job(spark: Any, amqp_url: str, http_url: str, checkpoint: str, per_batch: int) -> Any:
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
        latest.write.format("ringmq").options(url=amqp_url, exchange="aggregates").mode(
            "append"
        ).save()

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
    args = ap.parse_args(argv)

    from ringmq.connector.client import StreamClient
    from ringmq.connector.spark import session

    work = Path(tempfile.mkdtemp(prefix="ringmq-pipeline-"))
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
