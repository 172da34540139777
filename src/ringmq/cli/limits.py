"""`ringmq set_vhost_limits|clear_vhost_limits|set_user_limits|clear_user_limits` (the listings,
`ringmq list vhost_limits|user_limits`, are `_LISTS` entries in cli/admin.py).

rabbitmqctl's names and argument shapes: a limit definition is a JSON object
(`'{"max-connections": 10, "max-queues": -1}'`), the vhost an option (`--vhost`/`-V` as the
other ringmq commands'; rabbitmqctl's `-p` is `--password` here), the user an argument. Over
the same HTTP API as cli/admin.py (cli/apiclient.py): each limit of a definition is one `PUT
/api/{vhost,user}-limits/{owner}/{name}` with `{"value": n}`; clearing is one `DELETE` per
limit, all of the owner's limits (read first from the listing) when no name (or `all`) is
given. The API decides which names and values are valid (core/limits.py, one rule) and its
refusal is what the command prints.
"""

from __future__ import annotations

import json
from typing import Annotated, Any, Literal

import typer

from ringmq.cli.apiclient import (
    DEFAULT_PASSWORD,
    DEFAULT_URL,
    DEFAULT_USER,
    Client,
    Password,
    Url,
    User,
    _client,
    _q,
    out,
)

Kind = Literal["vhost", "user"]

# rabbitmqctl's `-p` is `--password` here, as in every ringmq command
LimitsVhost = Annotated[str, typer.Option("--vhost", "-V", help="Virtual host.")]
Definition = Annotated[
    str,
    typer.Argument(
        help="A JSON object of limits, e.g. '{\"max-connections\": 10}' (a negative value is "
        "no limit, 0 refuses everything)."
    ),
]
LimitUser = Annotated[str, typer.Argument(help="The user.", show_default=False)]


def _definition(raw: str) -> dict[str, Any]:
    try:
        parsed = json.loads(raw)
    except ValueError as exc:
        raise typer.BadParameter(f"not JSON: {exc}", param_hint="DEFINITION") from None
    if not isinstance(parsed, dict) or not parsed:
        raise typer.BadParameter(
            "expected a JSON object of limits, e.g. '{\"max-connections\": 10}'",
            param_hint="DEFINITION",
        )
    return parsed


def _set_limits(
    kind: Kind, owner: str, raw: str, url: str | None, user: str, password: str
) -> None:
    """The definition becomes the owner's limits, as rabbitmqctl's (its limits are one runtime
    parameter whose value the definition replaces): PUT each limit it names, in its order, then
    DELETE the owner's others. The first refusal ends the command (limits before it stay set,
    as the API applied them; none is cleared)."""
    limits = _definition(raw)
    with _client(url, user, password) as c:
        for name, value in limits.items():
            c.request("PUT", f"/{kind}-limits/{_q(owner)}/{_q(name)}", {"value": value})
        for name in _owner_limits(c, kind, owner):
            if name not in limits:
                c.request("DELETE", f"/{kind}-limits/{_q(owner)}/{_q(name)}")
    out.print(f"{kind} limits of {owner} set: {json.dumps(limits)}", highlight=False)


def _owner_limits(c: Client, kind: Kind, owner: str) -> list[str]:
    rows = c.request("GET", f"/{kind}-limits/{_q(owner)}")
    return [name for row in rows for name in row.get("value", {})]


def _clear_limits(
    kind: Kind, owner: str, name: str | None, url: str | None, user: str, password: str
) -> None:
    """DELETE one limit, or every limit the owner has when `name` is None."""
    with _client(url, user, password) as c:
        names = [name] if name is not None else _owner_limits(c, kind, owner)
        for n in names:
            c.request("DELETE", f"/{kind}-limits/{_q(owner)}/{_q(n)}")
    what = ", ".join(names) if names else "no limits"
    out.print(f"{kind} limits of {owner} cleared: {what}", highlight=False)


def set_vhost_limits(
    definition: Definition,
    vhost: LimitsVhost = "/",
    url: Url = DEFAULT_URL,
    user: User = DEFAULT_USER,
    password: Password = DEFAULT_PASSWORD,
) -> None:
    """Set a virtual host's limits (max-connections, max-queues), e.g.
    `ringmq set_vhost_limits --vhost V '{"max-connections": 10}'`. It replaces the vhost's
    limits, as rabbitmqctl's: limits it does not name are cleared."""
    _set_limits("vhost", vhost, definition, url, user, password)


def clear_vhost_limits(
    name: Annotated[
        str | None, typer.Argument(help="One limit to clear (default: all of them).")
    ] = None,
    vhost: LimitsVhost = "/",
    url: Url = DEFAULT_URL,
    user: User = DEFAULT_USER,
    password: Password = DEFAULT_PASSWORD,
) -> None:
    """Clear a virtual host's limits (all, as rabbitmqctl's), or the one named."""
    _clear_limits("vhost", vhost, None if name in (None, "all") else name, url, user, password)


def set_user_limits(
    username: LimitUser,
    definition: Definition,
    url: Url = DEFAULT_URL,
    user: User = DEFAULT_USER,
    password: Password = DEFAULT_PASSWORD,
) -> None:
    """Set a user's limits (max-connections, max-channels), e.g.
    `ringmq set_user_limits u '{"max-channels": 5}'`. It replaces the user's limits, as
    rabbitmqctl's: limits it does not name are cleared."""
    _set_limits("user", username, definition, url, user, password)


def clear_user_limits(
    username: LimitUser,
    name: Annotated[str, typer.Argument(help="The limit to clear, or `all`.")],
    url: Url = DEFAULT_URL,
    user: User = DEFAULT_USER,
    password: Password = DEFAULT_PASSWORD,
) -> None:
    """Clear one of a user's limits, or `all` of them (rabbitmqctl's `clear_user_limits`)."""
    _clear_limits("user", username, None if name == "all" else name, url, user, password)


def register(app: typer.Typer) -> None:
    """Add rabbitmqctl's four limit commands."""
    for command in (set_vhost_limits, clear_vhost_limits, set_user_limits, clear_user_limits):
        app.command(name=command.__name__)(command)
