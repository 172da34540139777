"""Publishes refused while the disk fails: does a consumer receive a message its publisher was
nacked for? (The durability hold, core/queue/hold.py; docs/storage.md, "Write failures".)

A broker runs in this process (its loop in a thread) on a temporary data directory. A pika
consumer drains one durable queue while aio-pika publishes `--messages` persistent messages
with confirms, `--in-flight` at a time. After `--fail-after` confirms the journal's writes fail
with ENOSPC for `--fail-s` seconds (an injected `journal.write_all`), then succeed again; the
broker nacks what it cannot write, blocks the publisher, and unblocks it once a probe writes.
Printed: acks, nacks, timeouts, messages received, and the two numbers that must be 0:
received but nacked (a refused publish reached a consumer) and acked but not received.

    .venv/bin/python -m benchmarks.refused_delivery [--messages 3000] [--fail-s 1.0]

Bounded: every wait has a deadline; loopback only.
"""

from __future__ import annotations

import argparse
import asyncio
import errno
import os
import tempfile
import threading
import time
from pathlib import Path

import aio_pika
import pika

from ringmq.node import BrokerThread
from ringmq.server.configfile import FileConfig
from ringmq.server.runtime import ServerOptions
from ringmq.storage import journal


def _consume(port: int, got: set[bytes], stop: threading.Event) -> None:
    conn = pika.BlockingConnection(pika.ConnectionParameters("127.0.0.1", port, heartbeat=0))
    ch = conn.channel()
    ch.basic_qos(prefetch_count=500)

    def on_message(c: object, m: pika.spec.Basic.Deliver, _p: object, body: bytes) -> None:
        got.add(body)
        ch.basic_ack(m.delivery_tag)

    ch.basic_consume("rq", on_message)
    while not stop.is_set():
        conn.process_data_events(0.05)
    conn.close()


async def _publish(
    port: int, args: argparse.Namespace, fail: threading.Event
) -> dict[str, set[bytes]]:
    out: dict[str, set[bytes]] = {"acked": set(), "nacked": set(), "timeout": set()}
    conn = await aio_pika.connect(f"amqp://guest:guest@127.0.0.1:{port}/")
    ch = await conn.channel(publisher_confirms=True)
    x = ch.default_exchange
    sem = asyncio.Semaphore(args.in_flight)

    async def one(i: int) -> None:
        body = b"m%07d" % i
        async with sem:
            msg = aio_pika.Message(body, delivery_mode=aio_pika.DeliveryMode.PERSISTENT)
            try:
                await asyncio.wait_for(x.publish(msg, routing_key="rq"), args.timeout_s)
            except aio_pika.exceptions.DeliveryError:
                out["nacked"].add(body)
            except TimeoutError:
                out["timeout"].add(body)
            else:
                out["acked"].add(body)
            if len(out["acked"]) == args.fail_after and not fail.is_set():
                fail.set()

    await asyncio.gather(*(one(i) for i in range(args.messages)))
    await conn.close()
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--messages", type=int, default=3000)
    p.add_argument("--in-flight", type=int, default=100)
    p.add_argument("--fail-after", type=int, default=500)
    p.add_argument("--fail-s", type=float, default=1.0)
    p.add_argument("--timeout-s", type=float, default=20.0)
    args = p.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        opts = ServerOptions(
            host="127.0.0.1",
            amqp_port=0,
            stomp_port=None,
            mqtt_port=None,
            data_dir=Path(tmp) / "data",
            config=FileConfig(),
        )
        b = BrokerThread(opts)
        b.start()
        setup = pika.BlockingConnection(pika.ConnectionParameters("127.0.0.1", b.port))
        setup.channel().queue_declare("rq", durable=True)
        setup.close()
        real = journal.write_all
        fail = threading.Event()

        def full(fd: int, data: bytes | bytearray) -> None:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

        def injector() -> None:
            fail.wait(timeout=120)
            journal.write_all = full
            time.sleep(args.fail_s)
            journal.write_all = real

        got: set[bytes] = set()
        stop = threading.Event()
        consumer = threading.Thread(target=_consume, args=(b.port, got, stop), daemon=True)
        consumer.start()
        threading.Thread(target=injector, daemon=True).start()
        out = asyncio.run(_publish(b.port, args, fail))
        deadline = time.monotonic() + 30
        while not out["acked"] <= got and time.monotonic() < deadline:
            time.sleep(0.05)
        time.sleep(0.5)  # anything refused that would still arrive
        stop.set()
        consumer.join(10)
        b.stop()
    print(
        f"acked {len(out['acked'])}  nacked {len(out['nacked'])}  "
        f"timed out {len(out['timeout'])}  received {len(got)}"
    )
    print(f"received but nacked: {len(got & out['nacked'])}")
    print(f"acked but not received: {len(out['acked'] - got)}")


if __name__ == "__main__":
    main()
