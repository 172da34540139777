"""Health checks for load balancers and probes, in RabbitMQ's shapes and status codes.

Theory of operation: each check answers 200 `{"status": "ok", ...}` when healthy and 503
`{"status": "failed", "reason": ..., ...}` when not (RabbitMQ's `HEALTH_CHECK_FAILURE_STATUS`),
so a probe needs only the status code:

* `/api/health/checks/alarms` and `/local-alarms`: any resource alarm (memory, disk, a journal
  write failure) fails, listing `alarms: [{"resource", "node"}]` (one node: both are the same).
* `/api/health/checks/port-listener/{port}`: fails with `missing` and the `ports` that do
  listen when no listener has that port; a port that is not a number is 400 "Invalid port".
* `/api/health/checks/virtual-hosts`: ringmq's vhosts live in the one core and cannot be down
  on their own, so it is ok while the broker answers.
* `/api/aliveness-test/{vhost}`: declares the non-durable queue `aliveness-test` in the vhost,
  publishes `test_message` to it through the default exchange and gets it back (the older
  RabbitMQ behaviour, a real round trip through the core); 404 for an unknown vhost.

Authorisation as RabbitMQ: the checks need any management user (`is_authorized`); the
aliveness test needs access to the vhost (`is_authorized_vhost`: a permission entry there).
"""

from __future__ import annotations

from typing import Any, Final
from urllib.parse import unquote

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from ringmq.management.api import Api
from ringmq.management.errors import BadRequestError, NotFoundError
from ringmq.management.nodes import ALARM_RESOURCES, NodeProbe

FAILURE_STATUS: Final = 503
ALIVENESS_QUEUE: Final = "aliveness-test"
ALIVENESS_BODY: Final = b"test_message"


def _ok(**extra: Any) -> JSONResponse:
    return JSONResponse({"status": "ok", **extra})


def _failed(reason: str, **extra: Any) -> JSONResponse:
    return JSONResponse({"status": "failed", "reason": reason, **extra}, status_code=FAILURE_STATUS)


def routes(api: Api, probe: NodeProbe) -> list[Route]:
    """The health-check routes, wrapped by the API's error boundary (auth included)."""
    node = probe.runtime.node

    async def alarms(request: Request) -> Response:
        found = probe.alarms()
        if not found:
            return _ok()
        listed = sorted({ALARM_RESOURCES.get(k, k) for k in found})
        return _failed(
            "There are alarms in effect on the node",
            alarms=[{"resource": r, "node": node} for r in listed],
        )

    async def port_listener(request: Request) -> Response:
        raw = unquote(request.path_params["port"])
        if not raw.isdigit():
            raise BadRequestError("Invalid port")
        port = int(raw)
        ports = [ln.port for ln in probe.runtime.listeners()]
        if port in ports:
            return _ok(port=port)
        return _failed("No active listener", missing=port, ports=ports)

    async def virtual_hosts(request: Request) -> Response:
        api.admin.vhosts()  # the core answers: every vhost is up
        return _ok()

    async def aliveness(request: Request) -> Response:
        vhost = unquote(request.path_params["vhost"])
        admin = api.admin
        if vhost not in admin.vhosts():
            raise NotFoundError()

        def round_trip() -> bytes | None:
            now = api.clock_ms()
            admin.declare_queue(
                vhost, ALIVENESS_QUEUE, durable=False, auto_delete=False, arguments={}, now_ms=now
            )
            admin.purge_queue(vhost, ALIVENESS_QUEUE, now_ms=now)
            admin.publish(vhost, "", ALIVENESS_QUEUE, ALIVENESS_BODY, {}, now_ms=now)
            got = admin.get_messages(
                vhost, ALIVENESS_QUEUE, count=1, ackmode="ack_requeue_false", now_ms=now
            )
            return got[0].body if got else None

        try:
            body = probe.runtime.run_batch(round_trip)
        except Exception as exc:  # noqa: BLE001 - a probe reports, it does not crash
            return _failed(f"aliveness test failed: {exc}")
        if body != ALIVENESS_BODY:
            return _failed("aliveness test failed: the test message did not come back")
        return _ok()

    # who may call them: management.authz (any management user; aliveness: vhost access)
    return [
        api.route("/api/health/checks/alarms", alarms, ["GET"]),
        api.route("/api/health/checks/local-alarms", alarms, ["GET"]),
        api.route("/api/health/checks/port-listener/{port}", port_listener, ["GET"]),
        api.route("/api/health/checks/virtual-hosts", virtual_hosts, ["GET"]),
        api.route("/api/aliveness-test/{vhost}", aliveness, ["GET"]),
    ]
