"""`/api/cluster` and `/api/cluster/step-down`: the node's cluster as etcd shows it.

Theory of operation: a clustered node's server carries a `ClusterNode` (ringmq.cluster.agent)
that management reaches through the `Runtime` port's optional `cluster` attribute, typed here by
the `ClusterPort` protocol (what management needs of it: the last `ClusterView` and a planned
step-down). A single node has none: `/api/cluster` then answers `{"clustered": false}` and a
step-down is refused (400). A step-down answers 200 with the node's report: the epoch it gave
up and what its handover waited for. `/api/nodes` (nodes.py) reads the same view.

Authorisation: GET as `/api/nodes` (monitoring or administrator), POST administrator.
"""

from __future__ import annotations

from dataclasses import asdict
from typing import Any, Protocol

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from ringmq.cluster.view import ClusterView
from ringmq.management.api import Api
from ringmq.management.errors import BadRequestError
from ringmq.management.port import Runtime

__all__ = ["ClusterPort", "cluster_of", "routes", "view_json"]


class ClusterPort(Protocol):
    """What management needs of a cluster node."""

    def view(self) -> ClusterView: ...

    async def step_down(self) -> dict[str, object] | None: ...


def cluster_of(runtime: Runtime) -> ClusterPort | None:
    """The runtime's cluster node (None: a single node)."""
    cluster: ClusterPort | None = getattr(runtime, "cluster", None)
    return cluster


def view_json(view: ClusterView) -> dict[str, Any]:
    out = asdict(view)
    out["clustered"] = True
    out["isr"] = list(view.isr)
    out["nodes"] = [asdict(n) for n in view.nodes]
    return out


def routes(api: Api, runtime: Runtime) -> list[Route]:
    async def status(request: Request) -> Response:
        cluster = cluster_of(runtime)
        if cluster is None:
            return JSONResponse({"clustered": False, "node": runtime.node, "role": "leader"})
        return JSONResponse(view_json(cluster.view()))

    async def step_down(request: Request) -> Response:
        cluster = cluster_of(runtime)
        if cluster is None:
            raise BadRequestError("not a cluster node: nothing to step down from")
        report = await cluster.step_down()
        if report is None:
            view = cluster.view()
            raise BadRequestError(
                f"{view.node} does not lead shard {view.shard}; the leader is "
                f"{view.leader or 'not known'}"
            )
        # what it gave up and what it waited for (the followers' catch-up, server/member.py)
        return JSONResponse(report)

    return [
        api.route("/api/cluster", status, ["GET"]),
        api.route("/api/cluster/step-down", step_down, ["POST"]),
    ]
