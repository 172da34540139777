"""Load-generator roles: producer and consumer processes, and topology setup/teardown.

Theory of operation: a scenario run forks separate OS processes for the producer and the
consumers (``multiprocessing``, fork context), so the generator never shares a Python
interpreter (a GIL, an event loop) with the other side of the measurement. Many independent
publishers (one per queue) share one producer process, one connection each, as the consumers
of several queues share one consumer process: two generator processes whatever the number of
queues, so that on 2 cores the broker is not crowded out by the generator. Each role runs one
event loop (uvloop when installed) with ``amqp_client`` connections, does its part, and puts
one result ``dict`` on a ``multiprocessing`` queue: timings from ``time.monotonic()`` (one
clock for all processes on Linux), counts, latency percentiles and its own CPU seconds.
The driver process owns nothing but setup, the clock of the run and the results; it never
has an event loop running when it forks. Every wait is bounded by a deadline.
"""

from __future__ import annotations

import asyncio
import multiprocessing as mp
import os
import queue as queue_mod
import resource
import time
import traceback
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from multiprocessing.process import BaseProcess
from typing import Any, Final

from benchmarks import amqp_client as client_mod
from benchmarks import amqp_wire as wire

Result = dict[str, Any]

_CTX: Final = mp.get_context("fork")


@dataclass(frozen=True, slots=True)
class QueueSpec:
    name: str
    durable: bool = False
    arguments: Mapping[str, wire.FieldValue] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Topology:
    """Queues to declare (fresh), and optionally a fanout exchange bound to all of them."""

    queues: tuple[QueueSpec, ...]
    fanout_exchange: str = ""

    @property
    def publish_target(self) -> tuple[str, str]:
        """(exchange, routing_key) a producer publishes to."""
        if self.fanout_exchange:
            return self.fanout_exchange, ""
        return "", self.queues[0].name


@dataclass(frozen=True, slots=True)
class ProducerSpec:
    url: str
    exchange: str
    routing_key: str
    body_size: int
    count: int
    persistent: bool = False
    confirm_window: int = 0  # 0: no publisher confirms
    rate_per_s: float = 0.0  # 0: as fast as possible
    barrier_queue: str = ""  # after publishing, wait until everything has landed in it


@dataclass(frozen=True, slots=True)
class ConsumerSpec:
    url: str
    queues: tuple[str, ...]
    targets: tuple[int, ...]  # messages to receive per queue
    prefetch: int = 1000
    ack_every: int = 250
    measure_latency: bool = False


def percentiles_ms(samples_ns: Sequence[int]) -> dict[str, float]:
    """Nearest-rank p50/p99/p999/max of nanosecond samples, in milliseconds."""
    if not samples_ns:
        return {}
    ordered = sorted(samples_ns)
    n = len(ordered)

    def rank(q: float) -> float:
        return ordered[min(n - 1, max(0, int(q * n + 0.999999) - 1))] / 1e6

    return {"p50_ms": rank(0.50), "p99_ms": rank(0.99), "p999_ms": rank(0.999), "max_ms": rank(1.0)}


def _cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def _run_loop(main: Callable[[], Awaitable[Result]]) -> Result:
    try:
        import uvloop  # optional: speeds up the generator only

        asyncio.set_event_loop_policy(uvloop.EventLoopPolicy())
    except ImportError:
        pass

    async def wrapped() -> Result:
        return await main()

    return asyncio.run(wrapped())


# -- producer ------------------------------------------------------------------------------


async def _publish(spec: ProducerSpec) -> tuple[Result, list[int]]:
    """One producer's run: its result, and its confirm latencies in ns (none without confirms)."""
    client = await client_mod.AMQPClient.connect(spec.url)
    try:
        channel = await client.open_channel()
        body = (b"0123456789abcdef" * (spec.body_size // 16 + 1))[: spec.body_size]
        template = wire.publish(
            channel,
            spec.exchange,
            spec.routing_key,
            body,
            persistent=spec.persistent,
            frame_max=client.frame_max,
        )
        result: Result = {"role": "producer", "sent": spec.count}
        tracker = None
        if spec.confirm_window:
            await client.rpc(channel, wire.confirm_select(channel), wire.CONFIRM_SELECT_OK)
            tracker = client.confirms(channel)
        t_start = time.monotonic()
        if spec.rate_per_s and tracker is not None:
            await client_mod.publish_confirmed_paced(
                client, tracker, template.frames, spec.count, spec.confirm_window, spec.rate_per_s
            )
        elif spec.rate_per_s:
            await client_mod.publish_paced(client, template, spec.count, spec.rate_per_s)
        elif tracker is not None:
            await client_mod.publish_confirmed(
                client, channel, tracker, template.frames, spec.count, spec.confirm_window
            )
        else:
            await client_mod.publish_flood(client, template.frames, spec.count)
        t_sent = time.monotonic()
        if spec.barrier_queue:
            result["queue_depth"] = await client.landed(channel, spec.barrier_queue)
        t_end = time.monotonic()
        result.update(t_start=t_start, t_sent=t_sent, t_end=t_end, blocked=client.blocked_events)
        if tracker is None:
            return result, []
        result.update(confirmed=tracker.confirmed, nacked=tracker.nacked)
        return result, tracker.latencies_ns
    finally:
        await client.close()


async def _produce(spec: ProducerSpec) -> Result:
    result, latencies = await _publish(spec)
    result.update({f"confirm_{k}": v for k, v in percentiles_ms(latencies).items()})
    return result


async def _produce_all(specs: Sequence[ProducerSpec]) -> Result:
    # Every producer has its own connection and starts when connected; the aggregate span runs
    # from the first one's start to the last one's end, and each one's own start is kept so
    # that the driver can tell the slowest pair.
    done = await asyncio.gather(*(_publish(spec) for spec in specs))
    runs = [r for r, _ in done]
    result: Result = {
        "role": "producers",
        "sent": sum(r["sent"] for r in runs),
        "t_start": min(r["t_start"] for r in runs),
        "t_sent": max(r["t_sent"] for r in runs),
        "t_end": max(r["t_end"] for r in runs),
        "t_starts": [r["t_start"] for r in runs],
        "blocked": sum(r["blocked"] for r in runs),
    }
    if any("confirmed" in r for r in runs):
        result.update(
            confirmed=sum(r["confirmed"] for r in runs), nacked=sum(r["nacked"] for r in runs)
        )
        merged = [ns for _, latencies in done for ns in latencies]
        result.update({f"confirm_{k}": v for k, v in percentiles_ms(merged).items()})
    return result


def producer_main(spec: ProducerSpec, results: mp.Queue[Result]) -> None:
    """Process entry point of the producer."""
    _report(results, "producer", lambda: _produce(spec))


def producers_main(specs: tuple[ProducerSpec, ...], results: mp.Queue[Result]) -> None:
    """Process entry point of several producers publishing at once (one connection each, one
    event loop): one result with the sums, the span from the first start to the last end,
    merged confirm latencies, and ``t_starts`` in the order of ``specs``."""
    _report(results, "producers", lambda: _produce_all(specs))


# -- consumers -----------------------------------------------------------------------------


async def _consume(spec: ConsumerSpec, ready: mp.Queue[Result]) -> Result:
    clients: list[client_mod.AMQPClient] = []
    consumers: list[client_mod.Consumer] = []
    t_consume = 0.0
    try:
        for i, (queue, target) in enumerate(zip(spec.queues, spec.targets, strict=True)):
            client = await client_mod.AMQPClient.connect(spec.url)
            clients.append(client)
            channel = await client.open_channel()
            await client.rpc(channel, wire.basic_qos(channel, spec.prefetch), wire.BASIC_QOS_OK)
            consumer = client_mod.Consumer(
                channel=channel,
                target=target,
                ack_every=max(1, min(spec.ack_every, spec.prefetch // 2 or 1)),
                measure_latency=spec.measure_latency,
            )
            client.add_consumer(consumer)
            consumers.append(consumer)
            if target:
                # Deliveries may arrive in the same read as consume-ok: time from the request.
                t_consume = t_consume or time.monotonic()
                await client.rpc(
                    channel, wire.basic_consume(channel, queue, f"bench-{i}"), wire.BASIC_CONSUME_OK
                )
            else:
                assert consumer.done is not None
                consumer.done.set_result(None)
        t_ready = time.monotonic()
        ready.put({"role": "consumer-ready", "t_ready": t_ready})
        await asyncio.gather(*(c.done for c in consumers if c.done is not None))
        latencies = [ns for c in consumers for ns in c.latencies_ns]
        received = sum(c.received for c in consumers)
        result: Result = {
            "role": "consumer",
            "received": received,
            "t_ready": t_ready,
            "t_consume": t_consume or t_ready,
            "t_first": min((c.t_first for c in consumers if c.received), default=t_ready),
            "t_last": max((c.t_last for c in consumers if c.received), default=t_ready),
            "t_lasts": [c.t_last for c in consumers],  # per queue, in the order of spec.queues
        }
        result.update({f"latency_{k}": v for k, v in percentiles_ms(latencies).items()})
        return result
    finally:
        for client in clients:
            await client.close()


def consumer_main(spec: ConsumerSpec, ready: mp.Queue[Result], results: mp.Queue[Result]) -> None:
    """Process entry point of the consumers (one connection per queue, one event loop)."""
    _report(results, "consumer", lambda: _consume(spec, ready), also_on_failure=ready)


def _report(
    results: mp.Queue[Result],
    role: str,
    main: Callable[[], Awaitable[Result]],
    also_on_failure: mp.Queue[Result] | None = None,
) -> None:
    try:
        result = _run_loop(main)
        result["ok"] = True
    except BaseException as exc:  # noqa: BLE001 - reported to the driver, which fails the run
        result = {"role": role, "ok": False, "error": f"{exc!r}\n{traceback.format_exc()}"}
    result["cpu_s"] = _cpu_s()
    result["pid"] = os.getpid()
    results.put(result)
    if also_on_failure is not None and not result["ok"]:
        also_on_failure.put(result)  # the driver may still be waiting for "ready"


# -- driver side -----------------------------------------------------------------------------


class RunFailedError(Exception):
    """A role failed, timed out or a count did not match."""


def start_process(target: Callable[..., None], *args: object) -> BaseProcess:
    proc = _CTX.Process(target=target, args=args, daemon=True)
    proc.start()
    return proc


def new_queue() -> mp.Queue[Result]:
    return _CTX.Queue()


def wait_result(
    results: mp.Queue[Result],
    deadline: float,
    procs: Sequence[BaseProcess],
    on_tick: Callable[[], None] | None = None,
) -> Result:
    """The next result, calling ``on_tick`` about every 100 ms; RunFailedError at the deadline."""
    while True:
        if on_tick is not None:
            on_tick()
        try:
            result = results.get(timeout=0.1)
        except queue_mod.Empty:
            if time.monotonic() > deadline:
                raise RunFailedError("timeout") from None
            if procs and all(not p.is_alive() for p in procs) and results.empty():
                time.sleep(0.2)
                if results.empty():
                    raise RunFailedError("load processes exited without a result") from None
            continue
        if not result.get("ok", True):
            raise RunFailedError(f"{result['role']} failed: {result.get('error', '?')}")
        return result


def stop_processes(procs: Sequence[BaseProcess]) -> None:
    for proc in procs:
        proc.join(timeout=2.0)
        if proc.is_alive():
            proc.kill()
            proc.join(timeout=2.0)


async def _with_channel(
    url: str, body: Callable[[client_mod.AMQPClient, int], Awaitable[Result]]
) -> Result:
    client = await client_mod.AMQPClient.connect(url)
    try:
        channel = await client.open_channel()
        return await body(client, channel)
    finally:
        await client.close()


def setup_topology(url: str, topology: Topology) -> None:
    """Declare fresh queues (deleting leftovers of the same name) and bind the fanout."""

    async def body(client: client_mod.AMQPClient, channel: int) -> Result:
        for q in topology.queues:
            await client.rpc(channel, wire.queue_delete(channel, q.name), wire.QUEUE_DELETE_OK)
            await client.rpc(
                channel,
                wire.queue_declare(channel, q.name, durable=q.durable, arguments=q.arguments),
                wire.QUEUE_DECLARE_OK,
            )
        if topology.fanout_exchange:
            await client.rpc(
                channel,
                wire.exchange_declare(channel, topology.fanout_exchange, "fanout"),
                wire.EXCHANGE_DECLARE_OK,
            )
            for q in topology.queues:
                await client.rpc(
                    channel,
                    wire.queue_bind(channel, q.name, topology.fanout_exchange),
                    wire.QUEUE_BIND_OK,
                )
        return {}

    asyncio.run(_with_channel(url, body))


def queue_depths(url: str, topology: Topology) -> list[int]:
    async def body(client: client_mod.AMQPClient, channel: int) -> Result:
        depths = []
        for q in topology.queues:
            ok = await client.rpc(
                channel, wire.queue_declare(channel, q.name, passive=True), wire.QUEUE_DECLARE_OK
            )
            depths.append(wire.decode_queue_declare_ok(ok)[1])
        return {"depths": depths}

    depths: list[int] = asyncio.run(_with_channel(url, body))["depths"]
    return depths


def teardown_topology(url: str, topology: Topology, timeout_s: float = 120.0) -> None:
    """Delete the scenario's queues and exchange; errors are ignored (best effort)."""

    async def body(client: client_mod.AMQPClient, channel: int) -> Result:
        for q in topology.queues:
            await client.rpc(
                channel, wire.queue_delete(channel, q.name), wire.QUEUE_DELETE_OK, timeout_s
            )
        if topology.fanout_exchange:
            await client.rpc(
                channel,
                wire.exchange_delete(channel, topology.fanout_exchange),
                wire.EXCHANGE_DELETE_OK,
                timeout_s,
            )
        return {}

    try:
        asyncio.run(_with_channel(url, body))
    except (client_mod.BrokerClosedError, OSError, TimeoutError):
        pass
