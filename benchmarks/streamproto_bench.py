"""Stream protocol load: publish and consume msg/s with rstream, pipelined, and broker CPU.

Usage (docs/streams.md; `benchmarks/stream_bench.py` is the Spark streams API's, not this):

    python -m benchmarks.streamproto_bench                         # 100 B and 1 KiB, 3 rounds
    python -m benchmarks.streamproto_bench --messages 20000 --sizes 100 --rounds 1
    python -m benchmarks.streamproto_bench --rabbitmq-port 5552    # also a running RabbitMQ

Theory of operation: one load generator drives each broker in turn, size by size, round by
round (interleaved, so a slow minute of the shared machine hits every broker alike). A round
creates a fresh stream, publishes `--messages` messages of the size with one rstream
`Producer` (`send_batch` of `--batch` messages, up to `--in-flight` batches unconfirmed: the
pipelining rstream does), waits for every confirm, then reads the whole stream from `first`
with one `Consumer` (rstream's default credit) and stops at the last message. Reported per
size: the median publish and consume msg/s, and the broker's CPU seconds per 1,000 messages
from /proc (`amqp_brokers.ProcessStats`) for the ringmq it started.

* ringmq: `ringmq serve` on free loopback ports with a temporary data dir, stopped at the end.
* RabbitMQ: never started here; used when its stream listener answers on loopback
  (`--rabbitmq-port`; `rabbitmq-plugins enable rabbitmq_stream`), skipped otherwise (its CPU
  is read when `listening_pid` finds its process).

Every round is bounded by its message count and `--timeout`; a failed round is reported.
"""

from __future__ import annotations

import argparse
import asyncio
import socket
import statistics
import time
from dataclasses import dataclass

from benchmarks import amqp_brokers as brokers
from rstream import (
    AMQPMessage,
    Consumer,
    ConsumerOffsetSpecification,
    MessageContext,
    OffsetType,
    Producer,
)


@dataclass(slots=True)
class Round:
    publish_rate: float
    consume_rate: float
    cpu_per_k: float | None


async def _round(
    port: int, stream: str, n: int, size: int, batch: int, in_flight: int, limit_s: float
) -> tuple[float, float]:
    body = b"x" * size
    async with Producer("127.0.0.1", port=port, username="guest", password="guest") as p:
        await p.create_stream(stream, exists_ok=True)
        window = asyncio.Semaphore(in_flight)
        done = asyncio.Event()
        confirmed = 0

        def on_confirm(_: object) -> None:
            nonlocal confirmed
            confirmed += 1
            if confirmed % batch == 0 or confirmed == n:
                window.release()
            if confirmed == n:
                done.set()

        t0 = time.perf_counter()
        sent = 0
        while sent < n:
            k = min(batch, n - sent)
            await window.acquire()
            await p.send_batch(
                stream, [AMQPMessage(body=body) for _ in range(k)], on_publish_confirm=on_confirm
            )
            sent += k
        await asyncio.wait_for(done.wait(), limit_s)
        publish_s = time.perf_counter() - t0
    got = 0
    finished = asyncio.Event()

    def on_message(_msg: bytes, _ctx: MessageContext) -> None:
        nonlocal got
        got += 1
        if got == n:
            finished.set()

    c = Consumer("127.0.0.1", port=port, username="guest", password="guest")
    await c.start()
    try:
        t0 = time.perf_counter()
        await c.subscribe(
            stream, on_message, offset_specification=ConsumerOffsetSpecification(OffsetType.FIRST)
        )
        await asyncio.wait_for(finished.wait(), limit_s)
        consume_s = time.perf_counter() - t0
        await c.delete_stream(stream)
    finally:
        await c.close()
    return n / publish_s, n / consume_s


def _open(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), 1):
            return True
    except OSError:
        return False


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--messages", type=int, default=100_000)
    ap.add_argument("--sizes", default="100,1024")
    ap.add_argument("--batch", type=int, default=100)
    ap.add_argument("--in-flight", type=int, default=10)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--timeout", type=float, default=300.0)
    ap.add_argument("--rabbitmq-port", type=int, default=5552)
    args = ap.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    ringmq = brokers.RingmqProcess(protocols=("stream",))
    ringmq.start()
    targets: dict[str, tuple[int, int | None]] = {"ringmq": (ringmq.ports["stream"], ringmq.pid)}
    if args.rabbitmq_port != ringmq.ports["stream"] and _open(args.rabbitmq_port):
        targets["rabbitmq"] = (args.rabbitmq_port, brokers.listening_pid(args.rabbitmq_port))
    results: dict[tuple[str, int], list[Round]] = {}
    try:
        for r in range(args.rounds):
            for size in sizes:
                for name, (port, pid) in targets.items():
                    stats = brokers.ProcessStats(pid)
                    before = stats.sample()
                    try:
                        pub, con = asyncio.run(
                            _round(
                                port,
                                f"bench-{size}-{r}",
                                args.messages,
                                size,
                                args.batch,
                                args.in_flight,
                                args.timeout,
                            )
                        )
                    except Exception as exc:  # noqa: BLE001 - reported, not retried
                        print(f"{name} {size} B round {r}: failed: {exc!r}")
                        continue
                    after = stats.sample()
                    cpu = None
                    if before is not None and after is not None:
                        cpu = (after.cpu_s - before.cpu_s) / (2 * args.messages) * 1000
                    results.setdefault((name, size), []).append(Round(pub, con, cpu))
    finally:
        ringmq.stop()
    print(f"{'broker':10} {'size':>6} {'publish msg/s':>14} {'consume msg/s':>14} {'CPU s/1k':>9}")
    for (name, size), rounds in sorted(results.items()):
        pub = statistics.median(x.publish_rate for x in rounds)
        con = statistics.median(x.consume_rate for x in rounds)
        cpus = [x.cpu_per_k for x in rounds if x.cpu_per_k is not None]
        cpu = f"{statistics.median(cpus):9.4f}" if cpus else f"{'-':>9}"
        print(f"{name:10} {size:>6} {pub:>14,.0f} {con:>14,.0f} {cpu}")


if __name__ == "__main__":
    main()
