"""`ringmq serve --shards N` (ringmq/cli/shards.py): what each shard is started with, and the
command lines and settings it refuses."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest
import typer

from ringmq.cli.serve import _peers, _serve_args
from ringmq.cli.shards import refusal, shard_commands
from ringmq.server.configfile import FileConfig
from ringmq.server.options import options_from


def test_each_shard_gets_its_directory_index_link_and_the_peers(tmp_path: Path) -> None:
    options = options_from(FileConfig(), amqp_port=0, data_dir=tmp_path)
    commands = shard_commands(options, 3, ["--log-level", "debug"], 5999, "s3cret")
    assert len(commands) == 3
    peers = {tuple(argv[argv.index("--shard-peers") + 1].split(",")) for argv, _ in commands}
    assert len(peers) == 1  # every shard knows every link
    for k, (argv, env) in enumerate(commands):

        def last(option: str, argv: list[str] = argv) -> str:
            return argv[len(argv) - 1 - argv[::-1].index(option) + 1]

        assert argv[argv.index("serve") + 1 : argv.index("serve") + 3] == ["--log-level", "debug"]
        assert last("--amqp-port") == "5999"
        assert "--reuse-port" in argv
        assert last("--shard-index") == str(k)
        assert last("--data-dir") == str(tmp_path / f"shard-{k}")
        assert env["RINGMQ_SHARD_LINK_SECRET"] == "s3cret"
        if k:  # management, STOMP, MQTT and streams are shard 0's
            assert last("--http-port") == last("--mqtt-port") == last("--stomp-port") == "off"
        else:
            assert "--http-port" not in argv


def test_the_shards_option_goes_and_the_rest_stays() -> None:
    argv = ["/bin/ringmq", "serve", "--shards", "2", "--amqp-port", "0", "--shards=3", "-v"]
    assert _serve_args(argv) == ["--amqp-port", "0", "-v"]
    assert _peers("0=127.0.0.1:1,1=127.0.0.1:2") == {0: ("127.0.0.1", 1), 1: ("127.0.0.1", 2)}
    with pytest.raises(typer.BadParameter, match="INDEX=HOST:PORT"):
        _peers("one=127.0.0.1:x")


def test_what_several_shards_do_not_run_yet_is_refused(tmp_path: Path) -> None:
    options = options_from(FileConfig(), amqp_port=0, data_dir=tmp_path)
    assert refusal(options, 1) is None
    assert refusal(options, 2) is None
    assert "shard link" in str(refusal(replace(options, shard_link_port=0), 2))
    assert "plain AMQP" in str(refusal(replace(options, amqp_port=None), 2))
