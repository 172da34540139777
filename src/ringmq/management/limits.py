"""`/api/vhost-limits` and `/api/user-limits`: RabbitMQ's per-vhost and per-user limits.

Shapes as RabbitMQ's HTTP API: `GET /api/vhost-limits[/{vhost}]` answers
`[{"vhost": ..., "value": {"max-connections": n, ...}}]`, `PUT
/api/vhost-limits/{vhost}/{name}` takes `{"value": n}` (`max-connections`, `max-queues`; a
negative value is no limit), `DELETE` removes one; the same for users (`max-connections`,
`max-channels`) under `/api/user-limits`. The core enforces them (`ringmq.core.limits`).

Stateless: one call into the core's `TenantLimits` per request, on the loop thread.
"""

from __future__ import annotations

from typing import Any

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from ringmq.core.limits import LimitError, TenantLimits
from ringmq.management.api import Resource
from ringmq.management.errors import BadRequestError, NotFoundError
from ringmq.management.params import json_body, no_content, param


class Limits(Resource):
    """Vhost and user limits."""

    def routes(self) -> list[Route]:
        r = self.api.route
        return [
            r("/api/vhost-limits", self.vhost_limits, ["GET"]),
            r("/api/vhost-limits/{vhost}", self.vhost_limits, ["GET"]),
            r("/api/vhost-limits/{vhost}/{name}", self.vhost_limit, ["PUT", "DELETE"]),
            r("/api/user-limits", self.user_limits, ["GET"]),
            r("/api/user-limits/{user}", self.user_limits, ["GET"]),
            r("/api/user-limits/{user}/{name}", self.user_limit, ["PUT", "DELETE"]),
        ]

    @property
    def _table(self) -> TenantLimits:
        return self.admin.limits()

    async def vhost_limits(self, request: Request) -> Response:
        vhost = self.api.vhost_of(request)
        table = self._table.vhosts
        items = [
            {"vhost": v, "value": dict(values)}
            for v, values in sorted(table.items())
            if vhost is None or v == vhost
        ]
        return self.api.listing(request, items)

    async def vhost_limit(self, request: Request) -> Response:
        vhost = self.api.vhost_of(request)
        assert vhost is not None
        name = param(request, "name")
        if request.method == "DELETE":
            if not self.admin.clear_limit("vhost", vhost, name):
                raise NotFoundError(f"no limit {name!r} on vhost {vhost!r}")
        else:
            body = await json_body(request)
            self._set(lambda value: self.admin.set_limit("vhost", vhost, name, value), body)
        return no_content()

    async def user_limits(self, request: Request) -> Response:
        user = param(request, "user") if "user" in request.path_params else None
        if user is not None and user not in {u.name for u in self.admin.users()}:
            raise NotFoundError(f"no user {user!r}")
        items = [
            {"user": u, "value": dict(values)}
            for u, values in sorted(self._table.users.items())
            if user is None or u == user
        ]
        return self.api.listing(request, items)

    async def user_limit(self, request: Request) -> Response:
        user = param(request, "user")
        if user not in {u.name for u in self.admin.users()}:
            raise NotFoundError(f"no user {user!r}")
        name = param(request, "name")
        if request.method == "DELETE":
            if not self.admin.clear_limit("user", user, name):
                raise NotFoundError(f"no limit {name!r} on user {user!r}")
        else:
            body = await json_body(request)
            self._set(lambda value: self.admin.set_limit("user", user, name, value), body)
        return no_content()

    @staticmethod
    def _set(setter: Any, body: dict[str, Any]) -> None:
        if "value" not in body:
            raise BadRequestError("a limit needs a 'value'")
        try:
            setter(body["value"])
        except LimitError as exc:
            raise BadRequestError(str(exc)) from None
