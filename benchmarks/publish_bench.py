"""In-process microbenchmark of the broker's publish path: CPU microseconds per publish.

No sockets, no event loop: a fresh in-memory `Broker`, one connection with a confirm channel and
one queue (with a message_id de-duplication window, as the Spark writer's queues have) bound to
the default exchange. The timed loop publishes `--messages` messages either one by one through
the AMQP 0-9-1 adapter's `Amqp091.handle(basic.publish)` (what an AMQP client costs the core)
or through `Amqp091.publish_batch` in slices of `--slice` (what the bulk HTTP endpoint does),
with properties `none` (empty list), `mid` (message_id only: the Spark writer) or `many`
(content_type, delivery_mode, message_id, correlation_id, timestamp, app_id: a kombu-like
list). With `--paged` the broker pages (`enable_paging` onto page files in a temporary
directory, the default in-memory head), as a server with a data directory does, so that a
long run goes to the page file as a Spark sink's backlog does (the bulk ingest step,
`core/ingest.py`, takes the batch mode's runs then). Prints the median of `--rounds` runs of
`time.process_time()` per message.

    .venv/bin/python -m benchmarks.publish_bench [--messages 100000] [--rounds 3] [--paged]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from ringmq.adapters.amqp091 import Amqp091
from ringmq.amqp import spec
from ringmq.amqp.frames import RawContent
from ringmq.amqp.properties import BasicProperties, encode_properties
from ringmq.core.broker import Broker
from ringmq.core.config import BrokerConfig
from ringmq.storage.bodystore import DiskSpillStore

_QUEUE = "bench"


def _props(kind: str, i: int) -> bytes:
    if kind == "none":
        return encode_properties(BasicProperties())
    if kind == "mid":
        return encode_properties(BasicProperties(message_id=f"p0-{i:012d}"))
    return encode_properties(
        BasicProperties(
            content_type="application/json",
            delivery_mode=1,
            message_id=f"p0-{i:012d}",
            correlation_id="c-1",
            timestamp=1_700_000_000,
            app_id="bench",
        )
    )


def _run(n: int, kind: str, mode: str, slice_n: int, size: int, paged: bool) -> float:
    with tempfile.TemporaryDirectory(prefix="ringmq-publish-bench-") as d:
        return _run_in(Path(d), n, kind, mode, slice_n, size, paged)


def _run_in(d: Path, n: int, kind: str, mode: str, slice_n: int, size: int, paged: bool) -> float:
    broker = Broker(BrokerConfig(name_seed=1))
    if paged:
        broker.enable_paging(lambda _vh, q: DiskSpillStore(d / q))
    now = 1_000_000
    broker.connection_opened(1, "guest", "/", "127.0.0.1:1", {}, now)
    broker.channel_opened(1, 1, now)
    adapter = Amqp091(broker)
    adapter.handle(1, 1, spec.ConfirmSelect(), None, now)
    args = {"x-message-deduplication-window-ms": 600_000}
    adapter.handle(1, 1, spec.QueueDeclare(queue=_QUEUE, arguments=args), None, now)
    body = b"x" * size
    messages = [(_QUEUE, _props(kind, i), body) for i in range(n)]
    run: Callable[[], None]
    if mode == "handle":
        method = spec.BasicPublish(exchange="", routing_key=_QUEUE)
        handle = adapter.handle

        def run() -> None:
            for _rk, pb, b in messages:
                handle(1, 1, method, RawContent(60, len(b), pb, b), now)

    else:

        def run() -> None:
            for a in range(0, n, slice_n):
                done = adapter.publish_batch(1, 1, "", messages, a, min(n, a + slice_n), now)
                assert done.error is None
                assert done.published == min(n, a + slice_n) - a

    t0 = time.process_time()
    run()
    dt = time.process_time() - t0
    counters = broker.vhosts["/"].queues[_QUEUE].queue.counters
    assert counters.ready + counters.paged == n
    return dt / n * 1e6


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--messages", type=int, default=100_000)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--slice", type=int, default=2048)
    ap.add_argument("--size", type=int, default=100)
    ap.add_argument("--props", default="none,mid,many")
    ap.add_argument("--modes", default="handle,batch")
    ap.add_argument("--paged", action="store_true", help="page past the in-memory head")
    a = ap.parse_args()
    for kind in a.props.split(","):
        for mode in a.modes.split(","):
            runs = [_run(a.messages, kind, mode, a.slice, a.size, a.paged) for _ in range(a.rounds)]
            print(f"props={kind:5s} mode={mode:6s} {statistics.median(runs):6.2f} us/publish")


if __name__ == "__main__":
    main()
