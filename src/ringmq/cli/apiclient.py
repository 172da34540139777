"""What every `ringmq` management subcommand shares: the management API client and its options.

Theory of operation: a subcommand (cli/admin.py, cli/access.py, cli/definitions.py,
cli/scheduled.py, cli/cluster.py) opens `_client(url, user, password)`, which finds the broker
(`--url`, else RINGMQ_URL, else the broker `ringmq serve` announced: `ringmq.announce.locate`,
else RabbitMQ's default http://127.0.0.1:15672, named on stderr when found, not given), yields
a `Client` (a thin synchronous httpx client of `/api`) and closes it at the end. An error
answer (`ApiError`: the API's reason) ends the command with status 1, an unreachable broker
with status 2 (with the hint `announce` gives). With `ringmq_only`, a broker whose overview is
not ringmq's (a RabbitMQ on the default port) is refused. Also here: the shared typer options
(`Url`, `User`, `Password`, `Vhost`, `AsJson`), the consoles (`out`, `err`), drawing a table
(rich, `_table`) or JSON (`_print_json`), parsing `KEY=VALUE` options (`_pairs`) and the
progress bar of long commands (`_progress`). Each command's client lives for that command
only; nothing else is kept.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Annotated, Any, Final
from urllib.parse import quote

import httpx
import typer
from rich.console import Console
from rich.progress import BarColumn, Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

from ringmq import announce
from ringmq.cli.formats import table_of

DEFAULT_URL: Final[str | None] = None
"""`--url`'s default: find the broker (`ringmq.announce.locate`)."""
FALLBACK_URL: Final = "http://127.0.0.1:15672"
"""RabbitMQ's management port, tried when no running ringmq announced itself."""
DEFAULT_USER: Final = "guest"
DEFAULT_PASSWORD: Final = "guest"  # noqa: S105 - RabbitMQ's well-known default, loopback only

Url = Annotated[
    str | None,
    typer.Option(
        "--url",
        envvar="RINGMQ_URL",
        help="Management API URL (default: the broker `ringmq serve` started, else "
        f"{FALLBACK_URL}).",
        show_default=False,
    ),
]
User = Annotated[str, typer.Option("--user", "-u", envvar="RINGMQ_USER", help="User name.")]
Password = Annotated[
    str, typer.Option("--password", "-p", envvar="RINGMQ_PASSWORD", help="Password.")
]
Vhost = Annotated[str, typer.Option("--vhost", "-V", help="Virtual host.")]
AsJson = Annotated[bool, typer.Option("--json", help="Print JSON instead of a table.")]

# soft wrap: a long queue name in a message stays on one line (copied whole)
out = Console(soft_wrap=True)
err = Console(stderr=True, soft_wrap=True)


class ApiError(Exception):
    """An error answer from the management API."""


class Client:
    """A thin synchronous client of the management API."""

    def __init__(self, url: str, user: str, password: str, timeout_s: float = 30.0) -> None:
        # Loading the CA bundle costs about a second; plain-HTTP URLs never need it.
        tls = url.lower().startswith("https://")
        self.http = httpx.Client(
            base_url=url.rstrip("/"), auth=(user, password), timeout=timeout_s, verify=tls
        )

    def request(self, method: str, path: str, body: Any = None, **params: Any) -> Any:
        try:
            res = self.http.request(
                method,
                "/api" + path,
                json=body,
                params={k: v for k, v in params.items() if v is not None},
            )
        except httpx.TransportError as exc:
            raise ConnectionError(f"cannot reach {self.http.base_url}: {exc}") from None
        if res.status_code >= 400:
            try:
                reason = res.json().get("reason", res.text)
            except ValueError:
                reason = res.text
            raise ApiError(f"{res.status_code}: {reason}")
        if not res.content:
            return None
        return res.json()


def _q(name: str) -> str:
    return quote(name, safe="")


RINGMQ_PRODUCT: Final = "ringmq"


@contextmanager
def _client(
    url: str | None, user: str, password: str, *, ringmq_only: str | None = None
) -> Iterator[Client]:
    """A `Client` for the URL `announce.locate` finds; API and connection errors end the
    command. With `ringmq_only` (the command's name), refuse a broker that is not ringmq
    (its overview's `product_name`), such as a RabbitMQ on the default port."""
    target = announce.locate(url, FALLBACK_URL)
    client = Client(target.url, user, password)
    try:
        if target.found is not None:
            err.print(f"[dim]{target.found}[/dim]", highlight=False)
        if ringmq_only is not None:
            _check_ringmq(client, ringmq_only)
        yield client
    except ApiError as exc:
        err.print(f"[red]error[/red] {exc}", highlight=False)
        raise typer.Exit(code=1) from None
    except ConnectionError as exc:
        err.print(f"[red]error[/red] {exc}", highlight=False)
        if target.fallback is not None:
            err.print(target.fallback, highlight=False)
        raise typer.Exit(code=2) from None
    finally:
        client.http.close()


def _check_ringmq(client: Client, command: str) -> None:
    o = client.request("GET", "/overview")
    product = str(o.get("product_name", "?"))
    if product.lower() != RINGMQ_PRODUCT:
        raise ApiError(
            f"{client.http.base_url} is {product} {o.get('product_version', '')}, not ringmq: "
            f"`ringmq {command}` needs ringmq (pass --url or set RINGMQ_URL)"
        )


def _table(title: str, columns: list[tuple[str, str]], rows: list[dict[str, Any]]) -> None:
    table_of(out, title, columns, rows)


def _print_json(data: Any) -> None:
    sys.stdout.write(json.dumps(data, indent=2, sort_keys=True) + "\n")


def _parse_value(raw: str) -> Any:
    # `--arg x-max-length=10` should send an integer, `--arg x-overflow=drop-head` a string.
    try:
        return json.loads(raw)
    except ValueError:
        return raw


def _pairs(items: list[str], what: str) -> dict[str, Any]:
    parsed: dict[str, Any] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise typer.BadParameter(f"expected KEY=VALUE, got {item!r}", param_hint=what)
        parsed[key] = _parse_value(value)
    return parsed


def _progress() -> Progress:
    return Progress(
        SpinnerColumn(),
        TextColumn("{task.description}"),
        BarColumn(),
        TextColumn("{task.completed:,.0f}/{task.total:,.0f}"),
        TimeElapsedColumn(),
        console=err,
        transient=True,
    )
