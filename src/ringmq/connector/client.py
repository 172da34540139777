"""Plain HTTP client of a running broker's streams API, usable without Spark.

`StreamClient`: the streams HTTP API (reserve, range read, settle, browse, head/tail, stream
offsets, bulk publish), over one keep-alive `http.client` connection. Cheap to create;
connects lazily. `AMQPParams` parses an AMQP URL. The AMQP publisher is `connector.publisher`
(apart, so that what imports this module, e.g. Spark's per-query source runner, does not load
the AMQP codec: 70 ms of a process start).

Nothing here holds state that matters across processes: Spark tasks create clients inside
`read()` and `write()` (docs/spark.md).
"""

from __future__ import annotations

import base64
import http.client
import json
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Final
from urllib.parse import quote, unquote, urlsplit

from ringmq.connector.records import (
    PUBLISH_MEDIA_TYPE,
    Record,
    decode_records,
    skip_published,
)

DEFAULT_HTTP_TIMEOUT_S: Final = 30.0
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
