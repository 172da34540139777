"""`/api/nodes` and `/api/nodes/{name}`: the node's figures in RabbitMQ's shape.

Theory of operation: ringmq is one node. `NodeProbe` reads what the server already measures —
the memory monitor's last reading, watermark and free-disk limit (`server.memory`), the core's
alarms, the listeners and connections — plus what only the OS knows at request time (open file
descriptors from `/proc/self/fd`, their limit from `RLIMIT_NOFILE`). Field names are
RabbitMQ's (`rabbit_mgmt_wm_nodes`: `mem_used`, `mem_limit`, `mem_alarm`, `disk_free`,
`disk_free_limit`, `disk_free_alarm`, `fd_used`, `fd_total`, `sockets_used`, `uptime` in ms...)
so rabbitmqadmin's `list nodes` and dashboards built on it fill in. The same probe feeds the
health checks (health.py), `/metrics` (metrics.py) and the console's overview.

Clustered (`--cluster-etcd`), the list has every node etcd knows: this one with its figures,
the others with what etcd says of them (name, running, cluster address and ports). Every entry
carries the cluster's fields: `role` ("leader"/"follower"), `epoch`, `in_sync` (in the ISR).
A single node is its own leader: `role` "leader", `epoch` 0, `in_sync` true.

Authorisation as RabbitMQ's `rabbit_mgmt_wm_node`: `is_authorized_monitor`, i.e. the
`monitoring` or `administrator` tag.

Runs on the loop thread; reads only.
"""

from __future__ import annotations

import os
import resource
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final
from urllib.parse import unquote

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from ringmq import __version__
from ringmq.core.routing import EXCHANGE_TYPE_NAMES
from ringmq.management.admin import CoreAdmin
from ringmq.management.api import Api
from ringmq.management.cluster import cluster_of
from ringmq.management.errors import NotFoundError
from ringmq.management.port import Runtime

"""Tags RabbitMQ's `is_authorized_monitor` accepts (nodes; node figures in metrics)."""

ALARM_RESOURCES: Final = {"memory": "memory", "disk": "disk", "disk_write": "disk"}
"""Core alarm key -> RabbitMQ's resource name (a journal write failure is a disk alarm)."""


@dataclass(frozen=True, slots=True)
class NodeFigures:
    """One reading of the node (see the module docstring)."""

    name: str
    mem_used: int
    mem_limit: int
    mem_alarm: bool
    disk_free: int
    disk_free_limit: int
    disk_free_alarm: bool
    fd_used: int
    fd_total: int
    sockets_used: int
    uptime_ms: int
    started_at_ms: int
    alarms: dict[str, str]
    """Core alarm key ("memory", "disk", "disk_write") -> reason."""


def open_fds() -> int:
    """File descriptors this process has open (0 where /proc is missing)."""
    try:
        return len(os.listdir("/proc/self/fd"))
    except OSError:
        return 0


def max_fds() -> int:
    """The soft RLIMIT_NOFILE (what `open` runs into)."""
    soft, _hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    return soft if soft != resource.RLIM_INFINITY else 2**31 - 1


class NodeProbe:
    """Reads the node's figures from the server (`runtime`) and the core (the facade)."""

    def __init__(self, admin: CoreAdmin, runtime: Runtime) -> None:
        self.admin = admin
        self.runtime = runtime

    def alarms(self) -> dict[str, str]:
        return dict(self.admin.alarms())

    def read(self, now_ms: int) -> NodeFigures:
        monitor = getattr(self.runtime, "memory", None)
        alarms = self.alarms()
        mem_used = mem_limit = disk_limit = 0
        disk_free: int | None = None
        if monitor is not None:
            mem_used = int(monitor.used)
            mem_limit = int(monitor.governor.watermark_bytes)
            disk_limit = int(monitor.governor.limits.disk_free_limit)
            disk_free = monitor.disk_free
        if disk_free is None:
            disk_free = _disk_free(self._data_dir())
        started = int(self.runtime.started_at_ms)
        return NodeFigures(
            name=self.runtime.node,
            mem_used=mem_used,
            mem_limit=mem_limit,
            mem_alarm="memory" in alarms,
            disk_free=disk_free,
            disk_free_limit=disk_limit,
            disk_free_alarm="disk" in alarms or "disk_write" in alarms,
            fd_used=open_fds(),
            fd_total=max_fds(),
            sockets_used=len(self.runtime.connections()),
            uptime_ms=max(0, now_ms - started),
            started_at_ms=started,
            alarms=alarms,
        )

    def _data_dir(self) -> Path:
        options = getattr(self.runtime, "options", None)
        return Path(getattr(options, "data_dir", "."))

    def nodes_json(self, now_ms: int) -> list[dict[str, Any]]:
        """RabbitMQ's `/api/nodes`: this node, and the cluster's others when clustered."""
        cluster = cluster_of(self.runtime)
        if cluster is None:
            return [self.node_json(now_ms)]
        view = cluster.view()
        out = []
        for n in view.nodes:
            fields = {
                "role": n.role,
                "epoch": n.epoch,
                "in_sync": n.in_sync,
                "cluster_address": n.address,
            }
            if n.name == self.runtime.node:
                out.append({**self.node_json(now_ms), **fields})
            else:
                out.append(
                    {
                        "name": n.name,
                        "type": "disc",
                        "running": n.running,
                        "being_drained": False,
                        "partitions": [],
                        "alarms": [],
                        "amqp_port": n.amqp_port,
                        "http_port": n.http_port,
                        **fields,
                    }
                )
        return out

    def node_json(self, now_ms: int) -> dict[str, Any]:
        """This node's element of RabbitMQ's `/api/nodes`."""
        f = self.read(now_ms)
        return {
            "name": f.name,
            "role": "leader",
            "epoch": 0,
            "in_sync": True,
            "type": "disc",
            "running": True,
            "being_drained": False,
            "mem_used": f.mem_used,
            "mem_limit": f.mem_limit,
            "mem_alarm": f.mem_alarm,
            "disk_free": f.disk_free,
            "disk_free_limit": f.disk_free_limit,
            "disk_free_alarm": f.disk_free_alarm,
            "fd_used": f.fd_used,
            "fd_total": f.fd_total,
            "sockets_used": f.sockets_used,
            "sockets_total": f.fd_total,
            "uptime": f.uptime_ms,
            "processors": os.cpu_count() or 1,
            "os_pid": str(os.getpid()),
            "rates_mode": "basic",
            "partitions": [],
            "alarms": [
                {"resource": ALARM_RESOURCES.get(k, k), "reason": v}
                for k, v in sorted(f.alarms.items())
            ],
            "exchange_types": [
                {"name": t, "description": "", "enabled": True} for t in EXCHANGE_TYPE_NAMES
            ],
            "applications": [
                {"name": "ringmq", "description": "RingMQ message broker", "version": __version__}
            ],
            "enabled_plugins": [],
            "ringmq_version": __version__,
            "db_dir": str(self._data_dir()),
        }


def _disk_free(path: Path) -> int:
    try:
        return shutil.disk_usage(path).free
    except OSError:
        return 0


def routes(api: Api, probe: NodeProbe) -> list[Route]:
    """`/api/nodes` and `/api/nodes/{name}`, wrapped by the API's error boundary."""

    async def nodes(request: Request) -> Response:
        return JSONResponse(probe.nodes_json(api.clock_ms()))

    async def node(request: Request) -> Response:
        name = unquote(request.path_params["name"])
        for entry in probe.nodes_json(api.clock_ms()):
            if entry["name"] == name:
                return JSONResponse(entry)
        raise NotFoundError("Not Found")

    # who may call them: management.authz (monitoring or administrator, as RabbitMQ)
    return [
        api.route("/api/nodes", nodes, ["GET"]),
        api.route("/api/nodes/{name}", node, ["GET"]),
    ]
