"""`/api/queues`: declare, delete, list, purge and read queues, change a queue's settings live,
and manage its scheduled messages (RabbitMQ's routes and shapes, plus ringmq's `settings` and
`scheduled`).

Stateless: each handler validates the request, then calls the facade (`admin.CoreAdmin`).
`/get` alone spans several loop turns: it fetches and encodes in slices of `GET_SLICE`,
yielding between them, and holds what it fetched until it settles it all at the end.
"""

from __future__ import annotations

import asyncio
from typing import Any, Final, cast

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from ringmq.management import paging, shapes
from ringmq.management.api import Resource
from ringmq.management.errors import BadRequestError
from ringmq.management.params import (
    as_bool,
    as_dict,
    as_int,
    as_str,
    caller,
    dumps,
    history_window,
    json_body,
    json_response,
    no_content,
    param,
)
from ringmq.management.records import AckMode

ACK_MODES: Final = ("ack_requeue_true", "reject_requeue_true", "ack_requeue_false")
MAX_GET_COUNT: Final = 10_000
"""Most messages one `POST /api/queues/{vhost}/{name}/get` may ask for (400 beyond)."""
GET_SLICE: Final = 200
"""Messages a get fetches and encodes between two yields to the event loop."""


class Queues(Resource):
    """Queues and their contents."""

    def routes(self) -> list[Route]:
        r = self.api.route
        return [
            r("/api/queues", self.queues, ["GET"]),
            r("/api/queues/{vhost}", self.queues, ["GET"]),
            r("/api/queues/{vhost}/{name}", self.queue, ["GET", "PUT", "DELETE"]),
            r("/api/queues/{vhost}/{name}/bindings", self.queue_bindings, ["GET"]),
            r("/api/queues/{vhost}/{name}/contents", self.purge, ["DELETE"]),
            r("/api/queues/{vhost}/{name}/get", self.get, ["POST"]),
            r("/api/queues/{vhost}/{name}/settings", self.settings, ["PUT"]),
            r("/api/queues/{vhost}/{name}/scheduled", self.scheduled, ["GET", "DELETE"]),
            r("/api/queues/{vhost}/{name}/scheduled/deliver", self.deliver_scheduled, ["POST"]),
            r("/api/queues/{vhost}/{name}/groups", self.groups, ["GET", "DELETE"]),
            r("/api/queues/{vhost}/{name}/groups/{group}", self.groups, ["DELETE"]),
        ]

    # -- queues --------------------------------------------------------------------------

    def _queue_path(self, request: Request) -> tuple[str, str]:
        vhost = self.api.vhost_of(request)
        assert vhost is not None
        return vhost, param(request, "name")

    async def queues(self, request: Request) -> Response:
        vhost = self.api.vhost_of(request)
        who = caller(request)
        return self.api.listing(
            request,
            [self.api.queue_json(q) for q in self.admin.queues(vhost) if who.sees_vhost(q.vhost)],
        )

    async def queue(self, request: Request) -> Response:
        vhost, name = self._queue_path(request)
        now = self.clock_ms()
        if request.method == "GET":
            found = self.api.find_queue(vhost, name)
            out = self.api.queue_json(found)
            self._add_history(request, out, shapes.queue_key(vhost, name), now)
            return json_response(out)
        if request.method == "DELETE":
            self.api.find_queue(vhost, name)
            q = request.query_params
            self.admin.delete_queue(
                vhost,
                name,
                if_unused=as_bool(q.get("if-unused"), "if-unused", False),
                if_empty=as_bool(q.get("if-empty"), "if-empty", False),
                now_ms=now,
            )
            return no_content()
        body = await json_body(request)
        if not name or len(name.encode()) > 255:
            raise BadRequestError("queue name must be 1..255 bytes")
        if name.startswith("amq."):
            raise BadRequestError(f"ACCESS_REFUSED - queue name {name!r} uses reserved 'amq.'")
        created = self.admin.declare_queue(
            vhost,
            name,
            durable=as_bool(body.get("durable"), "durable", True),
            auto_delete=as_bool(body.get("auto_delete"), "auto_delete", False),
            arguments=as_dict(body.get("arguments"), "arguments"),
            now_ms=now,
        )
        return no_content(201 if created else 204)

    def _add_history(self, request: Request, out: dict[str, Any], key: str, now: int) -> None:
        """RabbitMQ's `lengths_age`/`lengths_incr` and `msg_rates_age`/`msg_rates_incr` (seconds):
        samples of the lengths and of the message_stats counters from the sampler's history."""
        for prefix, names, details in (
            ("lengths", shapes.DEPTH_NAMES, out),
            ("msg_rates", (*shapes.STAT_NAMES, "deliver_get"), out["message_stats"]),
        ):
            window = history_window(request, prefix)
            if window is not None:
                points = self.api.sampler.series(key, *window, now)
                shapes.add_samples(details, names, points)

    async def queue_bindings(self, request: Request) -> Response:
        vhost, name = self._queue_path(request)
        self.api.find_queue(vhost, name)
        items = [
            shapes.binding(b)
            for b in self.admin.bindings(vhost)
            if b.destination_type == "queue" and b.destination == name
        ]
        return self.api.listing(request, items)

    async def purge(self, request: Request) -> Response:
        vhost, name = self._queue_path(request)
        self.api.find_queue(vhost, name)
        self.admin.purge_queue(vhost, name, now_ms=self.clock_ms())
        return no_content()

    async def get(self, request: Request) -> Response:
        vhost, name = self._queue_path(request)
        body = await json_body(request)
        count = as_int(body.get("count"), "count", 1)
        if not 1 <= count <= MAX_GET_COUNT:
            raise BadRequestError(f"count must be between 1 and {MAX_GET_COUNT}, got {count}")
        ackmode = as_str(body.get("ackmode"), "ackmode", "ack_requeue_true")
        if ackmode not in ACK_MODES:
            raise BadRequestError(f"ackmode must be one of {', '.join(ACK_MODES)}")
        encoding = as_str(body.get("encoding"), "encoding", "auto")
        if encoding not in ("auto", "base64"):
            raise BadRequestError("encoding must be auto or base64")
        truncate_raw = body.get("truncate")
        truncate = None if truncate_raw is None else as_int(truncate_raw, "truncate")
        self.api.find_queue(vhost, name)
        # Fetch and encode in slices, yielding to the loop between them so that AMQP traffic
        # keeps flowing during a large get; the messages are held until `finish` settles them.
        session = self.admin.begin_get(vhost, name, ackmode=cast(AckMode, ackmode))
        parts: list[str] = []
        try:
            left = count
            while left > 0:
                got = session.fetch(min(GET_SLICE, left), self.clock_ms())
                parts.extend(dumps(shapes.fetched(m, encoding, truncate)) for m in got)
                left -= len(got)
                if left > 0 and len(got) == GET_SLICE:
                    await asyncio.sleep(0)
                else:
                    break
        finally:
            session.finish(self.clock_ms())
        return Response("[" + ",".join(parts) + "]", media_type="application/json")

    async def settings(self, request: Request) -> Response:
        vhost, name = self._queue_path(request)
        body = await json_body(request)
        if not body:
            raise BadRequestError("no settings given")
        self.api.find_queue(vhost, name)
        updated = self.admin.update_queue(vhost, name, body, now_ms=self.clock_ms())
        return json_response(self.api.queue_json(updated))

    async def scheduled(self, request: Request) -> Response:
        vhost, name = self._queue_path(request)
        self.api.find_queue(vhost, name)
        if request.method == "DELETE":
            removed = self.admin.purge_scheduled(vhost, name, now_ms=self.clock_ms())
            return json_response({"purged": removed})
        items = [shapes.scheduled(s) for s in self.admin.scheduled(vhost, name)]
        return json_response(paging.apply(items, request.query_params))

    async def deliver_scheduled(self, request: Request) -> Response:
        vhost, name = self._queue_path(request)
        body = await json_body(request)
        raw = body.get("seqs")
        seqs: list[int] | None = None
        if raw is not None:
            if not isinstance(raw, list):
                raise BadRequestError("seqs must be a list of integers")
            seqs = [as_int(s, "seqs") for s in raw]
        self.api.find_queue(vhost, name)
        moved = self.admin.deliver_scheduled_now(vhost, name, seqs, now_ms=self.clock_ms())
        return json_response({"delivered": moved})

    async def groups(self, request: Request) -> Response:
        """The owned message groups of a queue (GET), or unbind them (DELETE: all, or the one
        named in the path): Artemis' `listGroups`, `resetAllGroups` and `resetGroup`."""
        vhost, name = self._queue_path(request)
        self.api.find_queue(vhost, name)
        if request.method == "DELETE":
            group = request.path_params.get("group")
            reset = self.admin.reset_groups(vhost, name, group, now_ms=self.clock_ms())
            return json_response({"reset": reset})
        items = self.admin.groups(vhost, name)
        return json_response(paging.apply(items, request.query_params))
