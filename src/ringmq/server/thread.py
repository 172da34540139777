"""A server on its own event loop in a daemon thread (tests, embedding), or in the foreground.

Theory of operation: `ServerThread` runs `BrokerServer.serve_forever()` on a new loop in a
daemon thread. `start()` returns once the listeners accept connections; `call(fn)` runs `fn` on
the loop thread (the only thread allowed to touch the broker) as one batch and returns its
result; `stop()` asks the server to stop and joins the thread. `run_server` is the foreground
form (`ringmq serve`): GC tuned, signals installed, start-up errors turned into an exit status.
Neither builds a server: `ringmq.node` does.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, TypeVar

from ringmq.core.errors import BrokerError
from ringmq.server.configspec import ConfigError
from ringmq.server.loop import new_event_loop, tune_gc
from ringmq.server.runtime import BrokerServer

if TYPE_CHECKING:
    from ringmq.core.broker import Broker

log = logging.getLogger(__name__)

_T = TypeVar("_T")


class ServerThread:
    """A `BrokerServer` on its own event loop in a daemon thread (see the module docstring)."""

    def __init__(self, server: BrokerServer) -> None:
        self.server = server
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._error: BaseException | None = None

    @property
    def host(self) -> str:
        return self.server.options.host

    @property
    def port(self) -> int:
        """The plain AMQP port (LookupError when that listener is off)."""
        return self.server.amqp_port

    def port_of(self, protocol: str) -> int:
        """The port of the listener of `protocol` ("amqp", "stomp", "mqtt", "http"...)."""
        return self.server.port_of(protocol)

    @property
    def broker(self) -> Broker:
        return self.server.broker

    def start(self, timeout: float = 10.0) -> None:
        self._thread = threading.Thread(target=self._run, name="ringmq-broker", daemon=True)
        self._thread.start()
        if not self.server.ready.wait(timeout) or self._error is not None:
            raise RuntimeError("broker failed to start") from self._error

    def _run(self) -> None:
        loop = new_event_loop()
        self._loop = loop
        asyncio.set_event_loop(loop)
        try:
            loop.run_until_complete(self.server.serve_forever())
        except BaseException as exc:
            self._error = exc
            self.server.ready.set()
            raise
        finally:
            loop.close()

    def call(self, fn: Callable[[], _T], timeout: float = 10.0) -> _T:
        """Run `fn()` on the broker's loop thread as one batch and return its result."""
        assert self._loop is not None

        async def run() -> _T:
            return self.server.run_batch(fn)

        return asyncio.run_coroutine_threadsafe(run(), self._loop).result(timeout)

    def stop(self, timeout: float = 10.0) -> None:
        if self._loop is None or self._thread is None:
            return
        if self._thread.is_alive():
            with contextlib.suppress(RuntimeError):
                self._loop.call_soon_threadsafe(self.server.request_stop)
            self._thread.join(timeout)


def run_server(server: BrokerServer) -> int:
    """Run `server` in the foreground until SIGTERM/SIGINT; returns the exit status."""
    tune_gc()
    loop = new_event_loop()
    asyncio.set_event_loop(loop)
    try:
        loop.run_until_complete(server.serve_forever(install_signals=True))
    except (ConfigError, OSError, BrokerError, ValueError) as exc:
        # bad TLS files, a port in use, a declaration the core refuses, an invalid policy
        log.error("cannot start: %s", exc)
        return 1
    finally:
        loop.close()
    return 0
