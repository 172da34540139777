"""`/api/connections`, `/api/channels` and `/api/consumers`: the live client sessions.

Connections are the server's (`port.Runtime`); channels and consumers the core's (the facade).
Non-monitor users see only what their own connections own. Stateless.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from ringmq.management import shapes
from ringmq.management.api import Resource
from ringmq.management.errors import NotFoundError
from ringmq.management.params import (
    caller,
    history_window,
    json_response,
    no_content,
    param,
)
from ringmq.management.port import ConnectionInfo


class Sessions(Resource):
    """Connections, channels and consumers."""

    def routes(self) -> list[Route]:
        r = self.api.route
        return [
            r("/api/connections", self.connections, ["GET"]),
            r("/api/connections/{name}", self.connection, ["GET", "DELETE"]),
            r("/api/channels", self.channels, ["GET"]),
            r("/api/consumers", self.consumers, ["GET"]),
            r("/api/consumers/{vhost}", self.consumers, ["GET"]),
        ]

    # -- connections, channels, consumers ------------------------------------------------

    def _channel_counts(self) -> Counter[int]:
        # A connection's channels as the channel listing (and the overview's total) counts
        # them: the core's sessions. The server's own figure is the protocol's view (MQTT and
        # STOMP keep two core sessions under one socket and report 1).
        return Counter(ch.conn_id for ch in self.admin.channels())

    def _connection_json(self, c: ConnectionInfo, counts: Counter[int]) -> dict[str, Any]:
        shown = shapes.connection(c, self.runtime.node)
        shown["channels"] = counts.get(c.conn_id, c.channels)
        rates = self.api.sampler.rates(shapes.connection_key(c.name))
        for name in ("recv_oct", "send_oct"):
            shown[f"{name}_details"] = {"rate": rates.get(name, 0.0)}
        return shown

    async def connections(self, request: Request) -> Response:
        who = caller(request)
        counts = self._channel_counts()
        return self.api.listing(
            request,
            [
                self._connection_json(c, counts)
                for c in self.runtime.connections()
                if who.sees_owner(c.user)
            ],
        )

    async def connection(self, request: Request) -> Response:
        name = param(request, "name")
        found = next((c for c in self.runtime.connections() if c.name == name), None)
        if found is None:
            raise NotFoundError(f"no connection {name!r}")
        caller(request).require_owner(found.user, request.method)
        if request.method == "DELETE":
            reason = request.headers.get("x-reason", "Closed via management plugin")
            self.runtime.close_connection(name, reason)
            return no_content()
        shown = self._connection_json(found, self._channel_counts())
        window = history_window(request, "data_rates")  # RabbitMQ's samples of the byte totals
        if window is not None:
            points = self.api.sampler.series(shapes.connection_key(name), *window, self.clock_ms())
            shapes.add_samples(shown, ("recv_oct", "send_oct"), points)
        return json_response(shown)

    async def channels(self, request: Request) -> Response:
        conns = self.api.connections_by_id()
        node = self.runtime.node
        who = caller(request)
        return self.api.listing(
            request,
            [
                shapes.channel(ch, conns.get(ch.conn_id), node)
                for ch in self.admin.channels()
                if self.api.owned(who, conns, ch.conn_id)
            ],
        )

    async def consumers(self, request: Request) -> Response:
        vhost = self.api.vhost_of(request)
        conns = self.api.connections_by_id()
        return self.api.listing(
            request,
            [
                shapes.consumer(c, conns.get(c.conn_id))
                for c in self.admin.consumers()
                if (vhost is None or c.vhost == vhost)
                and self.api.owned(caller(request), conns, c.conn_id)
            ],
        )
