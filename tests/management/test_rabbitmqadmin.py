"""RabbitMQ's own rabbitmqadmin against ringmq: `list nodes`, `export`, `import`.

rabbitmqadmin is a Python script shipped in Debian's rabbitmq-server package (the management
plugin's `priv/www/cli/rabbitmqadmin`); `tools/fetch_rabbitmqadmin.sh` (run by .ci/run) puts it
in ~/.cache/ringmq/rabbitmqadmin, RINGMQ_RABBITMQADMIN names it, or it is on PATH (as
/usr/bin/rabbitmqadmin): `ringmq.management.cliscript.find_rabbitmqadmin`, the search that also
serves it at `/cli/rabbitmqadmin`. Without it the test skips and says why.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from ringmq.management.cliscript import find_rabbitmqadmin
from ringmq.node import BrokerThread
from ringmq.server.runtime import ServerOptions

AUTH = ("guest", "guest")


SCRIPT = find_rabbitmqadmin()
needs_script = pytest.mark.skipif(
    SCRIPT is None,
    reason="rabbitmqadmin not found: run tools/fetch_rabbitmqadmin.sh (needs apt-get and "
    "Debian's rabbitmq-server package) or set RINGMQ_RABBITMQADMIN",
)


@pytest.fixture
def live(tmp_path: Path) -> Iterator[BrokerThread]:
    b = BrokerThread(
        ServerOptions(host="127.0.0.1", amqp_port=0, http_port=0, data_dir=tmp_path / "d")
    )
    b.start()
    yield b
    b.stop()


def admin(b: BrokerThread, *args: str) -> str:
    assert SCRIPT is not None
    cmd = [sys.executable, str(SCRIPT), "-H", "127.0.0.1", "-P", str(b.server.http_port)]
    cmd += ["-u", "guest", "-p", "guest", *args]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=60, check=False)
    out = done.stdout + done.stderr
    sys.stdout.write(f"$ rabbitmqadmin {' '.join(args)}\n{out}\n")  # shown with pytest -s
    assert done.returncode == 0, out
    return out


@needs_script
def test_list_nodes_export_and_import(live: BrokerThread, tmp_path: Path) -> None:
    url = f"http://127.0.0.1:{live.server.http_port}/api"
    nodes = admin(live, "list", "nodes")
    assert "ringmq@localhost" in nodes
    assert "disc" in nodes
    admin(
        live,
        "declare",
        "exchange",
        "name=later",
        "type=x-delayed-message",
        'arguments={"x-delayed-type": "topic"}',
    )
    admin(live, "declare", "queue", "name=orders", "durable=true")
    admin(live, "declare", "binding", "source=later", "destination=orders", "routing_key=a.#")
    defs = tmp_path / "defs.json"
    assert "Exported definitions" in admin(live, "export", str(defs))
    exported = json.loads(defs.read_text())
    (later,) = [x for x in exported["exchanges"] if x["name"] == "later"]
    assert later["type"] == "x-delayed-message"
    admin(live, "delete", "exchange", "name=later")
    admin(live, "delete", "queue", "name=orders")
    assert "Uploaded definitions" in admin(live, "import", str(defs))
    x = httpx.get(url + "/exchanges/%2F/later", auth=AUTH).json()
    assert (x["type"], x["arguments"]) == ("x-delayed-message", {"x-delayed-type": "topic"})
    keys = [
        b["routing_key"] for b in httpx.get(url + "/queues/%2F/orders/bindings", auth=AUTH).json()
    ]
    assert "a.#" in keys


@needs_script
def test_the_api_serves_rabbitmqadmin_and_that_copy_works(
    live: BrokerThread, tmp_path: Path
) -> None:
    assert SCRIPT is not None
    res = httpx.get(f"http://127.0.0.1:{live.server.http_port}/cli/rabbitmqadmin")  # no login
    assert res.status_code == 200
    assert res.content == SCRIPT.read_bytes()
    assert b"Mozilla Public" in res.content[:1000]  # served unchanged, licence header included
    fetched = tmp_path / "rabbitmqadmin"
    fetched.write_bytes(res.content)
    cmd = [sys.executable, str(fetched), "-H", "127.0.0.1", "-P", str(live.server.http_port)]
    done = subprocess.run(
        [*cmd, "list", "nodes"], capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "ringmq@localhost" in done.stdout


def test_without_rabbitmqadmin_the_route_says_where_to_get_it(
    live: BrokerThread, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("RINGMQ_RABBITMQADMIN", str(tmp_path / "absent"))
    res = httpx.get(f"http://127.0.0.1:{live.server.http_port}/cli/rabbitmqadmin")
    assert res.status_code == 404
    assert "fetch_rabbitmqadmin.sh" in res.text


def test_rabbitmqadmin_on_path_is_found(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # as Debian-style installs put it: /usr/bin/rabbitmqadmin
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    script = bin_dir / "rabbitmqadmin"
    script.write_text("#!/usr/bin/env python3\n")
    script.chmod(0o755)
    monkeypatch.delenv("RINGMQ_RABBITMQADMIN", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))  # no ~/.cache/ringmq copy
    monkeypatch.setenv("PATH", str(bin_dir))
    assert find_rabbitmqadmin() == script
