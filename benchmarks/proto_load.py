"""MQTT and STOMP load generators: fan-in, fan-out and one-to-one, each side in its own process.

Theory of operation: a run is one scenario against one broker endpoint. The subscribers run
in one process and the publishers in another (forked), each with one event loop (uvloop when
installed), so the two sides use the two cores as the AMQP load generator does
(docs/benchmarks.md). The subscriber process connects and subscribes every subscriber, then
says "ready"; the publisher process then sends a fixed number of messages, pre-encoded
(`proto_wire`), written in batches and pipelined: QoS 0 without waiting for anything, QoS 1
with a bounded window of unacknowledged publishes. Subscribers count what they receive
(acknowledging QoS 1 deliveries at once, STOMP's cumulatively every 250) until each has its
expected count or nothing arrived for `idle_s`. Times are CLOCK_MONOTONIC nanoseconds, which
both processes share: the end-to-end rate is deliveries / (last delivery - first publish).

Every loop is bounded by a message count and a deadline; only loopback endpoints are used.
"""

from __future__ import annotations

import asyncio
import contextlib
import multiprocessing as mp
import struct
import time
from dataclasses import dataclass, field
from multiprocessing.connection import Connection
from typing import Any, Final

from benchmarks import proto_wire as w

PAYLOAD_BYTES: Final = 64
QOS1_WINDOW: Final = 1000
STOMP_PREFETCH: Final = 1000
STOMP_ACK_EVERY: Final = 250
_BATCH: Final = 500


@dataclass(frozen=True, slots=True)
class Endpoint:
    """A broker's MQTT or STOMP listener (loopback only)."""

    protocol: str  # "mqtt" or "stomp"
    port: int
    host: str = "127.0.0.1"
    username: str | None = "guest"
    password: str | None = "guest"


@dataclass(frozen=True, slots=True)
class Scenario:
    """What one run does."""

    name: str
    protocol: str
    publishers: int
    subscribers: int
    messages: int
    """Messages published in all (split over the publishers)."""
    qos: int = 0
    idle_s: float = 3.0
    timeout_s: float = 120.0


@dataclass(slots=True)
class RunResult:
    scenario: str
    published: int = 0
    received: int = 0
    expected: int = 0
    start_ns: int = 0
    publish_end_ns: int = 0
    last_ns: int = 0
    error: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def e2e_rate(self) -> float:
        span = (self.last_ns - self.start_ns) / 1e9
        return self.received / span if span > 0 else 0.0

    @property
    def publish_rate(self) -> float:
        span = (self.publish_end_ns - self.start_ns) / 1e9
        return self.published / span if span > 0 else 0.0


SCENARIOS: Final = {
    s.name: s
    for s in (
        Scenario("mqtt-fanin-q0", "mqtt", publishers=10, subscribers=1, messages=200_000),
        Scenario("mqtt-fanin-q1", "mqtt", publishers=10, subscribers=1, messages=100_000, qos=1),
        Scenario("mqtt-fanout-q0", "mqtt", publishers=1, subscribers=10, messages=20_000),
        Scenario("mqtt-fanout-q1", "mqtt", publishers=1, subscribers=10, messages=10_000, qos=1),
        Scenario("stomp-1p1c", "stomp", publishers=1, subscribers=1, messages=100_000),
    )
}


def _loop() -> asyncio.AbstractEventLoop:
    try:
        import uvloop

        return uvloop.new_event_loop()
    except ImportError:
        return asyncio.new_event_loop()


async def _open(ep: Endpoint) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    return await asyncio.open_connection(ep.host, ep.port, limit=1 << 20)


# -- MQTT -------------------------------------------------------------------------------------


async def _mqtt_session(
    ep: Endpoint, client_id: str
) -> tuple[asyncio.StreamReader, asyncio.StreamWriter, w.MqttReader]:
    r, wr = await _open(ep)
    wr.write(w.mqtt_connect(client_id, username=ep.username, password=ep.password))
    parser = w.MqttReader()
    while True:
        data = await r.read(65536)
        if not data:
            raise ConnectionError("closed before CONNACK")
        for kind, _flags, body in parser.feed(data):
            if kind == w.CONNACK:
                if body[1] != 0:
                    raise ConnectionError(f"CONNACK return code {body[1]}")
                return r, wr, parser


async def _mqtt_subscriber(
    ep: Endpoint, sc: Scenario, index: int, topic_filter: str, expected: int, out: dict[str, int]
) -> None:
    r, wr, parser = await _mqtt_session(ep, f"bench-sub-{index}")
    wr.write(w.mqtt_subscribe(1, topic_filter, sc.qos))
    subscribed = False
    while not subscribed:
        data = await r.read(65536)
        if not data:
            raise ConnectionError("closed before SUBACK")
        subscribed = any(kind == w.SUBACK for kind, _f, _b in parser.feed(data))
    out[f"ready{index}"] = 1
    await _mqtt_count(r, wr, parser, sc, index, expected, out)
    with contextlib.suppress(ConnectionError):
        wr.write(w.MQTT_DISCONNECT)
        wr.close()


async def _mqtt_count(
    r: asyncio.StreamReader,
    wr: asyncio.StreamWriter,
    parser: w.MqttReader,
    sc: Scenario,
    index: int,
    expected: int,
    out: dict[str, int],
) -> None:
    got = 0
    last = 0
    puback = w.mqtt_puback
    while got < expected:
        try:
            data = await asyncio.wait_for(r.read(1 << 20), sc.idle_s if got else sc.timeout_s)
        except TimeoutError:
            break
        if not data:
            break
        acks = []
        for kind, flags, body in parser.feed(data):
            if kind == w.PUBLISH:
                got += 1
                if flags & 0x06:
                    acks.append(puback(w.publish_packet_id(flags, body)))
        if acks:
            wr.write(b"".join(acks))
        last = time.monotonic_ns()
    out[f"got{index}"] = got
    out[f"last{index}"] = last


async def _mqtt_publisher(
    ep: Endpoint, sc: Scenario, index: int, topic: str, count: int, out: dict[str, int]
) -> None:
    r, wr, parser = await _mqtt_session(ep, f"bench-pub-{index}")
    payload = b"x" * PAYLOAD_BYTES
    if sc.qos == 0:
        packet = w.mqtt_publish(topic, payload)
        sent = 0
        while sent < count:
            n = min(_BATCH, count - sent)
            wr.write(packet * n)
            sent += n
            await wr.drain()
    else:
        head, tail = w.mqtt_publish_parts(topic, payload, 1)
        pack = struct.Struct(">H").pack
        acked = 0
        sent = 0
        window = asyncio.Semaphore(QOS1_WINDOW)

        async def read_acks() -> None:
            nonlocal acked
            while acked < count:
                data = await r.read(65536)
                if not data:
                    raise ConnectionError("closed while waiting for PUBACKs")
                n = sum(1 for kind, _f, _b in parser.feed(data) if kind == w.PUBACK)
                acked += n
                for _ in range(n):
                    window.release()

        reader = asyncio.ensure_future(read_acks())
        while sent < count:
            n = min(_BATCH, count - sent)
            parts = []
            for _ in range(n):
                await window.acquire()
                sent += 1
                parts.append(head + pack(sent % 65535 + 1) + tail)
            wr.write(b"".join(parts))
            await wr.drain()
        await asyncio.wait_for(reader, sc.timeout_s)
    out[f"sent{index}"] = count
    wr.write(w.MQTT_DISCONNECT)
    await wr.drain()
    wr.close()


# -- STOMP ------------------------------------------------------------------------------------


async def _stomp_session(
    ep: Endpoint,
) -> tuple[asyncio.StreamReader, asyncio.StreamWriter, w.StompReader]:
    r, wr = await _open(ep)
    wr.write(w.stomp_connect("/", ep.username or "guest", ep.password or "guest"))
    parser = w.StompReader()
    while True:
        data = await r.read(65536)
        if not data:
            raise ConnectionError("closed before CONNECTED")
        for command, headers, _body in parser.feed(data):
            if command == b"CONNECTED":
                return r, wr, parser
            if command == b"ERROR":
                raise ConnectionError(f"STOMP ERROR: {headers!r}")


async def _stomp_subscriber(
    ep: Endpoint, sc: Scenario, index: int, expected: int, out: dict[str, int]
) -> None:
    r, wr, parser = await _stomp_session(ep)
    wr.write(
        w.stomp_frame(
            "SUBSCRIBE",
            {
                "id": "0",
                "destination": "/queue/bench",
                "ack": "client",
                "prefetch-count": str(STOMP_PREFETCH),
                "receipt": "sub",
            },
        )
    )
    ready = False
    while not ready:
        data = await r.read(65536)
        if not data:
            raise ConnectionError("closed before the subscription's RECEIPT")
        ready = any(command == b"RECEIPT" for command, _h, _b in parser.feed(data))
    out[f"ready{index}"] = 1
    got = 0
    last = 0
    pending_ack: bytes | None = None
    unacked = 0
    while got < expected:
        try:
            data = await asyncio.wait_for(r.read(1 << 20), sc.idle_s if got else sc.timeout_s)
        except TimeoutError:
            break
        if not data:
            break
        for command, headers, _body in parser.feed(data):
            if command == b"MESSAGE":
                got += 1
                unacked += 1
                pending_ack = w.header(headers, b"ack") or w.header(headers, b"message-id")
        if pending_ack is not None and (unacked >= STOMP_ACK_EVERY or got >= expected):
            wr.write(w.stomp_frame("ACK", {"id": pending_ack.decode()}))
            unacked = 0
            pending_ack = None
        last = time.monotonic_ns()
    out[f"got{index}"] = got
    out[f"last{index}"] = last
    wr.write(w.stomp_frame("DISCONNECT", {}))
    wr.close()


async def _stomp_publisher(ep: Endpoint, sc: Scenario, count: int, out: dict[str, int]) -> None:
    r, wr, parser = await _stomp_session(ep)
    payload = b"x" * PAYLOAD_BYTES
    frame = w.stomp_send("/queue/bench", payload)
    sent = 0
    while sent < count - 1:
        n = min(_BATCH, count - 1 - sent)
        wr.write(frame * n)
        sent += n
        await wr.drain()
    wr.write(w.stomp_send("/queue/bench", payload, receipt="last"))  # "landed": its RECEIPT
    got_receipt = False
    while not got_receipt:
        data = await asyncio.wait_for(r.read(65536), sc.timeout_s)
        if not data:
            raise ConnectionError("closed before the last RECEIPT")
        got_receipt = any(command == b"RECEIPT" for command, _h, _b in parser.feed(data))
    out["sent0"] = count
    wr.write(w.stomp_frame("DISCONNECT", {}))
    wr.close()


# -- the two processes ------------------------------------------------------------------------


def _subscriber_side(ep: Endpoint, sc: Scenario, pipe: Connection) -> None:
    out: dict[str, int] = {}
    per_sub = sc.messages // sc.publishers * sc.publishers  # what each subscriber gets

    async def main() -> None:
        if sc.protocol == "mqtt":
            topic_filter = "bench/+" if sc.publishers > 1 else "bench/fan"
            tasks = [
                _mqtt_subscriber(ep, sc, i, topic_filter, per_sub, out)
                for i in range(sc.subscribers)
            ]
        else:
            tasks = [_stomp_subscriber(ep, sc, 0, sc.messages, out)]
        gathered = asyncio.gather(*tasks)

        async def announce() -> None:
            # each subscriber sets out[f"ready{i}"] once subscribed, then waits for messages
            ready = asyncio.Event()

            def check() -> None:
                if sum(1 for k in out if k.startswith("ready")) >= sc.subscribers:
                    ready.set()
                else:
                    loop.call_later(0.005, check)

            loop = asyncio.get_running_loop()
            check()
            await ready.wait()
            pipe.send("ready")

        await asyncio.gather(gathered, announce())

    try:
        _loop().run_until_complete(asyncio.wait_for(main(), sc.timeout_s))
        pipe.send(out)
    except Exception as exc:  # noqa: BLE001 - reported to the driver
        pipe.send({"error": f"subscriber: {type(exc).__name__}: {exc}"})


def _publisher_side(ep: Endpoint, sc: Scenario, go: Any, pipe: Connection) -> None:
    out: dict[str, int] = {}

    async def main() -> None:
        if sc.protocol == "mqtt":
            each = sc.messages // sc.publishers
            topics = [
                f"bench/p{i}" if sc.publishers > 1 else "bench/fan" for i in range(sc.publishers)
            ]
            out["start"] = time.monotonic_ns()
            await asyncio.gather(
                *(_mqtt_publisher(ep, sc, i, topics[i], each, out) for i in range(sc.publishers))
            )
        else:
            out["start"] = time.monotonic_ns()
            await _stomp_publisher(ep, sc, sc.messages, out)
        out["end"] = time.monotonic_ns()

    go.wait(sc.timeout_s)
    try:
        _loop().run_until_complete(asyncio.wait_for(main(), sc.timeout_s))
        pipe.send(out)
    except Exception as exc:  # noqa: BLE001 - reported to the driver
        pipe.send({"error": f"publisher: {type(exc).__name__}: {exc}"})


def run(ep: Endpoint, sc: Scenario) -> RunResult:
    """One run of `sc` against `ep` (blocks; bounded by the scenario's timeout)."""
    ctx = mp.get_context("fork")
    sub_pipe, sub_child = ctx.Pipe()
    pub_pipe, pub_child = ctx.Pipe()
    go = ctx.Event()
    subs = ctx.Process(target=_subscriber_side, args=(ep, sc, sub_child), daemon=True)
    pubs = ctx.Process(target=_publisher_side, args=(ep, sc, go, pub_child), daemon=True)
    result = RunResult(sc.name)
    subs.start()
    pubs.start()
    try:
        if not sub_pipe.poll(30):
            result.error = "subscribers not ready in 30 s"
            return result
        first = sub_pipe.recv()
        if isinstance(first, dict):
            result.error = str(first.get("error", first))
            return result
        go.set()
        if not pub_pipe.poll(sc.timeout_s + 5) or not sub_pipe.poll(sc.timeout_s + 5):
            result.error = "timed out"
            return result
        pub, sub = pub_pipe.recv(), sub_pipe.recv()
        if "error" in pub or "error" in sub:
            result.error = str(pub.get("error") or sub.get("error"))
            return result
        per_sub = sc.messages // sc.publishers * sc.publishers
        result.published = sum(v for k, v in pub.items() if k.startswith("sent"))
        result.expected = per_sub * sc.subscribers
        result.received = sum(v for k, v in sub.items() if k.startswith("got"))
        result.start_ns = pub["start"]
        result.publish_end_ns = pub["end"]
        result.last_ns = max(v for k, v in sub.items() if k.startswith("last"))
        return result
    finally:
        for p in (pubs, subs):
            p.join(5)
            if p.is_alive():
                p.kill()
                p.join(5)
