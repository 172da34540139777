"""A forwarding origin shard in a process of its own, for `shard_forward_bench`.

Usage (started by the benchmark; by hand for a look)::

    python -m benchmarks.shard_origin --link-port P --secret S --data-dir DIR --copy q0 --copy q1

Theory of operation: nothing makes copies of another shard's queues from metadata yet
(docs/dev/shards.md), so an origin is a broker server built in Python exactly as
`tests/integration/test_shard_forward.py` builds one: `ringmq.node.server` with
`ServerOptions.shard_peers` naming the owner's link listener (shard `--owner-index`, default 1)
and the shards' secret, started, then one durable copy per `--copy` made with
`Topology.create_copy` before any client connects. Everything else is as `ringmq serve` runs:
the same option defaults (`options_from` over an empty `FileConfig`: group commit, memory
monitor, management HTTP on a free port, no STOMP/MQTT/stream listener), `tune_gc` and the
same event loop (uvloop when installed). When the copies exist it prints
``SHARD-ORIGIN AMQP port N`` on stdout (what `OriginProcess` waits for), and runs until
SIGTERM or SIGINT, then stops cleanly. Loopback only.

`OriginProcess` is the driver's side: it starts this module with the interpreter running the
benchmark, reads the port, and stops only the process it started.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path
from typing import Final

if __package__ in (None, ""):  # run as a script: make `benchmarks` importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

READY: Final = "SHARD-ORIGIN AMQP port"
_READY_RE: Final = re.compile(rf"{READY} (\d+)")
_ROOT: Final = Path(__file__).resolve().parent.parent


def _parse_args(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    ap.add_argument("--link-port", type=int, required=True, help="the owner's shard link port")
    ap.add_argument("--secret", required=True, help="the shards' shared link secret")
    ap.add_argument("--data-dir", type=Path, required=True)
    ap.add_argument("--copy", action="append", default=[], help="a queue of the owner (repeat)")
    ap.add_argument("--owner-index", type=int, default=1)
    ap.add_argument("--vhost", default="/")
    ap.add_argument("--log-level", default="info")
    return ap.parse_args(argv)


async def _serve(args: argparse.Namespace) -> None:
    from ringmq.node import server as build_server
    from ringmq.server.configfile import FileConfig
    from ringmq.server.options import options_from

    options = options_from(
        FileConfig(),
        host="127.0.0.1",
        amqp_port=0,
        http_port=0,
        stomp_port=-1,
        mqtt_port=-1,
        stream_port=-1,
        data_dir=args.data_dir,
    )
    options = replace(
        options,
        shard_link_secret=args.secret.encode(),
        shard_peers={args.owner_index: ("127.0.0.1", args.link_port)},
    )
    server = build_server(options)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    await server.start()
    try:
        for name in args.copy:
            server.broker.topology.create_copy(args.vhost, name, args.owner_index, durable=True)
        print(f"{READY} {server.amqp_port}", flush=True)
        await stop.wait()
    finally:
        await server.stop()


def main(argv: list[str] | None = None) -> int:
    args = _parse_args(argv)
    from ringmq.cli.logsetup import configure_logging
    from ringmq.server.loop import new_event_loop, tune_gc

    configure_logging(args.log_level)
    tune_gc()
    loop = new_event_loop()
    asyncio.set_event_loop(loop)
    try:
        loop.run_until_complete(_serve(args))
    finally:
        loop.close()
    return 0


class OriginProcess:
    """`python -m benchmarks.shard_origin` on a temporary data dir, stopped by `stop`."""

    def __init__(
        self, link_port: int, secret: str, copies: tuple[str, ...], *, timeout_s: float = 120.0
    ) -> None:
        self.link_port, self.secret, self.copies = link_port, secret, copies
        self._dir = Path(tempfile.mkdtemp(prefix="ringmq-origin-bench-"))
        self.log_path = self._dir / "origin.log"
        self._timeout = timeout_s
        self._proc: subprocess.Popen[bytes] | None = None
        self.url = ""

    def start(self) -> str:
        """Start the origin and return its AMQP URL once its copies exist."""
        cmd = [
            sys.executable, "-m", "benchmarks.shard_origin",
            "--link-port", str(self.link_port), "--secret", self.secret,
            "--data-dir", str(self._dir / "data"),
            *(arg for name in self.copies for arg in ("--copy", name)),
        ]  # fmt: skip
        # `benchmarks` importable from the child whatever the caller's PYTHONPATH says
        path = os.pathsep.join(p for p in (str(_ROOT), os.environ.get("PYTHONPATH", "")) if p)
        env = {**os.environ, "PYTHONPATH": path}
        with self.log_path.open("ab") as log:
            self._proc = subprocess.Popen(
                cmd, stdout=log, stderr=subprocess.STDOUT, env=env, cwd=_ROOT
            )
        deadline = time.monotonic() + self._timeout
        while time.monotonic() < deadline:
            found = _READY_RE.search(self.log_path.read_text(errors="replace"))
            if found:
                self.url = f"amqp://guest:guest@127.0.0.1:{found.group(1)}/"
                return self.url
            if self._proc.poll() is not None:
                break
            time.sleep(0.05)
        tail = self.log_path.read_text(errors="replace")[-2000:]
        self.stop()
        raise RuntimeError(f"the origin did not report its AMQP port; log tail:\n{tail}")

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc else None

    def log_tail(self, lines: int = 40) -> str:
        """The end of its log without the per-connection lines (what went wrong, if logged)."""
        with contextlib.suppress(OSError):
            text = self.log_path.read_text(errors="replace").splitlines()
            kept = [
                t for t in text if "connection opened" not in t and "connection closed" not in t
            ]
            return "\n".join(kept[-lines:])
        return ""

    def stop(self) -> None:
        proc = self._proc
        if proc is not None:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
                try:
                    proc.wait(timeout=15)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait(timeout=5)
            self._proc = None
        shutil.rmtree(self._dir, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
