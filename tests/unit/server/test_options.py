"""Server options from the config file and the command line (`options_from`): defaults, the
command line over the file over the defaults, listeners turned off."""

from __future__ import annotations

from pathlib import Path

import pytest

from ringmq.server.configfile import ConfigError, FileConfig, ListenSpec, parse_toml
from ringmq.server.runtime import DEFAULT_AMQP_PORT, DEFAULT_HTTP_PORT, options_from


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


def test_the_stream_port_defaults_to_5552_and_can_be_turned_off() -> None:
    assert options_from(FileConfig()).stream_port == 5552
    assert options_from(parse_toml('[server]\nstream_port = "off"\n')).stream_port is None
    assert options_from(FileConfig(), stream_port=0).stream_port == 0


def test_the_shard_link_is_off_unless_a_port_and_a_secret_are_given() -> None:
    o = options_from(FileConfig())
    assert (o.shard_link_port, o.shard_link_secret) == (None, None)
    o = options_from(FileConfig(), shard_link_port=0, shard_link_secret="s")
    assert (o.shard_link_port, o.shard_link_secret) == (0, b"s")
    o = options_from(parse_toml('[server]\nshard_link_port = 7000\nshard_link_secret = "f"\n'))
    assert (o.shard_link_port, o.shard_link_secret) == (7000, b"f")
    assert options_from(FileConfig(), shard_link_port=-1).shard_link_port is None
    with pytest.raises(ConfigError, match=r"shard link listener .* needs a secret"):
        options_from(FileConfig(), shard_link_port=7000)


def test_the_shard_index_is_0_unless_given_and_fits_the_link() -> None:
    assert options_from(FileConfig()).shard_index == 0
    assert options_from(parse_toml("[server]\nshard_index = 3\n")).shard_index == 3
    assert options_from(parse_toml("[server]\nshard_index = 3\n"), shard_index=5).shard_index == 5
    with pytest.raises(ConfigError, match="shard index must be 0 to 4294967295"):
        options_from(FileConfig(), shard_index=2**32)
    with pytest.raises(ConfigError, match="shard_index: must be >= 0"):
        parse_toml("[server]\nshard_index = -1\n")
    with pytest.raises(ConfigError, match="shard_idx"):  # a misspelt key is never dropped
        parse_toml("[server]\nshard_idx = 1\n")


def test_file_can_disable_http() -> None:
    assert options_from(parse_toml("[server]\nhttp_port = -1\n")).http_port is None
