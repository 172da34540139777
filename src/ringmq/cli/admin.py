"""`ringmq` management subcommands: a small rabbitmqadmin over the management HTTP API.

Every command talks HTTP to a running broker: `--url`, else RINGMQ_URL, else the broker that
`ringmq serve` announced (`ringmq.announce`: the file in RINGMQ_DATA_DIR, else the user's
runtime file), else RabbitMQ's default http://127.0.0.1:15672; a URL it found itself it names
on stderr. `--user`/`--password` (RINGMQ_USER / RINGMQ_PASSWORD) log in. `status`, `list ...`,
`declare ...`, `delete ...`, `purge queue`, `publish`, `get`, `update queue` (cli/scheduled.py,
cli/definitions.py, cli/access.py and cli/limits.py have `scheduled ...`, `policy ...`,
`definitions export|import`, users, vhosts, permissions, vhost and user limits; the client,
options and drawing they all share are cli/apiclient.py's). Tables are drawn with rich;
`--json` prints the API's JSON instead. Errors print the API's reason and exit with status 1
(2 when the broker cannot be reached).
"""

from __future__ import annotations

from typing import Annotated, Any, Final

import typer
from rich.table import Table

from ringmq.cli.apiclient import (
    DEFAULT_PASSWORD,
    DEFAULT_URL,
    DEFAULT_USER,
    ApiError,
    AsJson,
    Password,
    Url,
    User,
    Vhost,
    _client,
    _pairs,
    _print_json,
    _progress,
    _q,
    _table,
    out,
)
from ringmq.cli.formats import node_rows

# -- status and listings ----------------------------------------------------------------------


def status(
    url: Url = DEFAULT_URL,
    user: User = DEFAULT_USER,
    password: Password = DEFAULT_PASSWORD,
    as_json: AsJson = False,
) -> None:
    """Show the broker's overview: node, listeners, object and message totals, rates."""
    with _client(url, user, password) as c:
        o = c.request("GET", "/overview")
        try:
            node: dict[str, Any] = c.request("GET", f"/nodes/{_q(o['node'])}")
        except ApiError:
            node = {}  # a user without the monitoring tag sees the overview only
        base = c.http.base_url
    if as_json:
        _print_json({**o, "node_status": node} if node else o)
        return
    t, q = o["object_totals"], o["queue_totals"]
    stats = o.get("message_stats", {})
    out.print(
        f"[bold]{o['product_name']} {o['product_version']}[/bold] on {o['node']} at {base}",
        highlight=False,
    )
    for ln in o.get("listeners", []):
        out.print(f"  {ln['protocol']:<8} {ln['ip_address']}:{ln['port']}")
    table = Table(show_header=False, box=None)
    table.add_column(style="dim")
    table.add_column(justify="right")
    for label, value in (
        ("connections", t["connections"]),
        ("blocked connections", o.get("blocked_connections", 0)),
        ("channels", t["channels"]),
        ("queues", t["queues"]),
        ("exchanges", t["exchanges"]),
        ("consumers", t["consumers"]),
        ("messages", q["messages"]),
        ("  ready", q["messages_ready"]),
        ("  unacknowledged", q["messages_unacknowledged"]),
        ("  scheduled", q.get("messages_scheduled", 0)),
        ("  paged", q.get("messages_paged", 0)),
        ("publish rate /s", stats.get("publish_details", {}).get("rate", 0.0)),
        ("deliver rate /s", stats.get("deliver_get_details", {}).get("rate", 0.0)),
    ):
        table.add_row(label, str(value))
    for label, text in node_rows(node):
        table.add_row(label, text)
    out.print(table)


_LISTS: Final[dict[str, tuple[str, list[tuple[str, str]]]]] = {
    "users": ("/users", [("name", "name"), ("tags", "tags")]),
    "vhosts": ("/vhosts", [("name", "name"), ("messages", "messages")]),
    "permissions": (
        "/permissions",
        [
            ("user", "user"),
            ("vhost", "vhost"),
            ("configure", "configure"),
            ("write", "write"),
            ("read", "read"),
        ],
    ),
    "topic-permissions": (
        "/topic-permissions",
        [
            ("user", "user"),
            ("vhost", "vhost"),
            ("exchange", "exchange"),
            ("write", "write"),
            ("read", "read"),
        ],
    ),
    # rabbitmqadmin's object names (underscores); set and cleared by cli/limits.py
    "vhost_limits": ("/vhost-limits", [("vhost", "vhost"), ("limits", "value")]),
    "user_limits": ("/user-limits", [("user", "user"), ("limits", "value")]),
    "queues": (
        "/queues",
        [
            ("vhost", "vhost"),
            ("name", "name"),
            ("ready", "messages_ready"),
            ("unacked", "messages_unacknowledged"),
            ("scheduled", "messages_scheduled"),
            ("paged", "messages_paged"),
            ("messages", "messages"),
            ("consumers", "consumers"),
            ("ring size", "ring_size"),
            ("ring evicted", "counters.ring_evicted"),
            ("policy", "policy"),
        ],
    ),
    "exchanges": (
        "/exchanges",
        [
            ("vhost", "vhost"),
            ("name", "name"),
            ("type", "type"),
            ("durable", "durable"),
            ("auto delete", "auto_delete"),
            ("internal", "internal"),
        ],
    ),
    "bindings": (
        "/bindings",
        [
            ("vhost", "vhost"),
            ("source", "source"),
            ("destination", "destination"),
            ("type", "destination_type"),
            ("routing key", "routing_key"),
        ],
    ),
    "connections": (
        "/connections",
        [
            ("name", "name"),
            ("user", "user"),
            ("vhost", "vhost"),
            ("state", "state"),
            ("blocked because", "blocked_reason"),
            ("channels", "channels"),
        ],
    ),
    "consumers": (
        "/consumers",
        [
            ("queue", "queue.name"),
            ("tag", "consumer_tag"),
            ("channel", "channel_details.name"),
            ("ack", "ack_required"),
            ("prefetch", "prefetch_count"),
        ],
    ),
    "channels": (
        "/channels",
        [
            ("name", "name"),
            ("user", "user"),
            ("consumers", "consumer_count"),
            ("unacked", "messages_unacknowledged"),
            ("prefetch", "prefetch_count"),
        ],
    ),
    "policies": (
        "/policies",
        [
            ("vhost", "vhost"),
            ("name", "name"),
            ("pattern", "pattern"),
            ("apply to", "apply-to"),
            ("priority", "priority"),
            ("definition", "definition"),
        ],
    ),
}

list_app = typer.Typer(help="List queues, exchanges, bindings, connections, consumers...")


def _lister(kind: str) -> None:
    path, columns = _LISTS[kind]

    def command(
        url: Url = DEFAULT_URL,
        user: User = DEFAULT_USER,
        password: Password = DEFAULT_PASSWORD,
        as_json: AsJson = False,
        name: Annotated[str | None, typer.Option(help="Only names containing this.")] = None,
        sort: Annotated[str | None, typer.Option(help="Sort by this field.")] = None,
    ) -> None:
        with _client(url, user, password) as c:
            rows = c.request("GET", path, name=name, sort=sort)
        if as_json:
            _print_json(rows)
        else:
            _table(kind, columns, rows)

    command.__doc__ = f"List {kind}."
    list_app.command(name=kind)(command)


for _kind in _LISTS:
    _lister(_kind)


# -- queues and exchanges -----------------------------------------------------------------------

declare_app = typer.Typer(help="Declare a queue or an exchange.")
delete_app = typer.Typer(help="Delete a queue or an exchange.")
purge_app = typer.Typer(help="Purge a queue.")
update_app = typer.Typer(help="Change a running queue's settings.")


@declare_app.command(name="queue")
def declare_queue(
    name: str,
    arg: Annotated[
        list[str] | None, typer.Option("--arg", "-a", help="Queue argument KEY=VALUE (repeat).")
    ] = None,
    durable: Annotated[bool, typer.Option(help="Survive a restart.")] = True,
    auto_delete: Annotated[bool, typer.Option(help="Delete when the last consumer goes.")] = False,
    vhost: Vhost = "/",
    url: Url = DEFAULT_URL,
    user: User = DEFAULT_USER,
    password: Password = DEFAULT_PASSWORD,
) -> None:
    """Declare a queue, e.g. `ringmq declare queue orders --arg x-ring-size=3`."""
    body = {"durable": durable, "auto_delete": auto_delete, "arguments": _pairs(arg or [], "--arg")}
    with _client(url, user, password) as c:
        c.request("PUT", f"/queues/{_q(vhost)}/{_q(name)}", body)
    out.print(f"queue [bold]{name}[/bold] declared")


@declare_app.command(name="exchange")
def declare_exchange(
    name: str,
    type_: Annotated[
        str, typer.Option("--type", "-t", help="direct, fanout, topic, headers.")
    ] = "direct",
    arg: Annotated[list[str] | None, typer.Option("--arg", "-a", help="KEY=VALUE.")] = None,
    durable: Annotated[bool, typer.Option(help="Survive a restart.")] = True,
    vhost: Vhost = "/",
    url: Url = DEFAULT_URL,
    user: User = DEFAULT_USER,
    password: Password = DEFAULT_PASSWORD,
) -> None:
    """Declare an exchange."""
    body = {"type": type_, "durable": durable, "arguments": _pairs(arg or [], "--arg")}
    with _client(url, user, password) as c:
        c.request("PUT", f"/exchanges/{_q(vhost)}/{_q(name)}", body)
    out.print(f"exchange [bold]{name}[/bold] declared")


@declare_app.command(name="binding")
def declare_binding(
    source: str,
    destination: str,
    routing_key: Annotated[str, typer.Option("--routing-key", "-k")] = "",
    to_exchange: Annotated[bool, typer.Option(help="Destination is an exchange.")] = False,
    vhost: Vhost = "/",
    url: Url = DEFAULT_URL,
    user: User = DEFAULT_USER,
    password: Password = DEFAULT_PASSWORD,
) -> None:
    """Bind a queue (or an exchange) to an exchange."""
    kind = "e" if to_exchange else "q"
    with _client(url, user, password) as c:
        c.request(
            "POST",
            f"/bindings/{_q(vhost)}/e/{_q(source)}/{kind}/{_q(destination)}",
            {"routing_key": routing_key, "arguments": {}},
        )
    out.print(f"bound {destination} to {source}")


@delete_app.command(name="queue")
def delete_queue(
    name: str,
    if_empty: Annotated[bool, typer.Option(help="Only if it has no messages.")] = False,
    if_unused: Annotated[bool, typer.Option(help="Only if it has no consumers.")] = False,
    vhost: Vhost = "/",
    url: Url = DEFAULT_URL,
    user: User = DEFAULT_USER,
    password: Password = DEFAULT_PASSWORD,
) -> None:
    """Delete a queue."""
    with _client(url, user, password) as c:
        c.request(
            "DELETE",
            f"/queues/{_q(vhost)}/{_q(name)}",
            **{"if-empty": str(if_empty).lower(), "if-unused": str(if_unused).lower()},
        )
    out.print(f"queue [bold]{name}[/bold] deleted")


@delete_app.command(name="exchange")
def delete_exchange(
    name: str,
    vhost: Vhost = "/",
    url: Url = DEFAULT_URL,
    user: User = DEFAULT_USER,
    password: Password = DEFAULT_PASSWORD,
) -> None:
    """Delete an exchange."""
    with _client(url, user, password) as c:
        c.request("DELETE", f"/exchanges/{_q(vhost)}/{_q(name)}")
    out.print(f"exchange [bold]{name}[/bold] deleted")


@purge_app.command(name="queue")
def purge_queue(
    name: str,
    vhost: Vhost = "/",
    url: Url = DEFAULT_URL,
    user: User = DEFAULT_USER,
    password: Password = DEFAULT_PASSWORD,
) -> None:
    """Remove every ready message from a queue (shows progress on large queues)."""
    path = f"/queues/{_q(vhost)}/{_q(name)}"
    with _client(url, user, password) as c:
        before = int(c.request("GET", path)["messages_ready"])
        with _progress() as progress:
            task = progress.add_task(f"purging {name}", total=max(before, 1))
            c.request("DELETE", path + "/contents")
            after = int(c.request("GET", path)["messages_ready"])
            progress.update(task, completed=max(before, 1))
    out.print(f"queue [bold]{name}[/bold] purged ({max(before - after, 0)} messages)")


@update_app.command(name="queue")
def update_queue(
    name: str,
    ring_size: Annotated[
        int | None, typer.Option(help="New ring size (-1: not a ring). Lowering does not purge.")
    ] = None,
    setting: Annotated[
        list[str] | None, typer.Option("--set", help="Other setting KEY=VALUE, e.g. max-length=10.")
    ] = None,
    vhost: Vhost = "/",
    url: Url = DEFAULT_URL,
    user: User = DEFAULT_USER,
    password: Password = DEFAULT_PASSWORD,
    as_json: AsJson = False,
) -> None:
    """Change a running queue's settings, e.g. `ringmq update queue q --ring-size 5`."""
    body = _pairs(setting or [], "--set")
    if ring_size is not None:
        body["ring-size"] = ring_size
    if not body:
        raise typer.BadParameter("nothing to change", param_hint="--ring-size/--set")
    with _client(url, user, password, ringmq_only="update queue") as c:
        q = c.request("PUT", f"/queues/{_q(vhost)}/{_q(name)}/settings", body)
    if as_json:
        _print_json(q)
    else:
        out.print(
            f"queue [bold]{name}[/bold]: ring size {q['ring_size']}, {q['messages']} messages"
        )


# -- messages -------------------------------------------------------------------------------------


def publish(
    routing_key: Annotated[str, typer.Option("--routing-key", "-k", help="Routing key.")],
    payload: Annotated[str, typer.Option("--payload", "-m", help="Message body (text).")] = "",
    exchange: Annotated[
        str, typer.Option("--exchange", "-e", help="Exchange ('' = default).")
    ] = "",
    header: Annotated[list[str] | None, typer.Option("--header", "-H", help="KEY=VALUE.")] = None,
    count: Annotated[int, typer.Option(help="Publish this many copies.", min=1)] = 1,
    persistent: Annotated[bool, typer.Option(help="delivery_mode 2.")] = False,
    vhost: Vhost = "/",
    url: Url = DEFAULT_URL,
    user: User = DEFAULT_USER,
    password: Password = DEFAULT_PASSWORD,
) -> None:
    """Publish a message (or --count copies, with a progress bar)."""
    props: dict[str, Any] = {}
    if header:
        props["headers"] = _pairs(header, "--header")
    if persistent:
        props["delivery_mode"] = 2
    body = {
        "routing_key": routing_key,
        "payload": payload,
        "payload_encoding": "string",
        "properties": props,
    }
    path = f"/exchanges/{_q(vhost)}/{_q(exchange or 'amq.default')}/publish"
    routed = 0
    with _client(url, user, password) as c, _progress() as progress:
        task = progress.add_task("publishing", total=count)
        for _ in range(count):
            if c.request("POST", path, body)["routed"]:
                routed += 1
            progress.advance(task)
    out.print(f"published {count}, routed {routed}")
    if routed < count:
        raise typer.Exit(code=1)


def get(
    queue: str,
    count: Annotated[int, typer.Option(help="How many messages.", min=1)] = 1,
    ack: Annotated[
        bool, typer.Option(help="Remove the messages (default: peek, they are requeued).")
    ] = False,
    vhost: Vhost = "/",
    url: Url = DEFAULT_URL,
    user: User = DEFAULT_USER,
    password: Password = DEFAULT_PASSWORD,
    as_json: AsJson = False,
) -> None:
    """Peek at (or with --ack, take) messages from a queue."""
    body = {
        "count": count,
        "ackmode": "ack_requeue_false" if ack else "ack_requeue_true",
        "encoding": "auto",
        "truncate": 50_000,
    }
    with _client(url, user, password) as c:
        msgs = c.request("POST", f"/queues/{_q(vhost)}/{_q(queue)}/get", body)
    if as_json:
        _print_json(msgs)
        return
    _table(
        f"{queue}: {len(msgs)} message(s)",
        [
            ("routing key", "routing_key"),
            ("redelivered", "redelivered"),
            ("bytes", "payload_bytes"),
            ("payload", "payload"),
            ("left", "message_count"),
        ],
        msgs,
    )


def register(app: typer.Typer) -> None:
    """Add the management subcommands to the `ringmq` CLI."""
    app.command(name="status")(status)
    app.add_typer(list_app, name="list")
    app.add_typer(declare_app, name="declare")
    app.add_typer(delete_app, name="delete")
    app.add_typer(purge_app, name="purge")
    app.add_typer(update_app, name="update")
    app.command(name="publish")(publish)
    app.command(name="get")(get)
