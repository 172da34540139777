"""A streaming job through broker crashes: every message reaches the sink exactly once.

The broker is a `ringmq serve` subprocess (tests/serve.py) on a data dir; a thread SIGKILLs it
twice while a Spark query (local mode) moves a durable queue of persistent messages into a
de-duplicating durable queue, restarting it at once on the same ports. The query fails when
the broker vanishes under it and is started again from its checkpoint (a bounded loop), as an
operator or a supervisor would. Exactly once rests on the durable leases (a replayed batch
reads the same messages at the same positions), the journaled settles (a settled batch is
not read again) and the durable de-duplication window (the replayed batch's deterministic
message ids are dropped by the sink queue).
"""

from __future__ import annotations

import contextlib
import threading
import time
from pathlib import Path
from typing import Any

import pika
import pytest

from ringmq.connector.client import StreamClient
from ringmq.connector.publisher import Publisher
from tests.ports import free_port
from tests.serve import Serve

from .conftest import wait_until

pytestmark = [pytest.mark.spark, pytest.mark.slow, pytest.mark.timeout(900)]

N = 3000
PERSISTENT = b"\x10\x00\x02"  # basic properties: delivery_mode 2
WINDOW = {"x-message-deduplication-window-ms": 3_600_000}


class Broker:
    """The subprocess broker, restarted on the same data dir and ports after each kill."""

    def __init__(self, tmp: Path) -> None:
        self.tmp = tmp
        self.amqp_port, self.http_port = free_port(), free_port()
        self.runs = 0
        self.serve = self._start()

    def _start(self) -> Serve:
        self.runs += 1
        return Serve(
            self.tmp / "data",
            self.tmp / f"serve-{self.runs}.log",
            http=True,
            amqp_port=self.amqp_port,
            http_port=self.http_port,
        )

    def kill_and_restart(self) -> None:
        self.serve.kill()
        self.serve = self._start()

    def info(self, queue: str) -> dict[str, Any]:
        with StreamClient(self.serve.http_url) as c:
            return c.info(queue)


class Kill:
    """What the broker held just before a kill and just after its restart."""

    def __init__(self, settled: int, sink: int) -> None:
        self.settled_before = settled
        self.sink_before = sink
        self.source_after = -1
        self.sink_after = -1


def _killer(broker: Broker, stop: threading.Event, kills: list[Kill]) -> None:
    # Kill when the sink holds a third, then two thirds, of the messages: mid-job each time.
    for fraction in (3, 3 / 2):
        while not stop.is_set():
            with contextlib.suppress(OSError, ValueError):
                sink = broker.info("bk-out")["messages"]
                if sink >= N / fraction:
                    leases = broker.info("bk-in")["leases"]
                    break
            time.sleep(0.05)
        if stop.is_set():
            return
        kill = Kill(leases[0]["settled"] if leases else 0, sink)
        broker.kill_and_restart()
        kill.source_after = broker.info("bk-in")["messages"]
        kill.sink_after = broker.info("bk-out")["messages"]
        kills.append(kill)


def test_stream_through_broker_kills_is_exactly_once(spark: Any, tmp_path: Path) -> None:
    from pyspark.errors import StreamingQueryException

    broker = Broker(tmp_path)
    try:
        conn = pika.BlockingConnection(pika.ConnectionParameters("127.0.0.1", broker.amqp_port))
        ch = conn.channel()
        ch.queue_declare("bk-in", durable=True)
        ch.queue_declare("bk-out", durable=True, arguments=WINDOW)
        conn.close()
        with Publisher(broker.serve.amqp_url) as pub:
            pub.publish_many(("", "bk-in", PERSISTENT, b"m%05d" % i) for i in range(N))
        opts = {"url": broker.serve.amqp_url, "httpUrl": broker.serve.http_url}

        def run() -> Any:
            return (
                spark.readStream.format("ringmq")
                .options(**opts, queue="bk-in", consumerName="bk-job")
                .option("maxMessagesPerBatch", 150)
                .option("minMessagesPerPartition", 50)
                .option("leaseMs", 600_000)
                .load()
                .select("body")
                .writeStream.format("ringmq")
                .options(**opts, routingKey="bk-out", persistent="true")
                .option("checkpointLocation", str(tmp_path / "ck"))
                .trigger(availableNow=True)
                .start()
            )

        stop = threading.Event()
        kills: list[Kill] = []
        killer = threading.Thread(target=_killer, args=(broker, stop, kills), daemon=True)
        killer.start()
        failures = 0
        try:
            for _ in range(12):  # bounded: each broker kill costs a query restart or two
                q = run()
                try:
                    q.awaitTermination(600)
                except StreamingQueryException:
                    failures += 1
                    time.sleep(1)
                    continue
                if broker.info("bk-in")["messages"] == 0 and len(kills) == 2:
                    break
                time.sleep(0.5)  # AvailableNow ended before a kill restarted the broker: again
        finally:
            stop.set()
            killer.join(timeout=120)
        assert len(kills) == 2
        for k in kills:
            # settled messages stayed settled, written ones stayed written
            assert k.source_after <= N - k.settled_before, vars(k)
            assert k.sink_after >= k.sink_before, vars(k)
        assert failures >= 1  # the query really ran into a dead broker
        wait_until(lambda: broker.info("bk-out")["messages"] >= N, 60)
        with StreamClient(broker.serve.http_url) as c:
            bodies = sorted(r.body for r in c.browse_all("bk-out"))
            assert c.info("bk-in")["messages"] == 0
        assert bodies == [b"m%05d" % i for i in range(N)]  # every message exactly once
    finally:
        broker.serve.kill()
