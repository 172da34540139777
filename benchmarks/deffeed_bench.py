"""What shard 0's definitions feed costs a declaration, and what applying it costs a follower.

Core only, no sockets (docs/dev/shards.md, core/deffeed.py): one client session declares a
queue, binds it to amq.topic and deletes it, `--cycles` times, each step one core call as the
AMQP 0-9-1 adapter makes it, in three modes:

* `off`: one shard, no feed (today's broker);
* `feed`: shard 0 with the feed on, its changes drained after every step (what the server
  does after each batch);
* `follow`: the same, and a second broker (shard 1) applying each step's changes
  (`Broker.apply_definitions`), its time counted too.

Each broker has a store (`MemoryStore`: the definition writes of a durable queue without the
disk, so `off` pays the store's definition sync and the modes differ by the feed alone).
`--existing` queues (each bound) are declared first, to show that a step costs the same
whatever the number of definitions. Reports, per mode, the median over `--rounds` rounds of
microseconds per cycle (declare + bind + delete) and the changes per cycle.

    python -m benchmarks.deffeed_bench --rounds 5 --cycles 5000 --existing 10000
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable

from ringmq.core.broker import Broker
from ringmq.core.config import BrokerConfig
from ringmq.core.session import Session
from ringmq.storage.memstore import MemoryStore

NOW = 1_000_000


def _session(broker: Broker) -> Session:
    broker.connection_opened(1, "guest", "/", "127.0.0.1:1", {}, NOW, parks=True)
    broker.channel_opened(1, 1, NOW)
    s = broker.session(1, 1)
    assert s is not None
    return s


def _cycle(broker: Broker, s: Session, name: str, after: Callable[[], None]) -> None:
    topology = broker.topology
    with broker.call(NOW):
        topology.declare_queue(
            s, name, durable=True, exclusive=False, auto_delete=False, arguments={}, now_ms=NOW
        )
    after()
    with broker.call(NOW):
        topology.bind_queue(s, name, "amq.topic", f"{name}.#", {})
    after()
    with broker.call(NOW):
        found, _count = topology.delete_for(s, name, if_unused=False, if_empty=False)
        topology.delete_named(s, found, NOW)
    after()


def run(mode: str, cycles: int, existing: int) -> tuple[float, float]:
    """One round of `mode`: (µs per cycle, changes per cycle)."""
    zero = Broker(BrokerConfig(name_seed=1), store=MemoryStore(), now_ms=NOW)
    one = None
    if mode == "follow":
        one = Broker(BrokerConfig(name_seed=2), store=MemoryStore(), now_ms=NOW)
    s = _session(zero)
    for i in range(existing):
        with zero.call(NOW):
            zero.topology.declare_queue(
                s, f"old-{i}", durable=True, exclusive=False, auto_delete=False, arguments={},
                now_ms=NOW,
            )  # fmt: skip
            zero.topology.bind_queue(s, f"old-{i}", "amq.topic", f"old.{i}", {})
    changes = [0]
    if mode == "off":

        def after() -> None:
            return None

    else:
        zero.feed_definitions()
        snapshot = zero.definitions_snapshot()
        zero.drain_definitions()
        if one is not None:
            one.apply_definitions(snapshot, shard=1, now_ms=NOW, snapshot=True)

        def after() -> None:
            drained = zero.drain_definitions()
            changes[0] += len(drained)
            if one is not None:
                one.apply_definitions(drained, shard=1, now_ms=NOW)

    start = time.perf_counter()
    for i in range(cycles):
        _cycle(zero, s, f"q-{i}", after)
    elapsed = time.perf_counter() - start
    return elapsed / cycles * 1e6, changes[0] / cycles


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--cycles", type=int, default=5000)
    ap.add_argument("--existing", type=int, default=10_000)
    args = ap.parse_args(argv)
    results: dict[str, list[tuple[float, float]]] = {"off": [], "feed": [], "follow": []}
    for _ in range(args.rounds):
        for mode in results:  # interleaved: the modes share the machine's state
            results[mode].append(run(mode, args.cycles, args.existing))
    base = statistics.median(us for us, _ in results["off"])
    print(f"{args.cycles} cycles (declare, bind, delete) over {args.existing} bound queues")
    for mode, rows in results.items():
        us = statistics.median(r[0] for r in rows)
        per = statistics.median(r[1] for r in rows)
        print(f"{mode:>7}: {us:7.1f} us/cycle ({us / base:4.2f}x), {per:.1f} changes/cycle")


if __name__ == "__main__":
    main()
