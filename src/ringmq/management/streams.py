"""HTTP endpoints for offset-based readers: reserve, range read, settle, browse, head/tail.

Theory of operation
-------------------
`StreamService` keeps one `core.reservations.Reservations` book per live queue (created on
first use, dropped when the queue is deleted) and exposes it under `/api/streams/...`
(docs/spark.md is the wire reference). Every handler runs on the broker's event loop, like the
rest of management, so it calls the pure core directly without locks. Anything that can make
messages ready again (a lease expiring, a consumer name dropped) is followed by a broker `tick`
whose effects go out through the runtime, so waiting AMQP consumers get the returned messages.

A loop timer (armed by the first request) expires leases once a second.

Range reads answer `application/x-ringmq-records`: a sequence of records, each
`>QQBqBBII` = position, queue seq, flags (bit 0 redelivered), timestamp_ms, exchange length,
routing-key length, properties length, body length; then exchange, routing key, the raw AMQP
basic properties (flags + list, exactly as published) and the body. The connector decodes them
(`ringmq.connector.records`).
"""

from __future__ import annotations

import asyncio
import json
import logging
import struct
from collections.abc import Awaitable, Callable, Iterable
from typing import Any, Final
from urllib.parse import unquote

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from ringmq.core.message import Message, SeqId
from ringmq.core.reservations import (
    DEFAULT_LEASE_MS,
    MAX_RESERVE_PER_CALL,
    EngineAdapter,
    Lease,
    Reservations,
)
from ringmq.management.errors import HttpError, to_response

log = logging.getLogger(__name__)

RECORDS_MEDIA_TYPE: Final = "application/x-ringmq-records"
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


class StreamService:
    """Reservation books per queue, on top of the core broker (see module docstring).

    Args:
        broker: the core `Broker` (uses `vhosts`, `tick`).
        runtime: the server (uses `run_batch`, `apply_effects`); None in unit tests.
        clock_ms: wall clock in ms (the server's clock).
    """

    def __init__(self, broker: Any, runtime: Any, clock_ms: Callable[[], int]) -> None:
        self.broker = broker
        self.runtime = runtime
        self.clock_ms = clock_ms
        self._books: dict[tuple[str, str], tuple[Any, Reservations[SeqId]]] = {}
        self._timer: asyncio.TimerHandle | None = None

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
        """The queue entity and its reservation book (404 when the queue does not exist)."""
        q = self._entity(vhost, name)
        key = (vhost, name)
        got = self._books.get(key)
        if got is None or got[0] is not q:
            # A new queue under an old name: the old book's messages died with the old queue.
            if q.settings.non_destructive:
                raise StreamError(400, f"queue {name!r} is non-destructive: use browse")
            got = (q, Reservations(EngineAdapter(q.queue)))
            self._books[key] = got
        return got

    def _kick(self, q: Any, now_ms: int) -> None:
        # Messages went back to the queue: let the broker dispatch them to waiting consumers.
        effects = self.broker.queue_changed(q, now_ms)
        if self.runtime is not None and effects:
            self.runtime.apply_effects(effects)

    def expire(self, now_ms: int) -> int:
        """Expire leases of every book; returns how many leases gave messages back."""
        n = 0
        for key, (q, book) in list(self._books.items()):
            if getattr(q, "deleted", False):
                del self._books[key]
                continue
            gone = book.expire(now_ms)
            if gone:
                n += len(gone)
                log.info("lease expired on %s/%s: %s", key[0], key[1], ", ".join(gone))
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
        q, book = self.book(vhost, name)
        now = self.clock_ms()
        r = book.reserve(consumer, start, max_messages, now, lease_ms=lease_ms, max_bytes=max_bytes)
        return {
            "start": r.start,
            "end": r.end,
            "settled": r.settled,
            "next": r.next_pos,
            "skipped": r.skipped,
            "expired": r.expired,
            **_bounds(q),
        }

    def read(self, vhost: str, name: str, consumer: str, lo: int, hi: int) -> bytes:
        _, book = self.book(vhost, name)
        if hi - lo > MAX_READ:
            raise StreamError(400, f"range too large (at most {MAX_READ} positions)")
        parts: list[bytes] = []
        for e in book.read(consumer, lo, hi, self.clock_ms()):
            encode_record(e.pos, e.seq, e.redelivered, e.message, parts)
        return b"".join(parts)

    def settle(self, vhost: str, name: str, body: dict[str, Any]) -> dict[str, Any]:
        consumer = _consumer(body.get("consumer"))
        up_to = _int(body.get("up_to"), "up_to", 0)
        q, book = self.book(vhost, name)
        deleted = book.settle(consumer, up_to, self.clock_ms())
        lease = book.lease(consumer)
        return {"deleted": deleted, "settled": 0 if lease is None else lease.settled, **_bounds(q)}

    def browse(self, vhost: str, name: str, after: int | None, limit: int) -> bytes:
        """Ready messages with seq > after, in seq order, without changing anything.

        Records carry the queue seq as both position and seq (a browse has no lease).
        """
        q = self._entity(vhost, name)
        now = self.clock_ms()
        parts: list[bytes] = []
        cursor: SeqId | None = None if after is None else SeqId(after)
        for _ in range(limit):
            d = q.queue.browse(cursor, now)
            if d is None:
                break
            encode_record(d.seq, d.seq, d.redelivered, d.message, parts)
            cursor = d.seq
        return b"".join(parts)

    def drop(self, vhost: str, name: str, consumer: str) -> bool:
        q, book = self.book(vhost, name)
        now = self.clock_ms()
        found = book.drop(consumer, now)
        if found:
            self._kick(q, now)
        return found

    def info(self, vhost: str, name: str) -> dict[str, Any]:
        q = self._entity(vhost, name)
        got = self._books.get((vhost, name))
        leases: Iterable[Lease[SeqId]] = got[1].leases() if got and got[0] is q else ()
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

    def _in_batch(self, fn: Callable[[], Any]) -> Any:
        run_batch = getattr(self.runtime, "run_batch", None)
        return fn() if run_batch is None else run_batch(fn)


def _bounds(q: Any, *, head: bool = False) -> dict[str, Any]:
    # head_seq costs a scan (browse index, unacked seqs): only the info endpoint pays it.
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
    # The lowest live seq: the first ready message in seq order, or the oldest unacked one.
    d = engine.browse(None, 0)
    unacked = engine.unacked_seqs() if engine.unacked_count else []
    candidates = [int(min(unacked))] if unacked else []
    if d is not None:
        candidates.append(int(d.seq))
    return min(candidates) if candidates else None


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


def routes(
    broker: Any,
    runtime: Any,
    clock_ms: Callable[[], int] | None = None,
    *,
    service: StreamService | None = None,
) -> list[Route]:
    """Starlette routes of the streams API, to mount in the management app.

    Requests are authenticated like the rest of the API when the app exposes
    `app.state.api.authenticate(request)` (HTTP Basic against the broker's users). The clock
    defaults to the runtime's (`runtime.clock.wall_ms`).
    """
    svc = service
    if svc is None:
        if clock_ms is None:
            clock = getattr(runtime, "clock", None)
            if clock is None:
                raise ValueError("clock_ms is required without a runtime clock")
            clock_ms = clock.wall_ms
        svc = StreamService(broker, runtime, clock_ms)

    def endpoint(fn: Callable[[Request, str, str], Awaitable[Response]]) -> Handler:
        async def handle(request: Request) -> Response:
            try:
                api = getattr(request.app.state, "api", None)
                if api is not None:
                    api.authenticate(request)
                svc.ensure_started()
                vhost = unquote(request.path_params["vhost"])
                name = unquote(request.path_params["queue"])
                return await fn(request, vhost, name)
            except StreamError as exc:
                return JSONResponse(
                    {
                        "error": "bad_request" if exc.status == 400 else "not_found",
                        "reason": exc.reason,
                    },
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
        return JSONResponse(svc._in_batch(lambda: svc.reserve(vhost, name, body)))

    async def settle(request: Request, vhost: str, name: str) -> Response:
        body = await body_of(request)
        return JSONResponse(svc._in_batch(lambda: svc.settle(vhost, name, body)))

    async def read(request: Request, vhost: str, name: str) -> Response:
        p = request.query_params
        consumer = _consumer(p.get("consumer"))
        lo = _int(p.get("lo"), "lo", 0)
        hi = _int(p.get("hi"), "hi", lo)
        data = svc.read(vhost, name, consumer, lo, hi)
        return Response(data, media_type=RECORDS_MEDIA_TYPE)

    async def browse(request: Request, vhost: str, name: str) -> Response:
        p = request.query_params
        after = p.get("after")
        limit = _int(p.get("limit", 1000), "limit", 0, MAX_READ)
        data = svc.browse(vhost, name, None if after is None else _int(after, "after", 0), limit)
        return Response(data, media_type=RECORDS_MEDIA_TYPE)

    async def drop(request: Request, vhost: str, name: str) -> Response:
        consumer = _consumer(unquote(request.path_params["consumer"]))
        found = svc._in_batch(lambda: svc.drop(vhost, name, consumer))
        return Response(status_code=204 if found else 404)

    base = "/api/streams/{vhost}/{queue}"
    out = [
        Route(base, endpoint(info), methods=["GET"]),
        Route(base + "/reserve", endpoint(reserve), methods=["POST"]),
        Route(base + "/read", endpoint(read), methods=["GET"]),
        Route(base + "/settle", endpoint(settle), methods=["POST"]),
        Route(base + "/browse", endpoint(browse), methods=["GET"]),
        Route(base + "/leases/{consumer}", endpoint(drop), methods=["DELETE"]),
    ]
    return out


def mount(broker: Any, runtime: Any) -> list[Route]:
    """The streams routes for `create_app`, or none when `broker` is not the core broker.

    (Management tests may serve a `BrokerAdmin` fake without queues' engines or a clock.)
    """
    if not hasattr(broker, "tick") or not hasattr(getattr(runtime, "clock", None), "wall_ms"):
        return []
    return routes(broker, runtime)
