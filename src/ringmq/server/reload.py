"""Configuration reload: poll the file's mtime, re-read it, apply what a running broker can take.

Theory of operation (Artemis `configuration-file-refresh-period`): when the file asks for
reloads, its mtime is polled at that period; a change re-reads the whole file. An invalid file
is logged and the running configuration stays. A valid one replaces the address-settings and
declares the exchanges, queues and bindings that are new (`setup.reload_settings`), as one
batch, so the effects reach clients at once; queues removed from the file stay. A declaration
the core refuses (a queue redeclared with other arguments: 406) stops the reload there, and
what came before it stays applied. A reload never takes the broker down.

Owns the poll timer and the last mtime seen. Owned by the loop thread.
"""

from __future__ import annotations

import asyncio
import logging
import os
from pathlib import Path
from typing import TYPE_CHECKING

from ringmq.core.errors import BrokerError
from ringmq.server.configfile import load_config
from ringmq.server.configspec import ConfigError, FileConfig
from ringmq.server.connections import Connections
from ringmq.server.setup import reload_settings

if TYPE_CHECKING:
    from ringmq.core.broker import Broker

log = logging.getLogger(__name__)


class ConfigReload:
    """Reloads of one server's configuration file (see the module docstring)."""

    def __init__(self, broker: Broker, config: FileConfig, conns: Connections) -> None:
        self.broker = broker
        self.config = config
        self.conns = conns
        self.stopped = False
        self._loop: asyncio.AbstractEventLoop | None = None
        self._handle: asyncio.TimerHandle | None = None
        self._mtime: float | None = None

    def start(self, loop: asyncio.AbstractEventLoop) -> None:
        """Poll the file, when it has a source and asks for reloads."""
        cfg = self.config
        if cfg.source is not None and cfg.refresh_period_ms:
            self._loop = loop
            self._mtime = _mtime(cfg.source)
            self._arm()

    def stop(self) -> None:
        self.stopped = True
        if self._handle is not None:
            self._handle.cancel()
            self._handle = None

    def _arm(self) -> None:
        assert self._loop is not None
        period = self.config.refresh_period_ms or 5000
        self._handle = self._loop.call_later(period / 1000.0, self._check)

    def _check(self) -> None:
        src = self.config.source
        assert src is not None
        mtime = _mtime(src)
        if mtime is not None and mtime != self._mtime:
            self._mtime = mtime
            self.reload()
        if not self.stopped:
            self._arm()

    def reload(self) -> bool:
        """Re-read the config file: replace address-settings, declare new queues/exchanges.

        Returns False (and keeps the running configuration) when the file is invalid.
        """
        src = self.config.source
        if src is None:
            return False
        try:
            new = load_config(src)
        except ConfigError as exc:
            log.error("configuration reload failed, keeping the running one: %s", exc)
            return False
        with self.conns.batch():
            try:
                reload_settings(self.broker, new, self.conns.clock.wall_ms())
            except (BrokerError, ValueError) as exc:
                # e.g. a queue redeclared with other arguments (406): what came before stays
                log.error("configuration reload stopped: %s", exc)
                return False
            except Exception:  # a reload must never take the broker down
                log.exception("configuration reload failed")
                return False
        log.info("configuration reloaded from %s", src)
        return True


def _mtime(path: Path) -> float | None:
    try:
        return os.stat(path).st_mtime
    except OSError:
        return None
