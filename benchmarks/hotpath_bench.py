"""In-process microbenchmark of the broker's per-message path: CPU microseconds per message.

Theory of operation
-------------------
No sockets and no event loop: a ``BrokerServer`` is built around a fresh in-memory ``Broker``
with the AMQP 0-9-1 handler wired as ``ringmq.node`` wires it, and two of the server's
connections of that protocol (``HandlerConnection``: a producer and a consumer) are attached
to fake transports that only count the bytes written. Everything the client would send is
encoded up front (the handshake, one queue, a prefetch and a consumer, then publish batches),
so the timed loop runs exactly the server's own code: ``data_received`` -> the connection
driver (``server.handlers.Handlers``) -> ``Amqp091Handler.receive_data`` ->
``ServerConnection.receive_data`` -> ``Amqp091.handle`` -> effects -> ``Connections.apply``
-> ``Amqp091Handler.apply`` -> one write per connection per batch.

The loop mirrors benchmark scenario (a)/(b): the producer delivers ``--batch`` publishes per
read; after each read the consumer acks (``multiple=true``) everything delivered so far once
``--ack-every`` deliveries are outstanding, the way the load generator does. The figure printed
is ``time.process_time()`` per message (publish + deliver + ack), the median of ``--rounds``.

``--mode publish`` mirrors scenario (d) instead: no consumer, a queue with ``x-max-length=1000``
(drop-head), so every publish past the first thousand drops the head; the figure is the CPU
microseconds per publish.

    .venv/bin/python -m benchmarks.hotpath_bench [--messages 50000] [--size 16] [--profile F]
    .venv/bin/python -m benchmarks.hotpath_bench --mode publish
"""

from __future__ import annotations

import argparse
import cProfile
import statistics
import struct
import tempfile
import time
from pathlib import Path
from typing import Any

from ringmq.adapters.amqp091.connection import Amqp091Handlers
from ringmq.amqp import spec
from ringmq.amqp.frames import PROTOCOL_HEADER, encode_content_frames, encode_method_frame
from ringmq.amqp.properties import BasicProperties, encode_properties
from ringmq.core.broker import Broker
from ringmq.server.configfile import FileConfig
from ringmq.server.handlers import HandlerConnection
from ringmq.server.runtime import BrokerServer, Core, ServerOptions
from ringmq.server.setup import broker_config

_QUEUE = "hotpath"


class _Transport:
    """Just enough of ``asyncio.Transport`` for a connection: counts written bytes."""

    def __init__(self) -> None:
        self.written = 0
        self.last = b""

    def write(self, data: bytes) -> None:
        self.written += len(data)
        self.last = data

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return ("127.0.0.1", 40000) if name in ("peername", "sockname") else default

    def set_write_buffer_limits(self, high: int | None = None, low: int | None = None) -> None:
        pass

    def is_closing(self) -> bool:
        return False

    def pause_reading(self) -> None:
        pass

    def resume_reading(self) -> None:
        pass

    def close(self) -> None:
        pass

    def abort(self) -> None:
        pass


def _handshake() -> bytes:
    frames = [
        PROTOCOL_HEADER,
        encode_method_frame(0, spec.ConnectionStartOk(response=b"\x00guest\x00guest")),
        encode_method_frame(0, spec.ConnectionTuneOk(2047, 131072, 0)),
        encode_method_frame(0, spec.ConnectionOpen(virtual_host="/")),
        encode_method_frame(1, spec.ChannelOpen()),
    ]
    return b"".join(frames)


def _server(tmp: str) -> tuple[Broker, BrokerServer]:
    broker = Broker(broker_config(FileConfig()))
    core = Core(broker)
    server = BrokerServer(
        ServerOptions(amqp_port=0, http_port=None, data_dir=Path(tmp)),
        lambda _emit, _now: core,
        handlers={"amqp091": Amqp091Handlers()},
    )
    server.attach(core)  # what `BrokerServer.start` builds around the broker, without sockets
    return broker, server


def _one_publish(size: int) -> bytes:
    # One basic.publish (method, header, body frames) of `size` bytes to the queue.
    props = encode_properties(BasicProperties(delivery_mode=1))
    method = spec.BasicPublish(exchange="", routing_key=_QUEUE)
    return encode_content_frames(1, method, props, b"x" * size, 131072)


def _connect(
    server: BrokerServer, conn_id: int, setup: bytes
) -> tuple[HandlerConnection, _Transport]:
    conn = HandlerConnection(server.handlers, conn_id, "amqp091", tls=False)
    transport = _Transport()
    conn.connection_made(transport)  # type: ignore[arg-type]
    conn.data_received(_handshake() + setup)
    if not conn.opened:
        raise RuntimeError("the handshake did not complete")
    return conn, transport


def run_once(
    messages: int, size: int, batch: int, ack_every: int, prefetch: int, mode: str = "cycle"
) -> float:
    """One run on a fresh broker; returns CPU microseconds per message."""
    if mode == "publish":
        return _run_publish(messages, size, batch)
    with tempfile.TemporaryDirectory() as tmp:
        broker, server = _server(tmp)
        consumer, _ = _connect(
            server,
            1,
            encode_method_frame(1, spec.QueueDeclare(queue=_QUEUE))
            + encode_method_frame(1, spec.BasicQos(prefetch_count=prefetch))
            + encode_method_frame(1, spec.BasicConsume(queue=_QUEUE, consumer_tag="c1")),
        )
        producer, _ = _connect(server, 2, b"")
        one = _one_publish(size)
        chunk = one * batch
        ack_head = struct.pack(">BHIHH", 1, 1, 13, 60, 80)
        stats = broker.stats
        acked = 0
        sent = 0
        start = time.process_time()
        while sent < messages:
            n = min(batch, messages - sent)
            producer.data_received(chunk if n == batch else one * n)
            sent += n
            delivered = stats["delivered"]
            if delivered - acked >= ack_every or sent >= messages:
                consumer.data_received(ack_head + struct.pack(">QB", delivered, 1) + b"\xce")
                acked = delivered
        while acked < messages:  # deliveries held back by the prefetch window
            delivered = stats["delivered"]
            if delivered == acked:
                raise RuntimeError(f"stalled at {acked} of {messages} messages")
            consumer.data_received(ack_head + struct.pack(">QB", delivered, 1) + b"\xce")
            acked = delivered
        elapsed = time.process_time() - start
        return elapsed * 1e6 / messages


def _run_publish(messages: int, size: int, batch: int) -> float:
    # Scenario (d): publishes into a drop-head queue of 1000 with no consumer.
    with tempfile.TemporaryDirectory() as tmp:
        broker, server = _server(tmp)
        declare = spec.QueueDeclare(
            queue=_QUEUE, arguments={"x-max-length": 1000, "x-overflow": "drop-head"}
        )
        producer, _ = _connect(server, 1, encode_method_frame(1, declare))
        one = _one_publish(size)
        chunk = one * batch
        sent = 0
        start = time.process_time()
        while sent < messages:
            n = min(batch, messages - sent)
            producer.data_received(chunk if n == batch else one * n)
            sent += n
        elapsed = time.process_time() - start
        if broker.stats["published"] != messages:
            raise RuntimeError(f"published {broker.stats['published']} of {messages}")
        return elapsed * 1e6 / messages


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    ap.add_argument("--messages", type=int, default=50_000)
    ap.add_argument("--size", type=int, default=16)
    ap.add_argument("--batch", type=int, default=50, help="publishes per read")
    ap.add_argument("--ack-every", type=int, default=250)
    ap.add_argument("--prefetch", type=int, default=1000)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--profile", help="write a cProfile of one extra run here")
    ap.add_argument(
        "--mode",
        choices=("cycle", "publish"),
        default="cycle",
        help="cycle: publish+deliver+ack (a); publish: into a full drop-head queue (d)",
    )
    args = ap.parse_args(argv)
    run = (args.messages, args.size, args.batch, args.ack_every, args.prefetch, args.mode)
    results = [run_once(*run) for _ in range(args.rounds)]
    what = f"ack every {args.ack_every}" if args.mode == "cycle" else "drop-head 1000, no consumer"
    print(
        f"hotpath {args.mode}: {args.messages} x {args.size} B, batch {args.batch}, "
        f"{what}: cpu_us_per_msg median {statistics.median(results):.2f} "
        f"(runs: {', '.join(f'{r:.2f}' for r in results)})"
    )
    if args.profile:
        prof = cProfile.Profile()
        prof.runcall(run_once, *run)
        prof.dump_stats(args.profile)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
