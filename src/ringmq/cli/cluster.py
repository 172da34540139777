"""`ringmq cluster status|step-down`: a cluster's nodes and a planned switchover.

Both ask the node at `--url` (`/api/cluster`). `step-down` posts to the leader: the node at
`--url` when it leads, else the leader it names, reached at its advertised host and management
port (same user and password). Exit status 1 when the API refuses, 2 when unreachable.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import urlsplit, urlunsplit

import typer

from ringmq import announce
from ringmq.cli.apiclient import (
    DEFAULT_PASSWORD,
    DEFAULT_URL,
    DEFAULT_USER,
    FALLBACK_URL,
    AsJson,
    Password,
    Url,
    User,
    _client,
    _print_json,
    _table,
    err,
    out,
)

cluster_app = typer.Typer(help="A cluster's nodes, roles and epoch; planned step-down.")


@cluster_app.command(name="status")
def status(
    url: Url = DEFAULT_URL,
    user: User = DEFAULT_USER,
    password: Password = DEFAULT_PASSWORD,
    as_json: AsJson = False,
) -> None:
    """Show the cluster as the node at --url reads it from etcd."""
    with _client(url, user, password) as c:
        view = c.request("GET", "/cluster")
    if as_json:
        _print_json(view)
        return
    if not view.get("clustered"):
        out.print(f"{view.get('node')}: a single node (not clustered), leader")
        return
    out.print(
        f"cluster {view['cluster']!r} shard {view['shard']}: leader "
        f"{view['leader'] or '(none)'}, epoch {view['epoch']}, ISR {', '.join(view['isr'])}"
        + ("" if view["etcd_ok"] else "  [etcd unreachable from this node]")
    )
    _table(
        "nodes",
        [
            ("name", "name"),
            ("role", "role"),
            ("running", "running"),
            ("epoch", "epoch"),
            ("in sync", "in_sync"),
            ("address", "address"),
        ],
        view["nodes"],
    )


@cluster_app.command(name="step-down")
def step_down(
    url: Url = DEFAULT_URL,
    user: User = DEFAULT_USER,
    password: Password = DEFAULT_PASSWORD,
) -> None:
    """Planned switchover: the leader stops leading and another in-sync node takes over."""
    with _client(url, user, password) as c:
        view = c.request("GET", "/cluster")
    if not view.get("clustered"):
        err.print("[red]error[/red] not a cluster node: nothing to step down from")
        raise typer.Exit(code=1)
    leader = view.get("leader")
    if leader is None:
        err.print("[red]error[/red] no node leads now")
        raise typer.Exit(code=1)
    here = announce.locate(url, FALLBACK_URL).url
    target = here if leader == view["node"] else _leader_url(here, view, leader)
    with _client(target, user, password) as c:
        report = c.request("POST", "/cluster/step-down", {}) or {}
    out.print(f"{leader} stepped down (epoch {report.get('epoch', view['epoch'])})")
    if "log_position" in report:
        behind = report.get("behind") or {}
        out.print(
            f"waited {report['waited_ms']} ms for {', '.join(report['waited_for']) or 'nobody'}"
            f" to reach log position {report['log_position']}"
            + (f"; behind: {', '.join(sorted(behind))}" if behind else "")
        )


def _leader_url(url: str, view: dict[str, Any], leader: str) -> str:
    node = next((n for n in view["nodes"] if n["name"] == leader), None)
    if node is None or not node.get("http_port") or not node.get("address"):
        err.print(f"[red]error[/red] the leader {leader} advertises no management port")
        raise typer.Exit(code=1)
    host = str(node["address"]).rsplit(":", 1)[0]
    parts = urlsplit(url)
    return urlunsplit((parts.scheme, f"{host}:{node['http_port']}", parts.path, "", ""))


def register(app: typer.Typer) -> None:
    """Add `cluster` to the CLI."""
    app.add_typer(cluster_app, name="cluster")
