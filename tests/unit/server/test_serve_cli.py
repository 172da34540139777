from __future__ import annotations

from pathlib import Path

import typer
from typer.testing import CliRunner

from ringmq.cli import serve
from ringmq.server.configfile import FileConfig, ListenSpec, parse_toml
from ringmq.server.runtime import DEFAULT_AMQP_PORT, DEFAULT_HTTP_PORT, options_from


def _app() -> typer.Typer:
    app = typer.Typer()
    serve.register(app)

    @app.command()
    def noop() -> None:  # a second command keeps `serve` a named subcommand
        pass

    return app


def test_defaults() -> None:
    o = options_from(FileConfig())
    assert (o.host, o.amqp_port, o.http_port) == ("127.0.0.1", DEFAULT_AMQP_PORT, DEFAULT_HTTP_PORT)
    assert o.data_dir == Path("./ringmq-data")


def test_command_line_beats_file_beats_defaults() -> None:
    cfg = FileConfig(listen=ListenSpec(host="::1", amqp_port=5673, http_port=0))
    o = options_from(cfg)
    assert (o.host, o.amqp_port, o.http_port) == ("::1", 5673, 0)
    o = options_from(cfg, host="127.0.0.2", amqp_port=0, http_port=-1, data_dir=Path("d"))
    assert (o.host, o.amqp_port, o.http_port, o.data_dir) == ("127.0.0.2", 0, None, Path("d"))


def test_stomp_and_mqtt_ports_default_to_theirs_and_can_be_turned_off() -> None:
    o = options_from(FileConfig())
    assert (o.stomp_port, o.mqtt_port) == (61613, 1883)
    o = options_from(parse_toml('[server]\nstomp_port = 0\nmqtt_port = "off"\n'))
    assert (o.stomp_port, o.mqtt_port) == (0, None)
    o = options_from(FileConfig(), stomp_port=-1, mqtt_port=1884)
    assert (o.stomp_port, o.mqtt_port) == (None, 1884)


def test_file_can_disable_http() -> None:
    assert options_from(parse_toml("[server]\nhttp_port = -1\n")).http_port is None


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
