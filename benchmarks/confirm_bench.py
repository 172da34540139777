"""In-process benchmark of the server's AMQP 0-9-1 read path for a confirm publisher.

Theory of operation
-------------------
What a Spark sink with ``publishVia=amqp`` (the connector's ``Publisher``) costs the broker,
without sockets or an event loop: a ``BrokerServer`` around a fresh ``Broker`` (built as
``hotpath_bench.py`` builds it), one producer connection on a fake transport with a confirm
channel, one plain queue on the default exchange, and reads of ``--batch`` publishes (each
with a ``message_id`` as the sink sets it, non-persistent) handed to ``data_received`` one read
at a time. With ``--paged`` (the default) the broker pages past its in-memory head into a
temporary directory, as a server with a data directory does, so a long run is a Spark sink's
backlog. ``--no-runs`` turns the read path's publish runs off (``Amqp091Handlers.publish_runs``):
every publish then goes the per-command way, so old and new can be alternated in one tree.
Prints ``time.process_time()`` per message, the median of ``--rounds`` runs.

    .venv/bin/python -m benchmarks.confirm_bench [--messages 100000] [--size 100] [--no-runs]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path
from typing import cast

from benchmarks.hotpath_bench import _connect, _server

from ringmq.adapters.amqp091.connection import Amqp091Handlers
from ringmq.amqp import spec
from ringmq.amqp.frames import encode_content_frames, encode_method_frame
from ringmq.amqp.properties import BasicProperties, encode_properties
from ringmq.storage.bodystore import DiskSpillStore

_QUEUE = "confirm-bench"


def _publishes(start: int, n: int, size: int) -> bytes:
    method = spec.BasicPublish(exchange="", routing_key=_QUEUE)
    body = b"x" * size
    return b"".join(
        encode_content_frames(
            1, method, encode_properties(BasicProperties(message_id=f"p0:{i}")), body, 131072
        )
        for i in range(start, start + n)
    )


def run_once(messages: int, size: int, batch: int, paged: bool, runs: bool) -> float:
    """One run on a fresh broker; returns CPU microseconds per publish."""
    with tempfile.TemporaryDirectory() as tmp:
        broker, server = _server(tmp)
        if paged:
            broker.enable_paging(lambda _vh, q: DiskSpillStore(Path(tmp) / "spill" / q))
        cast("Amqp091Handlers", server.handlers.factories["amqp091"]).publish_runs = runs
        setup = encode_method_frame(1, spec.ConfirmSelect()) + encode_method_frame(
            1, spec.QueueDeclare(queue=_QUEUE)
        )
        producer, transport = _connect(server, 1, setup)
        reads = [_publishes(a, min(batch, messages - a), size) for a in range(0, messages, batch)]
        start = time.process_time()
        for data in reads:
            producer.data_received(data)
        elapsed = time.process_time() - start
        counters = broker.vhosts["/"].queues[_QUEUE].queue.counters
        if counters.ready + counters.paged != messages or broker.stats["confirmed"] != messages:
            raise RuntimeError(f"published {counters.ready + counters.paged} of {messages}")
        del transport
        return elapsed * 1e6 / messages


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    ap.add_argument("--messages", type=int, default=100_000)
    ap.add_argument("--size", type=int, default=100)
    ap.add_argument("--batch", type=int, default=256, help="publishes per read")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--no-paging", action="store_true")
    ap.add_argument("--no-runs", action="store_true", help="every publish the per-command way")
    args = ap.parse_args(argv)
    results = [
        run_once(args.messages, args.size, args.batch, not args.no_paging, not args.no_runs)
        for _ in range(args.rounds)
    ]
    print(
        f"confirm publishes: {args.messages} x {args.size} B, batch {args.batch}, "
        f"runs {'off' if args.no_runs else 'on'}: cpu_us_per_msg median "
        f"{statistics.median(results):.2f} (runs: {', '.join(f'{r:.2f}' for r in results)})"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
