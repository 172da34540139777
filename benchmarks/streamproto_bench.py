"""Stream protocol load: publish and consume msg/s, pipelined, and broker CPU, side by side.

Usage (docs/benchmarks.md; `benchmarks/stream_bench.py` is the Spark streams API's, not this):

    python -m benchmarks.streamproto_bench                      # ringmq, 100 B and 1 KiB, 3 rounds
    python -m benchmarks.streamproto_bench --target both --rabbitmq-port 25552
    python -m benchmarks.streamproto_bench --target both --large 1000000 --sizes 100 --rounds 1

Theory of operation: one load generator drives each broker in turn, size by size, round by
round (interleaved, so a slow minute of the shared machine hits every broker alike). The
generator speaks the protocol itself, with frames built and read with `struct`, so what is
measured is the broker and not a Python client's per-message objects: rstream's framing and
pipelining (a publish frame of `--batch` messages, up to `--in-flight` frames unconfirmed;
a subscription with rstream's initial credit of 10 chunks and one Credit per chunk read),
without rstream's per-message encoding and decoding. A round creates a fresh stream, publishes
`--messages` messages of the size, waits for every confirm, then reads the whole stream from
`first` and stops at the last message (a chunk's record count from its header). Reported per
size: the median publish and consume msg/s, and the broker's CPU from /proc/<pid>/stat (utime +
stime: `amqp_brokers.ProcessStats`) per message of each phase (publish, consume, in
microseconds) and per 1,000 messages of the whole round (published and consumed: the older
tables' column).

`--large N` adds one case per broker: a stream of N messages (100 B) published, then read from
the start by one consumer (msg/s of the read alone).

* ringmq: `ringmq serve` on free loopback ports with a temporary data dir, stopped at the end;
  one per stream confirm rule of `--rules` (`fsynced`, `written`: docs/streams.md), and with
  `--baseline-src DIR` one more running an older tree's `src` (its default rule), all
  alternating round by round with the others.
* `--cluster`: also a 3-node ringmq cluster on one etcd (`cluster_bench.RingmqCluster`, the
  stream port open), driven at its leader, its CPU summed over the three nodes; with
  `--baseline-src DIR` a second one running that `src`, `cluster-base`, in the same rounds:
  what replicating streams costs, old against new.
* RabbitMQ: never started here; used when its stream listener answers on loopback
  (`--rabbitmq-port`; docs/benchmarks.md says how to start one), its CPU read from the process
  that listens there.

Every round is bounded by its message count and `--timeout`; a failed round is reported.
"""

from __future__ import annotations

import argparse
import asyncio
import socket
import statistics
import struct
import time
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from benchmarks import amqp_brokers as brokers
from benchmarks.cluster_bench import RingmqCluster

_U32 = struct.Struct(">I")
_HEAD = struct.Struct(">IHH")  # frame size, key, version
_MSG = struct.Struct(">QI")  # publishing id, message size
_CREDIT = struct.Struct(">IHHBH").pack(7, 9, 1, 1, 1)  # Credit: subscription 1, one chunk
_BODY_SECTION = b"\x00\x53\x75\xb0"  # an AMQP 1.0 data section (vbin32)
_Job = Callable[[], Coroutine[Any, Any, tuple[float, float, float | None]]]
"""A measured case: publish msg/s, consume msg/s, the broker's CPU seconds between them."""


@dataclass(slots=True)
class Round:
    publish_rate: float
    consume_rate: float
    cpu_per_k: float | None
    """Broker CPU seconds per 1,000 messages, published and consumed (2 per message)."""
    publish_us: float | None = None
    """Broker CPU microseconds per message published (the publish phase alone)."""
    consume_us: float | None = None
    """Broker CPU microseconds per message consumed."""


def _str(s: str) -> bytes:
    b = s.encode()
    return struct.pack(">H", len(b)) + b


def _frame(key: int, body: bytes, version: int = 1) -> bytes:
    return _HEAD.pack(len(body) + 4, key, version) + body


class _Conn:
    """One stream-protocol connection: frames out, frames in (key, content)."""

    def __init__(self, r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
        self.r, self.w = r, w

    @classmethod
    async def open(cls, port: int) -> _Conn:
        c = cls(*await asyncio.open_connection("127.0.0.1", port))
        c.w.write(_frame(17, _U32.pack(1) + _U32.pack(0)))  # peer properties: none
        await c.expect(17 | 0x8000)
        c.w.write(_frame(18, _U32.pack(2)))  # SASL handshake
        await c.expect(18 | 0x8000)
        c.w.write(_frame(19, _U32.pack(3) + _str("PLAIN") + _U32.pack(12) + b"\0guest\0guest"))
        await c.expect(19 | 0x8000)
        _k, tune = await c.expect(20)
        c.w.write(_frame(20, tune))  # the server's frame max and heartbeat, accepted
        c.w.write(_frame(21, _U32.pack(4) + _str("/")))
        await c.expect(21 | 0x8000)
        return c

    async def read(self) -> tuple[int, bytes]:
        (n,) = _U32.unpack(await self.r.readexactly(4))
        data = await self.r.readexactly(n)
        return int.from_bytes(data[:2], "big"), data[4:]

    async def expect(self, key: int) -> tuple[int, bytes]:
        while True:
            k, content = await self.read()
            if k == key:
                return k, content

    async def call(self, key: int, body: bytes) -> int:
        """A request with correlation id 9; its response code."""
        self.w.write(_frame(key, _U32.pack(9) + body))
        _k, content = await self.expect(key | 0x8000)
        return int.from_bytes(content[4:6], "big")

    async def close(self) -> None:
        self.w.close()
        await self.w.wait_closed()


async def _publish(port: int, stream: str, n: int, size: int, batch: int, in_flight: int) -> float:
    body = _BODY_SECTION + _U32.pack(size) + b"x" * size  # what rstream sends for a body
    c = await _Conn.open(port)
    try:
        await c.call(13, _str(stream) + _U32.pack(0))  # create (exists: fine)
        assert await c.call(1, b"\x01" + _str("") + _str(stream)) == 1  # publisher 1
        window = asyncio.Semaphore(in_flight)
        confirmed = 0
        done = asyncio.Event()

        async def confirms() -> None:
            nonlocal confirmed
            while confirmed < n:
                k, content = await c.read()
                if k == 3:  # PublishConfirm: [publisher][count][ids]
                    got = _U32.unpack_from(content, 1)[0]
                    before = confirmed // batch
                    confirmed += got
                    for _ in range(confirmed // batch - before):
                        window.release()
                elif k == 4:
                    raise RuntimeError("publish error")
            done.set()

        reader = asyncio.create_task(confirms())
        t0 = time.perf_counter()
        sent = 0
        while sent < n:
            k = min(batch, n - sent)
            await window.acquire()
            parts = [b"\x01", _U32.pack(k)]
            for i in range(sent, sent + k):
                parts += (_MSG.pack(i, len(body)), body)
            c.w.write(_frame(2, b"".join(parts)))
            sent += k
            if c.w.transport.get_write_buffer_size() > 1 << 20:
                await c.w.drain()
        await reader
        return n / (time.perf_counter() - t0)
    finally:
        await c.close()


async def _consume(port: int, stream: str, n: int) -> float:
    c = await _Conn.open(port)
    try:
        t0 = time.perf_counter()
        sub = b"\x01" + _str(stream) + struct.pack(">HH", 1, 10) + _U32.pack(0)  # first, 10
        c.w.write(_frame(7, _U32.pack(9) + sub))
        got = 0
        while got < n:
            k, content = await c.read()
            if k == 8:  # Deliver (v1): [sub][magic][type][u16 entries][u32 records]...
                got += _U32.unpack_from(content, 5)[0]
                c.w.write(_CREDIT)
            elif k == 7 | 0x8000 and int.from_bytes(content[4:6], "big") != 1:
                raise RuntimeError("subscribe refused")
        rate = n / (time.perf_counter() - t0)
        await c.call(14, _str(stream))  # delete
        return rate
    finally:
        await c.close()


async def _round(
    port: int, stream: str, n: int, size: int, batch: int, in_flight: int, limit_s: float,
    stats: brokers.ProcessStats,
) -> tuple[float, float, float | None]:  # fmt: skip
    pub = await asyncio.wait_for(_publish(port, stream, n, size, batch, in_flight), limit_s)
    between = stats.sample()  # the publish phase's CPU ends here
    con = await asyncio.wait_for(_consume(port, stream, n), limit_s)
    return pub, con, between.cpu_s if between is not None else None


def _open(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), 1):
            return True
    except OSError:
        return False


def _run(name: str, port: int, stats: brokers.ProcessStats, job: _Job, n: int) -> Round | None:
    # One measured case: its rates and the broker's CPU per message, by phase and in all.
    before = stats.sample()
    try:
        pub, con, between = asyncio.run(job())
    except Exception as exc:  # noqa: BLE001 - reported, not retried
        print(f"{name}: failed: {exc!r}")
        return None
    after = stats.sample()
    if before is None or after is None or between is None:
        return Round(pub, con, None)
    return Round(
        pub, con,
        (after.cpu_s - before.cpu_s) / (2 * n) * 1000,
        (between - before.cpu_s) / n * 1e6,
        (after.cpu_s - between) / n * 1e6,
    )  # fmt: skip


def _median(values: list[float | None]) -> str:
    got = [v for v in values if v is not None]
    return f"{statistics.median(got):.4g}" if got else "-"


def _median_row(label: str, rounds: list[Round]) -> str:
    pub = statistics.median(x.publish_rate for x in rounds)
    con = statistics.median(x.consume_rate for x in rounds)
    cpu = _median([x.cpu_per_k for x in rounds])
    pub_us = _median([x.publish_us for x in rounds])
    con_us = _median([x.consume_us for x in rounds])
    return (
        f"{label:30} {pub:>14,.0f} {con:>14,.0f} {pub_us:>8} {con_us:>8} {cpu:>9} {len(rounds):>6}"
    )


def _ratio_rows(results: dict[tuple[str, int], list[Round]], base: str) -> list[str]:
    # Each ringmq target's medians over `base`'s (RabbitMQ's when it ran), size by size.
    out: list[str] = []
    for (name, size), rounds in sorted(results.items()):
        theirs = results.get((base, size))
        if name == base or not theirs:
            continue
        pub = statistics.median(x.publish_rate for x in rounds)
        con = statistics.median(x.consume_rate for x in rounds)
        pub_b = statistics.median(x.publish_rate for x in theirs)
        con_b = statistics.median(x.consume_rate for x in theirs)
        out.append(
            f"{name} {size} B / {base}: publish {pub / pub_b:.2f}x, consume {con / con_b:.2f}x"
        )
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--messages", type=int, default=100_000)
    ap.add_argument("--sizes", default="100,1024")
    ap.add_argument("--batch", type=int, default=100)
    ap.add_argument("--in-flight", type=int, default=10)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--timeout", type=float, default=300.0)
    ap.add_argument("--target", choices=("ringmq", "rabbitmq", "both"), default="ringmq")
    ap.add_argument("--rabbitmq-port", type=int, default=5552)
    ap.add_argument("--large", type=int, default=0, help="messages of the read-from-start case")
    ap.add_argument(
        "--rules", default="fsynced",
        help="ringmq's stream confirm rules, one broker each: fsynced, written or both (a,b)",
    )  # fmt: skip
    ap.add_argument(
        "--baseline-src", type=Path, default=None,
        help="also run an older tree's src (e.g. /tmp/ss_old/src) as 'ringmq-old'",
    )  # fmt: skip
    ap.add_argument("--cluster", action="store_true", help="also a 3-node ringmq cluster")
    args = ap.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    targets: dict[str, tuple[int, brokers.ProcessStats]] = {}
    started: list[brokers.RingmqProcess] = []
    runs: list[tuple[str, brokers.RingmqProcess]] = []
    clusters: list[RingmqCluster] = []
    if args.target in ("ringmq", "both"):
        if args.baseline_src is not None:
            runs.append(
                ("ringmq-old", brokers.RingmqProcess(protocols=("stream",), src=args.baseline_src))
            )
        for rule in args.rules.split(","):
            proc = brokers.RingmqProcess(
                protocols=("stream",), extra_args=("--stream-confirm", rule)
            )
            runs.append((f"ringmq-{rule}", proc))
    try:
        for name, proc in runs:
            proc.start()
            started.append(proc)
            targets[name] = (proc.ports["stream"], brokers.ProcessStats(proc.pid))
        wanted = [("cluster", None)] if args.cluster else []
        if args.cluster and args.baseline_src is not None:
            wanted.append(("cluster-base", args.baseline_src))
        for name, src in wanted:
            cluster = RingmqCluster(name=name, src=src, stream=True)
            clusters.append(cluster)
            target = cluster.start()
            stats = brokers.ProcessStats(target.pid, target.others)
            targets[name] = (cluster.stream_port(target.pid), stats)
        if args.target in ("rabbitmq", "both"):
            if _open(args.rabbitmq_port):
                pid = brokers.listening_pid(args.rabbitmq_port)
                targets["rabbitmq"] = (args.rabbitmq_port, brokers.ProcessStats(pid))
            else:
                print(f"rabbitmq: nothing listens on 127.0.0.1:{args.rabbitmq_port}; skipped")
        results: dict[tuple[str, int], list[Round]] = {}
        large: dict[str, Round] = {}
        names = list(targets)
        k = len(names) or 1
        for r in range(args.rounds):
            for size in sizes:
                # each round starts with the next broker, so none is always first after a pause
                for name in names[r % k :] + names[: r % k]:
                    port, stats = targets[name]

                    def job(
                        port: int = port,
                        r: int = r,
                        size: int = size,
                        stats: brokers.ProcessStats = stats,
                    ) -> Coroutine[Any, Any, tuple[float, float, float | None]]:
                        return _round(
                            port, f"bench-{size}-{r}", args.messages, size, args.batch,
                            args.in_flight, args.timeout, stats,
                        )  # fmt: skip

                    got = _run(f"{name} {size} B round {r}", port, stats, job, args.messages)
                    if got is not None:
                        results.setdefault((name, size), []).append(got)
        if args.large:
            for name, (port, stats) in targets.items():

                def large_job(
                    port: int = port, stats: brokers.ProcessStats = stats
                ) -> Coroutine[Any, Any, tuple[float, float, float | None]]:
                    return _round(
                        port, "bench-large", args.large, 100, args.batch, args.in_flight,
                        args.timeout, stats,
                    )  # fmt: skip

                got = _run(f"{name} large", port, stats, large_job, args.large)
                if got is not None:
                    large[name] = got
    finally:
        for proc in started:
            proc.stop()
        for cluster in clusters:
            cluster.stop()
    print(
        f"{'broker, size':30} {'publish msg/s':>14} {'consume msg/s':>14} {'pub us':>8} "
        f"{'con us':>8} {'CPU s/1k':>9} rounds"
    )
    for (name, size), rounds in sorted(results.items()):
        print(_median_row(f"{name} {size} B", rounds))
    for name, got in sorted(large.items()):
        print(_median_row(f"{name} {args.large:,} x 100 B", [got]))
    if "rabbitmq" in targets:
        for line in _ratio_rows(results, "rabbitmq"):
            print(line)


if __name__ == "__main__":
    main()
