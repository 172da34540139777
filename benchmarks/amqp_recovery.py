"""Crash-recovery time of ringmq: confirmed persistent messages, kill -9, restart, count.

Usage (from the repository root)::

    .venv/bin/python -m benchmarks.amqp_recovery [--count 1000000] [--body-size 1024]
        [--stop kill|clean|both] [--no-verify] [--json FILE]

Theory of operation: the script starts its own ``ringmq serve`` (temporary data dir, port 0),
declares a durable queue, publishes ``count`` persistent messages with publisher confirms
(1000 in flight) and waits for every confirm, so every message is owed to the client. It then
SIGKILLs the broker (``--stop kill``), restarts it on the same data dir, and measures the time
from the restart to the AMQP port being logged and to a passive queue.declare reporting all
``count`` messages, and the restarted broker's RSS and peak RSS (VmHWM). ``--stop clean`` stops
it with SIGTERM instead (a clean stop: recovery terms written); ``--stop both`` (the default)
measures the kill first, then a clean stop and start of the recovered broker. With
verification (the default) it finally drains the queue and checks that exactly ``count``
messages come back. RabbitMQ is not measured: this tool stops only what it started.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import sys
import time
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run as a script: make `benchmarks` importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks import amqp_client as client_mod
from benchmarks import amqp_wire as wire
from benchmarks.amqp_brokers import ProcessStats, RingmqProcess

QUEUE = "bench.recovery"
_MISSING_GRACE_S = 30.0  # a queue still unknown this long after the restart is lost


async def _fill(url: str, count: int, body_size: int, timeout_s: float) -> float:
    client = await client_mod.AMQPClient.connect(url)
    try:
        ch = await client.open_channel()
        await client.rpc(ch, wire.queue_declare(ch, QUEUE, durable=True), wire.QUEUE_DECLARE_OK)
        await client.rpc(ch, wire.queue_purge(ch, QUEUE), wire.QUEUE_PURGE_OK)
        await client.rpc(ch, wire.confirm_select(ch), wire.CONFIRM_SELECT_OK)
        tracker = client.confirms(ch, record_latency=False)
        body = (b"r" * body_size)[:body_size]
        template = wire.publish(ch, "", QUEUE, body, persistent=True, frame_max=client.frame_max)
        started = time.monotonic()
        await asyncio.wait_for(
            client_mod.publish_confirmed(client, ch, tracker, template.frames, count, 1000),
            timeout_s,
        )
        if tracker.confirmed != count:
            raise RuntimeError(
                f"{tracker.confirmed} of {count} confirmed ({tracker.nacked} nacked)"
            )
        return count / (time.monotonic() - started)
    finally:
        await client.close()


async def _depth(url: str) -> int:
    client = await client_mod.AMQPClient.connect(url)
    try:
        ch = await client.open_channel()
        ok = await client.rpc(
            ch, wire.queue_declare(ch, QUEUE, passive=True), wire.QUEUE_DECLARE_OK, 600.0
        )
        return wire.decode_queue_declare_ok(ok)[1]
    finally:
        await client.close()


async def _drain(url: str, count: int, timeout_s: float) -> int:
    client = await client_mod.AMQPClient.connect(url)
    try:
        ch = await client.open_channel()
        await client.rpc(ch, wire.basic_qos(ch, 1000), wire.BASIC_QOS_OK)
        consumer = client_mod.Consumer(channel=ch, target=count, ack_every=250)
        client.add_consumer(consumer)
        await client.rpc(ch, wire.basic_consume(ch, QUEUE, "drain"), wire.BASIC_CONSUME_OK)
        assert consumer.done is not None
        try:
            await asyncio.wait_for(asyncio.shield(consumer.done), timeout_s)
        except TimeoutError:
            pass
        await asyncio.sleep(0.5)  # anything beyond count (duplicates) would show up here
        return consumer.received
    finally:
        await client.close()


def _terminate(broker: RingmqProcess, timeout_s: float) -> float:
    # A clean stop (SIGTERM) that keeps the data dir; returns the seconds it took.
    pid = broker.pid
    assert pid is not None
    started = time.monotonic()
    os.kill(pid, signal.SIGTERM)
    deadline = started + timeout_s
    while time.monotonic() < deadline:
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            break
        if state == "Z":  # exited, not yet reaped
            break
        time.sleep(0.02)
    took = time.monotonic() - started
    broker.kill()  # reaps it (no signal is sent to an exited process)
    return took


def _restart(
    broker: RingmqProcess, count: int, timeout_s: float, prefix: str
) -> tuple[str, dict[str, Any]]:
    # Start on the same data dir; time to the listener and to all messages; RSS.
    restarted = time.monotonic()
    url = broker.start()
    listening_s = time.monotonic() - restarted
    deadline = restarted + timeout_s
    missing_since: float | None = None
    depth, error = -1, ""
    while time.monotonic() < deadline:
        try:
            depth, error = asyncio.run(_depth(url)), ""
            missing_since = None
        except client_mod.BrokerClosedError as exc:
            depth, error = -1, str(exc)
            missing_since = missing_since or time.monotonic()
            if time.monotonic() - missing_since > _MISSING_GRACE_S:
                break  # the queue did not come back: report, don't wait for the deadline
        except (OSError, TimeoutError) as exc:
            depth, error = -1, repr(exc)
        if depth >= count:
            break
        time.sleep(0.05)
    ready_s = time.monotonic() - restarted
    sample = ProcessStats(broker.pid).sample()
    return url, {
        f"{prefix}restart_to_listening_s": round(listening_s, 3),
        f"{prefix}restart_to_all_messages_s": round(ready_s, 3),
        f"{prefix}depth_after_restart": depth,
        f"{prefix}error": error,
        f"{prefix}rss_after_recovery_mib": round(sample.rss_bytes / 2**20, 1) if sample else None,
        f"{prefix}peak_rss_mib": round(sample.hwm_bytes / 2**20, 1) if sample else None,
    }


def measure(
    count: int, body_size: int, verify: bool, timeout_s: float, stop: str = "both"
) -> dict[str, Any]:
    broker = RingmqProcess(startup_timeout_s=timeout_s)
    try:
        url = broker.start()
        fill_rate = asyncio.run(_fill(url, count, body_size, timeout_s))
        result: dict[str, Any] = {
            "count": count,
            "body_size": body_size,
            "fill_confirmed_msg_s": round(fill_rate),
        }
        depths = []
        if stop in ("kill", "both"):
            broker.kill()
            url, got = _restart(broker, count, timeout_s, "")
            result.update(got)
            depths.append(got["depth_after_restart"])
        if stop in ("clean", "both"):
            result["clean_stop_s"] = round(_terminate(broker, timeout_s), 3)
            url, got = _restart(broker, count, timeout_s, "clean_")
            result.update(got)
            depths.append(got["clean_depth_after_restart"])
        depth = min(depths)
        if verify and depth > 0:
            result["drained"] = asyncio.run(_drain(url, count, timeout_s))
        result["ok"] = all(d == count for d in depths) and result.get("drained", count) == count
        return result
    finally:
        broker.stop()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="ringmq crash-recovery time")
    parser.add_argument("--count", type=int, default=1_000_000)
    parser.add_argument("--body-size", type=int, default=1024)
    parser.add_argument(
        "--stop",
        choices=("kill", "clean", "both"),
        default="both",
        help="kill -9, clean stop (SIGTERM), or kill then clean stop",
    )
    parser.add_argument("--no-verify", action="store_true", help="skip draining the queue")
    parser.add_argument("--timeout", type=float, default=900.0, help="seconds per phase")
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args(argv)
    result = measure(args.count, args.body_size, not args.no_verify, args.timeout, args.stop)
    for key, value in result.items():
        print(f"{key}: {value}")
    if args.json:
        args.json.write_text(json.dumps(result, indent=2))
    return 0 if result["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
