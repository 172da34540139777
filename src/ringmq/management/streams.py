"""HTTP endpoints for offset-based readers: reserve, range read, settle, browse, head/tail.

Theory of operation
-------------------
`StreamService` exposes the broker's reservation books (`core.streambooks.StreamBooks`: one
`core.reservations.Reservations` book per queue, created on first use, dropped with the queue,
stored with a durable queue and recovered at start) under `/api/streams/...` (docs/spark.md is
the wire reference). A reserve or a settle answers only once the group commit's fsync covers
what it wrote (the lease, the settles' ACK records), as a publisher confirm does.

Every handler runs on the broker's event loop, like the
rest of management, so it calls the pure core directly without locks. Anything that can make
messages ready again (a lease expiring, a consumer name dropped) is followed by a broker `tick`
whose effects go out through the runtime, so waiting AMQP consumers get the returned messages.

A loop timer (armed when the routes are mounted on a running loop, else by the first request)
expires leases once a second, recovered ones included.

Range reads answer `application/x-ringmq-records`: a sequence of records, each
`>QQBqBBII` = position, queue seq, flags (bit 0 redelivered), timestamp_ms, exchange length,
routing-key length, properties length, body length; then exchange, routing key, the raw AMQP
basic properties (flags + list, exactly as published) and the body. The connector decodes them
(`ringmq.connector.records`). With `format=columns`, reads and browses answer
`application/x-ringmq-columns` instead: the same fields as little-endian column arrays followed
by the four concatenated variable-length columns (`encode_columns`), which the connector maps
straight into Arrow buffers without a per-message Python loop.

Bulk publish (`POST /api/streams/{vhost}/{exchange}/publish`, body
`application/x-ringmq-publish`, see `decode_publish`) goes through the broker exactly like an
AMQP publish: the service opens an in-process *virtual connection* as the request's user
(`Broker.connection_opened`, so vhost access is checked), a channel in confirm mode, and hands
each slice to `Broker.publish_batch`, which does for every message what a `basic.publish` with
its raw content does (routing, write permission on the exchange, `message_id` de-duplication,
limits, nacks and persistence are the AMQP ones) with one confirm step per slice. Publishes
run in slices of `PUBLISH_SLICE` messages, each one server batch (effects for real connections
are applied; the group commit starts at the batch end), yielding to the loop between slices.
The answer waits until the channel holds no confirm back, i.e. every persistent message routed
to a durable queue is covered by an fsync: confirm semantics. Nacks (a queue refusing the
message) are counted in the answer; a block (memory alarm, Artemis BLOCK) stops the request
with 503 and the count already published, so the client resumes after it.

Who may call each endpoint is the management API's table (`management.authz.RULES`, applied
by `Api.guard` before a handler runs): read on the queue for the queue endpoints (as
`basic.get` would), write on the exchange for publish, 403 otherwise.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import logging
import struct
import sys
from array import array
from collections.abc import Awaitable, Callable, Iterable
from typing import Any, Final
from urllib.parse import unquote

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from ringmq.adapters.amqp091 import Amqp091
from ringmq.amqp.reply_codes import AMQPError, ReplyCode
from ringmq.core.effects import Block, Confirm, Effect
from ringmq.core.errors import BrokerError
from ringmq.core.message import Message, SeqId
from ringmq.core.reservations import (
    DEFAULT_LEASE_MS,
    MAX_RESERVE_PER_CALL,
    Lease,
    Reservations,
)
from ringmq.management.errors import HttpError, to_response

log = logging.getLogger(__name__)

RECORDS_MEDIA_TYPE: Final = "application/x-ringmq-records"
COLUMNS_MEDIA_TYPE: Final = "application/x-ringmq-columns"
PUBLISH_MEDIA_TYPE: Final = "application/x-ringmq-publish"
PUBLISH_SLICE: Final = 2000
"""Messages handed to the broker per server batch by a bulk publish."""
MAX_PUBLISH: Final = 200_000
"""Most messages in one bulk publish request."""
CONFIRM_TIMEOUT_S: Final = 60.0
_LITTLE: Final = sys.byteorder == "little"
RECORD_HEAD: Final = struct.Struct(">QQBqBBII")
EXPIRE_PERIOD_S: Final = 1.0
MAX_READ: Final = 200_000

Handler = Callable[[Request], Awaitable[Response]]


class StreamError(Exception):
    """A request the streams API refuses (mapped to an HTTP status)."""

    def __init__(self, status: int, reason: str) -> None:
        super().__init__(reason)
        self.status = status
        self.reason = reason


def encode_record(
    pos: int, seq: int, redelivered: bool, message: Message, parts: list[bytes]
) -> None:
    """Append one record of the range-read wire format to `parts`."""
    ex = message.exchange.encode()
    rk = message.routing_key.encode()
    parts.append(
        RECORD_HEAD.pack(
            pos,
            seq,
            1 if redelivered else 0,
            message.timestamp_ms,
            len(ex),
            len(rk),
            len(message.properties_bin),
            len(message.body),
        )
    )
    parts += (ex, rk, message.properties_bin, message.body)


def _le(a: array[int]) -> bytes:
    if not _LITTLE:
        a.byteswap()
    return a.tobytes()


def encode_columns(rows: Iterable[tuple[int, int, bool, Message]]) -> bytes:
    """The `application/x-ringmq-columns` encoding of (position, seq, redelivered, message).

    Layout, little-endian: `u32 n`; `u64[n]` positions; `u64[n]` seqs; `u8[n]` flags (bit 0
    redelivered); `i64[n]` timestamp_ms; `u32[n]` lengths of exchange, routing key, properties
    and body (four arrays); then all exchanges, all routing keys, all properties (raw, as
    published) and all bodies, each concatenated in row order.
    """
    pos: array[int] = array("Q")
    seqs: array[int] = array("Q")
    flags = bytearray()
    ts: array[int] = array("q")
    exs: list[bytes] = []
    rks: list[bytes] = []
    props: list[bytes] = []
    bodies: list[bytes] = []
    enc: dict[str, bytes] = {}
    for p, sq, red, m in rows:
        pos.append(p)
        seqs.append(sq)
        flags.append(1 if red else 0)
        ts.append(m.timestamp_ms)
        ex = enc.get(m.exchange)
        if ex is None:
            ex = enc[m.exchange] = m.exchange.encode()
        rk = enc.get(m.routing_key)
        if rk is None:
            rk = m.routing_key.encode()
            if len(enc) < 4096:
                enc[m.routing_key] = rk
        exs.append(ex)
        rks.append(rk)
        props.append(m.properties_bin)
        bodies.append(m.body)
    lens = [array("I", map(len, col)) for col in (exs, rks, props, bodies)]
    parts = [struct.pack("<I", len(pos)), _le(pos), _le(seqs), bytes(flags), _le(ts)]
    parts += (_le(a) for a in lens)
    # One join over every piece: the bodies are copied once, not joined and then joined again.
    parts += exs
    parts += rks
    parts += props
    parts += bodies
    return b"".join(parts)


def decode_publish(data: bytes) -> list[tuple[str, bytes, bytes]]:
    """(routing key, properties, body) of an `application/x-ringmq-publish` body.

    Layout, little-endian: `u32 n`; `u32[n]` lengths of routing keys, properties and bodies
    (three arrays); then all routing keys, all properties (AMQP basic properties: flags and
    list, as in a content header) and all bodies, each concatenated in row order.

    Raises:
        StreamError: 400 when the body is malformed.
    """
    if len(data) < 4:
        raise StreamError(400, "publish body too short")
    (n,) = struct.unpack_from("<I", data, 0)
    if n > MAX_PUBLISH:
        raise StreamError(400, f"at most {MAX_PUBLISH} messages per publish request")
    off = 4
    cols: list[array[int]] = []
    for _ in range(3):
        a: array[int] = array("I")
        if off + 4 * n > len(data):
            raise StreamError(400, "publish body truncated")
        a.frombytes(data[off : off + 4 * n])
        if not _LITTLE:
            a.byteswap()
        cols.append(a)
        off += 4 * n
    rk_lens, p_lens, b_lens = cols
    total = sum(rk_lens) + sum(p_lens) + sum(b_lens)
    if off + total != len(data):
        raise StreamError(400, "publish body length does not match its columns")
    view = memoryview(data)
    rk_at = off
    p_at = rk_at + sum(rk_lens)
    b_at = p_at + sum(p_lens)
    out: list[tuple[str, bytes, bytes]] = []
    try:
        for rl, pl, bl in zip(rk_lens, p_lens, b_lens, strict=True):
            rk = str(view[rk_at : rk_at + rl], "utf-8")
            out.append((rk, bytes(view[p_at : p_at + pl]), bytes(view[b_at : b_at + bl])))
            rk_at += rl
            p_at += pl
            b_at += bl
    except UnicodeDecodeError:
        raise StreamError(400, "routing key is not UTF-8") from None
    return out


class PublishResult:
    """What a bulk publish did so far (indices are request positions)."""

    __slots__ = ("blocked", "nacked", "published")

    def __init__(self) -> None:
        self.published = 0
        self.nacked: list[int] = []
        self.blocked: str | None = None

    def as_json(self) -> dict[str, Any]:
        return {
            "published": self.published,
            "nacked": len(self.nacked),
            "first_nacked": min(self.nacked) if self.nacked else None,
        }


class StreamService:
    """Reservation books per queue, on top of the core broker (see module docstring).

    Args:
        broker: the core `Broker` (uses `vhosts`, `tick`).
        runtime: the server (uses `run_batch`, `apply_effects`); None in unit tests.
        clock_ms: wall clock in ms (the server's clock).
    """

    def __init__(self, broker: Any, runtime: Any, clock_ms: Callable[[], int]) -> None:
        self.broker = broker
        self.amqp091 = Amqp091(broker)
        self.runtime = runtime
        self.clock_ms = clock_ms
        self._timer: asyncio.TimerHandle | None = None
        # Virtual connections of bulk publishes: negative ids never collide with the server's.
        self._virtual_ids = itertools.count(-1, -1)

    # -- books --------------------------------------------------------------------------------
    def _entity(self, vhost: str, name: str) -> Any:
        vh = self.broker.vhosts.get(vhost)
        if vh is None:
            raise StreamError(404, f"no vhost {vhost!r}")
        q = vh.queues.get(name)
        if q is None:
            raise StreamError(404, f"no queue {name!r} in vhost {vhost!r}")
        return q

    def book(self, vhost: str, name: str) -> tuple[Any, Reservations[SeqId]]:
        """The queue entity and its reservation book (404 when the queue does not exist).

        The books are the broker's (`core.streambooks.StreamBooks`: durable with the queue).
        """
        q = self._entity(vhost, name)
        if q.settings.non_destructive:
            raise StreamError(400, f"queue {name!r} is non-destructive: use browse")
        return q, self.broker.streams.book(q)

    def _kick(self, q: Any, now_ms: int) -> None:
        # Messages went back to the queue: let the broker dispatch them to waiting consumers.
        effects = self.broker.queue_changed(q, now_ms)
        if self.runtime is not None and effects:
            self.runtime.apply_effects(effects)

    def expire(self, now_ms: int) -> int:
        """Expire leases of every book; returns how many leases gave messages back."""
        n = 0
        for q, gone in self.broker.streams.expire(now_ms):
            n += len(gone)
            log.info("lease expired on %s/%s: %s", q.vhost, q.name, ", ".join(gone))
            self._kick(q, now_ms)
        return n

    # -- operations (sync; each is one call on the loop) --------------------------------------
    def reserve(self, vhost: str, name: str, body: dict[str, Any]) -> dict[str, Any]:
        consumer = _consumer(body.get("consumer"))
        start = _int(body.get("start", 0), "start", 0)
        max_messages = _int(body.get("max", 1000), "max", 0, MAX_RESERVE_PER_CALL)
        lease_ms = _int(body.get("lease_ms", DEFAULT_LEASE_MS), "lease_ms", 1)
        max_bytes = body.get("max_bytes")
        if max_bytes is not None:
            max_bytes = _int(max_bytes, "max_bytes", 1)
        q, _ = self.book(vhost, name)
        now = self.clock_ms()
        r = self.broker.streams.reserve(
            q, consumer, start, max_messages, now, lease_ms=lease_ms, max_bytes=max_bytes
        )
        return {
            "start": r.start,
            "end": r.end,
            "settled": r.settled,
            "next": r.next_pos,
            "skipped": r.skipped,
            "expired": r.expired,
            **_bounds(q),
        }

    def read(
        self, vhost: str, name: str, consumer: str, lo: int, hi: int, *, columns: bool = False
    ) -> bytes:
        _, book = self.book(vhost, name)
        if hi - lo > MAX_READ:
            raise StreamError(400, f"range too large (at most {MAX_READ} positions)")
        held = book.read(consumer, lo, hi, self.clock_ms())
        if columns:
            return encode_columns((e.pos, e.seq, e.redelivered, e.message) for e in held)
        parts: list[bytes] = []
        for e in held:
            encode_record(e.pos, e.seq, e.redelivered, e.message, parts)
        return b"".join(parts)

    def settle(self, vhost: str, name: str, body: dict[str, Any]) -> dict[str, Any]:
        consumer = _consumer(body.get("consumer"))
        up_to = _int(body.get("up_to"), "up_to", 0)
        q, book = self.book(vhost, name)
        deleted = self.broker.streams.settle(q, consumer, up_to, self.clock_ms())
        lease = book.lease(consumer)
        return {"deleted": deleted, "settled": 0 if lease is None else lease.settled, **_bounds(q)}

    def browse(
        self, vhost: str, name: str, after: int | None, limit: int, *, columns: bool = False
    ) -> bytes:
        """Ready messages with seq > after, in seq order, without changing anything.

        Records carry the queue seq as both position and seq (a browse has no lease). A paged
        queue is read in place and stays paged (`Queue.browse_ready`).
        """
        q = self._entity(vhost, name)
        now = self.clock_ms()
        cursor: SeqId | None = None if after is None else SeqId(after)
        found: list[tuple[int, int, bool, Message]] = [
            (d.seq, d.seq, d.redelivered, d.message)
            for d in q.queue.browse_ready(cursor, limit, now)
        ]
        if columns:
            return encode_columns(found)
        parts: list[bytes] = []
        for pos, seq, red, msg in found:
            encode_record(pos, seq, red, msg, parts)
        return b"".join(parts)

    def drop(self, vhost: str, name: str, consumer: str) -> bool:
        q, _ = self.book(vhost, name)
        now = self.clock_ms()
        found: bool = self.broker.streams.drop(q, consumer, now)
        if found:
            self._kick(q, now)
        return found

    def info(self, vhost: str, name: str) -> dict[str, Any]:
        q = self._entity(vhost, name)
        book = self.broker.streams.existing(q)
        leases: Iterable[Lease[SeqId]] = book.leases() if book is not None else ()
        return {
            "vhost": vhost,
            "name": name,
            **_bounds(q, head=True),
            "leases": [
                {
                    "consumer": le.consumer,
                    "settled": le.settled,
                    "next": le.next_pos,
                    "held": le.held,
                    "skipped": le.skipped,
                    "expired": le.expired,
                    "lease_ms": le.lease_ms,
                    "deadline_ms": le.deadline_ms,
                    "lag": le.held + q.queue.ready_count,
                }
                for le in leases
            ],
        }

    # -- bulk publish -------------------------------------------------------------------------
    def open_publisher(self, user: str, vhost: str) -> int:
        """Open a virtual connection of `user` on `vhost` with channel 1 in confirm mode."""
        if vhost not in self.broker.vhosts:
            raise StreamError(404, f"no vhost {vhost!r}")
        conn_id = next(self._virtual_ids)
        now = self.clock_ms()
        try:
            self.broker.connection_opened(
                conn_id, user, vhost, "http", {"product": "ringmq streams publish"}, now
            )
        except BrokerError as exc:
            raise StreamError(403, exc.explanation) from None
        self.broker.channel_opened(conn_id, 1, now)
        session = self.broker.session(conn_id, 1)
        assert session is not None
        self.broker.confirms.select(session)
        return conn_id

    def close_publisher(self, conn_id: int) -> None:
        """Forget a virtual connection (effects for other connections are applied)."""
        self._apply(conn_id, self.broker.connection_closed(conn_id, self.clock_ms()))

    def publish_slice(
        self,
        conn_id: int,
        exchange: str,
        messages: list[tuple[str, bytes, bytes]],
        start: int,
        stop: int,
        result: PublishResult,
    ) -> None:
        """Publish `messages[start:stop]` on the virtual connection (one server batch).

        Raises:
            StreamError: the broker refused a publish with a channel or connection error
                (unknown exchange 404, permission 403, others 400); `result.published`
                counts what went through before it.
        """
        alarms: dict[str, str] = self.broker.alarms  # a property: a copy of the alarms
        if alarms:
            # A resource alarm blocks publishers: take nothing until it clears (AMQP would
            # let one publish through and then block the connection).
            result.blocked = "; ".join(sorted(alarms.values()))
            return
        try:
            done = self.amqp091.publish_batch(
                conn_id, 1, exchange, messages, start, stop, self.clock_ms()
            )
        except (ValueError, IndexError, struct.error):
            raise StreamError(400, f"messages {start}-{stop - 1}: malformed properties") from None
        result.published += done.published
        effects = done.effects
        if effects:
            e = effects[0]
            if not (
                len(effects) == 1 and e.conn_id == conn_id and type(e) is Confirm and e.ok
            ):  # one ack for the whole slice is the common answer
                self._apply(conn_id, effects, result)
        if done.blocked and result.blocked is None:
            result.blocked = "blocked"
        exc = done.error
        if isinstance(exc, AMQPError):
            code = {ReplyCode.NOT_FOUND: 404, ReplyCode.ACCESS_REFUSED: 403}.get(exc.code, 400)
            raise StreamError(code, exc.explanation)

    def confirms_held(self, conn_id: int) -> int:
        """Publishes of the virtual connection still waiting for their fsync."""
        conn = self.broker.conns.get(conn_id)
        session = None if conn is None else conn.sessions.get(1)
        return 0 if session is None else len(session.confirm_held)

    def _apply(
        self, conn_id: int, effects: list[Effect], result: PublishResult | None = None
    ) -> None:
        mine = [e for e in effects if e.conn_id == conn_id]
        if result is not None:
            for e in mine:
                if isinstance(e, Confirm) and not e.ok:
                    result.nacked.append(e.seq - 1)
                elif isinstance(e, Block):
                    result.blocked = e.reason
        others = [e for e in effects if e.conn_id != conn_id] if mine else effects
        if self.runtime is not None and others:
            self.runtime.apply_effects(others)

    # -- background ---------------------------------------------------------------------------
    def ensure_started(self) -> None:
        """Arm the lease-expiry timer on the running loop (idempotent).

        A plain loop timer, not a task, so nothing is left pending when the loop closes.
        """
        if self._timer is None:
            loop = asyncio.get_running_loop()
            self._timer = loop.call_later(EXPIRE_PERIOD_S, self._on_timer)

    def _on_timer(self) -> None:
        self._timer = None
        try:
            self._in_batch(lambda: self.expire(self.clock_ms()))
        except Exception:
            log.exception("lease expiry failed")
        self.ensure_started()

    def stop(self) -> None:
        """Cancel the expiry timer."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    async def durable(self) -> None:
        """Wait for the fsync covering every store write so far (the runtime's group commit).

        Raises:
            StreamError: 500 when the store could not write or sync them.
        """
        until = getattr(self.runtime, "until_durable", None)
        if until is None:
            return
        try:
            await asyncio.wait_for(until(), CONFIRM_TIMEOUT_S)
        except (OSError, TimeoutError) as exc:
            raise StreamError(500, f"the store could not make this durable: {exc}") from None

    def _in_batch(self, fn: Callable[[], Any]) -> Any:
        run_batch = getattr(self.runtime, "run_batch", None)
        return fn() if run_batch is None else run_batch(fn)


def _bounds(q: Any, *, head: bool = False) -> dict[str, Any]:
    # head_seq scans what is in memory (lanes, unacked): only the info endpoint pays it.
    engine = q.queue
    c = engine.counters
    return {
        **({"head_seq": _head_seq(engine)} if head else {}),
        "tail_seq": int(engine.last_seq),  # seqs have gaps: `added` is a count, not a seq
        "ready": engine.ready_count,
        "unacked": engine.unacked_count,
        "messages": engine.message_count,
        "evicted": {
            "ring_evicted": c.ring_evicted,
            "lvq_replaced": c.lvq_replaced,
            "expired": c.expired,
            "maxlen_dropped": c.maxlen_dropped,
            "overflow_dropped": c.overflow_dropped,
            "purged": c.purged,
        },
    }


def _head_seq(engine: Any) -> int | None:
    # The lowest live seq: the first ready message in seq order, or the oldest unacked one
    # (without building the browse index, which would page the whole queue in for good).
    seq = engine.head_seq()
    return None if seq is None else int(seq)


_ERRORS: Final = {
    400: "bad_request",
    403: "access_refused",
    404: "not_found",
    500: "not_durable",
    503: "unavailable",
}


def _columns(value: str | None) -> bool:
    if value in (None, "records"):
        return False
    if value == "columns":
        return True
    raise StreamError(400, "format must be records or columns")


def _consumer(value: Any) -> str:
    if not isinstance(value, str) or not value or len(value) > 255:
        raise StreamError(400, "consumer must be a non-empty string of at most 255 characters")
    return value


def _int(value: Any, what: str, minimum: int, maximum: int | None = None) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        try:
            value = int(value)
        except (TypeError, ValueError):
            raise StreamError(400, f"{what} must be an integer") from None
    if value < minimum or (maximum is not None and value > maximum):
        raise StreamError(400, f"{what} out of range")
    return int(value)


Guard = Callable[[Request, str], Awaitable[Any]]
"""`Api.guard`: authenticates a request and applies the route's authorisation rule."""


def routes(
    broker: Any,
    runtime: Any,
    guard: Guard,
    clock_ms: Callable[[], int] | None = None,
    *,
    service: StreamService | None = None,
) -> list[Route]:
    """Starlette routes of the streams API, to mount in the management app.

    `guard(request, path)` authenticates each request and applies the path's rule of
    `management.authz` (the caller is then `request.state.principal`). The clock defaults to
    the runtime's (`runtime.clock.wall_ms`).
    """
    svc = service
    if svc is None:
        if clock_ms is None:
            clock = getattr(runtime, "clock", None)
            if clock is None:
                raise ValueError("clock_ms is required without a runtime clock")
            clock_ms = clock.wall_ms
        svc = StreamService(broker, runtime, clock_ms)
        with contextlib.suppress(RuntimeError):  # no running loop (bare routes in tests)
            svc.ensure_started()  # recovered leases expire even if no reader comes back

    def endpoint(path: str, fn: Callable[[Request, str, str], Awaitable[Response]]) -> Handler:
        async def handle(request: Request) -> Response:
            try:
                await guard(request, path)
                svc.ensure_started()
                vhost = unquote(request.path_params["vhost"])
                name = unquote(request.path_params["queue"])
                if vhost not in broker.vhosts:
                    raise StreamError(404, f"no vhost {vhost!r}")
                return await fn(request, vhost, name)
            except StreamError as exc:
                return JSONResponse(
                    {"error": _ERRORS.get(exc.status, "bad_request"), "reason": exc.reason},
                    status_code=exc.status,
                )
            except Exception as exc:
                if not isinstance(exc, HttpError | ValueError):
                    log.exception("streams request %s %s failed", request.method, request.url)
                return to_response(exc)

        return handle

    async def body_of(request: Request) -> dict[str, Any]:
        try:
            data = json.loads(await request.body() or b"{}")
        except ValueError:
            raise StreamError(400, "body is not JSON") from None
        if not isinstance(data, dict):
            raise StreamError(400, "body must be a JSON object")
        return data

    async def info(request: Request, vhost: str, name: str) -> Response:
        return JSONResponse(svc.info(vhost, name))

    async def reserve(request: Request, vhost: str, name: str) -> Response:
        body = await body_of(request)
        answer = svc._in_batch(lambda: svc.reserve(vhost, name, body))
        await svc.durable()  # the lease (positions -> messages) is on disk before it is told
        return JSONResponse(answer)

    async def settle(request: Request, vhost: str, name: str) -> Response:
        body = await body_of(request)
        answer = svc._in_batch(lambda: svc.settle(vhost, name, body))
        await svc.durable()  # the ACKs are on disk before the reader hears "settled"
        return JSONResponse(answer)

    async def read(request: Request, vhost: str, name: str) -> Response:
        p = request.query_params
        consumer = _consumer(p.get("consumer"))
        lo = _int(p.get("lo"), "lo", 0)
        hi = _int(p.get("hi"), "hi", lo)
        cols = _columns(p.get("format"))
        data = svc.read(vhost, name, consumer, lo, hi, columns=cols)
        return Response(data, media_type=COLUMNS_MEDIA_TYPE if cols else RECORDS_MEDIA_TYPE)

    async def browse(request: Request, vhost: str, name: str) -> Response:
        p = request.query_params
        after = p.get("after")
        limit = _int(p.get("limit", 1000), "limit", 0, MAX_READ)
        cols = _columns(p.get("format"))
        start = None if after is None else _int(after, "after", 0)
        data = svc.browse(vhost, name, start, limit, columns=cols)
        return Response(data, media_type=COLUMNS_MEDIA_TYPE if cols else RECORDS_MEDIA_TYPE)

    async def publish(request: Request, vhost: str, exchange: str) -> Response:
        # The path names the exchange; "amq.default" is the default exchange (RabbitMQ's API).
        if exchange == "amq.default":
            exchange = ""
        user: str = request.state.principal.name
        messages = decode_publish(await request.body())
        result = PublishResult()
        conn_id = svc._in_batch(lambda: svc.open_publisher(user, vhost))
        try:
            for a in range(0, len(messages), PUBLISH_SLICE):
                b = min(len(messages), a + PUBLISH_SLICE)

                def one_slice(a: int = a, b: int = b) -> None:
                    svc.publish_slice(conn_id, exchange, messages, a, b, result)

                svc._in_batch(one_slice)
                if result.blocked is not None:
                    break
                await asyncio.sleep(0)  # let other connections and the fsync completion run
            # Confirm semantics: persistent messages on durable queues are fsynced first. A
            # failed write or fsync nacks the held confirms (to this virtual connection, so we
            # do not see them) and raises the disk_write alarm: fail the request then, as a
            # nack fails an AMQP publisher (conservative: the failed group may be another's).
            loop = asyncio.get_running_loop()
            deadline = loop.time() + CONFIRM_TIMEOUT_S
            held = svc.confirms_held(conn_id) > 0
            store_failed = False
            while svc.confirms_held(conn_id):
                store_failed = store_failed or "disk_write" in svc.broker.alarms
                if loop.time() > deadline:
                    raise StreamError(500, "timed out waiting for the store to sync")
                await asyncio.sleep(0.001)
            if held:
                for _ in range(3):
                    await asyncio.sleep(0)  # the alarm follows the nacks by a loop turn
                store_failed = store_failed or "disk_write" in svc.broker.alarms
            if store_failed:
                raise StreamError(500, "the store could not make the messages durable")
        except StreamError as exc:
            if exc.status == 503:
                raise
            return JSONResponse(
                {
                    "error": _ERRORS.get(exc.status, "bad_request"),
                    "reason": exc.reason,
                    **result.as_json(),
                },
                status_code=exc.status,
            )
        finally:
            svc._in_batch(lambda: svc.close_publisher(conn_id))
        if result.blocked is not None:
            return JSONResponse(
                {"error": "blocked", "reason": result.blocked, **result.as_json()}, status_code=503
            )
        return JSONResponse(result.as_json())

    async def drop(request: Request, vhost: str, name: str) -> Response:
        consumer = _consumer(unquote(request.path_params["consumer"]))
        found = svc._in_batch(lambda: svc.drop(vhost, name, consumer))
        return Response(status_code=204 if found else 404)

    base = "/api/streams/{vhost}/{queue}"

    def route(
        suffix: str, fn: Callable[[Request, str, str], Awaitable[Response]], method: str
    ) -> Route:
        return Route(base + suffix, endpoint(base + suffix, fn), methods=[method])

    return [
        route("", info, "GET"),
        route("/reserve", reserve, "POST"),
        route("/read", read, "GET"),
        route("/settle", settle, "POST"),
        route("/browse", browse, "GET"),
        route("/leases/{consumer}", drop, "DELETE"),
        # {queue} names the exchange here: the path parameter is shared with the queue routes.
        route("/publish", publish, "POST"),
    ]


def mount(broker: Any, runtime: Any, guard: Guard) -> list[Route]:
    """The streams routes for `create_app`, or none when `broker` is not the core broker.

    (Management tests may serve a `BrokerAdmin` fake without queues' engines or a clock.)
    """
    if not hasattr(broker, "tick") or not hasattr(getattr(runtime, "clock", None), "wall_ms"):
        return []
    return routes(broker, runtime, guard)
