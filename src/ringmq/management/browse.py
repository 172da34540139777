"""`POST /api/queues/{vhost}/{name}/browse`: **ringmq**'s non-destructive peek.

RabbitMQ's `/get` with `ackmode: ack_requeue_true` takes the messages and puts them back: they
come back redelivered, a consumer may receive them meanwhile, and a last-value queue peeked that
way keeps the stale value it requeued. `browse` reads the ready messages from the head in place
(the queue's browse, the one the streams API uses): nothing is taken, marked redelivered or
paged in. Body `{"count": 5, "encoding": "auto"|"base64", "truncate": 50000}`; the answer has
`/get`'s shape (payload, properties, routing key...). Authorisation as `/get`: a management
user (the lead's authz table decides vhost access).
"""

from __future__ import annotations

from urllib.parse import unquote

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from ringmq.management import shapes
from ringmq.management.api import Api
from ringmq.management.errors import BadRequestError
from ringmq.management.params import json_body


def routes(api: Api) -> list[Route]:
    async def browse(request: Request) -> Response:
        vhost = unquote(request.path_params["vhost"])
        name = unquote(request.path_params["name"])
        body = await json_body(request)
        count = body.get("count", 1)
        if isinstance(count, bool) or not isinstance(count, int):
            raise BadRequestError(f"count must be an integer, got {count!r}")
        encoding = body.get("encoding", "auto")
        if encoding not in ("auto", "base64"):
            raise BadRequestError("encoding must be auto or base64")
        truncate = body.get("truncate")
        if truncate is not None and (isinstance(truncate, bool) or not isinstance(truncate, int)):
            raise BadRequestError(f"truncate must be an integer, got {truncate!r}")
        got = api.admin.browse_messages(vhost, name, count=count, now_ms=api.clock_ms())
        return JSONResponse([shapes.fetched(m, encoding, truncate) for m in got])

    # who may call it: management.authz (read on the queue, as /get)
    return [api.route("/api/queues/{vhost}/{name}/browse", browse, ["POST"])]
