"""The management ASGI app: `/api` (RabbitMQ's shape), `/metrics` (Prometheus) and `/` console.

Theory of operation: `create_app(broker, runtime)` builds one Starlette app that the server
serves with uvicorn on the broker's own event loop. Requests call the synchronous core through
the management facade (`management.admin.CoreAdmin`), so no lock is needed. This is where the
routes are gathered: the API's node-wide ones and each resource family's (`topology`,
`queues`, `access`, `sessions`, `definitions`, `nodes`, `health`, `browse`, `streams`).
Rates come from counter samples taken lazily before a request when the last sample is older
than the interval, plus a loop timer armed by the first request, so the console's live plot
keeps moving even with uvicorn's lifespan off.

RabbitMQ clients send the vhost "/" as `%2F`; ASGI servers decode `path`, which would turn
`/api/queues/%2F/q` into `/api/queues///q`. `_RawPath` re-derives `path` from `raw_path`
keeping each segment percent-encoded; handlers unquote the parameters they read.

Logins: when the runtime offers a `login_guard` (`core.throttle.LoginGuard`, shared with the
AMQP listener), `_LoginThrottle` slows repeated failed Basic logins per source address.

Request bodies are read under the body limit (`bodies.BodyLimit`, `max_body_size`): a larger
one is answered 413 before it is buffered.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import contextlib
import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any
from urllib.parse import quote, unquote

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles
from starlette.types import ASGIApp, Receive, Scope, Send

from ringmq import __version__
from ringmq.core.broker import Broker
from ringmq.core.throttle import LoginGuard
from ringmq.management import (
    bodies,
    browse,
    cliscript,
    cluster,
    consoleauth,
    health,
    metrics,
    nodes,
    streams,
)
from ringmq.management.access import Access
from ringmq.management.admin import CoreAdmin
from ringmq.management.api import LOGIN_OUTCOME, Api, SlowLogin, wall_ms
from ringmq.management.consoleauth import ConsoleOAuth
from ringmq.management.definitions import Definitions
from ringmq.management.errors import UnauthorizedError, to_response
from ringmq.management.limits import Limits
from ringmq.management.parameters import Parameters
from ringmq.management.port import Runtime
from ringmq.management.queues import Queues
from ringmq.management.rates import DEFAULT_INTERVAL_MS, RateSampler
from ringmq.management.sessions import Sessions
from ringmq.management.topicperms import TopicPermissions
from ringmq.management.topology import Topology

log = logging.getLogger(__name__)

CONSOLE_DIR = Path(__file__).parent / "console"


class _RawPath:
    """ASGI middleware: route on percent-encoded path segments (see module docstring)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            raw = scope.get("raw_path")
            text = raw.decode("latin-1") if raw else quote(scope["path"])
            text = text.split("?", 1)[0]
            segments = [quote(unquote(s), safe="~@:+!$&'()*,;=") for s in text.split("/")]
            scope = dict(scope)
            scope["path"] = "/".join(segments)
        await self.app(scope, receive, send)


def _basic_user(header: bytes) -> str | None:
    """The user name of a Basic `Authorization` header (None: not Basic credentials)."""
    scheme, _, token = header.partition(b" ")
    if scheme.lower() != b"basic" or not token:
        return None
    try:
        return base64.b64decode(token).decode("utf-8").partition(":")[0]
    except (binascii.Error, UnicodeDecodeError):
        return ""


class _LoginThrottle:
    """ASGI middleware: the login throttle (`core.throttle.LoginGuard`) for Basic credentials.

    A request carrying Basic credentials from an address with repeated failures waits before
    it is handled (or is refused unchecked); credentials `Api.authenticate` found wrong count as
    a failed login of that user from that address, right ones as a success (a user refused for
    a missing tag or permission logged in: that is no guess to slow down). It wraps the whole
    app, so the API and `/api/streams` are covered.
    """

    def __init__(self, app: ASGIApp, guard: LoginGuard, clock_ms: Callable[[], int]) -> None:
        self.app = app
        self.guard = guard
        self.clock_ms = clock_ms

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        user = None
        if scope["type"] == "http":
            for name, value in scope.get("headers", ()):
                if name == b"authorization":
                    user = _basic_user(value)
                    break
        if user is None:
            await self.app(scope, receive, send)
            return
        client = scope.get("client")
        source = str(client[0]) if client else ""
        delay = self.guard.before(source, self.clock_ms())
        if delay is None:
            await to_response(UnauthorizedError("Login failed"))(scope, receive, send)
            return
        if delay:
            await asyncio.sleep(delay / 1000)
        await self.app(scope, receive, send)
        outcome = scope.get(LOGIN_OUTCOME)  # set by Api.authenticate when it checked them
        if outcome is False:
            self.guard.failed(source, user, "HTTP", "wrong credentials", self.clock_ms())
        elif outcome is True:
            self.guard.succeeded(source)


class _Sampler:
    """Background rate sampling on the loop, armed lazily (uvicorn's lifespan is off).

    A self-re-arming `loop.call_later` rather than a task: it needs no cancellation when the
    server stops uvicorn, and a pending timer at loop close is silently dropped.
    """

    def __init__(self, api: Api, interval_s: float) -> None:
        self.api = api
        self.interval_s = interval_s
        self.handle: asyncio.TimerHandle | None = None
        self.stopped = False

    def ensure_started(self) -> None:
        if self.handle is None and not self.stopped:
            self.handle = asyncio.get_running_loop().call_later(self.interval_s, self._tick)

    def _tick(self) -> None:
        self.handle = None
        try:
            self.api.refresh_rates()
        except Exception:
            log.exception("rate sampling failed")
        self.ensure_started()

    def stop(self) -> None:
        self.stopped = True
        if self.handle is not None:
            self.handle.cancel()
            self.handle = None


def create_app(
    broker: Broker,
    runtime: Runtime,
    *,
    rate_interval_ms: int = DEFAULT_INTERVAL_MS,
    background_rates: bool = True,
    clock_ms: Callable[[], int] = wall_ms,
    max_body_size: int | None = None,
    slow_login: SlowLogin | None = None,
    console_oauth: ConsoleOAuth | None = None,
) -> Starlette:
    """The management ASGI app for a core broker.

    Args:
        broker: the core broker (management reaches it through `CoreAdmin`).
        runtime: the server (`Runtime` port): connections, listeners, effect application.
        rate_interval_ms: how often counters are sampled for rates.
        background_rates: sample on a timer too (off in tests that drive `clock_ms`).
        clock_ms: wall clock in ms (tests pass a fake).
        max_body_size: largest request body in bytes, larger ones are answered 413
            (`management.http.max_body_size`; None: `bodies.DEFAULT_MAX_BODY_SIZE`).
        slow_login: the slow login backends (LDAP) for passwords the user table refuses.
        console_oauth: the console's OAuth 2 login (`management.oauth_enabled`), or None.
    """
    max_body = bodies.DEFAULT_MAX_BODY_SIZE if max_body_size is None else max_body_size
    admin = CoreAdmin(broker, runtime)
    sampler = RateSampler(interval_ms=rate_interval_ms, history_key="overview")
    api = Api(admin, runtime, sampler, clock_ms, slow_login)
    background = _Sampler(api, rate_interval_ms / 1000)

    probe = nodes.NodeProbe(admin, runtime)

    def node_metrics() -> metrics.NodeMetrics:
        f = probe.read(clock_ms())
        node_cluster = cluster.cluster_of(runtime)
        view = node_cluster.view() if node_cluster is not None else None
        return metrics.NodeMetrics(
            mem_used=f.mem_used,
            mem_limit=f.mem_limit,
            disk_free=f.disk_free,
            disk_free_limit=f.disk_free_limit,
            fd_used=f.fd_used,
            fd_total=f.fd_total,
            mem_alarm=f.mem_alarm,
            disk_alarm=f.disk_free_alarm,
            uptime_ms=f.uptime_ms,
            started_at_ms=f.started_at_ms,
            stats=admin.stats(),
            by_protocol=admin.counts_by_protocol(),
            cluster_leader=view is None or view.role == "leader",
            cluster_epoch=view.epoch if view else 0,
            cluster_isr_size=len(view.isr) if view else 1,
            cluster_nodes_running=sum(n.running for n in view.nodes) if view else 1,
        )

    def scrape(per_object: bool) -> Response:
        text = metrics.render(
            admin.queues(),
            connections=runtime.connections(),
            consumers=admin.consumers(),
            channels=len(admin.channels()),
            exchanges=len(admin.exchanges()),
            node=runtime.node,
            version=__version__,
            node_metrics=node_metrics(),
            per_object=per_object,
        )
        return PlainTextResponse(text, media_type=metrics.CONTENT_TYPE)

    async def metrics_endpoint(request: Request) -> Response:
        return scrape(per_object=False)  # rabbitmq_prometheus' default: aggregated

    async def metrics_per_object(request: Request) -> Response:
        return scrape(per_object=True)

    async def metrics_detailed(request: Request) -> Response:
        try:
            text = metrics.render_detailed(
                admin.queues(),
                request.query_params.getlist("family"),
                vhosts=request.query_params.getlist("vhost"),
                node=runtime.node,
                version=__version__,
                stats=admin.stats(),
            )
        except ValueError as exc:
            return PlainTextResponse(str(exc), status_code=400)
        return PlainTextResponse(text, media_type=metrics.CONTENT_TYPE)

    routes: list[Route | Mount] = [
        *consoleauth.routes(console_oauth),  # /api/auth: how the console logs in
        *api.routes(),  # /api/overview, /api/whoami, /api/ringmq/rates
        *Topology(api).routes(),  # /api/exchanges, /api/bindings
        *Queues(api).routes(),  # /api/queues
        *Access(api).routes(),  # /api/vhosts, /api/users, /api/permissions, /api/policies
        *TopicPermissions(api).routes(),  # /api/topic-permissions
        *Limits(api).routes(),  # /api/vhost-limits, /api/user-limits
        *Parameters(api).routes(),  # /api/parameters, /api/global-parameters
        *Sessions(api).routes(),  # /api/connections, /api/channels, /api/consumers
        *Definitions(api).routes(),  # /api/definitions
        *streams.mount(admin, runtime, api.guard),  # /api/streams: reservations for offset readers
        *nodes.routes(api, probe),  # /api/nodes (monitoring)
        *cluster.routes(api, runtime),  # /api/cluster, /api/cluster/step-down
        *health.routes(api, probe),  # /api/health/checks/*, /api/aliveness-test (any user)
        *browse.routes(api),  # POST /api/queues/{vhost}/{name}/browse: peek in place
        Route("/metrics", metrics_endpoint, methods=["GET"]),
        Route("/metrics/per-object", metrics_per_object, methods=["GET"]),
        Route("/metrics/detailed", metrics_detailed, methods=["GET"]),
        *cliscript.routes(),  # /cli/rabbitmqadmin, as RabbitMQ's management plugin
        Mount("/", StaticFiles(directory=CONSOLE_DIR, html=True), name="console"),
    ]

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> Any:
        yield
        background.stop()

    app = Starlette(routes=routes, lifespan=lifespan)
    app.state.api = api
    app.state.admin = admin

    inner = app.build_middleware_stack

    def build() -> ASGIApp:
        stack = inner()

        async def with_sampler(scope: Scope, receive: Receive, send: Send) -> None:
            if scope["type"] == "http" and background_rates:
                background.ensure_started()
            await stack(scope, receive, send)

        # the body limit outside the login throttle, which reads what `Api.authenticate`
        # wrote in the scope it passed on (BodyLimit hands on a copy)
        guard = getattr(runtime, "login_guard", None)
        if isinstance(guard, LoginGuard):
            return _RawPath(
                bodies.BodyLimit(_LoginThrottle(with_sampler, guard, clock_ms), max_body)
            )
        return _RawPath(bodies.BodyLimit(with_sampler, max_body))

    app.build_middleware_stack = build  # type: ignore[method-assign]
    return app
