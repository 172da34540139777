from __future__ import annotations

import json
import logging
from typing import Any

import pytest
from typer.testing import CliRunner

from ringmq import node
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
    for h in root.handlers:
        if h not in handlers:
            h.close()
    root.handlers[:] = handlers
    root.setLevel(level)


def _captured(monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    seen: dict[str, Any] = {}

    def fake_run(options: runtime.ServerOptions) -> int:
        seen["options"] = options
        return 0

    monkeypatch.setattr(node, "run", fake_run)
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


@pytest.mark.parametrize(
    ("flag", "value"), [("--amqp-port", "99999"), ("--amqp-port", "-2"), ("--http-port", "65536")]
)
def test_out_of_range_ports_are_refused_not_wrapped(
    monkeypatch: pytest.MonkeyPatch, flag: str, value: str
) -> None:
    # 99999 used to reach bind() and silently become 34463 (99999 mod 65536)
    seen = _captured(monkeypatch)
    result = CliRunner().invoke(app, ["serve", flag, value])
    assert result.exit_code == 2
    assert flag in result.output
    assert "options" not in seen


def test_port_bounds_are_accepted(monkeypatch: pytest.MonkeyPatch) -> None:
    seen = _captured(monkeypatch)
    result = CliRunner().invoke(app, ["serve", "--amqp-port", "65535", "--http-port", "-1"])
    assert result.exit_code == 0, result.output
    assert seen["options"].amqp_port == 65535
    assert seen["options"].http_port is None


def test_log_file_in_json_rotates(monkeypatch: pytest.MonkeyPatch, tmp_path: Any) -> None:
    seen = _captured(monkeypatch)
    log_file = tmp_path / "logs" / "ringmq.log"
    args = ["serve", "--log-file", str(log_file), "--log-format", "json"]
    result = CliRunner().invoke(app, [*args, "--log-max-bytes", "1KiB", "--log-backups", "2"])
    assert result.exit_code == 0, result.output
    assert "options" in seen
    for i in range(60):
        logging.getLogger("ringmq.test").warning("line %d with some padding to fill the file", i)
    files = sorted(p.name for p in log_file.parent.iterdir())
    assert files == ["ringmq.log", "ringmq.log.1", "ringmq.log.2"]
    last = log_file.read_text().splitlines()[-1]
    record = json.loads(last)
    assert record["message"] == "line 59 with some padding to fill the file"
    assert record["level"] == "WARNING"
    assert record["logger"] == "ringmq.test"


def test_unknown_log_format_is_a_usage_error(monkeypatch: pytest.MonkeyPatch) -> None:
    seen = _captured(monkeypatch)
    result = CliRunner().invoke(app, ["serve", "--log-format", "xml"])
    assert result.exit_code == 2
    assert "--log-format" in result.output
    assert "options" not in seen


def test_max_message_size_flag_overrides_the_limit(monkeypatch: pytest.MonkeyPatch) -> None:
    seen = _captured(monkeypatch)
    result = CliRunner().invoke(app, ["serve", "--max-message-size", "1MiB"])
    assert result.exit_code == 0, result.output
    assert seen["options"].config.limits.max_message_size == 1024 * 1024
    result = CliRunner().invoke(app, ["serve", "--max-message-size", "huge"])
    assert result.exit_code != 0
    assert "not a size" in result.output


def test_http_max_body_size_flag_overrides_the_file(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Any
) -> None:
    seen = _captured(monkeypatch)
    toml = tmp_path / "body.toml"
    toml.write_text("management.http.max_body_size = 1000\n")
    result = CliRunner().invoke(app, ["serve", "--config", str(toml)])
    assert result.exit_code == 0, result.output
    assert seen["options"].config.management.max_body_size == 1000
    result = CliRunner().invoke(
        app, ["serve", "--config", str(toml), "--http-max-body-size", "2MiB"]
    )
    assert result.exit_code == 0, result.output
    assert seen["options"].config.management.max_body_size == 2 * 1024 * 1024
    for bad, needle in (("huge", "not a size"), ("0", "at least 1 byte")):
        result = CliRunner().invoke(app, ["serve", "--http-max-body-size", bad])
        assert result.exit_code != 0
        assert needle in result.output


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


def test_replication_flags_reach_the_server(monkeypatch: pytest.MonkeyPatch) -> None:
    seen = _captured(monkeypatch)
    result = CliRunner().invoke(
        app, ["serve", "--cluster-port", "0", "--cluster-secret", "s", "--confirm-replicated"]
    )
    assert result.exit_code == 0, result.output
    repl = seen["options"].replication
    assert (repl.port, repl.follow, repl.secret, repl.confirm_replicated) == (0, None, b"s", True)
    seen.clear()
    result = CliRunner().invoke(
        app,
        ["serve", "--follow", "10.0.0.1:7000", "--follower-fsync"],
        env={"RINGMQ_CLUSTER_SECRET": "t"},
    )
    assert result.exit_code == 0, result.output
    repl = seen["options"].replication
    assert (repl.port, repl.follow, repl.secret, repl.follower_fsync) == (
        None,
        ("10.0.0.1", 7000),
        b"t",
        True,
    )


def test_no_replication_flag_means_a_single_node(monkeypatch: pytest.MonkeyPatch) -> None:
    seen = _captured(monkeypatch)
    assert CliRunner().invoke(app, ["serve"]).exit_code == 0
    assert seen["options"].replication is None


@pytest.mark.parametrize(
    "args",
    [
        ["--cluster-port", "0"],  # no secret
        ["--follow", "nohost", "--cluster-secret", "s"],
        ["--follow", "h:1", "--cluster-port", "0", "--cluster-secret", "s"],
    ],
)
def test_bad_replication_flags_are_usage_errors(
    monkeypatch: pytest.MonkeyPatch, args: list[str]
) -> None:
    seen = _captured(monkeypatch)
    monkeypatch.delenv("RINGMQ_CLUSTER_SECRET", raising=False)
    result = CliRunner().invoke(app, ["serve", *args])
    assert result.exit_code == 2
    assert "options" not in seen


def test_web_stomp_and_web_mqtt_flags(monkeypatch: pytest.MonkeyPatch, tmp_path: Any) -> None:
    seen = _captured(monkeypatch)
    result = CliRunner().invoke(app, ["serve", "--web-stomp-port", "15674"])
    assert result.exit_code == 0, result.output
    opts = seen["options"]
    assert (opts.web_stomp_port, opts.web_mqtt_port) == (15674, None)  # off unless given
    toml = tmp_path / "web.toml"
    toml.write_text("[server]\nweb_stomp_port = 15674\nweb_mqtt_port = 15675\n")
    result = CliRunner().invoke(app, ["serve", "--config", str(toml), "--web-stomp-port", "off"])
    assert result.exit_code == 0, result.output
    opts = seen["options"]
    assert (opts.web_stomp_port, opts.web_mqtt_port) == (None, 15675)


def test_web_amqp_flag(monkeypatch: pytest.MonkeyPatch, tmp_path: Any) -> None:
    seen = _captured(monkeypatch)
    result = CliRunner().invoke(app, ["serve"])
    assert result.exit_code == 0, result.output
    assert seen["options"].web_amqp_port is None  # off unless given
    result = CliRunner().invoke(app, ["serve", "--web-amqp-port", "15678"])
    assert result.exit_code == 0, result.output
    opts = seen["options"]
    assert opts.web_amqp_port == 15678
    toml = tmp_path / "web.toml"
    toml.write_text("[server]\nweb_amqp_port = 15678\n")
    result = CliRunner().invoke(app, ["serve", "--config", str(toml), "--web-amqp-port", "off"])
    assert result.exit_code == 0, result.output
    opts = seen["options"]
    assert opts.web_amqp_port is None
