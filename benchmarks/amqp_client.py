"""A minimal asyncio AMQP 0-9-1 client, built to be cheaper per message than any broker.

Theory of operation: one ``AMQPClient`` is one ``asyncio.Protocol`` (one TCP connection).
Frames are written pre-encoded (``amqp_wire``); incoming bytes are split into frames in
``data_received`` by one loop that handles the hot frames inline, without building objects:

* ``basic.deliver`` bumps the channel's ``Consumer`` counters and, every ``ack_every``
  messages (and at the target count), writes one ``basic.ack`` with ``multiple=true``;
* ``basic.ack`` / ``basic.nack`` on a confirm channel settle ``Confirms`` (in tag order, with
  one send timestamp per tag, which gives the confirm latency);
* the first body frame after a deliver is read only when the consumer measures latency
  (its first 8 bytes are the sender's ``time.monotonic_ns()``, a clock shared by processes).

Every other method is handed to whoever awaits it (``expect``/``rpc``); a channel.close or
connection.close from the broker fails the waiters and the consumers of that channel with
``BrokerClosedError``. Writers respect transport flow control through ``drain()``. The client
keeps no timers and negotiates heartbeats off, so a run is only what the scenario sends.
"""

from __future__ import annotations

import asyncio
import struct
import time
from collections import deque
from dataclasses import dataclass, field
from typing import Final, cast
from urllib.parse import unquote, urlsplit

from benchmarks import amqp_wire as wire

_FRAME_HEAD: Final = struct.Struct(">BHI")
_U32: Final = struct.Struct(">I")
_U64: Final = struct.Struct(">Q")
_BASIC_DELIVER: Final = (60 << 16) | 60
_BASIC_ACK: Final = (60 << 16) | 80
_BASIC_NACK: Final = (60 << 16) | 120


Keys = frozenset[tuple[int, int]]
Reply = tuple[tuple[int, int], bytes]  # (class_id, method_id), method payload


class BrokerClosedError(Exception):
    """The broker closed the channel or the connection (or the socket went away)."""


@dataclass(frozen=True, slots=True)
class AMQPURL:
    host: str
    port: int
    user: str
    password: str
    vhost: str

    @classmethod
    def parse(cls, url: str) -> AMQPURL:
        parts = urlsplit(url)
        if parts.scheme != "amqp":
            raise ValueError(f"only amqp:// URLs are supported, got {url!r}")
        vhost = unquote(parts.path[1:]) if len(parts.path) > 1 else "/"
        return cls(
            host=parts.hostname or "127.0.0.1",
            port=parts.port or 5672,
            user=unquote(parts.username or "guest"),
            password=unquote(parts.password or "guest"),
            vhost=vhost,
        )


@dataclass(slots=True)
class Consumer:
    """Delivery accounting of one consumer (one channel)."""

    channel: int
    target: int
    ack_every: int
    measure_latency: bool = False
    received: int = 0
    acked: int = 0
    t_first: float = 0.0
    t_last: float = 0.0
    latencies_ns: list[int] = field(default_factory=list)
    want_stamp: bool = False
    done: asyncio.Future[None] | None = None


@dataclass(slots=True)
class Confirms:
    """Publisher-confirm accounting of one channel (tags start at 1, RabbitMQ style)."""

    record_latency: bool = True
    next_tag: int = 1
    confirmed: int = 0
    nacked: int = 0
    pending: deque[tuple[int, int]] = field(default_factory=deque)  # (tag, send_ns), tag order
    settled_out_of_order: set[int] = field(default_factory=set)
    latencies_ns: list[int] = field(default_factory=list)
    wake: asyncio.Event = field(default_factory=asyncio.Event)
    error: BrokerClosedError | None = None  # set when the channel or connection fails

    @property
    def in_flight(self) -> int:
        return self.next_tag - 1 - self.confirmed - self.nacked

    def sent(self, count: int, now_ns: int) -> None:
        pending = self.pending
        for tag in range(self.next_tag, self.next_tag + count):
            pending.append((tag, now_ns))
        self.next_tag += count

    def settle(self, tag: int, multiple: bool, nack: bool, now_ns: int) -> None:
        pending, lat = self.pending, self.latencies_ns
        settled = 0
        if multiple:
            while pending and pending[0][0] <= tag:
                head, sent_ns = pending.popleft()
                if head in self.settled_out_of_order:
                    self.settled_out_of_order.discard(head)
                    continue
                settled += 1
                if self.record_latency:
                    lat.append(now_ns - sent_ns)
        elif pending and pending[0][0] == tag:
            _, sent_ns = pending.popleft()
            settled = 1
            if self.record_latency:
                lat.append(now_ns - sent_ns)
        else:
            # A single ack past the head: find its send time, count it now, skip it later.
            for head, sent_ns in pending:
                if head == tag:
                    self.settled_out_of_order.add(tag)
                    settled = 1
                    if self.record_latency:
                        lat.append(now_ns - sent_ns)
                    break
        if nack:
            self.nacked += settled
        else:
            self.confirmed += settled
        self.wake.set()


class AMQPClient(asyncio.Protocol):
    """One AMQP connection. Create with ``await AMQPClient.connect(url)``."""

    def __init__(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._buf = bytearray()
        self._transport: asyncio.Transport | None = None
        self._waiters: dict[int, list[tuple[Keys, asyncio.Future[Reply]]]] = {}
        self._consumers: dict[int, Consumer] = {}
        self._confirms: dict[int, Confirms] = {}
        self._writable = asyncio.Event()
        self._writable.set()
        self._next_channel = 1
        self.closed: asyncio.Future[None] = self._loop.create_future()
        self.error: BrokerClosedError | None = None
        self.frame_max = wire.DEFAULT_FRAME_MAX
        self.blocked_events = 0
        self.server_frames = 0

    # -- setup ------------------------------------------------------------------------------

    @classmethod
    async def connect(cls, url: str, *, timeout_s: float = 10.0) -> AMQPClient:
        target = AMQPURL.parse(url)
        loop = asyncio.get_running_loop()
        _, client = await asyncio.wait_for(
            loop.create_connection(cls, target.host, target.port), timeout_s
        )
        await asyncio.wait_for(client.handshake(target), timeout_s)
        return client

    async def handshake(self, target: AMQPURL) -> None:
        """Open the connection: start-ok, tune-ok, open (`connect` calls it)."""
        start = self.expect_any(0, frozenset((wire.CONNECTION_START,)))
        self.write(wire.PROTOCOL_HEADER)
        await start
        tune = self.expect_any(0, frozenset((wire.CONNECTION_TUNE,)))
        self.write(wire.connection_start_ok(target.user, target.password))
        channel_max, frame_max, _ = wire.decode_tune((await tune)[1])
        self.frame_max = min(frame_max or wire.DEFAULT_FRAME_MAX, wire.DEFAULT_FRAME_MAX)
        self.write(wire.connection_tune_ok(channel_max or 2047, self.frame_max, 0))
        await self.rpc(0, wire.connection_open(target.vhost), wire.CONNECTION_OPEN_OK)

    async def open_channel(self) -> int:
        channel = self._next_channel
        self._next_channel += 1
        await self.rpc(channel, wire.channel_open(channel), wire.CHANNEL_OPEN_OK)
        return channel

    async def close(self, timeout_s: float = 5.0) -> None:
        if self._transport is None or self.closed.done():
            return
        waiter = self.expect_any(0, frozenset((wire.CONNECTION_CLOSE_OK,)))
        self.write(wire.connection_close())
        try:
            await asyncio.wait_for(waiter, timeout_s)
        except (TimeoutError, BrokerClosedError):
            pass
        finally:
            self._transport.close()

    # -- requests ---------------------------------------------------------------------------

    def expect_any(self, channel: int, keys: Keys) -> asyncio.Future[Reply]:
        """A future for the next method on ``channel`` whose key is in ``keys``."""
        fut: asyncio.Future[Reply] = self._loop.create_future()
        if self.error is not None:
            fut.set_exception(self.error)
        else:
            self._waiters.setdefault(channel, []).append((keys, fut))
        return fut

    async def expect(self, channel: int, key: tuple[int, int]) -> bytes:
        """The payload of the next ``key`` method on ``channel``."""
        _, payload = await self.expect_any(channel, frozenset((key,)))
        return payload

    async def rpc(
        self, channel: int, request: bytes, reply: tuple[int, int], timeout_s: float = 30.0
    ) -> bytes:
        fut = self.expect_any(channel, frozenset((reply,)))
        self.write(request)
        return (await asyncio.wait_for(fut, timeout_s))[1]

    async def landed(self, channel: int, queue: str, timeout_s: float = 600.0) -> int:
        """Depth of ``queue`` once everything published earlier on ``channel`` has landed.

        A passive queue.declare is not a barrier on RabbitMQ (its queue process answers stat
        calls ahead of queued deliveries), but basic.get is served in order, so: get one
        message, read the count, and put the message back with basic.reject(requeue).
        """
        fut = self.expect_any(channel, frozenset((wire.BASIC_GET_OK, wire.BASIC_GET_EMPTY)))
        self.write(wire.basic_get(channel, queue))
        key, payload = await asyncio.wait_for(fut, timeout_s)
        if key == wire.BASIC_GET_EMPTY:
            return 0
        tag, remaining = wire.decode_get_ok(payload)
        self.write(wire.basic_reject(channel, tag, requeue=True))
        return remaining + 1

    def write(self, data: bytes) -> None:
        if self.error is not None:
            raise self.error
        assert self._transport is not None
        self._transport.write(data)

    async def drain(self) -> None:
        """Wait until the transport buffer is below its high-water mark."""
        if not self._writable.is_set():
            await self._writable.wait()  # also set when the connection fails
        if self.error is not None:
            raise self.error

    def add_consumer(self, consumer: Consumer) -> None:
        consumer.done = self._loop.create_future()
        # A consumer failed by a channel close may never be awaited: retrieve its exception.
        consumer.done.add_done_callback(lambda f: f.cancelled() or f.exception())
        self._consumers[consumer.channel] = consumer

    def confirms(self, channel: int, *, record_latency: bool = True) -> Confirms:
        tracker = Confirms(record_latency=record_latency)
        self._confirms[channel] = tracker
        return tracker

    # -- asyncio.Protocol -------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # uvloop's transports implement the Transport interface without subclassing it.
        self._transport = cast(asyncio.Transport, transport)
        self._transport.set_write_buffer_limits(high=1 << 20)

    def connection_lost(self, exc: Exception | None) -> None:
        self._fail(BrokerClosedError(f"connection lost: {exc!r}" if exc else "connection closed"))
        self._writable.set()
        if not self.closed.done():
            self.closed.set_result(None)

    def pause_writing(self) -> None:
        self._writable.clear()

    def resume_writing(self) -> None:
        self._writable.set()

    def data_received(self, data: bytes) -> None:
        buf = self._buf
        buf += data
        size_all = len(buf)
        pos = 0
        head = _FRAME_HEAD.unpack_from
        u32 = _U32.unpack_from
        u64 = _U64.unpack_from
        consumers = self._consumers
        while size_all - pos >= 7:
            ftype, channel, size = head(buf, pos)
            start = pos + 7
            end = start + size
            if end >= size_all:
                break
            if buf[end] != wire.FRAME_END:
                self._protocol_error(f"bad frame end 0x{buf[end]:02x}")
                return
            pos = end + 1
            if ftype == 1:
                (cm,) = u32(buf, start)
                if cm == _BASIC_DELIVER:
                    c = consumers[channel]
                    (tag,) = u64(buf, start + 5 + buf[start + 4])
                    c.received += 1
                    if c.received == 1:
                        c.t_first = time.monotonic()
                    if c.measure_latency:
                        c.want_stamp = True
                    if c.received - c.acked >= c.ack_every or c.received == c.target:
                        self.write(wire.basic_ack(channel, tag, multiple=True))
                        c.acked = c.received
                    if c.received == c.target:
                        c.t_last = time.monotonic()
                        assert c.done is not None
                        if not c.done.done():
                            c.done.set_result(None)
                elif cm in (_BASIC_ACK, _BASIC_NACK):
                    (tag,) = u64(buf, start + 4)
                    self._confirms[channel].settle(
                        tag, bool(buf[start + 12] & 1), cm == _BASIC_NACK, time.monotonic_ns()
                    )
                else:
                    self._on_method(channel, (cm >> 16, cm & 0xFFFF), bytes(buf[start:end]))
            elif ftype == 3:
                bc = consumers.get(channel)  # None: the content of a basic.get-ok
                if bc is not None and bc.want_stamp:
                    bc.want_stamp = False
                    (stamp,) = u64(buf, start)
                    bc.latencies_ns.append(time.monotonic_ns() - stamp)
        if pos:
            del buf[:pos]

    # -- slow path ----------------------------------------------------------------------------

    def _on_method(self, channel: int, key: tuple[int, int], payload: bytes) -> None:
        if key == wire.CONNECTION_CLOSE:
            code, text, cls_id, meth_id = wire.decode_close(payload)
            self.write(wire.connection_close_ok())
            self._fail(
                BrokerClosedError(
                    f"connection closed by broker: {code} {text} ({cls_id},{meth_id})"
                )
            )
            return
        if key == wire.CHANNEL_CLOSE:
            code, text, cls_id, meth_id = wire.decode_close(payload)
            self.write(wire.channel_close_ok(channel))
            self._fail_channel(
                channel,
                BrokerClosedError(f"channel {channel} closed: {code} {text} ({cls_id},{meth_id})"),
            )
            return
        if key == wire.CONNECTION_BLOCKED:
            self.blocked_events += 1
            return
        if key in (wire.CONNECTION_UNBLOCKED, wire.BASIC_RETURN):
            return
        waiters = self._waiters.get(channel, [])
        for i, (wanted, fut) in enumerate(waiters):
            if key in wanted:
                del waiters[i]
                if not fut.done():
                    fut.set_result((key, payload))
                return
        # Unsolicited replies (basic.cancel from the broker, a late cancel-ok) are ignored.

    def _protocol_error(self, text: str) -> None:
        self._fail(BrokerClosedError(text))
        if self._transport is not None:
            self._transport.close()

    def _fail_channel(self, channel: int, error: BrokerClosedError) -> None:
        for _, fut in self._waiters.pop(channel, []):
            if not fut.done():
                fut.set_exception(error)
        consumer = self._consumers.get(channel)
        if consumer is not None and consumer.done is not None and not consumer.done.done():
            consumer.done.set_exception(error)
        tracker = self._confirms.get(channel)
        if tracker is not None:
            tracker.error = tracker.error or error
            tracker.wake.set()

    def _fail(self, error: BrokerClosedError) -> None:
        if self.error is None:
            self.error = error
        for channel in list(self._waiters) + list(self._consumers) + list(self._confirms):
            self._fail_channel(channel, error)
        self._writable.set()


# -- publishing loops ------------------------------------------------------------------------


async def publish_flood(client: AMQPClient, template: bytes, count: int) -> None:
    """Write ``count`` copies of a pre-encoded publish as fast as the socket takes them."""
    per_write = max(1, 65536 // len(template))
    batch = template * per_write
    sent = 0
    writes = 0
    while sent < count:
        if count - sent >= per_write:
            client.write(batch)
            sent += per_write
        else:
            client.write(template * (count - sent))
            sent = count
        writes += 1
        await client.drain()
        if writes % 8 == 0:
            await asyncio.sleep(0)  # let the loop read (blocked, close) even if never paused


async def publish_confirmed(
    client: AMQPClient, channel: int, tracker: Confirms, template: bytes, count: int, window: int
) -> None:
    """Publish with at most ``window`` unconfirmed messages; returns when all are settled."""
    per_write = max(1, min(window // 4 or 1, 65536 // len(template) or 1))
    sent = 0
    while sent < count:
        room = window - tracker.in_flight
        if room <= 0:
            tracker.wake.clear()
            await _wait_settled(tracker)
            continue
        k = min(room, per_write, count - sent)
        client.write(template * k)
        tracker.sent(k, time.monotonic_ns())
        sent += k
        await client.drain()
    while tracker.in_flight > 0:
        tracker.wake.clear()
        await _wait_settled(tracker)


async def publish_confirmed_paced(
    client: AMQPClient,
    tracker: Confirms,
    template: bytes,
    count: int,
    window: int,
    rate_per_s: float,
) -> None:
    """Publish ``count`` messages at a steady rate with confirms (at most ``window``
    unconfirmed: past it the rate slips); returns when all are settled. Below saturation the
    confirm latencies measure the broker's path, not the time a full window waits."""
    start = time.monotonic()
    sent = 0
    while sent < count:
        due = min(count, int((time.monotonic() - start) * rate_per_s) + 1)
        k = min(due - sent, window - tracker.in_flight)
        if k > 0:
            client.write(template * k)
            tracker.sent(k, time.monotonic_ns())
            sent += k
            await client.drain()
        elif tracker.in_flight >= window:
            tracker.wake.clear()
            await _wait_settled(tracker)
            continue
        next_due = start + (sent + 1) / rate_per_s
        await asyncio.sleep(max(0.001, next_due - time.monotonic()))
    while tracker.in_flight > 0:
        tracker.wake.clear()
        await _wait_settled(tracker)


async def _wait_settled(tracker: Confirms) -> None:
    await tracker.wake.wait()  # also set when the channel or the connection fails
    if tracker.error is not None:
        raise tracker.error


async def publish_paced(
    client: AMQPClient, template: wire.PublishTemplate, count: int, rate_per_s: float
) -> None:
    """Publish ``count`` messages at a steady rate, stamping each body with monotonic_ns."""
    frames = bytearray(template.frames)
    offset = template.body_offset
    pack_into = _U64.pack_into
    start = time.monotonic()
    sent = 0
    while sent < count:
        due = min(count, int((time.monotonic() - start) * rate_per_s) + 1)
        if due > sent:
            chunks = []
            for _ in range(due - sent):
                pack_into(frames, offset, time.monotonic_ns())
                chunks.append(bytes(frames))
            client.write(b"".join(chunks))
            sent = due
            await client.drain()
        # Sleep until the next message is due, at least 1 ms: few wake-ups, so the generator
        # leaves the CPU to the broker (at 5,000 msg/s that is bursts of about 5 messages).
        next_due = start + (sent + 1) / rate_per_s
        await asyncio.sleep(max(0.001, next_due - time.monotonic()))
