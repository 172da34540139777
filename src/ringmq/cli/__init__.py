"""Command line: `ringmq serve` (cli/serve.py) and the management subcommands (cli/admin.py)."""

from __future__ import annotations

import sys

import typer

app = typer.Typer(
    no_args_is_help=True,
    help="ringmq: a message broker for AMQP 0-9-1, AMQP 1.0, STOMP and MQTT, with a "
    "RabbitMQ-compatible management API. `ringmq serve` runs it; the other commands talk to "
    "a running broker (--url, RINGMQ_URL, or the one `ringmq serve` last started).",
)


@app.command()
def version() -> None:
    """Print ringmq's version."""
    from ringmq import __version__

    typer.echo(__version__)


def _register(argv: list[str] | None = None) -> None:
    # Each submodule adds its commands to `app`; imported here so `ringmq --help` lists them all.
    # `ringmq serve` registers only itself: the broker is a long-lived process and the client
    # commands' libraries (httpx, rich) would stay in its memory for nothing
    # (tests/unit/server/test_lazy_imports.py).
    from ringmq.cli import serve

    serve.register(app)
    if argv is not None and argv[:1] == ["serve"]:
        return
    from ringmq.cli import access, admin, cluster, definitions, limits, scheduled

    admin.register(app)
    scheduled.register(app)
    definitions.register(app)
    access.register(app)
    limits.register(app)
    cluster.register(app)


def main() -> None:
    _register(sys.argv[1:])
    app()
