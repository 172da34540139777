"""`ringmq user|vhost|permission|topic-permission ...` (`ringmq list users|vhosts|permissions|
topic-permissions` are `_LISTS` entries in cli/admin.py).

The same HTTP API and options as cli/admin.py (cli/apiclient.py; RabbitMQ's `rabbitmqctl add_user`,
`add_vhost`, `set_permissions`, `set_topic_permissions` over `/api/users`, `/api/vhosts`,
`/api/permissions`, `/api/topic-permissions`).
"""

from __future__ import annotations

from typing import Annotated

import typer

from ringmq.cli.apiclient import (
    DEFAULT_PASSWORD,
    DEFAULT_URL,
    DEFAULT_USER,
    Password,
    Url,
    User,
    _client,
    _q,
    out,
)

user_app = typer.Typer(help="Add, change or delete users.")
vhost_app = typer.Typer(help="Add or delete virtual hosts.")
permission_app = typer.Typer(help="Set or clear a user's permissions in a virtual host.")
topic_permission_app = typer.Typer(
    help="Set or clear a user's topic permissions (routing keys on a topic exchange)."
)

Tags = Annotated[
    str, typer.Option("--tags", help="Comma-separated: administrator, monitoring, management...")
]
InVhost = Annotated[str, typer.Option("--vhost", "-V", help="Virtual host.")]


@user_app.command(name="add")
def user_add(
    name: str,
    new_password: Annotated[str, typer.Option("--new-password", help="The user's password.")],
    tags: Tags = "",
    url: Url = DEFAULT_URL,
    user: User = DEFAULT_USER,
    password: Password = DEFAULT_PASSWORD,
) -> None:
    """Create a user, or change its password and tags."""
    with _client(url, user, password) as c:
        c.request("PUT", f"/users/{_q(name)}", {"password": new_password, "tags": tags})
    out.print(f"user {name} set")


@user_app.command(name="delete")
def user_delete(
    name: str,
    url: Url = DEFAULT_URL,
    user: User = DEFAULT_USER,
    password: Password = DEFAULT_PASSWORD,
) -> None:
    """Delete a user (its permissions go with it)."""
    with _client(url, user, password) as c:
        c.request("DELETE", f"/users/{_q(name)}")
    out.print(f"user {name} deleted")


@vhost_app.command(name="add")
def vhost_add(
    name: str,
    url: Url = DEFAULT_URL,
    user: User = DEFAULT_USER,
    password: Password = DEFAULT_PASSWORD,
) -> None:
    """Create a virtual host."""
    with _client(url, user, password) as c:
        c.request("PUT", f"/vhosts/{_q(name)}")
    out.print(f"vhost {name} added")


@vhost_app.command(name="delete")
def vhost_delete(
    name: str,
    url: Url = DEFAULT_URL,
    user: User = DEFAULT_USER,
    password: Password = DEFAULT_PASSWORD,
) -> None:
    """Delete a virtual host: its connections are closed and its queues dropped."""
    with _client(url, user, password) as c:
        c.request("DELETE", f"/vhosts/{_q(name)}")
    out.print(f"vhost {name} deleted")


@permission_app.command(name="set")
def permission_set(
    name: Annotated[str, typer.Argument(help="The user.")],
    vhost: InVhost = "/",
    configure: Annotated[str, typer.Option(help="Regex of names it may configure.")] = ".*",
    write: Annotated[str, typer.Option(help="Regex of names it may write to.")] = ".*",
    read: Annotated[str, typer.Option(help="Regex of names it may read from.")] = ".*",
    url: Url = DEFAULT_URL,
    user: User = DEFAULT_USER,
    password: Password = DEFAULT_PASSWORD,
) -> None:
    """Set a user's configure/write/read permissions in a virtual host."""
    body = {"configure": configure, "write": write, "read": read}
    with _client(url, user, password) as c:
        c.request("PUT", f"/permissions/{_q(vhost)}/{_q(name)}", body)
    out.print(f"permissions of {name} in {vhost} set")


@permission_app.command(name="clear")
def permission_clear(
    name: Annotated[str, typer.Argument(help="The user.")],
    vhost: InVhost = "/",
    url: Url = DEFAULT_URL,
    user: User = DEFAULT_USER,
    password: Password = DEFAULT_PASSWORD,
) -> None:
    """Remove a user's permissions in a virtual host."""
    with _client(url, user, password) as c:
        c.request("DELETE", f"/permissions/{_q(vhost)}/{_q(name)}")
    out.print(f"permissions of {name} in {vhost} cleared")


@topic_permission_app.command(name="set")
def topic_permission_set(
    name: Annotated[str, typer.Argument(help="The user.")],
    exchange: Annotated[str, typer.Argument(help="The topic exchange.")],
    write: Annotated[str, typer.Argument(help="Regex of routing keys it may publish with.")],
    read: Annotated[str, typer.Argument(help="Regex of binding keys it may bind with.")],
    vhost: InVhost = "/",
    url: Url = DEFAULT_URL,
    user: User = DEFAULT_USER,
    password: Password = DEFAULT_PASSWORD,
) -> None:
    """Set a user's topic permission on one exchange (`rabbitmqctl set_topic_permissions`;
    `{username}`, `{vhost}` and, for MQTT, `{client_id}` stand for the connection's values)."""
    body = {"exchange": exchange, "write": write, "read": read}
    with _client(url, user, password) as c:
        c.request("PUT", f"/topic-permissions/{_q(vhost)}/{_q(name)}", body)
    out.print(f"topic permission of {name} on {exchange} in {vhost} set")


@topic_permission_app.command(name="clear")
def topic_permission_clear(
    name: Annotated[str, typer.Argument(help="The user.")],
    vhost: InVhost = "/",
    url: Url = DEFAULT_URL,
    user: User = DEFAULT_USER,
    password: Password = DEFAULT_PASSWORD,
) -> None:
    """Remove a user's topic permissions in a virtual host."""
    with _client(url, user, password) as c:
        c.request("DELETE", f"/topic-permissions/{_q(vhost)}/{_q(name)}")
    out.print(f"topic permissions of {name} in {vhost} cleared")


def register(app: typer.Typer) -> None:
    """Add `user`, `vhost` and `permission` (the `list` commands join cli/admin.py's group)."""
    app.add_typer(user_app, name="user")
    app.add_typer(vhost_app, name="vhost")
    app.add_typer(permission_app, name="permission")
    app.add_typer(topic_permission_app, name="topic-permission")
