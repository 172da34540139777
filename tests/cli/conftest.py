"""CLI fixtures: a real broker (server + management on port 0) in a thread, and a runner."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import typer
import typer.testing
from typer.testing import CliRunner

from ringmq.cli import _register, app
from ringmq.node import BrokerThread
from ringmq.server.runtime import ServerOptions

Run = Callable[..., Any]


@pytest.fixture(scope="module")
def live_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerThread]:
    data: Path = tmp_path_factory.mktemp("cli-broker")
    b = BrokerThread(ServerOptions(host="127.0.0.1", amqp_port=0, http_port=0, data_dir=data))
    b.start()
    yield b
    b.stop()


@pytest.fixture(scope="module")
def url(live_broker: BrokerThread) -> str:
    return f"http://127.0.0.1:{live_broker.server.http_port}"


@pytest.fixture(scope="session")
def cli() -> Iterator[Any]:
    # typer's CliRunner rebuilds the click tree (evaluating every annotation, ~0.2 s) on each
    # invoke; build it once and hand the same tree to every invoke of this session.
    _register()
    built = typer.main.get_command(app)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(typer.testing, "_get_command", lambda typer_app: built)
        yield app


@pytest.fixture
def run(url: str, cli: Any) -> Run:
    runner = CliRunner()

    def invoke(*args: str, expect: int = 0) -> Any:
        result = runner.invoke(cli, [*args, "--url", url], env={"COLUMNS": "200"})
        assert result.exit_code == expect, (args, result.exit_code, result.output)
        return result

    return invoke
