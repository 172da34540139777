"""`ringmq serve` refuses a bad or missing config file and a bad log level as usage errors."""

from __future__ import annotations

from pathlib import Path

import typer
from typer.testing import CliRunner

from ringmq.cli import serve


def _app() -> typer.Typer:
    app = typer.Typer()
    serve.register(app)

    @app.command()
    def noop() -> None:  # a second command keeps `serve` a named subcommand
        pass

    return app


def test_bad_config_exits_2_with_the_reason(tmp_path: Path) -> None:
    bad = tmp_path / "bad.toml"
    bad.write_text("[limits]\nheartbeat = 1\n")
    result = CliRunner().invoke(_app(), ["serve", "--config", str(bad)])
    assert result.exit_code == 2
    assert "unknown key(s) 'heartbeat'" in result.output


def test_missing_config_file_is_a_usage_error(tmp_path: Path) -> None:
    result = CliRunner().invoke(_app(), ["serve", "--config", str(tmp_path / "nope.toml")])
    assert result.exit_code == 2


def test_bad_log_level(tmp_path: Path) -> None:
    result = CliRunner().invoke(_app(), ["serve", "--log-level", "loud"])
    assert result.exit_code == 2
