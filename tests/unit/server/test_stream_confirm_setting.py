"""The stream confirm rule setting: `[server] stream_confirm` in the configuration file and
`ringmq serve --stream-confirm`, `fsynced` (the default) or `written`; anything else refused;
the command line over the file; what the broker's configuration gets."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from ringmq import node
from ringmq.cli import _register, app
from ringmq.core.streamspec import ConfirmRule
from ringmq.server import runtime
from ringmq.server.configfile import ConfigError, parse_toml
from ringmq.server.setup import broker_config

_register()


@pytest.fixture(autouse=True)
def _restore_root_logger() -> Any:
    # `serve` calls logging.basicConfig on CliRunner's temporary stderr: undo it afterwards.
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    yield
    for h in root.handlers:
        if h not in handlers:
            h.close()
    root.handlers[:] = handlers
    root.setLevel(level)


@pytest.mark.parametrize(
    ("text", "rule"),
    [
        ("", ConfirmRule.FSYNCED),
        ("[server]\nhost = '127.0.0.1'\n", ConfirmRule.FSYNCED),
        ("[server]\nstream_confirm = 'fsynced'\n", ConfirmRule.FSYNCED),
        ("[server]\nstream_confirm = 'written'\n", ConfirmRule.WRITTEN),
        ("[server]\nstream_confirm = 'Written'\n", ConfirmRule.WRITTEN),
    ],
)
def test_the_file_sets_the_rule_and_the_broker_gets_it(text: str, rule: ConfirmRule) -> None:
    cfg = parse_toml(text)
    assert cfg.stream_confirm is rule
    assert broker_config(cfg).stream_confirm is rule


@pytest.mark.parametrize("value", ["'fsync'", "'none'", "''", "true", "1"])
def test_an_unknown_rule_in_the_file_is_refused(value: str) -> None:
    with pytest.raises(ConfigError, match="stream_confirm"):
        parse_toml(f"[server]\nstream_confirm = {value}\n")


def _serve(monkeypatch: pytest.MonkeyPatch, *args: str) -> tuple[Any, dict[str, Any]]:
    seen: dict[str, Any] = {}

    def fake_run(options: runtime.ServerOptions) -> int:
        seen["options"] = options
        return 0

    monkeypatch.setattr(node, "run", fake_run)
    return CliRunner().invoke(app, ["serve", *args]), seen


def test_the_flag_sets_the_rule_over_the_file(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    result, seen = _serve(monkeypatch)
    assert result.exit_code == 0, result.output
    assert seen["options"].config.stream_confirm is ConfirmRule.FSYNCED
    result, seen = _serve(monkeypatch, "--stream-confirm", "written")
    assert result.exit_code == 0, result.output
    assert seen["options"].config.stream_confirm is ConfirmRule.WRITTEN
    conf = tmp_path / "ringmq.toml"
    conf.write_text("[server]\nstream_confirm = 'written'\n")
    result, seen = _serve(monkeypatch, "--config", str(conf), "--stream-confirm", "fsynced")
    assert result.exit_code == 0, result.output
    assert seen["options"].config.stream_confirm is ConfirmRule.FSYNCED


def test_an_unknown_rule_on_the_command_line_is_a_usage_error(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    result, seen = _serve(monkeypatch, "--stream-confirm", "sometimes")
    assert result.exit_code == 2
    assert "--stream-confirm" in result.output
    assert "options" not in seen
