"""Where a running broker can be found: the file `ringmq serve` writes and the CLI reads.

Theory of operation: once its listeners are open, a broker started by `ringmq serve` writes
`broker.json` (`Announcement`: its pid, node, data directory and one URL per listener) into
its data directory and into a per-user runtime file (`runtime_file()`:
`$XDG_RUNTIME_DIR/ringmq/broker.json`, else `~/.cache/ringmq/broker.json`). Both are written
whole to a temporary name and renamed, so a reader never sees half a file. On a clean stop the
broker removes the data directory's file, and the runtime file if it still names this broker
(a later broker of the same user has taken it over otherwise). A file left behind by a broker
that was killed names a pid that is no longer alive: `read` treats it as absent.

`locate` is how the CLI (`ringmq.cli.admin`) finds its management URL: `--url`, then
`RINGMQ_URL`, then the file of `RINGMQ_DATA_DIR`, then the runtime file, then RabbitMQ's
default port; its `Target` says which one, for the user. Plain file I/O: no sockets, no asyncio
(the CLI imports this module, and importing `ringmq.server` would cost it the whole server).
"""

from __future__ import annotations

import contextlib
import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

FILE_NAME: Final = "broker.json"


@dataclass(frozen=True, slots=True)
class Announcement:
    """What a running broker says about itself.

    Attributes:
        pid: the broker's process id (a dead pid marks a stale file).
        node: its node name.
        data_dir: its data directory (absolute).
        urls: one URL per listener, by protocol ("http", "amqp", "stomp", "mqtt", "amqps"...).
    """

    pid: int
    node: str
    data_dir: str
    urls: dict[str, str] = field(default_factory=dict)

    @property
    def management_url(self) -> str | None:
        """The management API's URL (HTTPS when that is all it serves), None without one."""
        return self.urls.get("http") or self.urls.get("https")


def runtime_file() -> Path:
    """The per-user file naming the broker this user started last."""
    base = os.environ.get("XDG_RUNTIME_DIR")
    root = Path(base) if base else Path.home() / ".cache"
    return root / "ringmq" / FILE_NAME


def listener_url(protocol: str, host: str, port: int) -> str:
    """The URL a client on this machine connects to: a wildcard address becomes loopback."""
    if host in ("", "0.0.0.0"):  # noqa: S104 - reading a bind address, not binding
        host = "127.0.0.1"
    elif host == "::":
        host = "::1"
    if ":" in host:
        host = f"[{host}]"
    scheme = protocol.replace("/ssl", "s")  # "mqtt/ssl" -> "mqtts"
    return f"{scheme}://{host}:{port}"


def write(announcement: Announcement, paths: list[Path]) -> None:
    """Write `announcement` to each of `paths` (atomically; directories created).

    Raises:
        OSError: a file cannot be written (the caller logs it: it is a convenience).
    """
    text = json.dumps(
        {
            "pid": announcement.pid,
            "node": announcement.node,
            "data_dir": announcement.data_dir,
            "urls": announcement.urls,
        },
        indent=2,
        sort_keys=True,
    )
    for path in paths:
        path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        tmp = path.with_name(f".{path.name}.{os.getpid()}")
        tmp.write_text(text + "\n", encoding="utf-8")
        os.replace(tmp, path)


def remove(paths: list[Path], pid: int) -> None:
    """Remove each of `paths` that still names `pid` (another broker may have taken it)."""
    for path in paths:
        found = _load(path)
        if found is not None and found.pid == pid:
            with contextlib.suppress(OSError):
                path.unlink()


def read(path: Path) -> Announcement | None:
    """The announcement in `path`, None when it is missing, unreadable or stale."""
    found = _load(path)
    if found is None or not _alive(found.pid):
        return None
    return found


def find_running() -> tuple[Announcement, Path] | None:
    """The running broker to talk to and the file that named it: the file of the data
    directory `RINGMQ_DATA_DIR` names, else the user's runtime file; None when neither names
    a live broker with a management URL."""
    data_dir = os.environ.get("RINGMQ_DATA_DIR")
    candidates = [Path(data_dir) / FILE_NAME] if data_dir else []
    candidates.append(runtime_file())
    for path in candidates:
        found = read(path)
        if found is not None and found.management_url is not None:
            return found, path
    return None


@dataclass(frozen=True, slots=True)
class Target:
    """The management URL a command uses, and what to tell the user about it.

    Attributes:
        url: the URL.
        found: how the CLI found it itself (None: --url or RINGMQ_URL gave it).
        fallback: set when nothing was announced and the URL is the option's default: the
            hint printed if that default cannot be reached.
    """

    url: str
    found: str | None = None
    fallback: str | None = None


def locate(url: str | None, fallback_url: str) -> Target:
    """Where a `ringmq` command talks to: `url` (`--url` or RINGMQ_URL) when given; else the
    broker `ringmq serve` announced (`find_running`); else `fallback_url`."""
    if url is not None:
        return Target(url)
    found = find_running()
    if found is None:
        return Target(
            fallback_url,
            fallback=f"no running ringmq announced itself in {runtime_file()}, so this "
            f"tried {fallback_url}: start one with `ringmq serve`, or pass --url or set "
            "RINGMQ_URL",
        )
    a, path = found
    assert a.management_url is not None
    return Target(
        a.management_url, found=f"ringmq at {a.management_url} (pid {a.pid}, from {path})"
    )


def _load(path: Path) -> Announcement | None:
    try:
        doc: Any = json.loads(path.read_text(encoding="utf-8"))
        urls = doc["urls"]
        if not isinstance(urls, dict):
            return None
        return Announcement(
            int(doc["pid"]),
            str(doc["node"]),
            str(doc["data_dir"]),
            {str(k): str(v) for k, v in urls.items()},
        )
    except (OSError, ValueError, KeyError, TypeError):
        return None


def _alive(pid: int) -> bool:
    # signal 0 checks that the process exists; EPERM means it exists under another user
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
