"""A `ringmq serve` subprocess on a data dir, for tests that SIGKILL the broker.

Ports are 0 by default (AMQP, and HTTP when asked) and read back from the broker's log, so
tests run in parallel; a restart may ask for the ports of the broker it replaces (clients keep
their URLs); `kill()` is a SIGKILL (no clean stop, no recovery terms), `stop()` a SIGTERM.
`nofile` lowers the broker's descriptor limit (RLIMIT_NOFILE), the test's own being untouched.
`extra` adds command-line options; `wait` is the log line (host, port groups) that says the
process is up when it opens no AMQP listener (a replication follower); `wait_port` reads the
port of any other listener from its log line.
"""

from __future__ import annotations

import os
import re
import resource
import signal
import subprocess
import sys
import time
from pathlib import Path

_AMQP = re.compile(rb"AMQP listening on ([0-9.]+):(\d+)")
_HTTP = re.compile(rb"HTTP listening on ([0-9.]+):(\d+)")
_STOMP = re.compile(rb"STOMP listening on ([0-9.]+):(\d+)")
_MQTT = re.compile(rb"MQTT listening on ([0-9.]+):(\d+)")
_STREAM = re.compile(rb"STREAM listening on ([0-9.]+):(\d+)")


class Serve:
    """One `ringmq serve` subprocess on `data_dir`, its ports read from its log."""

    def __init__(
        self,
        data_dir: Path,
        log_path: Path,
        *,
        http: bool = False,
        amqp_port: int = 0,
        http_port: int = 0,
        stomp: bool = False,
        mqtt: bool = False,
        stream: bool = False,
        timeout_s: float = 60.0,
        nofile: int | None = None,
        extra: tuple[str, ...] = (),
        wait: re.Pattern[bytes] | None = None,
        config: Path | None = None,
        wrap: tuple[str, ...] = (),
    ) -> None:
        self.log_path = log_path
        self._log = log_path.open("wb")
        cmd = [
            *wrap,  # e.g. ("ip", "netns", "exec", NS): it execs, so the pid stays ringmq's
            sys.executable,
            "-m",
            "ringmq",
            "serve",
            "--host",
            "127.0.0.1",
            "--amqp-port",
            str(amqp_port),
            "--http-port",
            str(http_port) if http else "-1",
            "--stomp-port",
            "0" if stomp else "off",
            "--mqtt-port",
            "0" if mqtt else "off",
            "--stream-port",
            "0" if stream else "off",
            "--data-dir",
            str(data_dir),
            *extra,
        ]
        if config is not None:
            cmd += ["--config", str(config)]

        def limit() -> None:  # runs in the child, before exec
            assert nofile is not None
            resource.setrlimit(resource.RLIMIT_NOFILE, (nofile, nofile))

        self.proc = subprocess.Popen(
            cmd,
            stdout=self._log,
            stderr=subprocess.STDOUT,
            preexec_fn=None if nofile is None else limit,
        )
        if wait is not None:  # a process without an AMQP listener (a follower)
            self.port = self.wait_port(wait, timeout_s)
            self.http_port = self.stomp_port = self.mqtt_port = None
            return
        self.port = self.wait_port(_AMQP, timeout_s)
        self.http_port = self.wait_port(_HTTP, timeout_s) if http else None
        self.stomp_port = self.wait_port(_STOMP, timeout_s) if stomp else None
        self.mqtt_port = self.wait_port(_MQTT, timeout_s) if mqtt else None
        self.stream_port = self.wait_port(_STREAM, timeout_s) if stream else None

    @property
    def amqp_url(self) -> str:
        return f"amqp://guest:guest@127.0.0.1:{self.port}/%2F"

    @property
    def http_url(self) -> str:
        assert self.http_port is not None, "started without http"
        return f"http://guest:guest@127.0.0.1:{self.http_port}"

    def wait_port(self, pattern: re.Pattern[bytes], timeout_s: float = 60.0) -> int:
        """The port of the first log line `pattern` matches (its group 2), waiting for it; a
        broker that exits first, or never logs it, is killed and the test fails with its log.
        For a listener the constructor does not wait for (`--shard-link-port`...)."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            found = pattern.search(self.log_path.read_bytes())
            if found:
                return int(found.group(2))
            if self.proc.poll() is not None:
                break
            time.sleep(0.02)
        self.kill()
        raise AssertionError("broker did not start:\n" + self.log_path.read_text(errors="replace"))

    def kill(self) -> None:
        """SIGKILL (a crash: nothing flushed that was not fsynced)."""
        if self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGKILL)
        self.proc.wait(timeout=30)
        self._log.close()

    def stop(self) -> None:
        """SIGTERM: a clean stop (the store syncs and writes its recovery terms)."""
        if self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGTERM)
        try:
            self.proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self.kill()
            raise
        self._log.close()
