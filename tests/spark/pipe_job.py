"""A Spark driver for the kill -9 test: queue -> slow map -> ringmq sink, AvailableNow.

Usage: python pipe_job.py AMQP_URL HTTP_URL IN OUT CONSUMER CHECKPOINT SLOW_MS PER_BATCH LEASE_MS
[stream]. With `stream`, IN is a stream queue read by offset (`maxOffsetsPerTrigger`
PER_BATCH; CONSUMER and LEASE_MS are unused).
Prints "BATCH <id>" as batches complete and "DONE" at the end.
"""

from __future__ import annotations

import sys
import time


def main(argv: list[str]) -> int:
    amqp, http, src, dst, consumer, checkpoint, slow_ms, per_batch, lease_ms = argv[:9]
    by_offset = argv[9:] == ["stream"]
    from pyspark.sql.functions import col, udf
    from pyspark.sql.types import BinaryType

    from ringmq.connector.spark import session

    spark = session("ringmq-kill-test", "local[2]")
    delay = int(slow_ms) / 1000

    @udf(BinaryType())
    def slow(body: bytes) -> bytes:
        time.sleep(delay)
        return body

    reader = (
        spark.readStream.format("ringmq")
        .options(url=amqp, httpUrl=http, queue=src)
        .option("minMessagesPerPartition", "1")
    )
    if by_offset:
        reader = reader.option("stream", "true").option("maxOffsetsPerTrigger", per_batch)
    else:
        reader = reader.options(consumerName=consumer, maxMessagesPerBatch=per_batch)
        reader = reader.option("leaseMs", lease_ms)
    df = reader.load()
    q = (
        df.select(slow(col("body")).alias("body"))
        .writeStream.format("ringmq")
        .options(url=amqp, exchange="", routingKey=dst, checkpointLocation=checkpoint)
        .trigger(availableNow=True)
        .start()
    )
    seen = -1
    while q.isActive:
        p = q.lastProgress
        if p is not None and p["batchId"] != seen:
            seen = p["batchId"]
            print(f"BATCH {seen}", flush=True)
        time.sleep(0.1)
    q.awaitTermination()
    print("DONE", flush=True)
    spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
