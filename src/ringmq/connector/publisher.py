"""`Publisher`: a minimal AMQP 0-9-1 publisher built on ringmq's own codec.

It pipelines `basic.publish` on one channel in confirm mode, keeps at most `window` messages
unconfirmed, and `publish_many` returns only once the broker has confirmed every message (a
nack, a channel or connection close raises `PublishError`). `publish_framed` does the same for
publishes framed elsewhere (the Spark writer's column framing), sending from a second thread.
It holds nothing that matters across processes: Spark tasks create it inside `write()`.
"""

from __future__ import annotations

import bisect
import socket
import struct
from collections.abc import Iterable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, Final

from ringmq.amqp import spec
from ringmq.amqp.frames import (
    FRAME_BODY,
    FRAME_HEADER,
    FRAME_METHOD,
    FRAME_OVERHEAD,
    PROTOCOL_HEADER,
    encode_content_frames,
    encode_method_frame,
)
from ringmq.connector.client import AMQPParams, PublishError

_FRAME_HEAD: Final = struct.Struct(">BHI")
_PUBLISH_HEADER: Final = struct.Struct(">BHIHHQ")  # a content header frame's head, class..size
_BODY_HEAD: Final = struct.Struct(">BBHI")  # the frame end before a body frame, and its head
_SEND_ITEMS: Final = 3072
"""Pieces of frames joined into one `sendall` at most (512 publishes with a body)."""
_SEND_BYTES: Final = 256 * 1024
"""Body bytes joined into one `sendall` at most."""
_SEND_MESSAGES: Final = 512
"""Publishes in one `sendall` of pre-framed publishes at most."""
_ACK_IDS: Final = b"\x00\x3c\x00\x50"  # basic.ack: class 60, method 80
_ACK_ARGS: Final = struct.Struct(">QB")


Outgoing = tuple[str, str, bytes, bytes]
"""(exchange, routing_key, properties_bin, body) of one message to publish."""


class Publisher:
    """Pipelined AMQP publisher with publisher confirms (see module docstring).

    Args:
        url: `amqp://user:pass@host:port/vhost`.
        window: most messages in flight without a confirm.
    """

    def __init__(self, url: str, *, window: int = 2000, timeout_s: float = 30.0) -> None:
        self.params = AMQPParams.from_url(url)
        self.window = window
        self.timeout_s = timeout_s
        self._sock: socket.socket | None = None
        self._buf = bytearray()
        self._pos = 0
        self._methods: dict[tuple[str, str], bytes] = {}
        self._frame_max = 131072
        self._next = 1  # delivery tag of the next publish (confirm mode numbering)
        self._confirmed = 0  # every tag <= this is confirmed
        self._early: set[int] = set()  # confirmed tags above `_confirmed`

    # -- connection ---------------------------------------------------------------------------
    def connect(self) -> None:
        """Open the connection, channel 1, and confirm mode."""
        p = self.params
        sock = socket.create_connection((p.host, p.port), timeout=self.timeout_s)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self._sock = sock
        sock.sendall(PROTOCOL_HEADER)
        start = self._expect(spec.ConnectionStart)
        del start
        self._send(
            0,
            spec.ConnectionStartOk(
                client_properties={
                    "product": "ringmq-connector",
                    "capabilities": {"publisher_confirms": True},
                },
                mechanism="PLAIN",
                response=b"\x00" + p.user.encode() + b"\x00" + p.password.encode(),
            ),
        )
        tune = self._expect(spec.ConnectionTune)
        fm = tune.frame_max
        self._frame_max = min(fm, 131072) if fm else 131072
        self._send(0, spec.ConnectionTuneOk(channel_max=1, frame_max=self._frame_max, heartbeat=0))
        self._send(0, spec.ConnectionOpen(virtual_host=p.vhost))
        self._expect(spec.ConnectionOpenOk)
        self._send(1, spec.ChannelOpen())
        self._expect(spec.ChannelOpenOk)
        self._send(1, spec.ConfirmSelect())
        self._expect(spec.ConfirmSelectOk)

    def close(self) -> None:
        """Close politely; never raises."""
        sock = self._sock
        if sock is None:
            return
        try:
            self._send(0, spec.ConnectionClose(reply_code=200, reply_text="bye"))
            self._expect(spec.ConnectionCloseOk)
        except (OSError, PublishError):
            pass
        finally:
            sock.close()
            self._sock = None

    def __enter__(self) -> Publisher:
        if self._sock is None:
            self.connect()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def frame_max(self) -> int:
        """The negotiated frame_max (connects first when not connected)."""
        if self._sock is None:
            self.connect()
        return self._frame_max

    # -- publishing ---------------------------------------------------------------------------
    def publish_many(self, messages: Iterable[Outgoing]) -> int:
        """Publish every message and wait until all are confirmed; returns how many.

        Raises:
            PublishError: a message was nacked, or the broker closed the channel/connection.
        """
        if self._sock is None:
            self.connect()
        frame_max = self._frame_max
        max_body = frame_max - FRAME_OVERHEAD
        methods = self._methods
        # Per message: the publish method frame (encoded once per exchange and routing key),
        # the content header frame's head and fixed fields in one pack, the properties, the
        # header's frame end and the body frame's head in one pack, the body, its frame end.
        header, body_head, end = _PUBLISH_HEADER.pack, _BODY_HEAD.pack, b"\xce"
        batch: list[bytes] = []
        size = 0
        count = sent = 0
        for exchange, routing_key, props, body in messages:
            key = (exchange, routing_key)
            m = methods.get(key)
            if m is None:
                m = encode_method_frame(
                    1, spec.BasicPublish(exchange=exchange, routing_key=routing_key)
                )
                if len(methods) < 10_000:
                    methods[key] = m
            n = len(body)
            if not n:
                batch += (m, header(FRAME_HEADER, 1, 12 + len(props), 60, 0, 0), props, end)
            elif n <= max_body:
                batch += (
                    m,
                    header(FRAME_HEADER, 1, 12 + len(props), 60, 0, n),
                    props,
                    body_head(0xCE, FRAME_BODY, 1, n),
                    body,
                    end,
                )
                size += n
            else:
                method = spec.BasicPublish(exchange=exchange, routing_key=routing_key)
                batch.append(encode_content_frames(1, method, props, body, frame_max))
                size += n
            count += 1
            if len(batch) >= _SEND_ITEMS or size >= _SEND_BYTES:
                self._send_piece(b"".join(batch), count - sent)
                sent = count
                batch.clear()
                size = 0
        if batch:
            self._send_piece(b"".join(batch), count - sent)
        self._wait_confirms()
        return count

    def publish_framed(self, pieces: Iterable[tuple[bytes | memoryview, Sequence[int]]]) -> int:
        """Send publishes framed elsewhere and wait until all are confirmed; returns how many.

        Each piece is a buffer of whole `basic.publish` frame sequences on channel 1 and the end
        offset of each message in it, ascending (`connector.spark.amqpframes`). A piece is sent
        on a second thread, in slices at message boundaries under the same window as
        `publish_many`, while the caller's thread takes the next piece from `pieces` (framing
        overlaps sending and the broker's work).

        Raises:
            PublishError: as `publish_many`.
        """
        if self._sock is None:
            self.connect()
        count = 0
        with ThreadPoolExecutor(1, thread_name_prefix="ringmq-publish") as pool:
            sent: Future[None] | None = None
            for data, ends in pieces:
                if sent is not None:
                    sent.result()
                sent = pool.submit(self._send_framed, data, ends)
                count += len(ends)
            if sent is not None:
                sent.result()
        self._wait_confirms()
        return count

    def _send_framed(self, data: bytes | memoryview, ends: Sequence[int]) -> None:
        view = memoryview(data)
        i, n, at = 0, len(ends), 0
        while i < n:
            j = min(n, i + _SEND_MESSAGES, bisect.bisect_right(ends, at + _SEND_BYTES, i))
            j = max(j, i + 1)
            stop = int(ends[j - 1])
            self._send_piece(view[at:stop], j - i)
            i, at = j, stop

    def _send_piece(self, data: bytes | memoryview, count: int) -> None:
        """Send `count` whole publishes, then wait while more than `window` are unconfirmed."""
        assert self._sock is not None
        self._sock.sendall(data)
        self._next += count
        while self._next - 1 - self._confirmed > self.window:
            self._pump()

    def _wait_confirms(self) -> None:
        while self._confirmed < self._next - 1:
            self._pump()

    # -- frames -------------------------------------------------------------------------------
    def _send(self, channel: int, method: Any) -> None:
        assert self._sock is not None
        self._sock.sendall(encode_method_frame(channel, method))

    def _next_method(self) -> Any:
        """The next method from the broker; heartbeats and content frames are skipped.

        basic.ack, by far the most frequent, is parsed in place and returned as a tuple
        `(tag, multiple)` instead of a method object.
        """
        assert self._sock is not None
        buf = self._buf
        while True:
            pos = self._pos
            if len(buf) - pos >= 7:
                ftype, _channel, size = _FRAME_HEAD.unpack_from(buf, pos)
                stop = pos + 7 + size
                if len(buf) > stop:
                    if buf[stop] != 0xCE:
                        raise PublishError("frame error from the broker")
                    self._pos = stop + 1
                    if ftype != FRAME_METHOD:
                        continue  # heartbeat, or content of a return
                    if size == 13 and buf[pos + 7 : pos + 11] == _ACK_IDS:
                        tag, bits = _ACK_ARGS.unpack_from(buf, pos + 11)
                        return (tag, bool(bits & 1))
                    m = spec.decode_method(bytes(buf[pos + 7 : stop]))
                    if isinstance(m, spec.ConnectionClose | spec.ChannelClose):
                        raise PublishError(f"{m.reply_code} {m.reply_text}")
                    return m
            if self._pos:
                del buf[: self._pos]
                self._pos = 0
            data = self._sock.recv(262144)
            if not data:
                raise PublishError("connection closed by the broker")
            buf += data

    def _expect(self, kind: type[Any]) -> Any:
        m = self._next_method()
        if not isinstance(m, kind):
            raise PublishError(f"expected {kind.__name__}, got {type(m).__name__}")
        return m

    def _pump(self) -> None:
        m = self._next_method()
        if isinstance(m, tuple | spec.BasicAck):
            tag, multiple = m if isinstance(m, tuple) else (m.delivery_tag, m.multiple)
            if multiple:
                self._confirmed = max(self._confirmed, tag)
                self._early = {t for t in self._early if t > self._confirmed}
            else:
                # Single acks can come out of order (a persistent message waits for its fsync
                # while a transient one is confirmed at once): advance over contiguous tags.
                self._early.add(tag)
            while self._confirmed + 1 in self._early:
                self._confirmed += 1
                self._early.discard(self._confirmed)
        elif isinstance(m, spec.BasicNack):
            raise PublishError(f"message {m.delivery_tag} was nacked by the broker")
