"""`ringmq serve --shards N`: N shard processes under one parent (experimental).

Theory of operation
-------------------
The parent is a supervisor and nothing else: it never touches a message. It decides what the
shards share and what each has alone, starts each as `ringmq serve` (the same command line,
with these options appended: the last of a repeated option wins), restarts one that dies, and
stops them all on SIGTERM or SIGINT.

* **Shared**: the AMQP port (0-9-1 and 1.0). Each shard binds it with SO_REUSEPORT
  (`--reuse-port`), so the kernel spreads new connections over the shards; a port of 0 is
  resolved here first, by a socket bound with SO_REUSEPORT that the parent keeps (not
  listening: it takes no connections) so that the port stays this broker's across restarts.
* **Shard 0 only**: the management HTTP API, STOMP, MQTT, the stream protocol and the
  WebSocket ports (their adapters do not yet ask shard 0 for definition changes, so they are
  served where the definitions are: docs/dev/shards.md), and the configuration file's
  `[tls]` listeners are refused with several shards for the same reason.
* **Each its own**: a data directory (`<data-dir>/shard-<k>`), a shard link listener on a
  loopback port chosen here, its index; every shard knows every other's link
  (`--shard-peers`) and the shards' secret (a random one, in the environment). A shard
  other than 0 follows shard 0's definitions and asks it for its clients' declarations
  (server/shardlinks.py).

A shard that exits while the parent is not stopping is started again a second later (its
queues come back from its data directory, as a restarted broker's do); its clients
reconnect. The parent's exit status is 0 after a stop, else the first shard's failure to
start (status 2: a bad command line or configuration, which a restart would not mend).
"""

from __future__ import annotations

import contextlib
import logging
import os
import secrets
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Final

if TYPE_CHECKING:
    from ringmq.server.options import ServerOptions

__all__ = ["refusal", "run_shards"]

log = logging.getLogger(__name__)

RESTART_S: Final = 1.0
"""Wait before a dead shard is started again."""
STOP_S: Final = 30.0
"""Time the shards have to stop after SIGTERM before they are killed."""
_SHARD0_ONLY: Final = ("--stomp-port", "--mqtt-port", "--stream-port", "--web-stomp-port",
                       "--web-mqtt-port", "--web-amqp-port")  # fmt: skip


def refusal(options: ServerOptions, shards: int) -> str | None:
    """Why these options cannot run as `shards` shards (None: they can)."""
    if shards < 2:
        return None
    if options.config.tls is not None:
        return "--shards does not support [tls] listeners yet"
    if options.cluster is not None or options.replication is not None:
        return "--shards does not run in a cluster or with replication yet"
    if options.amqp_port is None:
        return "--shards needs the plain AMQP listener"
    if options.shard_link_port is not None or options.shard_peers:
        return "--shards chooses the shard link options itself"
    return None


def _reserve(host: str, port: int) -> socket.socket:
    # A socket in the port's SO_REUSEPORT group, bound, not listening: it holds the port
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    sock.bind((host, port))
    return sock


def _free_loopback_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class _Shard:
    index: int
    argv: list[str]
    env: dict[str, str]
    proc: subprocess.Popen[bytes] | None = None
    starts: int = 0
    due: float = 0.0

    def start(self) -> None:
        self.proc = subprocess.Popen(self.argv, env=self.env)  # noqa: S603 - our own command
        self.starts += 1


def shard_commands(
    options: ServerOptions, shards: int, args: list[str], amqp_port: int, secret: str
) -> list[tuple[list[str], dict[str, str]]]:
    """Each shard's command line and environment (module docstring)."""
    links = [_free_loopback_port() for _ in range(shards)]
    peers = ",".join(f"{k}=127.0.0.1:{port}" for k, port in enumerate(links))
    out = []
    for k in range(shards):
        argv = [sys.executable, "-m", "ringmq", "serve", *args]
        argv += ["--amqp-port", str(amqp_port), "--reuse-port"]
        argv += ["--shard-index", str(k), "--shard-link-port", str(links[k])]
        argv += ["--shard-peers", peers, "--data-dir", str(options.data_dir / f"shard-{k}")]
        env = dict(os.environ, RINGMQ_SHARD_LINK_SECRET=secret)
        if k:
            argv += ["--http-port", "off"]
            argv += [item for opt in _SHARD0_ONLY for item in (opt, "off")]
            # shard 0 is the broker `ringmq status` and the other commands find
            env["XDG_RUNTIME_DIR"] = str(options.data_dir / f"shard-{k}")
        out.append((argv, env))
    return out


def run_shards(options: ServerOptions, shards: int, args: list[str]) -> int:
    """Run `shards` shards of `ringmq serve args` until SIGTERM/SIGINT (module docstring);
    the exit status."""
    host = options.amqp_bind or options.host
    assert options.amqp_port is not None
    held = _reserve(host, options.amqp_port)
    amqp_port = int(held.getsockname()[1])
    secret = secrets.token_hex(32)
    fleet = [
        _Shard(k, argv, env)
        for k, (argv, env) in enumerate(shard_commands(options, shards, args, amqp_port, secret))
    ]
    stopping = False

    def stop(_signum: int, _frame: object) -> None:
        nonlocal stopping
        stopping = True

    old = {sig: signal.signal(sig, stop) for sig in (signal.SIGTERM, signal.SIGINT)}
    log.info("%d shards on AMQP port %d", shards, amqp_port)
    try:
        for shard in fleet:
            shard.start()
        while not stopping:
            time.sleep(0.1)
            now = time.monotonic()
            for shard in fleet:
                proc = shard.proc
                if proc is not None and proc.poll() is not None:
                    shard.proc = None
                    if proc.returncode == 2 and shard.starts == 1:
                        log.error("shard %d could not start", shard.index)
                        return 2
                    log.warning(
                        "shard %d exited (%d); starting it again in %.0f s",
                        shard.index,
                        proc.returncode,
                        RESTART_S,
                    )
                    shard.due = now + RESTART_S
                elif proc is None and now >= shard.due:
                    shard.start()
        return 0
    finally:
        for sig, handler in old.items():
            signal.signal(sig, handler)
        _stop(fleet)
        held.close()


def _stop(fleet: list[_Shard]) -> None:
    live = [s.proc for s in fleet if s.proc is not None and s.proc.poll() is None]
    for proc in live:
        with contextlib.suppress(ProcessLookupError):
            proc.send_signal(signal.SIGTERM)
    deadline = time.monotonic() + STOP_S
    for proc in live:
        try:
            proc.wait(timeout=max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
