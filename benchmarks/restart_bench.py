"""Restart time against restart history: kill -9 rounds, and a large persistent backlog.

Usage (from the repository root)::

    .venv/bin/python -m benchmarks.restart_bench [--rounds 100] [--report 1,10,100]
        [--messages 50] [--body-size 256] [--standing 0] [--leftover 0]
        [--backlog 500000] [--backlog-body-size 256] [--json FILE] [--keep]

Theory of operation: the script starts its own ``ringmq serve`` (a temporary data dir, a free
loopback port found by binding port 0) and runs ``rounds`` rounds. Each round declares the same
few durable queues, a de-duplicated queue (``x-message-deduplication-window-ms``) and a durable
exchange with bindings (definitions), publishes ``messages`` persistent messages to every queue
with publisher confirms (pika; message ids on the de-duplicated queue), drains every queue with
basic.get and acks, then SIGKILLs the broker and starts it again on the same data dir.
``--leftover K`` leaves the last K messages of the first queue at the kill (the next round
acks them: its journal segment then depends on the previous one), and ``--standing N`` puts N
persistent messages in a queue nobody consumes before round 1 (a standing backlog).

Per restart it records the time from the spawn to the AMQP port answering the protocol header
with connection.start (``port_up_s``: the socket is bound, and accepts TCP connections,
before the store is recovered), the broker's CPU seconds by then (``port_up_cpu_s``, less
sensitive than wall time to other load on the machine), the time to a passive queue.declare
of every queue plus a first basic.get answering (``queue_ready_s``), the recovery time the
broker logs (``recovery_ms``), and the data dir's files and bytes per subdirectory; at the
``--report`` rounds also the CPU time of replaying a copy of the store in this process
(``replay_cpu_ms``, best of 3: the part of a restart that depends on the store, measured
without the machine's other load). The queues hold the same at every restart, so a restart
should cost the same in round 100 as in round 1.

``--backlog N`` then measures one more restart, on a fresh data dir: N persistent messages
published with confirms (1000 in flight) into one queue, kill -9, restart; reported: port up,
queue ready (a passive declare reporting all N messages), recovery time, and the broker's RSS
and peak RSS after recovery. ``--backlog 0`` skips it. Linux only; this tool stops only the
processes it started.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Final

import pika
import pika.exceptions

if __package__ in (None, ""):  # run as a script: make `benchmarks` importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks import amqp_client as client_mod
from benchmarks import amqp_wire as wire
from benchmarks.amqp_brokers import ProcessStats
from tests.ports import free_port  # never in the kernel's ephemeral range

from ringmq.storage import FileStore

QUEUES: Final = ("restart.q0", "restart.q1", "restart.q2")
BACKLOG_QUEUE: Final = "restart.backlog"
STANDING_QUEUE: Final = "restart.standing"
DEDUP_QUEUE: Final = "restart.dedup"
EXCHANGE: Final = "restart.x"
_DEDUP_WINDOW_MS: Final = 1000  # ids of a round are out of the window by the next round
_POLL_S: Final = 0.005
_PROTOCOL_HEADER: Final = b"AMQP\x00\x00\x09\x01"
_RECOVERED: Final = re.compile(rb"recovered \d+ persistent messages .*? in (\d+) ms")


class Broker:
    """One ``ringmq serve`` on a fixed loopback port and a data dir; started and killed here."""

    def __init__(self, data: Path, log_path: Path, timeout_s: float) -> None:
        self.data = data
        self.log_path = log_path
        self.timeout_s = timeout_s
        self.port = free_port()
        self.proc: subprocess.Popen[bytes] | None = None
        self.spawned = 0.0

    def start(self) -> None:
        cmd = [
            sys.executable, "-m", "ringmq", "serve", "--host", "127.0.0.1",
            "--amqp-port", str(self.port), "--http-port", "-1",
            "--stomp-port", "off", "--mqtt-port", "off", "--stream-port", "off",
            "--data-dir", str(self.data),
        ]  # fmt: skip
        with self.log_path.open("ab") as log:
            self.spawned = time.monotonic()
            self.proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT)

    def wait_port(self) -> tuple[float, float]:
        """Seconds from the spawn to the AMQP port answering (connection.start after the
        protocol header: the socket is bound, and accepts, before the store is recovered),
        and the broker's CPU seconds by then (less sensitive than wall time to other load)."""
        deadline = self.spawned + self.timeout_s
        while time.monotonic() < deadline:
            with socket.socket() as s, contextlib.suppress(OSError):
                s.settimeout(max(0.01, deadline - time.monotonic()))
                s.connect(("127.0.0.1", self.port))
                s.sendall(_PROTOCOL_HEADER)
                if s.recv(1):  # the first byte of connection.start
                    took = time.monotonic() - self.spawned
                    return took, self.cpu_s()
            assert self.proc is not None
            if self.proc.poll() is not None:
                break
            time.sleep(_POLL_S)
        raise RuntimeError("broker did not listen:\n" + self.log_path.read_text()[-2000:])

    def cpu_s(self) -> float:
        assert self.proc is not None
        sample = ProcessStats(self.proc.pid).sample()
        return sample.cpu_s if sample else -1.0

    def recovery_ms(self) -> int:
        """The recovery time the broker logged last (-1 when none)."""
        found = _RECOVERED.findall(self.log_path.read_bytes())
        return int(found[-1]) if found else -1

    def connect(self) -> pika.BlockingConnection:
        return pika.BlockingConnection(
            pika.ConnectionParameters("127.0.0.1", self.port, connection_attempts=1)
        )

    def wait_ready(self, queues: tuple[str, ...], depth: int = 0) -> float:
        """Seconds from the spawn to every queue answering a passive declare (with at least
        `depth` messages in the first) and a basic.get on the first."""
        deadline = self.spawned + self.timeout_s
        while time.monotonic() < deadline:
            with contextlib.suppress(pika.exceptions.AMQPError, OSError):
                conn = self.connect()
                try:
                    ch = conn.channel()
                    counts = [
                        ch.queue_declare(q, passive=True).method.message_count for q in queues
                    ]
                    if counts[0] >= depth:
                        ch.basic_get(queues[0], auto_ack=False)  # answered: the queue serves
                        return time.monotonic() - self.spawned
                finally:
                    with contextlib.suppress(pika.exceptions.AMQPError, OSError):
                        conn.close()
            time.sleep(_POLL_S)
        raise RuntimeError("queues not ready:\n" + self.log_path.read_text()[-2000:])

    def kill(self) -> None:
        if self.proc is not None:
            if self.proc.poll() is None:
                os.kill(self.proc.pid, signal.SIGKILL)
            self.proc.wait(timeout=30)
            self.proc = None


def store_files(data: Path) -> dict[str, list[int]]:
    """Subdirectory (or top-level file) of the data dir -> [files, bytes]."""
    out: dict[str, list[int]] = {}
    for p in data.rglob("*"):
        if p.is_file():
            rel = p.relative_to(data).parts
            key = rel[0] if len(rel) > 1 else "."
            entry = out.setdefault(key, [0, 0])
            entry[0] += 1
            entry[1] += p.stat().st_size
    return dict(sorted(out.items()))


def replay_cpu_ms(data: Path, work: Path, repeat: int = 3) -> float:
    """CPU milliseconds of opening a copy of the data dir's store in this process (the
    replay after a kill -9, which is what grows with history), best of `repeat`: the broker's
    logged recovery time is wall time and moves with the machine's other load."""
    best = float("inf")
    for _ in range(repeat):
        copy = work / "replay"
        shutil.copytree(data / "store", copy)
        try:
            started = time.process_time()
            store = FileStore.open(copy, spill_directory=work / "replay-paging")
            store.recover()
            best = min(best, time.process_time() - started)
            store.abandon()
        finally:
            shutil.rmtree(copy, ignore_errors=True)
            shutil.rmtree(work / "replay-paging", ignore_errors=True)
    return round(best * 1000, 1)


def _drain(ch: Any, queue: str, keep: int) -> int:
    # get+ack until `keep` messages are left; returns how many were taken
    got = 0
    if ch.queue_declare(queue, passive=True).method.message_count <= keep:
        return got
    while True:
        method, _props, _body = ch.basic_get(queue, auto_ack=False)
        if method is None:
            return got
        ch.basic_ack(method.delivery_tag)
        got += 1
        if method.message_count <= keep:
            return got


def _round(broker: Broker, round_no: int, messages: int, body: bytes, leftover: int) -> None:
    # Declare everything, publish with confirms, drain with get+ack (all but `leftover` of the
    # first queue, which the next round takes first).
    conn = broker.connect()
    try:
        ch = conn.channel()
        ch.exchange_declare(EXCHANGE, "direct", durable=True)
        for q in QUEUES:
            ch.queue_declare(q, durable=True)
            ch.queue_bind(q, EXCHANGE, q)
        ch.queue_declare(
            DEDUP_QUEUE,
            durable=True,
            arguments={"x-message-deduplication-window-ms": _DEDUP_WINDOW_MS},
        )
        ch.confirm_delivery()
        for i in range(messages):
            for q in QUEUES:
                props = pika.BasicProperties(delivery_mode=2)
                ch.basic_publish(EXCHANGE, q, body, props)  # returns once confirmed
            mid = f"r{round_no}-{i}"
            props = pika.BasicProperties(delivery_mode=2, message_id=mid)
            ch.basic_publish("", DEDUP_QUEUE, body, props)
        for q in (*QUEUES, DEDUP_QUEUE):
            keep = leftover if q == QUEUES[0] else 0
            _drain(ch, q, keep)
            left = ch.queue_declare(q, passive=True).method.message_count
            if left != keep:
                raise RuntimeError(f"round {round_no}: {q} holds {left}, expected {keep}")
    finally:
        conn.close()


def rounds(args: argparse.Namespace, report: set[int], work: Path) -> list[dict[str, Any]]:
    data = work / "rounds"
    broker = Broker(data, work / "rounds.log", args.timeout)
    body = (b"b" * args.body_size)[: args.body_size]
    queues: tuple[str, ...] = (*QUEUES, DEDUP_QUEUE)
    rows: list[dict[str, Any]] = []
    try:
        broker.start()
        broker.wait_port()
        if args.standing:
            url = f"amqp://guest:guest@127.0.0.1:{broker.port}/"
            asyncio.run(_fill(url, STANDING_QUEUE, args.standing, args.body_size, args.timeout))
            queues = (STANDING_QUEUE, *queues)
        for n in range(1, args.rounds + 1):
            _round(broker, n, args.messages, body, args.leftover)
            broker.kill()
            broker.start()
            port_up, cpu = broker.wait_port()
            ready = broker.wait_ready(queues, depth=args.standing)
            files = store_files(data)
            row = {
                "restart": n,
                "port_up_s": round(port_up, 3),
                "port_up_cpu_s": round(cpu, 3),
                "queue_ready_s": round(ready, 3),
                "recovery_ms": broker.recovery_ms(),
                "journal_segments": len(list((data / "store" / "journal").glob("*.seg"))),
                "store_files": sum(f for f, _ in files.values()),
                "store_bytes": sum(b for _, b in files.values()),
                "by_dir": files,
            }
            rows.append(row)
            if n in report:
                row["replay_cpu_ms"] = replay_cpu_ms(data, work)
                print(
                    f"restart {n:4d}: port up {port_up:.3f} s ({cpu:.2f} s CPU), queues ready "
                    f"{ready:.3f} s, recovery {row['recovery_ms']} ms (replay alone "
                    f"{row['replay_cpu_ms']} ms CPU), journal {row['journal_segments']} "
                    f"segments, store {row['store_files']} files {row['store_bytes']} B",
                    flush=True,
                )
    finally:
        broker.kill()
    return rows


async def _fill(url: str, queue: str, count: int, body_size: int, timeout_s: float) -> None:
    # `count` persistent messages into `queue`, 1000 confirms in flight, all confirmed.
    client = await client_mod.AMQPClient.connect(url)
    try:
        ch = await client.open_channel()
        declare = wire.queue_declare(ch, queue, durable=True)
        await client.rpc(ch, declare, wire.QUEUE_DECLARE_OK)
        await client.rpc(ch, wire.confirm_select(ch), wire.CONFIRM_SELECT_OK)
        tracker = client.confirms(ch, record_latency=False)
        body = (b"r" * body_size)[:body_size]
        template = wire.publish(ch, "", queue, body, persistent=True, frame_max=client.frame_max)
        await asyncio.wait_for(
            client_mod.publish_confirmed(client, ch, tracker, template.frames, count, 1000),
            timeout_s,
        )
        if tracker.confirmed != count:
            raise RuntimeError(f"{tracker.confirmed} of {count} confirmed")
    finally:
        await client.close()


def backlog(count: int, body_size: int, timeout_s: float, work: Path) -> dict[str, Any]:
    data = work / "backlog"
    broker = Broker(data, work / "backlog.log", timeout_s)
    queue = BACKLOG_QUEUE
    try:
        broker.start()
        broker.wait_port()
        url = f"amqp://guest:guest@127.0.0.1:{broker.port}/"
        started = time.monotonic()
        asyncio.run(_fill(url, queue, count, body_size, timeout_s))
        fill_s = time.monotonic() - started
        broker.kill()
        broker.start()
        port_up, cpu = broker.wait_port()
        ready = broker.wait_ready((queue,), depth=count)
        assert broker.proc is not None
        sample = ProcessStats(broker.proc.pid).sample()  # right after the queue is ready
        files = store_files(data)
        return {
            "backlog": count,
            "body_size": body_size,
            "fill_s": round(fill_s, 1),
            "fill_confirmed_msg_s": round(count / fill_s),
            "port_up_s": round(port_up, 3),
            "port_up_cpu_s": round(cpu, 3),
            "recovery_ms": broker.recovery_ms(),
            "queue_ready_s": round(ready, 3),
            "rss_after_recovery_mib": round(sample.rss_bytes / 2**20, 1) if sample else None,
            "peak_rss_mib": round(sample.hwm_bytes / 2**20, 1) if sample else None,
            "store_files": sum(f for f, _ in files.values()),
            "store_bytes": sum(b for _, b in files.values()),
        }
    finally:
        broker.kill()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="ringmq restart time against history")
    parser.add_argument("--rounds", type=int, default=100)
    parser.add_argument("--report", default="1,10,100", help="rounds to print (comma list)")
    parser.add_argument("--messages", type=int, default=50, help="per queue per round")
    parser.add_argument("--body-size", type=int, default=256)
    parser.add_argument("--standing", type=int, default=0, help="a backlog nobody consumes")
    parser.add_argument("--leftover", type=int, default=0, help="left at each kill, see doc")
    parser.add_argument("--backlog", type=int, default=500_000, help="0: skip")
    parser.add_argument("--backlog-body-size", type=int, default=256)
    parser.add_argument("--timeout", type=float, default=600.0, help="seconds per phase")
    parser.add_argument("--json", type=Path, default=None)
    parser.add_argument("--keep", action="store_true", help="keep the temporary data dirs")
    args = parser.parse_args(argv)
    report = {int(r) for r in args.report.split(",") if r}
    work = Path(tempfile.mkdtemp(prefix="ringmq-restart-"))
    result: dict[str, Any] = {}
    try:
        if args.rounds > 0:
            rows = rounds(args, report, work)
            result["rounds"] = rows
        if args.backlog > 0:
            result["backlog"] = backlog(args.backlog, args.backlog_body_size, args.timeout, work)
            print(f"backlog: {result['backlog']}", flush=True)
    finally:
        if args.keep:
            print(f"data kept in {work}")
        else:
            shutil.rmtree(work, ignore_errors=True)
    if args.json:
        args.json.write_text(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
