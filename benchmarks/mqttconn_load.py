"""Many MQTT connections, each publishing 1 message a second: the load side of `mqttconn_bench`.

Theory of operation: a generator is one forked process with one event loop (uvloop when
installed) holding its share of the connections, plus one subscriber on `mqttconn/<g>/+` that
receives what that process's connections publish, so delivery is checked per process without
any cross-process bookkeeping. The driver (`mqttconn_bench`) steps every generator through the
same phases over a pipe, and each phase answers with counts and the process's own CPU
(getrusage), so the generator's cost is reported beside the broker's:

* `ramp`: connect the subscriber (CONNECT, SUBSCRIBE, SUBACK), then every publishing
  connection (TCP connect, CONNECT, CONNACK), `concurrency` at a time. A connection that fails
  or times out is counted with its error and never retried: refusals are what we measure.
* between phases every connection is kept alive by the wheel below sending PINGREQ once half
  the keep-alive has passed without a packet from it.
* `steady`: from a start time the driver gives (CLOCK_MONOTONIC, shared by all processes) every
  held connection publishes one message a second for `duration_s`, then the subscriber drains
  until it has them all, nothing came for `idle_s`, or the drain deadline passes.
* `close`: DISCONNECT on every connection; the broker closes the socket (so TIME_WAIT lands on
  its side, not on the generator's source ports); what is still open after a bound is aborted.

The wheel: `SLOTS` slots of 1/`SLOTS` s each; every connection sits in one slot chosen at
random, so the once-a-second publishes are spread evenly instead of firing together, and one
timer serves every connection of the process. A connection publishes in a slot when the slot's
*due* time falls in the window, so each one publishes exactly `duration_s` times unless its
socket is backed up (then the publish is counted as skipped, never buffered without bound). A
payload starts with its send time (monotonic ns); the subscriber takes one clock reading per
read and keeps the delivery latencies of a stride sample.

Bounded everywhere: connect attempts by a timeout, phases by the driver's deadlines, the drain
by `drain_s`, buffers by small write-buffer limits. Loopback only: each process may bind its own
127.0.0.x source address so that 20,000 connections to one port do not exhaust one address's
ephemeral ports (`ip_local_port_range`).
"""

from __future__ import annotations

import array
import asyncio
import contextlib
import math
import random
import resource
import socket
import struct
import time
from collections import Counter
from dataclasses import dataclass
from multiprocessing.connection import Connection
from typing import Any, Final, cast

from benchmarks import proto_wire as w

PAYLOAD_BYTES: Final = 32
"""Send time (8 bytes) and padding: a small sensor reading."""
SLOTS: Final = 100
PINGREQ: Final = b"\xc0\x00"
LATENCY_SAMPLES: Final = 20_000
"""Latencies each process keeps (a stride sample) for the driver's percentiles."""
_WRITE_HIGH: Final = 4096  # a backed-up socket skips publishes instead of buffering them
_IP_BIND_ADDRESS_NO_PORT: Final = 24  # linux/in.h: choose the source port at connect time
_STAMP: Final = struct.Struct(">Q")
_PACKET_ID: Final = struct.Struct(">H")


@dataclass(frozen=True, slots=True)
class Plan:
    """What one generator process does."""

    index: int
    host: str
    port: int
    connections: int
    """Publishing connections of this process (its subscriber comes on top)."""
    qos: int = 1
    """QoS of the publishes (1: the broker acknowledges each with PUBACK)."""
    sub_qos: int = 0
    """QoS of the subscription (0: deliveries need no acknowledgement)."""
    keepalive_s: int = 60
    source: str | None = None
    """Local address to connect from (a 127.0.0.x), or None for the kernel's choice."""
    concurrency: int = 100
    connect_timeout_s: float = 15.0
    username: str | None = "guest"
    password: str | None = "guest"
    seed: int = 0


def raise_fd_limit() -> tuple[int, int]:
    """Raise the soft RLIMIT_NOFILE to the hard one; return (soft, hard) as they now are."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < hard:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    return resource.getrlimit(resource.RLIMIT_NOFILE)


def _cpu_s() -> float:
    ru = resource.getrusage(resource.RUSAGE_SELF)
    return ru.ru_utime + ru.ru_stime


class _Client(asyncio.Protocol):
    """One publishing connection (the subscriber is `_Subscriber`)."""

    def __init__(self, gen: _Generator, topic: str) -> None:
        self.gen = gen
        payload = b"\0" * PAYLOAD_BYTES
        self.qos = gen.plan.qos
        if self.qos:  # the packet id goes between the topic and the payload
            self.head = w.mqtt_publish_parts(topic, payload, self.qos)[0]
        else:
            self.head = w.mqtt_publish(topic, payload)[:-PAYLOAD_BYTES]
        self.pad = b"x" * (PAYLOAD_BYTES - _STAMP.size)
        self.transport: asyncio.Transport | None = None
        self.reader = w.MqttReader()
        self.connack: asyncio.Future[int] = gen.loop.create_future()
        self.held = False
        self.paused = False
        self.last_sent = 0.0
        self.packet_id = 0
        self.stage = "TCP connect"

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # uvloop's transports implement the Transport interface without subclassing it.
        self.transport = cast(asyncio.Transport, transport)
        self.transport.set_write_buffer_limits(high=_WRITE_HIGH)

    def data_received(self, data: bytes) -> None:
        for kind, _flags, body in self.reader.feed(data):
            if kind == w.PUBACK:
                self.gen.acked += 1
            elif kind == w.CONNACK and not self.connack.done():
                self.connack.set_result(body[1])

    def connection_lost(self, exc: Exception | None) -> None:
        if not self.connack.done():
            self.connack.set_exception(exc or ConnectionError("closed before CONNACK"))
        if self.held and not self.gen.closing:
            self.gen.dropped += 1
        self.held = False
        self.gen.open_count -= 1
        if self.gen.closing and self.gen.open_count <= 0:
            self.gen.all_closed.set()

    def pause_writing(self) -> None:
        self.paused = True

    def resume_writing(self) -> None:
        self.paused = False

    def publish(self, now: float) -> None:
        if self.paused:
            self.gen.skipped += 1
            return
        stamp = _STAMP.pack(time.monotonic_ns())
        if self.qos:
            self.packet_id = self.packet_id % 65535 + 1
            packet = self.head + _PACKET_ID.pack(self.packet_id) + stamp + self.pad
        else:
            packet = self.head + stamp + self.pad
        assert self.transport is not None
        self.transport.write(packet)
        self.last_sent = now
        self.gen.published += 1

    def ping(self, now: float) -> None:
        assert self.transport is not None
        self.transport.write(PINGREQ)
        self.last_sent = now


class _Subscriber(_Client):
    """The process's subscriber: counts deliveries and samples their latency."""

    def __init__(self, gen: _Generator, topic: str) -> None:
        super().__init__(gen, topic)
        self.suback: asyncio.Future[None] = gen.loop.create_future()
        self.received = 0
        self.last_rx = 0.0
        self.stride = 1
        self.sent_ns = array.array("q")
        self.latencies_ns = array.array("q")

    def data_received(self, data: bytes) -> None:
        now_ns = time.monotonic_ns()
        acks: list[bytes] = []
        for kind, flags, body in self.reader.feed(data):
            if kind == w.PUBLISH:
                self.received += 1
                topic_end = 2 + ((body[0] << 8) | body[1])
                if flags & 0x06:
                    acks.append(w.mqtt_puback(w.publish_packet_id(flags, body)))
                    topic_end += 2
                if self.received % self.stride == 0:
                    sent_ns = _STAMP.unpack_from(body, topic_end)[0]
                    self.sent_ns.append(sent_ns)
                    self.latencies_ns.append(now_ns - sent_ns)
            elif kind == w.CONNACK and not self.connack.done():
                self.connack.set_result(body[1])
            elif kind == w.SUBACK and not self.suback.done():
                self.suback.set_result(None)
        if acks and self.transport is not None:
            self.transport.write(b"".join(acks))
        self.last_rx = time.monotonic()


class _Generator:
    """One process's connections, its wheel and its answers to the driver's phases."""

    def __init__(self, plan: Plan, loop: asyncio.AbstractEventLoop) -> None:
        self.plan = plan
        self.loop = loop
        self.rng = random.Random(plan.seed * 1000 + plan.index)
        self.clients: list[_Client] = []
        self.sub: _Subscriber | None = None
        self.slots: list[list[_Client]] = [[] for _ in range(SLOTS)]
        self.errors: Counter[str] = Counter()
        self.failed = 0
        self.open_count = 0
        self.dropped = 0
        self.published = 0
        self.acked = 0
        self.skipped = 0
        self.late_slots = 0
        self.window = (0.0, 0.0)
        self.closing = False
        self.all_closed = asyncio.Event()
        self.wheel: asyncio.Task[None] | None = None
        self.last_held_ns = 0

    # -- connecting -----------------------------------------------------------------------

    async def _open(self, client: _Client, client_id: str) -> None:
        plan = self.plan
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        try:
            sock.setblocking(False)
            if plan.source is not None:
                with contextlib.suppress(OSError):
                    sock.setsockopt(socket.IPPROTO_IP, _IP_BIND_ADDRESS_NO_PORT, 1)
                sock.bind((plan.source, 0))
            await self.loop.sock_connect(sock, (plan.host, plan.port))
        except BaseException:
            sock.close()
            raise
        await self.loop.create_connection(lambda: client, sock=sock)
        self.open_count += 1
        client.stage = "CONNACK"
        assert client.transport is not None
        client.transport.write(
            w.mqtt_connect(
                client_id,
                username=plan.username,
                password=plan.password,
                keepalive_s=plan.keepalive_s,
            )
        )
        code = await client.connack
        if code != 0:
            raise ConnectionError(f"CONNACK return code {code}")
        client.held = True
        client.last_sent = time.monotonic()
        self.last_held_ns = time.monotonic_ns()

    async def _connect_one(self, i: int) -> None:
        client = _Client(self, f"mqttconn/{self.plan.index}/{i}")
        try:
            await asyncio.wait_for(
                self._open(client, f"mc-{self.plan.index}-{i}"), self.plan.connect_timeout_s
            )
        except (OSError, TimeoutError, ConnectionError) as exc:
            self.failed += 1
            why = f"timed out waiting for {client.stage}" if isinstance(exc, TimeoutError) else exc
            self.errors[f"{type(exc).__name__}: {why}"[:160]] += 1
            if client.transport is not None:
                client.transport.abort()
            return
        self.clients.append(client)
        self.slots[self.rng.randrange(SLOTS)].append(client)

    async def ramp(self, deadline: float) -> dict[str, Any]:
        cpu0 = _cpu_s()
        # The wheel turns from the start: a slow ramp must not let the first connections
        # outlive their keep-alive before the last one is held.
        self.wheel = self.loop.create_task(self._turn())
        sub = _Subscriber(self, f"mqttconn/{self.plan.index}/sub")
        await asyncio.wait_for(
            self._open(sub, f"mc-{self.plan.index}-sub"), self.plan.connect_timeout_s
        )
        assert sub.transport is not None
        sub.transport.write(w.mqtt_subscribe(1, f"mqttconn/{self.plan.index}/+", self.plan.sub_qos))
        await asyncio.wait_for(sub.suback, self.plan.connect_timeout_s)
        self.sub = sub
        todo = iter(range(self.plan.connections))
        not_tried = 0

        async def worker() -> None:
            nonlocal not_tried
            for i in todo:
                if time.monotonic() > deadline:
                    not_tried += 1  # the ramp's time is up: count, do not try
                else:
                    await self._connect_one(i)

        await asyncio.gather(*(worker() for _ in range(self.plan.concurrency)))
        return {
            "held": len(self.clients),
            "failed": self.failed,
            "not_tried": not_tried,
            "errors": dict(self.errors.most_common(5)),
            "ramp_end_ns": time.monotonic_ns(),
            "last_held_ns": self.last_held_ns,
            "ramp_cpu_s": _cpu_s() - cpu0,
        }

    # -- the wheel ------------------------------------------------------------------------

    async def _turn(self) -> None:
        period = 1.0 / SLOTS
        ping_after = self.plan.keepalive_s / 2
        t0 = time.monotonic()
        k = 0
        while not self.closing:
            due = t0 + k * period
            delay = due - time.monotonic()
            if delay > 0:
                await asyncio.sleep(delay)
            elif delay < -period:
                self.late_slots += 1
            now = time.monotonic()
            start, end = self.window
            publishing = start <= due < end
            for c in self.slots[k % SLOTS]:
                if not c.held:
                    continue
                if publishing:
                    c.publish(now)
                elif now - c.last_sent > ping_after:
                    c.ping(now)
            sub = self.sub
            if k % SLOTS == 0 and sub is not None and sub.held and now - sub.last_sent > ping_after:
                sub.ping(now)
            k += 1

    # -- steady and close -----------------------------------------------------------------

    async def steady(self, start: float, duration_s: float, drain_s: float, idle_s: float) -> Any:
        sub = self.sub
        assert sub is not None
        # rounded up: a stride too small would fill the sample before the window's end
        sub.stride = max(1, math.ceil(len(self.clients) * duration_s / LATENCY_SAMPLES))
        received0, late0 = sub.received, self.late_slots
        del sub.sent_ns[:], sub.latencies_ns[:]
        self.published = self.acked = self.skipped = 0
        self.window = (start, start + duration_s)
        await asyncio.sleep(max(0.0, start - time.monotonic()))
        cpu0 = _cpu_s()
        await asyncio.sleep(max(0.0, start + duration_s - time.monotonic()))
        cpu_s = _cpu_s() - cpu0
        end = start + duration_s
        deadline = time.monotonic() + drain_s
        while time.monotonic() < deadline:
            got = sub.received - received0
            if got >= self.published and (self.plan.qos == 0 or self.acked >= self.published):
                break
            if time.monotonic() - max(sub.last_rx, end) > idle_s:
                break
            await asyncio.sleep(0.05)
        return {
            "drain_s": time.monotonic() - end,
            "published": self.published,
            "acked": self.acked,
            "skipped": self.skipped,
            "received": sub.received - received0,
            "held_at_end": sum(1 for c in self.clients if c.held),
            "dropped": self.dropped,  # since the ramp: keep-alive drops show here
            "subscriber_open": sub.held,
            "late_slots": self.late_slots - late0,
            "steady_cpu_s": cpu_s,
            "sent_ns": sub.sent_ns.tolist()[:LATENCY_SAMPLES],
            "latencies_ns": sub.latencies_ns.tolist()[:LATENCY_SAMPLES],
        }

    async def close(self, timeout_s: float) -> dict[str, Any]:
        self.closing = True
        if self.wheel is not None:
            self.wheel.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self.wheel
        everyone: list[_Client] = [*self.clients, *([self.sub] if self.sub else [])]
        for c in everyone:
            if c.transport is not None and not c.transport.is_closing():
                c.transport.write(w.MQTT_DISCONNECT)
        if self.open_count > 0:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.all_closed.wait(), timeout_s)
        aborted = 0
        for c in everyone:
            if c.transport is not None and not c.transport.is_closing():
                c.transport.abort()
                aborted += 1
        await asyncio.sleep(0)
        return {"aborted": aborted}


async def _serve(plan: Plan, pipe: Connection) -> None:
    loop = asyncio.get_running_loop()
    gen = _Generator(plan, loop)
    while True:
        # A thread waits for the driver: `add_reader` would make the pipe non-blocking, and a
        # large answer (the latency sample) would then fail with EAGAIN.
        command = await loop.run_in_executor(None, pipe.recv)
        try:
            match command:
                case ("ramp", deadline):
                    pipe.send(await gen.ramp(deadline))
                case ("steady", start, duration_s, drain_s, idle_s):
                    pipe.send(await gen.steady(start, duration_s, drain_s, idle_s))
                case ("close", timeout_s):
                    pipe.send(await gen.close(timeout_s))
                    return
                case _:
                    pipe.send({"error": f"unknown command {command!r}"})
        except Exception as exc:  # noqa: BLE001 - reported to the driver
            pipe.send({"error": f"generator {plan.index}: {type(exc).__name__}: {exc}"})


def process_main(plan: Plan, pipe: Connection) -> None:
    """The body of one generator process (fork): answer the driver's phases until `close`."""
    raise_fd_limit()
    try:
        import uvloop

        loop: asyncio.AbstractEventLoop = uvloop.new_event_loop()
    except ImportError:
        loop = asyncio.new_event_loop()
    try:
        loop.run_until_complete(_serve(plan, pipe))
    finally:
        loop.close()
