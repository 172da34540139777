from __future__ import annotations

import logging
from typing import Any

import pytest
from typer.testing import CliRunner

from ringmq.cli import _register, app
from ringmq.server import runtime
from ringmq.server.memory import MemoryLimits

_register()


@pytest.fixture(autouse=True)
def _restore_root_logger() -> Any:
    # `serve` calls logging.basicConfig on CliRunner's temporary stderr: undo it afterwards.
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    yield
    root.handlers[:] = handlers
    root.setLevel(level)


def _captured(monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    seen: dict[str, Any] = {}

    def fake_run(options: runtime.ServerOptions) -> int:
        seen["options"] = options
        return 0

    monkeypatch.setattr(runtime, "run", fake_run)
    return seen


def test_memory_and_disk_flags_reach_the_server(monkeypatch: pytest.MonkeyPatch) -> None:
    seen = _captured(monkeypatch)
    result = CliRunner().invoke(
        app,
        ["serve", "--memory-high-watermark", "512MiB", "--disk-free-limit", "1GB", "--no-paging"],
    )
    assert result.exit_code == 0, result.output
    limits: MemoryLimits = seen["options"].memory
    assert limits.high_watermark == 512 * 1024 * 1024
    assert limits.disk_free_limit == 10**9
    assert limits.paging is False


def test_relative_watermark_and_defaults(monkeypatch: pytest.MonkeyPatch) -> None:
    seen = _captured(monkeypatch)
    result = CliRunner().invoke(app, ["serve", "--memory-high-watermark", "0.25"])
    assert result.exit_code == 0, result.output
    assert seen["options"].memory.high_watermark == 0.25
    assert seen["options"].memory.paging is True


def test_bad_watermark_is_a_clear_usage_error(monkeypatch: pytest.MonkeyPatch) -> None:
    seen = _captured(monkeypatch)
    result = CliRunner().invoke(app, ["serve", "--memory-high-watermark", "lots"])
    assert result.exit_code == 2
    assert "options" not in seen


def test_max_message_size_flag_overrides_the_limit(monkeypatch: pytest.MonkeyPatch) -> None:
    seen = _captured(monkeypatch)
    result = CliRunner().invoke(app, ["serve", "--max-message-size", "1MiB"])
    assert result.exit_code == 0, result.output
    assert seen["options"].config.limits.max_message_size == 1024 * 1024
    result = CliRunner().invoke(app, ["serve", "--max-message-size", "huge"])
    assert result.exit_code != 0
    assert "not a size" in result.output


def test_listener_flags_reach_the_server(monkeypatch: pytest.MonkeyPatch, tmp_path: Any) -> None:
    seen = _captured(monkeypatch)
    toml = tmp_path / "tls.toml"
    toml.write_text('[tls]\ncert_file = "c.pem"\nkey_file = "k.pem"\nhttps = true\n')
    args = ["serve", "--config", str(toml), "--amqp-port", "off", "--amqps-bind", "0.0.0.0"]
    result = CliRunner().invoke(app, [*args, "--http-bind", "127.0.0.5"])
    assert result.exit_code == 0, result.output
    opts = seen["options"]
    assert opts.amqp_port is None
    assert (opts.amqps_bind, opts.http_bind, opts.amqp_bind) == ("0.0.0.0", "127.0.0.5", None)
    assert opts.config.tls.https is True


def test_plain_listener_off_without_tls_is_a_clear_error(monkeypatch: pytest.MonkeyPatch) -> None:
    seen = _captured(monkeypatch)
    result = CliRunner().invoke(app, ["serve", "--amqp-port", "off"])
    assert result.exit_code == 2
    assert "[tls] is not set" in result.output
    assert "options" not in seen
