"""Plain clients of a running broker, usable without Spark.

* `StreamClient`: the streams HTTP API (reserve, range read, settle, browse, head/tail), over one
  keep-alive `http.client` connection. Cheap to create; connects lazily.
* `Publisher`: a minimal AMQP 0-9-1 publisher built on ringmq's own codec. It pipelines
  `basic.publish` on one channel in confirm mode, keeps at most `window` messages unconfirmed,
  and `publish_many` returns only once the broker has confirmed every message (a nack, a
  channel or connection close raises `PublishError`). `publish_framed` does the same for
  publishes framed elsewhere (the Spark writer's column framing), sending from a second thread.

Neither holds state that matters across processes: Spark tasks create them inside `read()` and
`write()` (docs/spark.md).
"""

from __future__ import annotations

import base64
import bisect
import http.client
import json
import socket
import struct
import time
from collections.abc import Iterable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, Final
from urllib.parse import quote, unquote, urlsplit

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
from ringmq.connector.records import (
    PUBLISH_MEDIA_TYPE,
    Record,
    decode_records,
    skip_published,
)

DEFAULT_HTTP_TIMEOUT_S: Final = 30.0
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
STORED_MEDIA_TYPE: Final = "application/x-ringmq-stream-records"
"""`read_log_stored`'s answer when the broker sent the records as stored."""
READ_CHUNK: Final = 20_000
"""Positions per range-read request (bounded responses)."""


class StreamAPIError(Exception):
    """The streams API answered with an error status."""

    def __init__(self, status: int, text: str) -> None:
        super().__init__(f"HTTP {status}: {text}")
        self.status = status
        self.text = text


class PublishError(Exception):
    """The broker refused (nack) or closed the channel or connection while publishing."""


@dataclass(frozen=True, slots=True)
class AMQPParams:
    """What an `amqp://user:pass@host:port/vhost` URL says (RabbitMQ's URI spec)."""

    host: str = "127.0.0.1"
    port: int = 5672
    user: str = "guest"
    password: str = "guest"  # noqa: S105 - RabbitMQ's documented default account
    vhost: str = "/"

    @classmethod
    def from_url(cls, url: str) -> AMQPParams:
        """Parse an AMQP URL; an empty path means vhost "/" and `%2F` is "/"."""
        u = urlsplit(url)
        if u.scheme not in ("amqp", ""):
            raise ValueError(f"unsupported AMQP URL scheme {u.scheme!r}")
        path = u.path[1:] if u.path.startswith("/") else u.path
        return cls(
            host=u.hostname or "127.0.0.1",
            port=u.port or 5672,
            user=unquote(u.username) if u.username is not None else "guest",
            password=unquote(u.password) if u.password is not None else "guest",
            vhost=unquote(path) if path else "/",
        )


class StreamClient:
    """Client of `/api/streams/{vhost}/{queue}` (see docs/spark.md for the wire).

    Args:
        http_url: management base URL, e.g. `http://guest:guest@127.0.0.1:15672`; credentials
            in the URL win over `user`/`password`.
        vhost: the vhost of every queue this client names.
    """

    def __init__(
        self,
        http_url: str,
        vhost: str = "/",
        *,
        user: str = "guest",
        password: str = "guest",  # noqa: S107 - RabbitMQ's documented default account
        timeout_s: float = DEFAULT_HTTP_TIMEOUT_S,
    ) -> None:
        u = urlsplit(http_url)
        if u.scheme != "http":
            raise ValueError(f"httpUrl must be http://..., got {http_url!r}")
        self.host = u.hostname or "127.0.0.1"
        self.port = u.port or 15672
        self.prefix = u.path.rstrip("/")
        user = unquote(u.username) if u.username is not None else user
        password = unquote(u.password) if u.password is not None else password
        token = base64.b64encode(f"{user}:{password}".encode()).decode()
        self._headers = {"Authorization": f"Basic {token}"}
        self.vhost = vhost
        self.timeout_s = timeout_s
        self._conn: http.client.HTTPConnection | None = None

    def _path(self, queue: str, suffix: str = "") -> str:
        vhost, name = quote(self.vhost, safe=""), quote(queue, safe="")
        return f"{self.prefix}/api/streams/{vhost}/{name}{suffix}"

    def _request(
        self,
        method: str,
        path: str,
        body: dict[str, Any] | None = None,
        *,
        raw: bytes | Sequence[bytes | memoryview] | None = None,
        content_type: str = "application/json",
    ) -> bytes:
        return self._exchange(method, path, body, raw=raw, content_type=content_type)[0]

    def _exchange(
        self,
        method: str,
        path: str,
        body: dict[str, Any] | None = None,
        *,
        raw: bytes | Sequence[bytes | memoryview] | None = None,
        content_type: str = "application/json",
    ) -> tuple[bytes, str]:
        # One request: (the response's body, its media type).
        data = raw if body is None else json.dumps(body).encode()
        headers = dict(self._headers)
        if data is not None:
            headers["Content-Type"] = content_type
            if not isinstance(data, bytes):  # parts: http.client sends each (not chunked)
                headers["Content-Length"] = str(sum(map(len, data)))
        for attempt in (0, 1):
            if self._conn is None:
                self._conn = http.client.HTTPConnection(
                    self.host, self.port, timeout=self.timeout_s
                )
            try:
                self._conn.request(method, path, body=data, headers=headers)
                resp = self._conn.getresponse()
                payload = resp.read()
            except (ConnectionError, http.client.HTTPException, OSError):
                # A keep-alive connection the server closed: retry once on a fresh one. All
                # calls are idempotent (reserve of a held range, reads, cumulative settle).
                self.close()
                if attempt:
                    raise
                continue
            if resp.status >= 400:
                raise StreamAPIError(resp.status, payload.decode("utf-8", "replace"))
            return payload, resp.getheader("Content-Type") or ""
        raise AssertionError("unreachable")

    def close(self) -> None:
        """Close the HTTP connection (a later call reconnects)."""
        if self._conn is not None:
            self._conn.close()
            self._conn = None

    def __enter__(self) -> StreamClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- API ----------------------------------------------------------------------------------
    def info(self, queue: str) -> dict[str, Any]:
        """Head/tail seqs, depth, eviction counters and leases of `queue`."""
        out: dict[str, Any] = json.loads(self._request("GET", self._path(queue)))
        return out

    def reserve(
        self,
        queue: str,
        consumer: str,
        start: int,
        max_messages: int,
        *,
        lease_ms: int | None = None,
        max_bytes: int | None = None,
    ) -> dict[str, Any]:
        """Reserve positions `[start, end)`; returns the JSON answer (`end`, `skipped`, ...)."""
        body: dict[str, Any] = {"consumer": consumer, "start": start, "max": max_messages}
        if lease_ms is not None:
            body["lease_ms"] = lease_ms
        if max_bytes is not None:
            body["max_bytes"] = max_bytes
        out: dict[str, Any] = json.loads(self._request("POST", self._path(queue, "/reserve"), body))
        return out

    def read(self, queue: str, consumer: str, lo: int, hi: int) -> list[Record]:
        """The reserved messages at positions `[lo, hi)` (non-destructive, repeatable)."""
        out: list[Record] = []
        c = quote(consumer, safe="")
        for a in range(lo, hi, READ_CHUNK):
            b = min(hi, a + READ_CHUNK)
            path = self._path(queue, f"/read?consumer={c}&lo={a}&hi={b}")
            out += decode_records(self._request("GET", path))
        return out

    def read_columns(self, queue: str, consumer: str, lo: int, hi: int) -> bytes:
        """Positions `[lo, hi)` as one `application/x-ringmq-columns` body (at most 200 000)."""
        c = quote(consumer, safe="")
        path = self._path(queue, f"/read?consumer={c}&lo={lo}&hi={hi}&format=columns")
        return self._request("GET", path)

    def stream_bounds(self, queue: str, timestamp_ms: int | None = None) -> dict[str, Any]:
        """`info`; on a stream queue it also has `type` "stream", `first_offset` and
        `next_offset` (answered once durable), and with `timestamp_ms` `offset_at`: the first
        offset stored at or after that time."""
        q = "" if timestamp_ms is None else f"?timestamp={int(timestamp_ms)}"
        out: dict[str, Any] = json.loads(self._request("GET", self._path(queue, q)))
        return out

    def read_log_columns(self, queue: str, lo: int, hi: int) -> bytes:
        """A stream queue's offsets `[lo, hi)` as one `application/x-ringmq-columns` body (at
        most 200 000; nothing reserved, repeatable)."""
        return self._request("GET", self._path(queue, f"/log?lo={lo}&hi={hi}"))

    def read_log_stored(self, queue: str, lo: int, hi: int) -> tuple[str, bytes]:
        """A stream queue's records holding offsets `[lo, hi)` as the broker stores them (more
        at either end: trim by offset; `connector.spark.stored`), or, from a broker whose log
        keeps no stored form, the columns of `read_log_columns`: (media type, body)."""
        data, media = self._exchange(
            "GET", self._path(queue, f"/log?lo={lo}&hi={hi}&format=stored")
        )
        return media.split(";", 1)[0].strip(), data

    def browse_columns(self, queue: str, after: int | None = None, limit: int = 1000) -> bytes:
        """`browse` as one `application/x-ringmq-columns` body."""
        q = f"/browse?format=columns&limit={limit}" + ("" if after is None else f"&after={after}")
        return self._request("GET", self._path(queue, q))

    def publish(
        self, exchange: str, body: bytes | Sequence[bytes | memoryview], *, retry_s: float = 60.0
    ) -> dict[str, Any]:
        """Bulk publish an `application/x-ringmq-publish` body (see `encode_publish`), whole or
        as parts sent one after the other (no copy joins them).

        Returns once the broker confirmed every message (persistent ones on durable queues
        synced). While the broker blocks publishers (memory alarm, Artemis BLOCK) it resumes
        after the messages already taken, for up to `retry_s`.

        Raises:
            PublishError: a message was nacked (a queue refused it).
            StreamAPIError: the broker refused the request (unknown exchange, permissions).
        """
        name = quote(exchange or "amq.default", safe="")
        path = f"{self.prefix}/api/streams/{quote(self.vhost, safe='')}/{name}/publish"
        done = 0
        deadline = time.monotonic() + retry_s
        while True:
            try:
                answer: dict[str, Any] = json.loads(
                    self._request("POST", path, raw=body, content_type=PUBLISH_MEDIA_TYPE)
                )
            except StreamAPIError as exc:
                if exc.status != 503 or time.monotonic() > deadline:
                    raise
                got = json.loads(exc.text)
                taken = int(got.get("published", 0))
                if got.get("nacked"):
                    raise PublishError(f"{got['nacked']} messages nacked by the broker") from exc
                done += taken
                whole = body if isinstance(body, bytes) else b"".join(body)
                body = skip_published(whole, taken)
                time.sleep(0.2)
                continue
            if answer.get("nacked"):
                first = done + int(answer.get("first_nacked") or 0)
                raise PublishError(f"{answer['nacked']} messages nacked (first: {first})")
            answer["published"] = done + int(answer["published"])
            return answer

    def settle(self, queue: str, consumer: str, up_to: int) -> dict[str, Any]:
        """Delete every reserved message below position `up_to` (cumulative, idempotent)."""
        body = {"consumer": consumer, "up_to": up_to}
        out: dict[str, Any] = json.loads(self._request("POST", self._path(queue, "/settle"), body))
        return out

    def browse(self, queue: str, after: int | None = None, limit: int = 1000) -> list[Record]:
        """Up to `limit` ready messages with seq > `after`, without consuming them."""
        q = f"/browse?limit={limit}" + ("" if after is None else f"&after={after}")
        return decode_records(self._request("GET", self._path(queue, q)))

    def browse_all(self, queue: str, page: int = 10_000) -> list[Record]:
        """Every ready message, paging by seq."""
        out: list[Record] = []
        after: int | None = None
        while True:
            got = self.browse(queue, after, page)
            out += got
            if len(got) < page:
                return out
            after = got[-1].seq

    def drop(self, queue: str, consumer: str) -> bool:
        """Forget a consumer name, returning its reserved messages to the queue."""
        try:
            self._request("DELETE", self._path(queue, f"/leases/{quote(consumer, safe='')}"))
        except StreamAPIError as exc:
            if exc.status == 404:
                return False
            raise
        return True


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
