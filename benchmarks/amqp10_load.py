"""The AMQP 1.0 load generator: scenarios a, b, c and g of the AMQP benchmark, over AMQP 1.0.

Theory of operation: the same shapes as the AMQP 0-9-1 scenarios (benchmarks/scenarios.py), so
ringmq's two protocols and RabbitMQ can be compared run for run. The queue is declared fresh
over AMQP 0-9-1 first (both brokers speak it; `amqp_load.setup_topology`), then reached over
AMQP 1.0 at each broker's address for an existing queue (ringmq: RabbitMQ 4's `/queues/q`;
RabbitMQ 3.10's plugin: `/amq/queue/q`).

* consumer (its own forked process): SASL PLAIN, open, begin, attach a receiver, grant link
  credit 1000 (the 0-9-1 prefetch); count transfers reading only their delivery-id (and, for
  latency, the send time in the first 8 body bytes); every 250 deliveries settle them in one
  disposition (accepted, the range first..last: 0-9-1's ack `multiple=true`) and top the credit
  up to 1000 with a flow;
* producer (another process): attach a sender, wait for credit, send pre-encoded transfers
  in batches within the link credit and the session window: pre-settled for a, b and g (what
  0-9-1 does without confirms), unsettled with at most 1000 outstanding for c (durable
  messages to a durable queue: the broker settles each after the fsync that holds it, the
  0-9-1 confirms' rule), counting the broker's accepted dispositions;
* g paces the producer at 5,000 msg/s and the consumer records each message's latency.

Times are CLOCK_MONOTONIC nanoseconds shared by both processes. Every loop is bounded by a
count and a deadline; only loopback endpoints are used.
"""

from __future__ import annotations

import asyncio
import multiprocessing as mp
import struct
import time
from dataclasses import dataclass
from multiprocessing.connection import Connection
from typing import Any, Final

from benchmarks import amqp10_wire as w
from benchmarks import amqp_load
from benchmarks.amqp_client import AMQPURL

PREFETCH: Final = 1000
SETTLE_EVERY: Final = 250
CONFIRM_WINDOW: Final = 1000
_BATCH: Final = 256


@dataclass(frozen=True, slots=True)
class Scenario:
    key: str
    title: str
    count: int
    quick_count: int
    body_size: int
    durable: bool = False
    rate_per_s: float = 0.0
    timeout_s: float = 300.0


SCENARIOS: Final = {
    s.key: s
    for s in (
        Scenario("a", "1P+1C 16 B transient, credit 1000, pre-settled", 200_000, 20_000, 16),
        Scenario("b", "1P+1C 1 KiB transient, credit 1000, pre-settled", 200_000, 20_000, 1024),
        Scenario(
            "c",
            "persistent 1 KiB, durable queue, unsettled (1000 outstanding)",
            100_000,
            10_000,
            1024,
            durable=True,
        ),
        Scenario("g", "5,000 msg/s paced 1P+1C 16 B, latency", 50_000, 10_000, 16, rate_per_s=5000),
    )
}


@dataclass(frozen=True, slots=True)
class Target:
    """A broker's AMQP 1.0 side: its AMQP URL and how it names an existing queue."""

    name: str
    url: str
    queue_prefix: str  # "/queues/" (ringmq, RabbitMQ 4) or "/amq/queue/" (RabbitMQ 3.x plugin)


class Session:
    """One AMQP 1.0 connection with one session and one link (the load generator's side)."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.r = reader
        self.w = writer
        self.frames = w.FrameReader()
        self.pending: list[tuple[int, int, bytes]] = []
        self.remote_next_outgoing = 0
        self.remote_incoming_window = 0
        self.remote_next_incoming = 0
        self.link_credit = 0
        self.delivery_count = 0

    @classmethod
    async def open(cls, url: str, container: str) -> Session:
        u = AMQPURL.parse(url)
        r, wr = await asyncio.open_connection(u.host, u.port, limit=1 << 22)
        s = cls(r, wr)
        wr.write(w.SASL_HEADER)
        await s.until(lambda ft, code: ft == 1 and code == w.SASL_MECHANISMS)
        wr.write(w.sasl_init_plain(u.user, u.password))
        _, fields = await s.until(lambda ft, code: ft == 1 and code == w.SASL_OUTCOME)
        if fields and fields[0] != 0:
            raise ConnectionError(f"SASL outcome {fields[0]}")
        wr.write(w.AMQP_HEADER + w.open_frame(container, u.host) + w.begin_frame())
        await s.until(lambda ft, code: code == w.OPEN)
        _, begin = await s.until(lambda ft, code: code == w.BEGIN)
        s.remote_next_outgoing = begin[1]
        s.remote_incoming_window = begin[2]
        return s

    async def read(self, timeout_s: float) -> list[tuple[int, int, bytes]]:
        data = await asyncio.wait_for(self.r.read(1 << 20), timeout_s)
        if not data:
            raise ConnectionError("the broker closed the connection")
        return self.frames.feed(data)

    async def until(self, want: Any, timeout_s: float = 10.0) -> tuple[int, list[Any]]:
        """Read frames until `want(frame_type, code)`; keep transfers for later; fail on close."""
        while True:
            while self.pending:
                ftype, _ch, body = self.pending.pop(0)
                if ftype == -1:
                    continue
                code, fields, _end = w.performative_of(body)
                if code in (w.CLOSE, w.DETACH, w.END) and not want(ftype, code):
                    raise ConnectionError(f"broker sent {hex(code)}: {fields!r}")
                if code == w.FLOW:
                    self.on_flow(fields)
                if want(ftype, code):
                    return code, fields
            self.pending.extend(await self.read(timeout_s))

    def on_flow(self, fields: list[Any]) -> None:
        # session: next-incoming-id(0) incoming-window(1) next-outgoing-id(2) outgoing-window(3)
        nii = fields[0] if fields and fields[0] is not None else 0
        self.remote_next_incoming = nii
        self.remote_incoming_window = fields[1] if len(fields) > 1 else 0
        if len(fields) > 6 and fields[4] is not None:  # link: delivery-count(5), credit(6)
            dc = fields[5] or 0
            self.link_credit = dc + (fields[6] or 0) - self.delivery_count

    async def attach(self, *, receiver: bool, address: str, settled: bool) -> list[Any]:
        self.w.write(
            w.attach_frame("bench", 0, receiver=receiver, address=address, settled=settled)
        )
        _, fields = await self.until(lambda ft, code: code == w.ATTACH)
        if (receiver and fields[5] is None) or (not receiver and fields[6] is None):
            await self.until(lambda ft, code: code == w.DETACH)
            raise ConnectionError(f"attach to {address!r} refused")
        return fields

    async def close(self) -> None:
        self.w.write(w.close_frame())
        try:
            await self.w.drain()
            self.w.close()
        except ConnectionError:
            pass


async def _consume(target: Target, sc: Scenario, queue: str, pipe: Connection) -> dict[str, Any]:
    s = await Session.open(target.url, "bench-consumer")
    attach = await s.attach(receiver=True, address=target.queue_prefix + queue, settled=False)
    delivery_count = attach[9] if len(attach) > 9 and attach[9] is not None else 0
    received = 0
    next_incoming = s.remote_next_outgoing
    window = 1 << 20

    def flow() -> bytes:
        return w.flow_frame(
            next_incoming_id=next_incoming,
            window=window,
            next_outgoing_id=0,
            handle=0,
            delivery_count=delivery_count + received,
            link_credit=PREFETCH,
        )

    s.w.write(flow())
    await s.w.drain()
    pipe.send("ready")
    latencies: list[int] = []
    first_unsettled: int | None = None
    last_id = 0
    last_ns = 0
    paced = sc.rate_per_s > 0
    transfer_id = w.transfer_id
    frames: list[tuple[int, int, bytes]] = s.pending
    s.pending = []
    while received < sc.count:
        if not frames:
            frames = await s.read(sc.timeout_s)
        out = []
        for ftype, _ch, body in frames:
            if ftype != 0 or len(body) < 3 or body[2] != w.TRANSFER:
                code, fields, _ = w.performative_of(body) if ftype == 0 else (-1, [], 0)
                if code in (w.CLOSE, w.DETACH, w.END):
                    raise ConnectionError(f"broker sent {hex(code)}: {fields!r}")
                continue
            delivery_id = transfer_id(body)
            if first_unsettled is None:
                first_unsettled = delivery_id
            last_id = delivery_id
            received += 1
            next_incoming += 1
            if paced:
                _code, _f, end = w.performative_of(body)
                data_at = body.find(b"\x00\x53\x75", end)
                sent_ns = struct.unpack_from(">Q", body, data_at + 5)[0]
                latencies.append(time.monotonic_ns() - sent_ns)
            if received % SETTLE_EVERY == 0 or received == sc.count:
                out.append(w.disposition_frame(first_unsettled, last_id))
                out.append(flow())
                first_unsettled = None
        frames = []
        if out:
            s.w.write(b"".join(out))
        last_ns = time.monotonic_ns()
    await s.close()
    result: dict[str, Any] = {"received": received, "last_ns": last_ns}
    if latencies:
        result["latency_ms"] = amqp_load.percentiles_ms(latencies)
    return result


async def _produce(target: Target, sc: Scenario, queue: str) -> dict[str, Any]:
    s = await Session.open(target.url, "bench-producer")
    settled = not sc.durable
    await s.attach(receiver=False, address=target.queue_prefix + queue, settled=settled)
    while s.link_credit <= 0:
        await s.until(lambda ft, code: code == w.FLOW, sc.timeout_s)
    body = b"x" * sc.body_size
    payload = w.message_payload(body, durable=sc.durable)
    template = w.TransferTemplate(0, payload, settled=settled)
    start = time.monotonic_ns()
    sent = 0
    next_outgoing = 0
    confirmed = 0
    interval_ns = int(1e9 / sc.rate_per_s) if sc.rate_per_s else 0
    while sent < sc.count:
        room = min(s.link_credit, s.remote_next_incoming + s.remote_incoming_window - next_outgoing)
        if sc.durable:
            room = min(room, CONFIRM_WINDOW - (sent - confirmed))
        if room <= 0:
            for ftype, _ch, fbody in await s.read(sc.timeout_s):
                if ftype != 0:
                    continue
                code, fields, _ = w.performative_of(fbody)
                if code == w.FLOW:
                    s.on_flow(fields)
                elif code == w.DISPOSITION:
                    first, last = fields[1], fields[2] if fields[2] is not None else fields[1]
                    confirmed += last - first + 1
                elif code in (w.CLOSE, w.DETACH, w.END):
                    raise ConnectionError(f"broker sent {hex(code)}: {fields!r}")
            continue
        n = min(room, _BATCH, sc.count - sent)
        if interval_ns:
            n = 1
            due = start + sent * interval_ns
            delay = (due - time.monotonic_ns()) / 1e9
            if delay > 0.001:
                await asyncio.sleep(delay)
            payload = w.message_payload(struct.pack(">Q", time.monotonic_ns()) + body[8:])
            s.w.write(w.transfer(0, sent, payload, settled=settled))
        else:
            s.w.write(template.frames(sent, n))
        sent += n
        next_outgoing += n
        s.link_credit -= n
        s.delivery_count += n
        await s.w.drain()
    end = time.monotonic_ns()
    while sc.durable and confirmed < sent:
        for ftype, _ch, fbody in await s.read(sc.timeout_s):
            if ftype == 0:
                code, fields, _ = w.performative_of(fbody)
                if code == w.DISPOSITION:
                    first, last = fields[1], fields[2] if fields[2] is not None else fields[1]
                    confirmed += last - first + 1
        end = time.monotonic_ns()
    await s.close()
    return {"sent": sent, "start_ns": start, "end_ns": end, "confirmed": confirmed}


def _loop_run(coro: Any) -> Any:
    try:
        import uvloop

        return uvloop.run(coro)
    except ImportError:
        return asyncio.run(coro)


def _consumer_main(target: Target, sc: Scenario, queue: str, pipe: Connection) -> None:
    try:
        pipe.send(_loop_run(_consume(target, sc, queue, pipe)))
    except Exception as exc:  # noqa: BLE001 - reported to the driver
        pipe.send({"error": f"consumer: {type(exc).__name__}: {exc}"})


def _producer_main(target: Target, sc: Scenario, queue: str, go: Any, pipe: Connection) -> None:
    go.wait(60)
    try:
        pipe.send(_loop_run(_produce(target, sc, queue)))
    except Exception as exc:  # noqa: BLE001 - reported to the driver
        pipe.send({"error": f"producer: {type(exc).__name__}: {exc}"})


def run(target: Target, sc: Scenario, *, quick: bool = False) -> dict[str, Any]:
    """One run of `sc` against `target`: a fresh queue, consumer and producer processes."""
    import dataclasses

    if quick:
        sc = dataclasses.replace(sc, count=sc.quick_count)
    queue = f"bench10-{sc.key}"
    topology = amqp_load.Topology((amqp_load.QueueSpec(queue, durable=sc.durable),))
    amqp_load.setup_topology(target.url, topology)
    ctx = mp.get_context("fork")
    c_pipe, c_child = ctx.Pipe()
    p_pipe, p_child = ctx.Pipe()
    go = ctx.Event()
    consumer = ctx.Process(target=_consumer_main, args=(target, sc, queue, c_child), daemon=True)
    producer = ctx.Process(
        target=_producer_main, args=(target, sc, queue, go, p_child), daemon=True
    )
    live = not sc.durable  # c: the producer alone, as 0-9-1's confirms scenario
    procs = [producer, consumer] if live else [producer]
    for proc in procs:
        proc.start()
    result: dict[str, Any] = {"scenario": sc.key, "broker": target.name, "expected": sc.count}
    try:
        if live:
            if not c_pipe.poll(30):
                result["error"] = "consumer not ready in 30 s"
                return result
            ready = c_pipe.recv()
            if isinstance(ready, dict):
                result["error"] = ready.get("error", str(ready))
                return result
        go.set()
        if not p_pipe.poll(sc.timeout_s + 10) or (live and not c_pipe.poll(sc.timeout_s + 10)):
            result["error"] = "timed out"
            return result
        prod = p_pipe.recv()
        cons = c_pipe.recv() if live else {}
        if "error" in prod or "error" in cons:
            result["error"] = prod.get("error") or cons.get("error")
            return result
        result["publish_msg_s"] = prod["sent"] / ((prod["end_ns"] - prod["start_ns"]) / 1e9)
        result["error"] = None
        if live:
            span_s = (cons["last_ns"] - prod["start_ns"]) / 1e9
            result["received"] = cons["received"]
            result["e2e_msg_s"] = cons["received"] / span_s if span_s > 0 else 0.0
        else:
            result["received"] = prod["confirmed"]
            result["e2e_msg_s"] = result["publish_msg_s"]  # confirmed msg/s
        if "latency_ms" in cons:
            result["latency_ms"] = cons["latency_ms"]
        return result
    finally:
        for p in procs:
            p.join(5)
            if p.is_alive():
                p.kill()
                p.join(5)
        amqp_load.teardown_topology(target.url, topology)
