"""`/api/topic-permissions`: RabbitMQ's topic authorisation rules (`core.topicauth`), with its
routes and shapes.

Stateless: a PUT body is checked by `parse_topic_permission` (the rule definitions imports use
too) before one facade call (`admin.CoreAdmin`). As RabbitMQ: `GET /api/topic-permissions` lists
all, `GET /api/topic-permissions/{vhost}/{user}` that user's in that vhost (a list, one per
exchange), `PUT` with `{"exchange", "write", "read"}` (all three required) sets one exchange's,
`DELETE` removes all of that user's in that vhost; `/api/users/{user}/topic-permissions` and
`/api/vhosts/{vhost}/topic-permissions` list one user's or one vhost's.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from ringmq.management.api import Resource
from ringmq.management.errors import BadRequestError, NotFoundError
from ringmq.management.params import json_body, json_response, no_content, param
from ringmq.management.records import TopicPermissionInfo


def parse_topic_permission(vhost: str, user: str, body: Mapping[str, Any]) -> TopicPermissionInfo:
    """Validate `{"exchange", "write", "read"}` (every key required, as RabbitMQ; the two
    patterns regular expressions, `{username}`-style variables allowed)."""
    fields: dict[str, str] = {}
    for key in ("exchange", "write", "read"):
        value = body.get(key)
        if not isinstance(value, str):
            raise BadRequestError(f"topic permission: {key} must be a string")
        fields[key] = value
    for key in ("write", "read"):
        try:
            re.compile(re.sub(r"\{(username|vhost|client_id)\}", "v", fields[key]))
        except re.error as exc:
            raise BadRequestError(f"invalid {key} pattern {fields[key]!r}: {exc}") from None
    return TopicPermissionInfo(user, vhost, fields["exchange"], fields["write"], fields["read"])


def shape(t: TopicPermissionInfo) -> dict[str, Any]:
    """One topic permission as RabbitMQ's API and definitions show it."""
    return {
        "user": t.user,
        "vhost": t.vhost,
        "exchange": t.exchange,
        "write": t.write,
        "read": t.read,
    }


class TopicPermissions(Resource):
    """Topic permissions."""

    def routes(self) -> list[Route]:
        r = self.api.route
        return [
            r("/api/topic-permissions", self.listing, ["GET"]),
            r("/api/topic-permissions/{vhost}/{user}", self.one, ["GET", "PUT", "DELETE"]),
            r("/api/users/{user}/topic-permissions", self.of_user, ["GET"]),
            r("/api/vhosts/{vhost}/topic-permissions", self.of_vhost, ["GET"]),
        ]

    async def listing(self, request: Request) -> Response:
        return self.api.listing(request, [shape(t) for t in self.admin.topic_permissions()])

    async def of_user(self, request: Request) -> Response:
        user = param(request, "user")
        if user not in {u.name for u in self.admin.users()}:
            raise NotFoundError(f"no user {user!r}")
        found = [shape(t) for t in self.admin.topic_permissions() if t.user == user]
        return self.api.listing(request, found)

    async def of_vhost(self, request: Request) -> Response:
        vhost = self.api.vhost_of(request)
        found = [shape(t) for t in self.admin.topic_permissions() if t.vhost == vhost]
        return self.api.listing(request, found)

    async def one(self, request: Request) -> Response:
        vhost = self.api.vhost_of(request)
        assert vhost is not None
        user = param(request, "user")
        found = [t for t in self.admin.topic_permissions() if t.vhost == vhost and t.user == user]
        if request.method == "GET":
            if not found:
                raise NotFoundError(f"no topic permissions for {user!r} in vhost {vhost!r}")
            return json_response([shape(t) for t in found])
        if request.method == "DELETE":
            if not found or not self.admin.clear_topic_permissions(user, vhost):
                raise NotFoundError(f"no topic permissions for {user!r} in vhost {vhost!r}")
            return no_content()
        info = parse_topic_permission(vhost, user, await json_body(request))
        existed = any(t.exchange == info.exchange for t in found)
        try:
            self.admin.set_topic_permission(info)
        except ValueError as exc:
            raise BadRequestError(str(exc)) from None
        return no_content(204 if existed else 201)


__all__ = ["TopicPermissions", "parse_topic_permission", "shape"]
