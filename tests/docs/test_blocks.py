"""The README's and docs' code blocks run as written, in order, as one script per file.

A file's ```python and ```sh (or ```bash) blocks are joined, in the order they appear, into one
Python script (a shell block becomes a `bash -euo pipefail` call at its place), which runs
against a broker this test starts on free ports. Blocks tagged otherwise (```console for a
transcript with its output, ```toml, ```text...) are not run.

Ports: the blocks write RabbitMQ's default ports literally (5672, 15672, 61613, 1883), as a
reader types them; the test replaces each whole-number occurrence with its broker's port, and
sets RINGMQ_URL for the `ringmq` commands (which otherwise find the broker `ringmq serve`
started). So a block must name the AMQP port even where pika would default to it
(`pika.ConnectionParameters("127.0.0.1", 5672)`). The `# prints ...` comments are checked where
the test lists them (`EXPECTED`).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest

from ringmq.node import BrokerThread
from ringmq.server.runtime import ServerOptions

pytestmark = [pytest.mark.integration, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[2]
FILES = (
    "README.md",
    "docs/tour.md",
    "docs/management.md",
    "docs/amqp10.md",
    "docs/stomp.md",
    "docs/mqtt.md",
)
_BLOCK = re.compile(r"^```(\w+)[^\n]*\n(.*?)^```[ \t]*$", re.MULTILINE | re.DOTALL)
RUN = {"python": "python", "sh": "sh", "bash": "sh"}
DEFAULT_PORTS = {"amqp": 5672, "http": 15672, "stomp": 61613, "mqtt": 1883}
TIMEOUT_S = 280
"""A bound against a hang only: a script runs a few Python processes per `ringmq` command,
about half a second each on an idle machine and several on a loaded one."""

EXPECTED: dict[str, tuple[str, ...]] = {
    "README.md": (
        "b'Hello World!'",
        "[b'B', b'C', b'D']",
        "404 NOT_FOUND - no queue 'missing' in vhost '/'",
        "hello",
        "['B', 'C', 'D']",
        "/queue/tickets from STOMP",
        "/queue/tickets from AMQP 0-9-1",
        "home/kitchen/temp b'21.5'",
        "home/garage/temp b'12.0'",
    ),
    "docs/tour.md": (
        "b'Hello World!'",
        "[b'B', b'C', b'D']",
        "404 NOT_FOUND - no queue 'missing' in vhost '/'",
    ),
    "docs/management.md": ('{"max-length": 10}', "published 5, routed 5"),
    "docs/amqp10.md": ("hello",),
    "docs/stomp.md": ("/queue/work hello",),
    "docs/mqtt.md": ("policy mqtt-rings set",),
}


def blocks(text: str) -> list[tuple[str, str]]:
    """The runnable blocks of a Markdown text, in order: (kind, code)."""
    return [(RUN[tag], code) for tag, code in _BLOCK.findall(text) if tag in RUN]


def with_ports(code: str, ports: dict[str, int]) -> str:
    """`code` with each default port (a whole number) replaced by the test broker's."""
    for proto, default in DEFAULT_PORTS.items():
        code = re.sub(rf"(?<![\d.]){default}(?!\d)", str(ports[proto]), code)
    return code


def script(text: str, ports: dict[str, int]) -> str:
    """One Python script running the runnable blocks of `text` in order."""
    parts = ["import subprocess as _subprocess\n"]
    for kind, code in blocks(text):
        code = with_ports(code, ports)
        if kind == "python":
            parts.append(code)
        else:
            parts.append(
                f"_subprocess.run(['bash', '-euo', 'pipefail', '-c', {code!r}], check=True)\n"
            )
    return "\n".join(parts)


def test_blocks_are_found_and_ports_rewritten() -> None:
    text = textwrap.dedent(
        """\
        ```python
        pika.ConnectionParameters("127.0.0.1", 5672)  # and 15672, 61613, 1883, 25672
        ```
        ```console
        $ make run
        ```
        ```sh
        curl http://127.0.0.1:15672/api
        ```
        """
    )
    ports = {"amqp": 1, "http": 2, "stomp": 3, "mqtt": 4}
    assert [k for k, _ in blocks(text)] == ["python", "sh"]
    assert with_ports(blocks(text)[0][1], ports) == (
        'pika.ConnectionParameters("127.0.0.1", 1)  # and 2, 3, 4, 25672\n'
    )
    assert "127.0.0.1:2/api" in script(text, ports)


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[BrokerThread]:
    b = BrokerThread(
        ServerOptions(
            host="127.0.0.1",
            amqp_port=0,
            http_port=0,
            stomp_port=0,
            mqtt_port=0,
            data_dir=tmp_path / "data",
        )
    )
    b.start()
    yield b
    b.stop()


@pytest.mark.timeout(TIMEOUT_S + 20)
@pytest.mark.parametrize("name", FILES)
def test_blocks_run_as_a_script(name: str, broker: BrokerThread, tmp_path: Path) -> None:
    ports = {proto: broker.port_of(proto) for proto in DEFAULT_PORTS}
    code = script((ROOT / name).read_text(encoding="utf-8"), ports)
    path = tmp_path / "blocks.py"
    path.write_text(code, encoding="utf-8")
    env = {
        **os.environ,
        "RINGMQ_URL": f"http://127.0.0.1:{ports['http']}",
        # `ringmq` and the Python of this test first on PATH (the blocks' shell commands)
        "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}",
        "PYTHONUNBUFFERED": "1",
    }
    done = subprocess.run(
        [sys.executable, str(path)],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=TIMEOUT_S,
        check=False,
    )
    shown = f"--- script\n{code}\n--- stdout\n{done.stdout}\n--- stderr\n{done.stderr}"
    assert done.returncode == 0, shown
    for line in EXPECTED[name]:
        assert line in done.stdout, shown
