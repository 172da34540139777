"""The CLI finds the broker `ringmq serve` started, says so, and refuses ringmq-only commands
against a broker that is not ringmq (issue 30, items 1, 2 and 5)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from ringmq import announce, node
from ringmq.node import BrokerThread
from ringmq.server.runtime import ServerOptions

pytestmark = pytest.mark.integration


@pytest.fixture
def runtime_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    path = tmp_path / "xdg"
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(path))
    return path


@pytest.fixture
def announced(tmp_path: Path, runtime_dir: Path) -> Iterator[BrokerThread]:
    data = tmp_path / "data"
    here = (data / announce.FILE_NAME, announce.runtime_file())
    b = BrokerThread(
        ServerOptions(host="127.0.0.1", amqp_port=0, http_port=0, data_dir=data, announce_to=here)
    )
    b.start()
    yield b
    b.stop()


def _invoke(cli: Any, *args: str, columns: int = 200) -> Any:
    return CliRunner().invoke(cli, list(args), env={"COLUMNS": str(columns)})


def test_status_finds_the_announced_broker_and_names_it(
    announced: BrokerThread, runtime_dir: Path, cli: Any
) -> None:
    url = f"http://127.0.0.1:{announced.server.http_port}"
    found = announce.read(runtime_dir / "ringmq" / announce.FILE_NAME)
    assert found is not None
    assert found.management_url == url
    assert found.urls["amqp"] == f"amqp://127.0.0.1:{announced.port}"
    assert found.pid == os.getpid()
    result = _invoke(cli, "status")
    assert result.exit_code == 0, result.output
    assert f"on ringmq@localhost at {url}" in result.stdout
    assert f"ringmq at {url}" in result.stderr  # said which broker, and how it was found


def test_the_files_go_with_a_clean_stop(tmp_path: Path, runtime_dir: Path) -> None:
    data = tmp_path / "data"
    here = (data / announce.FILE_NAME, announce.runtime_file())
    b = BrokerThread(
        ServerOptions(host="127.0.0.1", amqp_port=0, http_port=0, data_dir=data, announce_to=here)
    )
    b.start()
    assert all(p.is_file() for p in here)
    b.stop()
    assert not any(p.exists() for p in here)


def test_data_dir_file_wins_over_the_runtime_file(
    announced: BrokerThread, tmp_path: Path, cli: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    other = tmp_path / "other"
    announce.write(
        announce.Announcement(os.getpid(), "n", str(other), {"http": "http://127.0.0.1:9"}),
        [other / announce.FILE_NAME],
    )
    monkeypatch.setenv("RINGMQ_DATA_DIR", str(other))
    result = _invoke(cli, "list", "vhosts")
    assert result.exit_code == 2
    assert "http://127.0.0.1:9" in result.output


def test_a_stale_file_is_ignored_and_the_fallback_explained(
    runtime_dir: Path, tmp_path: Path, cli: Any
) -> None:
    dead = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"],
        check=True,
        capture_output=True,
        text=True,
    )
    announce.write(
        announce.Announcement(int(dead.stdout), "n", str(tmp_path), {"http": "http://x:1"}),
        [announce.runtime_file()],
    )
    assert announce.read(announce.runtime_file()) is None
    result = _invoke(cli, "list", "vhosts", "--url", "http://127.0.0.1:9")
    assert result.exit_code == 2
    assert "no running ringmq" not in result.stderr  # --url given: no guessing to explain
    result = _invoke(cli, "list", "vhosts")
    assert "no running ringmq announced itself" in result.stderr
    assert "RINGMQ_URL" in result.stderr


class _RabbitOverview(BaseHTTPRequestHandler):
    # what RabbitMQ's management API answers on the port the user meant for ringmq
    def do_GET(self) -> None:
        body = json.dumps({"product_name": "RabbitMQ", "product_version": "3.10.8"}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:
        pass


@pytest.fixture
def rabbit() -> Iterator[str]:
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), _RabbitOverview)
    t = threading.Thread(target=httpd.serve_forever, daemon=True)
    t.start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}"
    httpd.shutdown()
    httpd.server_close()


@pytest.mark.parametrize(
    "command",
    [("scheduled", "list", "q"), ("update", "queue", "q", "--ring-size", "3")],
)
def test_ringmq_only_commands_refuse_another_broker(
    rabbit: str, cli: Any, command: tuple[str, ...]
) -> None:
    result = _invoke(cli, *command, "--url", rabbit)
    assert result.exit_code == 1, result.output
    assert "is RabbitMQ 3.10.8, not ringmq" in result.stderr


def test_http_port_off_like_the_other_listeners(cli: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    seen: dict[str, ServerOptions] = {}

    def fake_run(options: ServerOptions) -> int:
        seen["options"] = options
        return 0

    monkeypatch.setattr(node, "run", fake_run)
    result = _invoke(cli, "serve", "--http-port", "off", "--stomp-port", "off")
    assert result.exit_code == 0, result.output
    options = seen["options"]
    assert (options.http_port, options.stomp_port) == (None, None)
    # `ringmq serve` announces itself in the data directory and the user's runtime file
    assert options.announce_to == (
        options.data_dir / announce.FILE_NAME,
        announce.runtime_file(),
    )


def test_help_texts(cli: Any) -> None:
    top = _invoke(cli, "--help").stdout
    assert "AMQP 0-9-1, AMQP 1.0, STOMP and MQTT" in " ".join(top.split())
    # rich draws the options in a box: its borders cut wrapped lines
    serve = _invoke(cli, "serve", "--help").stdout
    serve = " ".join(re.sub("[\u2500-\u257f]", " ", serve).split())
    assert "needs [tls] in the configuration file" in serve


def test_list_tables_keep_whole_names_and_print_json(announced: BrokerThread, cli: Any) -> None:
    long = "q." + "very-long-queue-name-" * 5
    assert _invoke(cli, "declare", "queue", long).exit_code == 0
    assert _invoke(cli, "declare", "queue", "q.ring", "--arg", "x-ring-size=3").exit_code == 0
    pol = _invoke(cli, "policy", "set", "lim", "^q\\.", '{"max-length": 5}')
    assert pol.exit_code == 0, pol.output
    table = _invoke(cli, "list", "queues", columns=80).stdout
    assert long in table
    assert "-1" not in table  # the queue without a ring shows no ring size
    (ring_line,) = [ln for ln in table.splitlines() if "q.ring" in ln]
    assert " 3 " in ring_line
    policies = _invoke(cli, "policy", "list", columns=80).stdout
    assert '{"max-length": 5}' in policies
