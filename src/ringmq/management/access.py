"""`/api/vhosts`, `/api/users`, `/api/permissions` and `/api/policies`: who may do what where,
and the policies applied to queues (RabbitMQ's routes and shapes).

Stateless: bodies are checked by `params.parse_user|parse_permission|parse_policy` (the rules
definitions imports use too) before one facade call (`admin.CoreAdmin`); a changed or deleted
user drops the API's cached logins.
"""

from __future__ import annotations

from typing import Any

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from ringmq.management import shapes
from ringmq.management.api import Resource
from ringmq.management.errors import BadRequestError, NotFoundError
from ringmq.management.params import (
    caller,
    json_body,
    json_response,
    no_content,
    param,
    parse_permission,
    parse_policy,
    parse_user,
)


class Access(Resource):
    """Vhosts, users, permissions and policies."""

    def routes(self) -> list[Route]:
        r = self.api.route
        return [
            r("/api/vhosts", self.vhosts, ["GET"]),
            r("/api/vhosts/{vhost}", self.vhost, ["GET", "PUT", "DELETE"]),
            r("/api/users", self.users, ["GET"]),
            r("/api/users/{user}", self.user, ["GET", "PUT", "DELETE"]),
            r("/api/permissions", self.permissions, ["GET"]),
            r("/api/permissions/{vhost}/{user}", self.permission, ["GET", "PUT", "DELETE"]),
            r("/api/policies", self.policies, ["GET"]),
            r("/api/policies/{vhost}", self.policies, ["GET"]),
            r("/api/policies/{vhost}/{name}", self.policy, ["GET", "PUT", "DELETE"]),
        ]

    def _vhost_json(self, vhost: str) -> dict[str, Any]:
        depth = ready = unacked = 0
        for q in self.admin.queues(vhost):
            depth += q.messages
            ready += q.messages_ready
            unacked += q.messages_unacknowledged
        return {
            "name": vhost,
            "description": "",
            "tags": [],
            "tracing": False,
            "messages": depth,
            "messages_ready": ready,
            "messages_unacknowledged": unacked,
        }

    async def vhosts(self, request: Request) -> Response:
        who = caller(request)
        names = [v for v in self.admin.vhosts() if who.sees_vhost_name(v)]
        return self.api.listing(request, [self._vhost_json(v) for v in names])

    async def vhost(self, request: Request) -> Response:
        if request.method == "PUT":
            name = param(request, "vhost")
            await json_body(request)  # description/tags are accepted and not kept
            created = self.admin.add_vhost(name)
            return no_content(201 if created else 204)
        vhost = self.api.vhost_of(request)
        assert vhost is not None
        if request.method == "DELETE":
            self.admin.delete_vhost(vhost, now_ms=self.clock_ms())
            return no_content()
        return json_response(self._vhost_json(vhost))

    async def users(self, request: Request) -> Response:
        return self.api.listing(request, [shapes.user(u) for u in self.admin.users()])

    async def user(self, request: Request) -> Response:
        name = param(request, "user")
        existing = next((u for u in self.admin.users() if u.name == name), None)
        if request.method == "GET":
            if existing is None:
                raise NotFoundError(f"no user {name!r}")
            return json_response(shapes.user(existing))
        if request.method == "DELETE":
            if existing is None or not self.admin.delete_user(name):
                raise NotFoundError(f"no user {name!r}")
            self.api.forget_logins()
            return no_content()
        body = await json_body(request)
        password, password_hash, tags = parse_user(body)
        if not name:
            raise BadRequestError("user name must not be empty")
        self.admin.add_user(name, password=password, password_hash=password_hash, tags=tags)
        self.api.forget_logins()
        return no_content(201 if existing is None else 204)

    async def permissions(self, request: Request) -> Response:
        return self.api.listing(request, [shapes.permission(p) for p in self.admin.permissions()])

    async def permission(self, request: Request) -> Response:
        vhost = self.api.vhost_of(request)
        assert vhost is not None
        user = param(request, "user")
        found = next(
            (p for p in self.admin.permissions() if p.vhost == vhost and p.user == user), None
        )
        if request.method == "GET":
            if found is None:
                raise NotFoundError(f"no permissions for {user!r} in vhost {vhost!r}")
            return json_response(shapes.permission(found))
        if request.method == "DELETE":
            if found is None or not self.admin.clear_permissions(user, vhost):
                raise NotFoundError(f"no permissions for {user!r} in vhost {vhost!r}")
            return no_content()
        body = await json_body(request)
        self.admin.set_permissions(parse_permission(vhost, user, body))
        return no_content(201 if found is None else 204)

    # -- policies ------------------------------------------------------------------------

    async def policies(self, request: Request) -> Response:
        vhost = self.api.vhost_of(request)
        who = caller(request)
        return self.api.listing(
            request,
            [shapes.policy(p) for p in self.admin.policies(vhost) if who.sees_vhost(p.vhost)],
        )

    async def policy(self, request: Request) -> Response:
        vhost = self.api.vhost_of(request)
        assert vhost is not None
        name = param(request, "name")
        existing = next((p for p in self.admin.policies(vhost) if p.name == name), None)
        if request.method == "GET":
            if existing is None:
                raise NotFoundError(f"no policy {name!r} in vhost {vhost!r}")
            return json_response(shapes.policy(existing))
        if request.method == "DELETE":
            if existing is None:
                raise NotFoundError(f"no policy {name!r} in vhost {vhost!r}")
            self.admin.clear_policy(vhost, name, now_ms=self.clock_ms())
            return no_content()
        body = await json_body(request)
        policy = parse_policy(vhost, name, body)
        created = self.admin.set_policy(policy, now_ms=self.clock_ms())
        return no_content(201 if created else 204)
