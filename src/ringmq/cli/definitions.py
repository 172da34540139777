"""`ringmq policy set|clear|list` and `ringmq definitions export|import` (RabbitMQ's JSON)."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated

import typer

from ringmq.cli.admin import _LISTS
from ringmq.cli.apiclient import (
    DEFAULT_PASSWORD,
    DEFAULT_URL,
    DEFAULT_USER,
    AsJson,
    Password,
    Url,
    User,
    Vhost,
    _client,
    _print_json,
    _progress,
    _q,
    _table,
    err,
    out,
)

# -- policies and definitions ----------------------------------------------------------------------

policy_app = typer.Typer(help="Set, clear or list policies.")


@policy_app.command(name="set")
def policy_set(
    name: str,
    pattern: str,
    definition: Annotated[str, typer.Argument(help="JSON, e.g. '{\"ring-size\": 3}'.")],
    priority: int = 0,
    apply_to: Annotated[str, typer.Option(help="all, queues or exchanges.")] = "all",
    vhost: Vhost = "/",
    url: Url = DEFAULT_URL,
    user: User = DEFAULT_USER,
    password: Password = DEFAULT_PASSWORD,
) -> None:
    """Create or replace a policy."""
    try:
        parsed = json.loads(definition)
    except ValueError as exc:
        raise typer.BadParameter(f"not JSON: {exc}", param_hint="DEFINITION") from None
    body = {"pattern": pattern, "definition": parsed, "priority": priority, "apply-to": apply_to}
    with _client(url, user, password) as c:
        c.request("PUT", f"/policies/{_q(vhost)}/{_q(name)}", body)
    out.print(f"policy [bold]{name}[/bold] set")


@policy_app.command(name="clear")
def policy_clear(
    name: str,
    vhost: Vhost = "/",
    url: Url = DEFAULT_URL,
    user: User = DEFAULT_USER,
    password: Password = DEFAULT_PASSWORD,
) -> None:
    """Delete a policy."""
    with _client(url, user, password) as c:
        c.request("DELETE", f"/policies/{_q(vhost)}/{_q(name)}")
    out.print(f"policy [bold]{name}[/bold] cleared")


@policy_app.command(name="list")
def policy_list(
    url: Url = DEFAULT_URL,
    user: User = DEFAULT_USER,
    password: Password = DEFAULT_PASSWORD,
    as_json: AsJson = False,
) -> None:
    """List policies."""
    with _client(url, user, password) as c:
        rows = c.request("GET", "/policies")
    if as_json:
        _print_json(rows)
    else:
        _table("policies", _LISTS["policies"][1], rows)


definitions_app = typer.Typer(help="Export or import definitions (RabbitMQ's JSON format).")


@definitions_app.command(name="export")
def definitions_export(
    file: Annotated[Path | None, typer.Argument(help="Output file (default: stdout).")] = None,
    url: Url = DEFAULT_URL,
    user: User = DEFAULT_USER,
    password: Password = DEFAULT_PASSWORD,
) -> None:
    """Export users, vhosts, permissions, policies, queues, exchanges and bindings."""
    with _client(url, user, password) as c, _progress() as progress:
        task = progress.add_task("exporting definitions", total=1)
        doc = c.request("GET", "/definitions")
        progress.advance(task)
    text = json.dumps(doc, indent=2, sort_keys=True) + "\n"
    if file is None:
        sys.stdout.write(text)
    else:
        file.write_text(text, encoding="utf-8")
        n = {k: len(doc.get(k, [])) for k in ("queues", "exchanges", "bindings", "policies")}
        err.print(f"exported to {file}: " + ", ".join(f"{v} {k}" for k, v in n.items()))


@definitions_app.command(name="import")
def definitions_import(
    file: Annotated[Path, typer.Argument(help="A definitions JSON file.", exists=True)],
    url: Url = DEFAULT_URL,
    user: User = DEFAULT_USER,
    password: Password = DEFAULT_PASSWORD,
) -> None:
    """Import definitions (checked as a whole first: nothing is applied if any part is bad)."""
    try:
        doc = json.loads(file.read_text(encoding="utf-8"))
    except ValueError as exc:
        raise typer.BadParameter(f"not JSON: {exc}", param_hint="FILE") from None
    with _client(url, user, password) as c, _progress() as progress:
        task = progress.add_task("importing definitions", total=1)
        c.request("POST", "/definitions", doc)
        progress.advance(task)
    out.print(f"imported {file}")


def register(app: typer.Typer) -> None:
    """Add `policy` and `definitions` to the CLI."""
    app.add_typer(policy_app, name="policy")
    app.add_typer(definitions_app, name="definitions")
