"""RabbitMQ's own rabbitmqadmin against ringmq: `list nodes`, `export`, `import`.

rabbitmqadmin is a Python script shipped in Debian's rabbitmq-server package (the management
plugin's `priv/www/cli/rabbitmqadmin`); `tools/fetch_rabbitmqadmin.sh` (run by .ci/run) puts it
in ~/.cache/ringmq/rabbitmqadmin, or RINGMQ_RABBITMQADMIN names it. Without it the test skips
and says why.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from ringmq.node import BrokerThread
from ringmq.server.runtime import ServerOptions

AUTH = ("guest", "guest")


def _script() -> Path | None:
    named = os.environ.get("RINGMQ_RABBITMQADMIN")
    path = Path(named) if named else Path.home() / ".cache" / "ringmq" / "rabbitmqadmin"
    return path if path.is_file() else None


SCRIPT = _script()
pytestmark = pytest.mark.skipif(
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
