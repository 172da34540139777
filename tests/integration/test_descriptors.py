"""File descriptors (issue 16, 1.4): refusals at the limit are logged, idle HTTP is closed.

The descriptor limit is lowered in a broker subprocess (`RLIMIT_NOFILE`), so the test's own
clients are not limited with it.
"""

from __future__ import annotations

import re
import resource
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from ringmq.server.configfile import parse_toml
from tests.integration.conftest import BrokerFactory

pytestmark = pytest.mark.integration

PROTOCOL_HEADER = b"AMQP\x00\x00\x09\x01"
SERVE = (
    sys.executable,
    "-m",
    "ringmq",
    "serve",
    "--amqp-port",
    "0",
    "--http-port",
    "-1",
    "--stomp-port",
    "off",
    "--mqtt-port",
    "off",
)


def _closed_by_peer(sock: socket.socket, timeout: float = 10.0) -> bool:
    """True when the broker closes the connection (EOF or reset) before `timeout`."""
    sock.settimeout(timeout)
    try:
        while sock.recv(4096):
            pass
    except (ConnectionResetError, BrokenPipeError):
        return True
    except TimeoutError:
        return False
    return True


def test_idle_http_connections_are_closed(broker_factory: BrokerFactory) -> None:
    config = parse_toml("[limits]\nhandshake_timeout_ms = 300\n")
    b = broker_factory(config, http_port=0)
    port = b.server.http_port
    silent = socket.create_connection(("127.0.0.1", port), timeout=5)
    partial = socket.create_connection(("127.0.0.1", port), timeout=5)
    partial.sendall(b"GET /api/overview HTTP/1.1\r\nHost: x\r\n")  # no end of head, ever
    try:
        assert _closed_by_peer(silent)
        assert _closed_by_peer(partial)
    finally:
        silent.close()
        partial.close()
    # a complete request is answered as before
    with socket.create_connection(("127.0.0.1", port), timeout=5) as ok:
        ok.sendall(b"GET /api/overview HTTP/1.1\r\nHost: x\r\n\r\n")
        assert ok.recv(64).startswith(b"HTTP/1.1 401")


def test_connections_refused_at_the_descriptor_limit_are_logged_once_per_period(
    tmp_path: Path,
) -> None:
    def low_limit() -> None:
        resource.setrlimit(resource.RLIMIT_NOFILE, (64, 64))

    proc = subprocess.Popen(
        [*SERVE, "--data-dir", str(tmp_path / "data")],
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=low_limit,
    )
    socks: list[socket.socket] = []
    try:
        assert proc.stderr is not None
        port = None
        while port is None:
            line = proc.stderr.readline()
            assert line, "the broker exited"
            m = re.search(r"AMQP listening on [\d.]+:(\d+)", line)
            if m:
                port = int(m.group(1))
        for _ in range(2):  # two bursts, well within one log period
            for _ in range(60):
                s = socket.create_connection(("127.0.0.1", port), timeout=5)
                s.sendall(PROTOCOL_HEADER)
                socks.append(s)
            time.sleep(0.2)
        served = 0
        for s in socks:
            s.settimeout(5)
            try:
                served += s.recv(7) != b""
            except OSError:
                pass
        assert 0 < served < len(socks)  # some were served, the others closed (not left waiting)
    finally:
        for s in socks:
            s.close()
        proc.terminate()
        _out, err = proc.communicate(timeout=10)
    lines = [ln for ln in err.splitlines() if "connection(s) on amqp" in ln]
    assert len(lines) == 1, err  # rate-limited: one line per period, with a count
    m = re.search(
        r"refused (\d+) connection\(s\) on amqp 127\.0\.0\.1:\d+: Too many open files", lines[0]
    )
    assert m is not None, lines[0]
    assert "descriptor limit 64" in lines[0]
