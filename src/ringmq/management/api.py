"""The RabbitMQ-compatible HTTP API (`/api/...`): authentication, authorisation, errors, and the
node-wide endpoints; each resource family's handlers live in their own module.

Theory of operation: every handler runs on the broker's event loop and calls the synchronous
facade (`admin.CoreAdmin`) directly (the loop thread owns the core, so there are no locks and
no awaits in the middle of a change; the one exception is `/get`, which holds what it fetched
until it settles it and yields to the loop between slices of `GET_SLICE` messages). Each
request is authenticated with HTTP Basic against the broker's users (`authenticate`) and
authorised by its route's rule in `authz.RULES` (`guard`: tag gate, body media type, the AMQP
permission checks) before the handler runs; handlers only filter listings with the caller's
`authz.Principal`. A request is then parsed and validated completely (`params`) *before* the
facade is called, so a bad request (400) or a missing object (404) never leaves the broker
half-changed. Errors leave through one boundary (`_wrap`), in RabbitMQ's `{"error", "reason"}`
shape, logged by whose fault they are (`errors.answer`). The guard is also what reads a
request's body, under the body limit (`bodies`).

`Api.route` puts a handler behind that guard and boundary; every `/api` endpoint is made with
it. The handlers are grouped by what they own, each a `Resource` over one `Api`:
`topology` (exchanges, publish, bindings), `queues` (queues, purge, get, settings, scheduled
messages), `access` (vhosts, users, permissions, policies), `sessions` (connections, channels,
consumers), `definitions` (export and import), plus `nodes`, `health`, `browse` and `streams`.
`app.create_app` mounts them all.

Path segments arrive percent-encoded (`/api/queues/%2F/orders`): `app.py` keeps each segment
quoted while routing and handlers unquote the path parameters they read (`params.param`).
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import ipaddress
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any, Final, cast
from urllib.parse import unquote

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from ringmq import __version__
from ringmq.core.auth import Identity
from ringmq.core.routing import EXCHANGE_TYPE_NAMES
from ringmq.management import authz, bodies, paging, shapes
from ringmq.management.admin import CoreAdmin
from ringmq.management.authz import MANAGEMENT_TAGS, NotAuthorisedError, Principal
from ringmq.management.errors import NotFoundError, UnauthorizedError, answer
from ringmq.management.params import caller, json_response, param
from ringmq.management.port import ConnectionInfo, Runtime
from ringmq.management.rates import RateSampler
from ringmq.management.records import QueueInfo, UserInfo

SlowLogin = Callable[[str, str], Awaitable[Identity | None]]
"""`await slow_login(user, password)`: who a slow backend (LDAP) logs in (with the grant of
that request), or None."""

log = logging.getLogger(__name__)

EXCHANGE_TYPES: Final = EXCHANGE_TYPE_NAMES  # the broker's own list (core.routing)
_AUTH_CACHE_MS: Final = 5_000
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


class Api:
    """Handlers of `/api/*` bound to one broker facade, one runtime and one rate sampler."""

    def __init__(
        self,
        admin: CoreAdmin,
        runtime: Runtime,
        sampler: RateSampler,
        clock_ms: Callable[[], int] = wall_ms,
        slow_login: SlowLogin | None = None,
    ) -> None:
        self.admin = admin
        self.runtime = runtime
        self.sampler = sampler
        self.clock_ms = clock_ms
        self.slow_login = slow_login
        """The slow login backends (LDAP), asked when the user table refuses a password:
        `await slow_login(user, password)` is who they log in, or None."""
        self._auth_cache: dict[str, tuple[int, UserInfo]] = {}

    # -- plumbing ------------------------------------------------------------------------

    def _credentials(self, request: Request) -> tuple[str, str, str]:
        # (cache key, user, password) of Basic credentials; a Bearer token (the console's
        # OAuth 2 login, RabbitMQ's management.oauth) is (key, "", token)
        header = request.headers.get("authorization", "")
        scheme, _, token = header.partition(" ")
        if scheme.lower() not in ("basic", "bearer") or not token:
            raise UnauthorizedError("Not_Authorized")
        client = request.client.host if request.client else ""
        key = hashlib.sha256(f"{client}\0{scheme.lower()}\0{token}".encode()).hexdigest()
        if scheme.lower() == "bearer":
            return key, "", token
        try:
            username, sep, password = base64.b64decode(token).decode("utf-8").partition(":")
        except (binascii.Error, UnicodeDecodeError):
            raise UnauthorizedError("Not_Authorized") from None
        if not sep:
            raise UnauthorizedError("Not_Authorized")
        return key, username, password

    async def authenticate_any(self, request: Request) -> UserInfo:
        """`authenticate`, then the slow backends (LDAP) for a password the user table and
        the tokens refused."""
        try:
            return self.authenticate(request)
        except UnauthorizedError as exc:
            if self.slow_login is None or exc.reason != "Login failed":
                raise
            key, username, password = self._credentials(request)
            if not username:
                raise
            who = await self.slow_login(username, password)
            found = self.admin.granted_user(who.grant) if who is not None else None
            if found is None:
                raise
            request.scope[LOGIN_OUTCOME] = True
            return self._admit(request, key, found)

    def authenticate(self, request: Request) -> UserInfo:
        """The user of a request's Basic credentials (or Bearer token); raise 401 otherwise."""
        key, username, password = self._credentials(request)
        now = self.clock_ms()
        cached = self._auth_cache.get(key)
        if cached is not None and now - cached[0] < _AUTH_CACHE_MS:
            request.scope[LOGIN_OUTCOME] = True
            return cached[1]
        if username:
            found = self.admin.authenticate(username, password)
        else:  # a token: valid, signed, for this resource server (`core.oauth`)
            found = self.admin.token_user(password, now)
        # what the login throttle counts (management.app): wrong credentials only, not a
        # refusal of a user who logged in (a missing tag or permission)
        request.scope[LOGIN_OUTCOME] = found is not None
        if found is None:
            raise UnauthorizedError("Login failed")
        return self._admit(request, key, found)

    def _admit(self, request: Request, key: str, found: UserInfo) -> UserInfo:
        if not MANAGEMENT_TAGS.intersection(found.tags):
            raise UnauthorizedError("Not management user")
        if found.loopback_only and not _is_loopback(request):
            raise UnauthorizedError("User can only log in via localhost")
        if len(self._auth_cache) > 256:
            self._auth_cache.clear()
        self._auth_cache[key] = (self.clock_ms(), found)
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
        for c in self.runtime.connections():
            totals[shapes.connection_key(c.name)] = {"recv_oct": c.recv_oct, "send_oct": c.send_oct}
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
        principal = Principal(await self.authenticate_any(request), self.admin)
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
            if rule.body == authz.PUBLISH_BODY:
                bodies.lift_limit(request.scope)  # a batch of messages, not a document
            body = await request.body()  # within the body limit (bodies.BodyLimit), or 413
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
            except Exception as exc:  # noqa: BLE001 - the boundary; `answer` logs a defect
                return answer(exc, request, log)

        return endpoint

    def route(self, path: str, handler: Handler, methods: list[str]) -> Route:
        """A route behind the API's guard (its `authz` rule) and error boundary; endpoints
        served from other modules (nodes, health checks, browse) are made with this."""
        return Route(path, self._wrap(path, handler), methods=methods)

    def routes(self) -> list[Route]:
        """The node-wide endpoints; each resource family serves its own (`Resource.routes`)."""
        return [
            self.route("/api/overview", self.overview, ["GET"]),
            self.route("/api/whoami", self.whoami, ["GET"]),
            self.route("/api/ringmq/rates", self.rate_history, ["GET"]),
        ]

    # -- shared by the resource handlers ---------------------------------------------------

    def listing(self, request: Request, items: list[dict[str, Any]]) -> JSONResponse:
        """A list answer, paginated and sorted as the query asks (`paging`)."""
        return json_response(paging.apply(items, request.query_params))

    def vhost_of(self, request: Request) -> str | None:
        """The path's vhost (None when the route has none); 404 when it does not exist."""
        if "vhost" not in request.path_params:
            return None
        vhost = param(request, "vhost")
        if vhost not in self.admin.vhosts():
            raise NotFoundError(f"no vhost {vhost!r}")
        return vhost

    def connections_by_id(self) -> dict[int, ConnectionInfo]:
        return {c.conn_id: c for c in self.runtime.connections()}

    def queue_json(self, q: QueueInfo) -> dict[str, Any]:
        return shapes.queue(q, self.sampler, self.runtime.node)

    def forget_logins(self) -> None:
        """Drop cached logins (a user was changed or deleted)."""
        self._auth_cache.clear()

    @staticmethod
    def owned(who: Principal, conns: dict[int, ConnectionInfo], conn_id: int) -> bool:
        """`who` may see what connection `conn_id` owns (its channels, its consumers)."""
        conn = conns.get(conn_id)
        return who.is_monitor or (conn is not None and who.sees_owner(conn.user))

    @staticmethod
    def exchange_name(raw: str) -> str:
        """A path's exchange name: RabbitMQ names the default exchange "amq.default" in URLs."""
        return "" if raw == "amq.default" else raw

    def find_exchange(self, vhost: str, name: str) -> dict[str, Any]:
        """The exchange's JSON; 404 when there is none."""
        for x in self.admin.exchanges(vhost):
            if x.name == name:
                return shapes.exchange(x, self.sampler)
        raise NotFoundError(f"no exchange {name!r} in vhost {vhost!r}")

    def find_queue(self, vhost: str, name: str) -> QueueInfo:
        """The queue's snapshot; NOT_FOUND (404) when there is none."""
        return self.admin.queue(vhost, name)

    # -- node-wide endpoints ------------------------------------------------------------------

    async def overview(self, request: Request) -> Response:
        # Monitors see node-wide figures; other users the figures of their own vhosts and
        # connections (RabbitMQ's overview for a management user).
        who = caller(request)
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
        return json_response(
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
        u = await self.authenticate_any(request)
        return json_response({"name": u.name, "tags": list(u.tags)})

    async def rate_history(self, request: Request) -> Response:
        # Node-wide rates: a monitor's figures; other users get an empty history.
        return json_response(
            [{"t": t, **rates} for t, rates in self.sampler.history()]
            if self.sampler.history_key == OVERVIEW_KEY and caller(request).is_monitor
            else []
        )


class Resource:
    """The handlers of one resource family, served behind `api`'s guard (`Api.route`)."""

    def __init__(self, api: Api) -> None:
        self.api = api
        self.admin = api.admin
        self.runtime = api.runtime
        self.sampler = api.sampler
        self.clock_ms = api.clock_ms

    def routes(self) -> list[Route]:
        """This family's routes, each made with `self.api.route`."""
        raise NotImplementedError
