"""`ringmq scheduled list|purge|deliver QUEUE`: a queue's scheduled messages (dates shown)."""

from __future__ import annotations

import typer

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
    _q,
    _table,
    out,
)
from ringmq.cli.formats import format_ms

# -- scheduled messages ---------------------------------------------------------------------------

scheduled_app = typer.Typer(help="List, purge or deliver a queue's scheduled messages.")


@scheduled_app.command(name="list")
def scheduled_list(
    queue: str,
    vhost: Vhost = "/",
    url: Url = DEFAULT_URL,
    user: User = DEFAULT_USER,
    password: Password = DEFAULT_PASSWORD,
    as_json: AsJson = False,
) -> None:
    """List scheduled messages."""
    with _client(url, user, password, ringmq_only="scheduled list") as c:
        rows = c.request("GET", f"/queues/{_q(vhost)}/{_q(queue)}/scheduled")
    if as_json:
        _print_json(rows)
    else:
        shown = [{**r, "due": format_ms(r.get("due_ms"))} for r in rows]
        _table("scheduled", [("seq", "seq"), ("due", "due"), ("payload", "payload")], shown)


@scheduled_app.command(name="purge")
def scheduled_purge(
    queue: str,
    vhost: Vhost = "/",
    url: Url = DEFAULT_URL,
    user: User = DEFAULT_USER,
    password: Password = DEFAULT_PASSWORD,
) -> None:
    """Drop every scheduled message of a queue."""
    with _client(url, user, password, ringmq_only="scheduled purge") as c:
        r = c.request("DELETE", f"/queues/{_q(vhost)}/{_q(queue)}/scheduled")
    out.print(f"purged {r['purged']} scheduled message(s)")


@scheduled_app.command(name="deliver")
def scheduled_deliver(
    queue: str,
    vhost: Vhost = "/",
    url: Url = DEFAULT_URL,
    user: User = DEFAULT_USER,
    password: Password = DEFAULT_PASSWORD,
) -> None:
    """Deliver every scheduled message of a queue now."""
    with _client(url, user, password, ringmq_only="scheduled deliver") as c:
        r = c.request("POST", f"/queues/{_q(vhost)}/{_q(queue)}/scheduled/deliver", {})
    out.print(f"delivered {r['delivered']} scheduled message(s) now")


def register(app: typer.Typer) -> None:
    """Add `scheduled` to the CLI."""
    app.add_typer(scheduled_app, name="scheduled")
