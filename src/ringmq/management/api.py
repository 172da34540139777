"""The RabbitMQ-compatible HTTP API (`/api/...`) over the `BrokerAdmin` and `Runtime` ports.

Theory of operation: every handler runs on the broker's event loop and calls the synchronous
facade directly (the loop thread owns the core, so there are no locks and no awaits in the
middle of a change; the one exception is `get`, which holds what it fetched until it settles it
and yields to the loop between slices of `GET_SLICE` messages). Each request is authenticated
with HTTP Basic against the broker's users (`authenticate`) and authorised by its route's rule
in `authz.RULES` (`guard`: tag gate, body media type, the AMQP permission checks) before the
handler runs; handlers only filter listings with the caller's `authz.Principal`. A request is
then parsed and validated completely *before* the facade is called, so a bad request (400) or a
missing object (404) never leaves the broker half-changed. Errors leave through one boundary
(`_wrap`), in RabbitMQ's `{"error", "reason"}` shape.

Path segments arrive percent-encoded (`/api/queues/%2F/orders`): `app.py` keeps each segment
quoted while routing and handlers unquote the path parameters they read.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import hashlib
import ipaddress
import json
import logging
import re
import time
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, Final, cast
from urllib.parse import unquote

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from ringmq import __version__
from ringmq.core.routing import EXCHANGE_TYPE_NAMES, parse_exchange_type
from ringmq.management import authz, definitions, paging, shapes
from ringmq.management.authz import MANAGEMENT_TAGS, NotAuthorisedError, Principal
from ringmq.management.errors import (
    BadRequestError,
    HttpError,
    NotFoundError,
    UnauthorizedError,
    to_response,
)
from ringmq.management.port import (
    AckMode,
    BindingInfo,
    BrokerAdmin,
    ConnectionInfo,
    PermissionInfo,
    PolicyInfo,
    QueueInfo,
    Runtime,
    UserInfo,
)
from ringmq.management.rates import RateSampler

log = logging.getLogger(__name__)

EXCHANGE_TYPES: Final = EXCHANGE_TYPE_NAMES  # the broker's own list (core.routing)
ACK_MODES: Final = ("ack_requeue_true", "reject_requeue_true", "ack_requeue_false")
_AUTH_CACHE_MS: Final = 5_000
MAX_GET_COUNT: Final = 10_000
"""Most messages one `POST /api/queues/{vhost}/{name}/get` may ask for (400 beyond)."""
GET_SLICE: Final = 200
"""Messages a get fetches and encodes between two yields to the event loop."""
OVERVIEW_KEY: Final = "overview"
LOGIN_OUTCOME: Final = "ringmq.login_ok"
"""ASGI scope key `authenticate` sets: True when the credentials were right, False when not."""

Handler = Callable[[Request], Awaitable[Response]]


def wall_ms() -> int:
    return time.time_ns() // 1_000_000


def _is_loopback(request: Request) -> bool:
    host = request.client.host if request.client else ""
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return host == "localhost"


def _param(request: Request, name: str) -> str:
    return unquote(cast(str, request.path_params[name]))


def _bool(value: Any, field: str, default: bool) -> bool:
    if value is None:
        return default
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.lower() in ("true", "false"):
        return value.lower() == "true"
    raise BadRequestError(f"{field} must be a boolean, got {value!r}")


def _dict(value: Any, field: str) -> dict[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise BadRequestError(f"{field} must be a JSON object, got {value!r}")
    return value


def _str(value: Any, field: str, default: str | None = None) -> str:
    if value is None and default is not None:
        return default
    if not isinstance(value, str):
        raise BadRequestError(f"{field} must be a string, got {value!r}")
    return value


def _int(value: Any, field: str, default: int | None = None) -> int:
    if value is None and default is not None:
        return default
    if isinstance(value, bool) or not isinstance(value, int | str):
        raise BadRequestError(f"{field} must be an integer, got {value!r}")
    try:
        return int(value)
    except ValueError:
        raise BadRequestError(f"{field} must be an integer, got {value!r}") from None


async def _body(request: Request) -> dict[str, Any]:
    raw = await request.body()
    if not raw.strip():
        return {}
    try:
        body = json.loads(raw)
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise BadRequestError(f"request body is not valid JSON: {exc}") from None
    if not isinstance(body, dict):
        raise BadRequestError("request body must be a JSON object")
    return body


def _dumps(data: Any) -> str:
    # Starlette's JSONResponse encoding, for a body assembled piece by piece.
    return json.dumps(data, ensure_ascii=False, allow_nan=False, separators=(",", ":"))


def _json(data: Any, status: int = 200) -> JSONResponse:
    return JSONResponse(data, status_code=status)


def _no_content(status: int = 204) -> Response:
    return Response(status_code=status)


def _who(request: Request) -> Principal:
    """The caller `Api.guard` authenticated for this request."""
    return cast(Principal, request.state.principal)


class Api:
    """Handlers of `/api/*` bound to one broker facade, one runtime and one rate sampler."""

    def __init__(
        self,
        admin: BrokerAdmin,
        runtime: Runtime,
        sampler: RateSampler,
        clock_ms: Callable[[], int] = wall_ms,
    ) -> None:
        self.admin = admin
        self.runtime = runtime
        self.sampler = sampler
        self.clock_ms = clock_ms
        self._auth_cache: dict[str, tuple[int, UserInfo]] = {}

    # -- plumbing ------------------------------------------------------------------------

    def authenticate(self, request: Request) -> UserInfo:
        """The user of a request's Basic credentials; raise 401 otherwise."""
        header = request.headers.get("authorization", "")
        scheme, _, token = header.partition(" ")
        if scheme.lower() != "basic" or not token:
            raise UnauthorizedError("Not_Authorized")
        now = self.clock_ms()
        client = request.client.host if request.client else ""
        key = hashlib.sha256(f"{client}\0{token}".encode()).hexdigest()
        cached = self._auth_cache.get(key)
        if cached is not None and now - cached[0] < _AUTH_CACHE_MS:
            request.scope[LOGIN_OUTCOME] = True
            return cached[1]
        try:
            username, sep, password = base64.b64decode(token).decode("utf-8").partition(":")
        except (binascii.Error, UnicodeDecodeError):
            raise UnauthorizedError("Not_Authorized") from None
        if not sep:
            raise UnauthorizedError("Not_Authorized")
        found = self.admin.authenticate(username, password)
        # what the login throttle counts (management.app): wrong credentials only, not a
        # refusal of a user who logged in (a missing tag or permission)
        request.scope[LOGIN_OUTCOME] = found is not None
        if found is None:
            raise UnauthorizedError("Login failed")
        if not MANAGEMENT_TAGS.intersection(found.tags):
            raise UnauthorizedError("Not management user")
        if found.loopback_only and not _is_loopback(request):
            raise UnauthorizedError("User can only log in via localhost")
        if len(self._auth_cache) > 256:
            self._auth_cache.clear()
        self._auth_cache[key] = (now, found)
        return found

    def refresh_rates(self, force: bool = False) -> None:
        """Sample counters when the last sample is stale (the timer also calls this)."""
        now = self.clock_ms()
        if not force and not self.sampler.due(now):
            return
        totals: dict[str, dict[str, int]] = {}
        overview: dict[str, int] = dict.fromkeys((*shapes.STAT_NAMES, "deliver_get"), 0)
        overview.update(dict.fromkeys(shapes.DEPTH_NAMES, 0))
        for q in self.admin.queues():
            qt = shapes.queue_totals(q)
            totals[shapes.queue_key(q.vhost, q.name)] = qt
            for name, value in qt.items():
                overview[name] += value
        for x in self.admin.exchanges():
            totals[f"x\x00{x.vhost}\x00{x.name}"] = {
                "publish_in": x.publish_in,
                "publish_out": x.publish_out,
            }
        totals[OVERVIEW_KEY] = overview
        self.sampler.sample(now, totals)

    async def guard(self, request: Request, path: str) -> Principal | None:
        """Apply the route's `authz` rule: authenticate, gate, body media type, permissions.

        Returns the caller (None for a public route); handlers read it as
        `request.state.principal`. A missing path vhost skips the vhost gate and the
        permission checks so that the handler answers 404, as RabbitMQ does.
        """
        rule = authz.rule_for(path, request.method)
        if rule is None:
            raise NotAuthorisedError("no authorisation rule for this endpoint")
        if rule.gate is authz.Gate.PUBLIC:
            return None
        principal = Principal(self.authenticate(request), self.admin)
        request.state.principal = principal
        params = cast(dict[str, str], request.path_params)
        vhost = unquote(params["vhost"]) if "vhost" in params else None
        if vhost is not None and vhost not in self.admin.vhosts():
            vhost = None
            checks: tuple[authz.Check, ...] = ()
        else:
            checks = rule.checks
        principal.gate(rule.gate, vhost, rule.refusal)
        body = b""
        if request.method in ("POST", "PUT", "DELETE", "PATCH"):
            body = await request.body()
            authz.check_media_type(rule, request.headers.get("content-type"), body)
        if vhost is not None:
            named = authz.named_exchanges(rule, body) if checks else []
            principal.check(vhost, checks, params, rule.refusal, named)
        return principal

    def _wrap(self, path: str, handler: Handler) -> Handler:
        async def endpoint(request: Request) -> Response:
            try:
                await self.guard(request, path)
                self.refresh_rates()
                return await handler(request)
            except Exception as exc:
                if not isinstance(exc, HttpError | ValueError) and not hasattr(exc, "code"):
                    log.exception("management request %s %s failed", request.method, request.url)
                return to_response(exc)

        return endpoint

    def route(self, path: str, handler: Handler, methods: list[str]) -> Route:
        """A route behind the API's guard (its `authz` rule) and error boundary; endpoints
        served from other modules (nodes, health checks, browse) are made with this."""
        return Route(path, self._wrap(path, handler), methods=methods)

    def routes(self) -> list[Route]:
        r = self.route

        return [
            r("/api/overview", self.overview, ["GET"]),
            r("/api/whoami", self.whoami, ["GET"]),
            r("/api/ringmq/rates", self.rate_history, ["GET"]),
            r("/api/vhosts", self.vhosts, ["GET"]),
            r("/api/vhosts/{vhost}", self.vhost, ["GET", "PUT", "DELETE"]),
            r("/api/users", self.users, ["GET"]),
            r("/api/users/{user}", self.user, ["GET", "PUT", "DELETE"]),
            r("/api/permissions", self.permissions, ["GET"]),
            r("/api/permissions/{vhost}/{user}", self.permission, ["GET", "PUT", "DELETE"]),
            r("/api/connections", self.connections, ["GET"]),
            r("/api/connections/{name}", self.connection, ["GET", "DELETE"]),
            r("/api/channels", self.channels, ["GET"]),
            r("/api/consumers", self.consumers, ["GET"]),
            r("/api/consumers/{vhost}", self.consumers, ["GET"]),
            r("/api/exchanges", self.exchanges, ["GET"]),
            r("/api/exchanges/{vhost}", self.exchanges, ["GET"]),
            r("/api/exchanges/{vhost}/{name}", self.exchange, ["GET", "PUT", "DELETE"]),
            r("/api/exchanges/{vhost}/{name}/publish", self.publish, ["POST"]),
            r("/api/exchanges/{vhost}/{name}/bindings/{side}", self.exchange_bindings, ["GET"]),
            r("/api/bindings", self.bindings, ["GET"]),
            r("/api/bindings/{vhost}", self.bindings, ["GET"]),
            r(
                "/api/bindings/{vhost}/e/{source}/{kind}/{destination}",
                self.binding_pair,
                ["GET", "POST"],
            ),
            r(
                "/api/bindings/{vhost}/e/{source}/{kind}/{destination}/{props}",
                self.binding_one,
                ["GET", "DELETE"],
            ),
            r("/api/queues", self.queues, ["GET"]),
            r("/api/queues/{vhost}", self.queues, ["GET"]),
            r("/api/queues/{vhost}/{name}", self.queue, ["GET", "PUT", "DELETE"]),
            r("/api/queues/{vhost}/{name}/bindings", self.queue_bindings, ["GET"]),
            r("/api/queues/{vhost}/{name}/contents", self.purge, ["DELETE"]),
            r("/api/queues/{vhost}/{name}/get", self.get, ["POST"]),
            r("/api/queues/{vhost}/{name}/settings", self.settings, ["PUT"]),
            r("/api/queues/{vhost}/{name}/scheduled", self.scheduled, ["GET", "DELETE"]),
            r("/api/queues/{vhost}/{name}/scheduled/deliver", self.deliver_scheduled, ["POST"]),
            r("/api/policies", self.policies, ["GET"]),
            r("/api/policies/{vhost}", self.policies, ["GET"]),
            r("/api/policies/{vhost}/{name}", self.policy, ["GET", "PUT", "DELETE"]),
            r("/api/definitions", self.definitions, ["GET", "POST"]),
            r("/api/definitions/{vhost}", self.definitions, ["GET", "POST"]),
        ]

    def _list(self, request: Request, items: list[dict[str, Any]]) -> JSONResponse:
        return _json(paging.apply(items, request.query_params))

    def _vhost(self, request: Request) -> str | None:
        if "vhost" not in request.path_params:
            return None
        vhost = _param(request, "vhost")
        if vhost not in self.admin.vhosts():
            raise NotFoundError(f"no vhost {vhost!r}")
        return vhost

    def _connections_by_id(self) -> dict[int, ConnectionInfo]:
        return {c.conn_id: c for c in self.runtime.connections()}

    def _queue_json(self, q: QueueInfo) -> dict[str, Any]:
        return shapes.queue(q, self.sampler, self.runtime.node)

    # -- overview, vhosts, users ---------------------------------------------------------

    async def overview(self, request: Request) -> Response:
        # Monitors see node-wide figures; other users the figures of their own vhosts and
        # connections (RabbitMQ's overview for a management user).
        who = _who(request)
        queues = [q for q in self.admin.queues() if who.is_monitor or who.has_access(q.vhost)]
        totals = dict.fromkeys(shapes.DEPTH_NAMES, 0)
        scheduled = paged = 0
        for q in queues:
            totals["messages"] += q.messages
            totals["messages_ready"] += q.messages_ready
            totals["messages_unacknowledged"] += q.messages_unacknowledged
            scheduled += q.messages_scheduled
            paged += q.messages_paged
        rates = self.sampler.rates(OVERVIEW_KEY) if who.is_monitor else {}
        queue_totals: dict[str, Any] = dict(totals)
        for name in shapes.DEPTH_NAMES:
            queue_totals[f"{name}_details"] = {"rate": rates.get(name, 0.0)}
        queue_totals["messages_scheduled"] = scheduled
        queue_totals["messages_paged"] = paged
        overview_totals: dict[str, int] = {}
        for q in queues:
            for name, value in shapes.queue_totals(q).items():
                overview_totals[name] = overview_totals.get(name, 0) + value
        # (queues were read once above; rates come from the sampler's own reads)
        connections = [c for c in self.runtime.connections() if who.sees_owner(c.user)]
        owned = {c.conn_id for c in connections}
        channels = [ch for ch in self.admin.channels() if who.is_monitor or ch.conn_id in owned]
        consumers = [c for c in self.admin.consumers() if who.is_monitor or c.conn_id in owned]
        exchanges = [x for x in self.admin.exchanges() if who.is_monitor or who.has_access(x.vhost)]
        node = self.runtime.node
        return _json(
            {
                "management_version": __version__,
                "rates_mode": "basic",
                "sample_retention_policies": {"global": [600], "basic": [600], "detailed": [600]},
                "exchange_types": [{"name": t, "enabled": True} for t in EXCHANGE_TYPES],
                "product_name": "RingMQ",
                "product_version": __version__,
                "rabbitmq_version": "3.13.0",
                "cluster_name": node,
                "node": node,
                "started_at": self.runtime.started_at_ms,
                "message_stats": shapes.message_stats(overview_totals, rates),
                "queue_totals": queue_totals,
                "object_totals": {
                    "channels": len(channels),
                    "connections": len(connections),
                    "consumers": len(consumers),
                    "exchanges": len(exchanges),
                    "queues": len(queues),
                },
                "blocked_connections": sum(
                    1 for c in connections if c.state in ("blocked", "blocking")
                ),
                "listeners": [
                    {
                        "node": node,
                        "protocol": ln.protocol,
                        "ip_address": ln.ip_address,
                        "port": ln.port,
                    }
                    for ln in self.runtime.listeners()
                ],
                "contexts": [],
            }
        )

    async def whoami(self, request: Request) -> Response:
        u = self.authenticate(request)
        return _json({"name": u.name, "tags": list(u.tags)})

    async def rate_history(self, request: Request) -> Response:
        # Node-wide rates: a monitor's figures; other users get an empty history.
        return _json(
            [{"t": t, **rates} for t, rates in self.sampler.history()]
            if self.sampler.history_key == OVERVIEW_KEY and _who(request).is_monitor
            else []
        )

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
        who = _who(request)
        names = [v for v in self.admin.vhosts() if who.sees_vhost_name(v)]
        return self._list(request, [self._vhost_json(v) for v in names])

    async def vhost(self, request: Request) -> Response:
        if request.method == "PUT":
            name = _param(request, "vhost")
            await _body(request)  # description/tags are accepted and not kept
            created = self.admin.add_vhost(name)
            return _no_content(201 if created else 204)
        vhost = self._vhost(request)
        assert vhost is not None
        if request.method == "DELETE":
            self.admin.delete_vhost(vhost, now_ms=self.clock_ms())
            return _no_content()
        return _json(self._vhost_json(vhost))

    async def users(self, request: Request) -> Response:
        return self._list(request, [shapes.user(u) for u in self.admin.users()])

    async def user(self, request: Request) -> Response:
        name = _param(request, "user")
        existing = next((u for u in self.admin.users() if u.name == name), None)
        if request.method == "GET":
            if existing is None:
                raise NotFoundError(f"no user {name!r}")
            return _json(shapes.user(existing))
        if request.method == "DELETE":
            if existing is None or not self.admin.delete_user(name):
                raise NotFoundError(f"no user {name!r}")
            self._auth_cache.clear()
            return _no_content()
        body = await _body(request)
        password, password_hash, tags = parse_user(body)
        if not name:
            raise BadRequestError("user name must not be empty")
        self.admin.add_user(name, password=password, password_hash=password_hash, tags=tags)
        self._auth_cache.clear()
        return _no_content(201 if existing is None else 204)

    async def permissions(self, request: Request) -> Response:
        return self._list(request, [shapes.permission(p) for p in self.admin.permissions()])

    async def permission(self, request: Request) -> Response:
        vhost = self._vhost(request)
        assert vhost is not None
        user = _param(request, "user")
        found = next(
            (p for p in self.admin.permissions() if p.vhost == vhost and p.user == user), None
        )
        if request.method == "GET":
            if found is None:
                raise NotFoundError(f"no permissions for {user!r} in vhost {vhost!r}")
            return _json(shapes.permission(found))
        if request.method == "DELETE":
            if found is None or not self.admin.clear_permissions(user, vhost):
                raise NotFoundError(f"no permissions for {user!r} in vhost {vhost!r}")
            return _no_content()
        body = await _body(request)
        self.admin.set_permissions(parse_permission(vhost, user, body))
        return _no_content(201 if found is None else 204)

    # -- connections, channels, consumers ------------------------------------------------

    async def connections(self, request: Request) -> Response:
        node = self.runtime.node
        who = _who(request)
        return self._list(
            request,
            [
                shapes.connection(c, node)
                for c in self.runtime.connections()
                if who.sees_owner(c.user)
            ],
        )

    async def connection(self, request: Request) -> Response:
        name = _param(request, "name")
        found = next((c for c in self.runtime.connections() if c.name == name), None)
        if found is None:
            raise NotFoundError(f"no connection {name!r}")
        _who(request).require_owner(found.user, request.method)
        if request.method == "DELETE":
            reason = request.headers.get("x-reason", "Closed via management plugin")
            self.runtime.close_connection(name, reason)
            return _no_content()
        return _json(shapes.connection(found, self.runtime.node))

    async def channels(self, request: Request) -> Response:
        conns = self._connections_by_id()
        node = self.runtime.node
        who = _who(request)
        return self._list(
            request,
            [
                shapes.channel(ch, conns.get(ch.conn_id), node)
                for ch in self.admin.channels()
                if self._owned(who, conns, ch.conn_id)
            ],
        )

    @staticmethod
    def _owned(who: Principal, conns: dict[int, ConnectionInfo], conn_id: int) -> bool:
        conn = conns.get(conn_id)
        return who.is_monitor or (conn is not None and who.sees_owner(conn.user))

    async def consumers(self, request: Request) -> Response:
        vhost = self._vhost(request)
        conns = self._connections_by_id()
        return self._list(
            request,
            [
                shapes.consumer(c, conns.get(c.conn_id))
                for c in self.admin.consumers()
                if (vhost is None or c.vhost == vhost)
                and self._owned(_who(request), conns, c.conn_id)
            ],
        )

    # -- exchanges -----------------------------------------------------------------------

    @staticmethod
    def _exchange_name(raw: str) -> str:
        # RabbitMQ names the default exchange "amq.default" in URLs.
        return "" if raw == "amq.default" else raw

    async def exchanges(self, request: Request) -> Response:
        vhost = self._vhost(request)
        who = _who(request)
        return self._list(
            request,
            [
                shapes.exchange(x, self.sampler)
                for x in self.admin.exchanges(vhost)
                if who.sees_vhost(x.vhost)
            ],
        )

    def _find_exchange(self, vhost: str, name: str) -> dict[str, Any]:
        for x in self.admin.exchanges(vhost):
            if x.name == name:
                return shapes.exchange(x, self.sampler)
        raise NotFoundError(f"no exchange {name!r} in vhost {vhost!r}")

    async def exchange(self, request: Request) -> Response:
        vhost = self._vhost(request)
        assert vhost is not None
        name = self._exchange_name(_param(request, "name"))
        if request.method == "GET":
            return _json(self._find_exchange(vhost, name))
        if request.method == "DELETE":
            self._find_exchange(vhost, name)
            if_unused = _bool(request.query_params.get("if-unused"), "if-unused", False)
            self.admin.delete_exchange(vhost, name, if_unused=if_unused, now_ms=self.clock_ms())
            return _no_content()
        body = await _body(request)
        if not name:
            raise BadRequestError("cannot redeclare the default exchange")
        if name.startswith("amq.") and not any(x.name == name for x in self.admin.exchanges(vhost)):
            # AMQP's rule (403 ACCESS_REFUSED on exchange.declare), as a bad request here.
            raise BadRequestError(f"ACCESS_REFUSED - exchange name {name!r} uses reserved 'amq.'")
        xtype = _str(body.get("type"), "type")
        try:
            parse_exchange_type(xtype, _dict(body.get("arguments"), "arguments"))
        except ValueError as exc:
            raise BadRequestError(str(exc)) from None
        created = self.admin.declare_exchange(
            vhost,
            name,
            type=xtype,
            durable=_bool(body.get("durable"), "durable", True),
            auto_delete=_bool(body.get("auto_delete"), "auto_delete", False),
            internal=_bool(body.get("internal"), "internal", False),
            arguments=_dict(body.get("arguments"), "arguments"),
            now_ms=self.clock_ms(),
        )
        return _no_content(201 if created else 204)

    async def publish(self, request: Request) -> Response:
        vhost = self._vhost(request)
        assert vhost is not None
        name = self._exchange_name(_param(request, "name"))
        body = await _body(request)
        routing_key = _str(body.get("routing_key"), "routing_key")
        properties = _dict(body.get("properties"), "properties")
        text = _str(body.get("payload"), "payload")
        encoding = _str(body.get("payload_encoding"), "payload_encoding", "string")
        if encoding == "string":
            raw = text.encode("utf-8")
        elif encoding == "base64":
            try:
                raw = base64.b64decode(text, validate=True)
            except binascii.Error:
                raise BadRequestError("payload is not valid base64") from None
        else:
            raise BadRequestError(f"payload_encoding must be string or base64, got {encoding!r}")
        if name:
            self._find_exchange(vhost, name)
        routed = self.admin.publish(
            vhost, name, routing_key, raw, properties, now_ms=self.clock_ms()
        )
        return _json({"routed": routed})

    async def exchange_bindings(self, request: Request) -> Response:
        vhost = self._vhost(request)
        assert vhost is not None
        name = self._exchange_name(_param(request, "name"))
        side = _param(request, "side")
        if side not in ("source", "destination"):
            raise NotFoundError()
        self._find_exchange(vhost, name)
        items = [
            shapes.binding(b)
            for b in self.admin.bindings(vhost)
            if (
                b.source == name
                if side == "source"
                else (b.destination_type == "exchange" and b.destination == name)
            )
        ]
        return self._list(request, items)

    # -- bindings ------------------------------------------------------------------------

    async def bindings(self, request: Request) -> Response:
        vhost = self._vhost(request)
        who = _who(request)
        return self._list(
            request,
            [shapes.binding(b) for b in self.admin.bindings(vhost) if who.sees_vhost(b.vhost)],
        )

    def _pair(self, request: Request) -> tuple[str, str, str, str]:
        vhost = self._vhost(request)
        assert vhost is not None
        kind = _param(request, "kind")
        if kind not in ("q", "e"):
            raise NotFoundError()
        source = self._exchange_name(_param(request, "source"))
        destination = _param(request, "destination")
        self._find_exchange(vhost, source)
        if kind == "q":
            self._find_queue(vhost, destination)
        else:
            self._find_exchange(vhost, destination)
        return vhost, source, "queue" if kind == "q" else "exchange", destination

    def _pair_bindings(self, vhost: str, source: str, dtype: str, dest: str) -> list[BindingInfo]:
        return [
            b
            for b in self.admin.bindings(vhost)
            if b.source == source and b.destination_type == dtype and b.destination == dest
        ]

    async def binding_pair(self, request: Request) -> Response:
        vhost, source, dtype, dest = self._pair(request)
        if request.method == "GET":
            items = [shapes.binding(b) for b in self._pair_bindings(vhost, source, dtype, dest)]
            return self._list(request, items)
        body = await _body(request)
        routing_key = _str(body.get("routing_key"), "routing_key", "")
        arguments = _dict(body.get("arguments"), "arguments")
        if not source:
            raise BadRequestError("cannot bind to the default exchange")
        binding = BindingInfo(
            vhost=vhost,
            source=source,
            destination=dest,
            destination_type="queue" if dtype == "queue" else "exchange",
            routing_key=routing_key,
            arguments=arguments,
        )
        self.admin.bind(binding, now_ms=self.clock_ms())
        location = shapes.properties_key(routing_key, arguments)
        return Response(status_code=201, headers={"Location": location})

    async def binding_one(self, request: Request) -> Response:
        vhost, source, dtype, dest = self._pair(request)
        props = _param(request, "props")
        found = next(
            (
                b
                for b in self._pair_bindings(vhost, source, dtype, dest)
                if shapes.properties_key(b.routing_key, b.arguments) == props
            ),
            None,
        )
        if found is None:
            raise NotFoundError(f"no binding {props!r}")
        if request.method == "GET":
            return _json(shapes.binding(found))
        self.admin.unbind(found, now_ms=self.clock_ms())
        return _no_content()

    # -- queues --------------------------------------------------------------------------

    def _find_queue(self, vhost: str, name: str) -> QueueInfo:
        return self.admin.queue(vhost, name)

    def _queue_path(self, request: Request) -> tuple[str, str]:
        vhost = self._vhost(request)
        assert vhost is not None
        return vhost, _param(request, "name")

    async def queues(self, request: Request) -> Response:
        vhost = self._vhost(request)
        who = _who(request)
        return self._list(
            request,
            [self._queue_json(q) for q in self.admin.queues(vhost) if who.sees_vhost(q.vhost)],
        )

    async def queue(self, request: Request) -> Response:
        vhost, name = self._queue_path(request)
        now = self.clock_ms()
        if request.method == "GET":
            return _json(self._queue_json(self._find_queue(vhost, name)))
        if request.method == "DELETE":
            self._find_queue(vhost, name)
            q = request.query_params
            self.admin.delete_queue(
                vhost,
                name,
                if_unused=_bool(q.get("if-unused"), "if-unused", False),
                if_empty=_bool(q.get("if-empty"), "if-empty", False),
                now_ms=now,
            )
            return _no_content()
        body = await _body(request)
        if not name or len(name.encode()) > 255:
            raise BadRequestError("queue name must be 1..255 bytes")
        if name.startswith("amq."):
            raise BadRequestError(f"ACCESS_REFUSED - queue name {name!r} uses reserved 'amq.'")
        created = self.admin.declare_queue(
            vhost,
            name,
            durable=_bool(body.get("durable"), "durable", True),
            auto_delete=_bool(body.get("auto_delete"), "auto_delete", False),
            arguments=_dict(body.get("arguments"), "arguments"),
            now_ms=now,
        )
        return _no_content(201 if created else 204)

    async def queue_bindings(self, request: Request) -> Response:
        vhost, name = self._queue_path(request)
        self._find_queue(vhost, name)
        items = [
            shapes.binding(b)
            for b in self.admin.bindings(vhost)
            if b.destination_type == "queue" and b.destination == name
        ]
        return self._list(request, items)

    async def purge(self, request: Request) -> Response:
        vhost, name = self._queue_path(request)
        self._find_queue(vhost, name)
        self.admin.purge_queue(vhost, name, now_ms=self.clock_ms())
        return _no_content()

    async def get(self, request: Request) -> Response:
        vhost, name = self._queue_path(request)
        body = await _body(request)
        count = _int(body.get("count"), "count", 1)
        if not 1 <= count <= MAX_GET_COUNT:
            raise BadRequestError(f"count must be between 1 and {MAX_GET_COUNT}, got {count}")
        ackmode = _str(body.get("ackmode"), "ackmode", "ack_requeue_true")
        if ackmode not in ACK_MODES:
            raise BadRequestError(f"ackmode must be one of {', '.join(ACK_MODES)}")
        encoding = _str(body.get("encoding"), "encoding", "auto")
        if encoding not in ("auto", "base64"):
            raise BadRequestError("encoding must be auto or base64")
        truncate_raw = body.get("truncate")
        truncate = None if truncate_raw is None else _int(truncate_raw, "truncate")
        self._find_queue(vhost, name)
        # Fetch and encode in slices, yielding to the loop between them so that AMQP traffic
        # keeps flowing during a large get; the messages are held until `finish` settles them.
        session = self.admin.begin_get(vhost, name, ackmode=cast(AckMode, ackmode))
        parts: list[str] = []
        try:
            left = count
            while left > 0:
                got = session.fetch(min(GET_SLICE, left), self.clock_ms())
                parts.extend(_dumps(shapes.fetched(m, encoding, truncate)) for m in got)
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
        body = await _body(request)
        if not body:
            raise BadRequestError("no settings given")
        self._find_queue(vhost, name)
        updated = self.admin.update_queue(vhost, name, body, now_ms=self.clock_ms())
        return _json(self._queue_json(updated))

    async def scheduled(self, request: Request) -> Response:
        vhost, name = self._queue_path(request)
        self._find_queue(vhost, name)
        if request.method == "DELETE":
            removed = self.admin.purge_scheduled(vhost, name, now_ms=self.clock_ms())
            return _json({"purged": removed})
        items = [shapes.scheduled(s) for s in self.admin.scheduled(vhost, name)]
        return _json(paging.apply(items, request.query_params))

    async def deliver_scheduled(self, request: Request) -> Response:
        vhost, name = self._queue_path(request)
        body = await _body(request)
        raw = body.get("seqs")
        seqs: list[int] | None = None
        if raw is not None:
            if not isinstance(raw, list):
                raise BadRequestError("seqs must be a list of integers")
            seqs = [_int(s, "seqs") for s in raw]
        self._find_queue(vhost, name)
        moved = self.admin.deliver_scheduled_now(vhost, name, seqs, now_ms=self.clock_ms())
        return _json({"delivered": moved})

    # -- policies ------------------------------------------------------------------------

    async def policies(self, request: Request) -> Response:
        vhost = self._vhost(request)
        who = _who(request)
        return self._list(
            request,
            [shapes.policy(p) for p in self.admin.policies(vhost) if who.sees_vhost(p.vhost)],
        )

    async def policy(self, request: Request) -> Response:
        vhost = self._vhost(request)
        assert vhost is not None
        name = _param(request, "name")
        existing = next((p for p in self.admin.policies(vhost) if p.name == name), None)
        if request.method == "GET":
            if existing is None:
                raise NotFoundError(f"no policy {name!r} in vhost {vhost!r}")
            return _json(shapes.policy(existing))
        if request.method == "DELETE":
            if existing is None:
                raise NotFoundError(f"no policy {name!r} in vhost {vhost!r}")
            self.admin.clear_policy(vhost, name, now_ms=self.clock_ms())
            return _no_content()
        body = await _body(request)
        policy = parse_policy(vhost, name, body)
        created = self.admin.set_policy(policy, now_ms=self.clock_ms())
        return _no_content(201 if created else 204)

    # -- definitions ---------------------------------------------------------------------

    async def definitions(self, request: Request) -> Response:
        vhost = self._vhost(request)
        if request.method == "GET":
            return _json(definitions.export(self.admin, vhost))
        body = await _body(request)
        definitions.import_(self.admin, body, vhost, now_ms=self.clock_ms())
        return _no_content()


def parse_user(body: Mapping[str, Any]) -> tuple[str | None, str | None, list[str]]:
    """(password, password_hash, tags) of a user body; RabbitMQ sends tags comma-separated."""
    raw_tags = body.get("tags", "")
    if isinstance(raw_tags, str):
        tags = [t.strip() for t in raw_tags.split(",") if t.strip()]
    elif isinstance(raw_tags, list) and all(isinstance(t, str) for t in raw_tags):
        tags = list(raw_tags)
    else:
        raise BadRequestError("tags must be a comma-separated string or a list of strings")
    algorithm = body.get("hashing_algorithm", "rabbit_password_hashing_sha256")
    if algorithm != "rabbit_password_hashing_sha256":
        raise BadRequestError(f"unsupported hashing_algorithm {algorithm!r}")
    password = body.get("password")
    password_hash = body.get("password_hash")
    if password is not None and password_hash is not None:
        raise BadRequestError("give password or password_hash, not both")
    if password is None and password_hash is None:
        raise BadRequestError("password or password_hash is required")
    if password is not None:
        password = _str(password, "password")
    if password_hash is not None:
        password_hash = _str(password_hash, "password_hash")
        try:
            raw = base64.b64decode(password_hash, validate=True)
        except binascii.Error:
            raise BadRequestError("password_hash is not base64") from None
        if password_hash and len(raw) != 36:
            raise BadRequestError("password_hash must be base64(4-byte salt + sha256)")
    return password, password_hash, tags


def parse_permission(vhost: str, user: str, body: Mapping[str, Any]) -> PermissionInfo:
    """Validate `{"configure", "write", "read"}` (regular expressions)."""
    fields = {}
    for key in ("configure", "write", "read"):
        value = _str(body.get(key), key)
        try:
            re.compile(value)
        except re.error as exc:
            raise BadRequestError(f"invalid {key} pattern {value!r}: {exc}") from None
        fields[key] = value
    return PermissionInfo(user=user, vhost=vhost, **fields)


def parse_policy(vhost: str, name: str, body: Mapping[str, Any]) -> PolicyInfo:
    """Validate a policy body (`pattern`, `definition`, `priority`, `apply-to`)."""
    pattern = _str(body.get("pattern"), "pattern")
    definition = _dict(body.get("definition"), "definition")
    if not definition:
        raise BadRequestError("policy definition must not be empty")
    apply_to = _str(body.get("apply-to"), "apply-to", "all")
    if apply_to not in ("all", "queues", "exchanges", "classic_queues", "quorum_queues"):
        raise BadRequestError(f"invalid apply-to {apply_to!r}")
    try:
        re.compile(pattern)
    except re.error as exc:
        raise BadRequestError(f"invalid pattern {pattern!r}: {exc}") from None
    return PolicyInfo(
        vhost=vhost,
        name=name,
        pattern=pattern,
        definition=definition,
        priority=_int(body.get("priority"), "priority", 0),
        apply_to=apply_to,
    )
