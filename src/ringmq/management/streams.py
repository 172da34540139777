"""HTTP endpoints for offset-based readers: reserve, range read, settle, browse, head/tail, and
bulk publish (`/api/streams/...`; docs/spark.md is the wire reference).

The endpoints are thin: each authenticates and authorises the request, parses its parameters
and calls one of three modules that own the work:

* `streamreads.StreamReads`: the reservation books (reserve, read, settle, drop a lease,
  browse, info) and the lease-expiry timer;
* `streampublish.BulkPublish`: bulk publishes on in-process virtual AMQP connections, answered
  with confirm semantics;
* `streamwire`: the record, column and publish encodings and the parameter checks.

All three reach the broker only through the management facade (`admin.CoreAdmin`).

Who may call each endpoint is the management API's table (`management.authz.RULES`, applied
by `Api.guard` before a handler runs): read on the queue for the queue endpoints (as
`basic.get` would), write on the exchange for publish, 403 otherwise.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Awaitable, Callable
from typing import Any
from urllib.parse import unquote

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from ringmq.management.admin import CoreAdmin
from ringmq.management.bodies import json_object
from ringmq.management.errors import answer
from ringmq.management.port import Runtime
from ringmq.management.streampublish import BulkPublish
from ringmq.management.streamreads import StreamReads
from ringmq.management.streamwire import (
    COLUMNS_MEDIA_TYPE,
    ERROR_NAMES,
    MAX_READ,
    RECORDS_MEDIA_TYPE,
    StreamError,
    decode_publish,
    parse_consumer,
    parse_format,
    parse_int,
)

log = logging.getLogger(__name__)

Handler = Callable[[Request], Awaitable[Response]]
Guard = Callable[[Request, str], Awaitable[Any]]
"""`Api.guard`: authenticates a request and applies the route's authorisation rule."""


def _error(exc: StreamError) -> JSONResponse:
    return JSONResponse(
        {"error": ERROR_NAMES.get(exc.status, "bad_request"), "reason": exc.reason},
        status_code=exc.status,
    )


def routes(
    admin: CoreAdmin,
    runtime: Runtime,
    guard: Guard,
    clock_ms: Callable[[], int] | None = None,
    *,
    service: StreamReads | None = None,
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
        svc = StreamReads(admin, runtime, clock_ms)
        with contextlib.suppress(RuntimeError):  # no running loop (bare routes in tests)
            svc.ensure_started()  # recovered leases expire even if no reader comes back
    publisher = BulkPublish(svc)

    def endpoint(path: str, fn: Callable[[Request, str, str], Awaitable[Response]]) -> Handler:
        async def handle(request: Request) -> Response:
            try:
                await guard(request, path)
                svc.ensure_started()
                vhost = unquote(request.path_params["vhost"])
                name = unquote(request.path_params["queue"])
                if not admin.has_vhost(vhost):
                    raise StreamError(404, f"no vhost {vhost!r}")
                return await fn(request, vhost, name)
            except StreamError as exc:
                return _error(exc)
            except Exception as exc:  # noqa: BLE001 - the boundary; `answer` logs a defect
                return answer(exc, request, log)

        return handle

    async def body_of(request: Request) -> dict[str, Any]:
        return json_object(await request.body())  # 400 bad_request unless a JSON object

    async def info(request: Request, vhost: str, name: str) -> Response:
        ts = request.query_params.get("timestamp")
        stamp = None if ts is None else parse_int(ts, "timestamp", 0)
        answer = svc.info(vhost, name, stamp)
        if "next_offset" in answer:
            # A stream's end is told only once durable: an offset a reader has seen is never
            # reused by a broker that lost it in a crash (Kafka's high watermark).
            await svc.durable()
        return JSONResponse(answer)

    async def log_read(request: Request, vhost: str, name: str) -> Response:
        # A stream queue's offsets [lo, hi): nothing reserved, nothing to settle. `format`:
        # `columns` (the default) or `stored` (the records as stored, when the log has them).
        p = request.query_params
        lo = parse_int(p.get("lo"), "lo", 0)
        hi = parse_int(p.get("hi"), "hi", lo)
        form = p.get("format", "columns")
        if form not in ("columns", "stored"):
            raise StreamError(400, "format must be columns or stored")
        media, data = svc.read_log(vhost, name, lo, hi, stored=form == "stored")
        return Response(data, media_type=media)

    async def reserve(request: Request, vhost: str, name: str) -> Response:
        body = await body_of(request)
        answer = svc.in_batch(lambda: svc.reserve(vhost, name, body))
        await svc.durable()  # the lease (positions -> messages) is on disk before it is told
        return JSONResponse(answer)

    async def settle(request: Request, vhost: str, name: str) -> Response:
        body = await body_of(request)
        answer = svc.in_batch(lambda: svc.settle(vhost, name, body))
        await svc.durable()  # the ACKs are on disk before the reader hears "settled"
        return JSONResponse(answer)

    async def read(request: Request, vhost: str, name: str) -> Response:
        p = request.query_params
        consumer = parse_consumer(p.get("consumer"))
        lo = parse_int(p.get("lo"), "lo", 0)
        hi = parse_int(p.get("hi"), "hi", lo)
        cols = parse_format(p.get("format"))
        data = svc.read(vhost, name, consumer, lo, hi, columns=cols)
        return Response(data, media_type=COLUMNS_MEDIA_TYPE if cols else RECORDS_MEDIA_TYPE)

    async def browse(request: Request, vhost: str, name: str) -> Response:
        p = request.query_params
        after = p.get("after")
        limit = parse_int(p.get("limit", 1000), "limit", 0, MAX_READ)
        cols = parse_format(p.get("format"))
        start = None if after is None else parse_int(after, "after", 0)
        data = svc.browse(vhost, name, start, limit, columns=cols)
        return Response(data, media_type=COLUMNS_MEDIA_TYPE if cols else RECORDS_MEDIA_TYPE)

    async def publish(request: Request, vhost: str, exchange: str) -> Response:
        # The path names the exchange; "amq.default" is the default exchange (RabbitMQ's API).
        if exchange == "amq.default":
            exchange = ""
        user: str = request.state.principal.name
        messages = decode_publish(await request.body())
        status, answer = await publisher.run(user, vhost, exchange, messages)
        return JSONResponse(answer, status_code=status)

    async def drop(request: Request, vhost: str, name: str) -> Response:
        consumer = parse_consumer(unquote(request.path_params["consumer"]))
        found = svc.in_batch(lambda: svc.drop(vhost, name, consumer))
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
        route("/log", log_read, "GET"),
        route("/settle", settle, "POST"),
        route("/browse", browse, "GET"),
        route("/leases/{consumer}", drop, "DELETE"),
        # {queue} names the exchange here: the path parameter is shared with the queue routes.
        route("/publish", publish, "POST"),
    ]


def mount(admin: CoreAdmin, runtime: Runtime, guard: Guard) -> list[Route]:
    """The streams routes for `create_app`, or none when the runtime has no clock (the
    management tests' `FakeRuntime`: their clock is the app's)."""
    if not hasattr(getattr(runtime, "clock", None), "wall_ms"):
        return []
    return routes(admin, runtime, guard)
