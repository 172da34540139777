"""Command line: `ringmq serve` and the management subcommands."""

from __future__ import annotations

import typer

app = typer.Typer(no_args_is_help=True, help="ringmq: an AMQP 0-9-1 message broker.")


@app.command()
def version() -> None:
    """Print ringmq's version."""
    from ringmq import __version__

    typer.echo(__version__)


def main() -> None:
    app()
