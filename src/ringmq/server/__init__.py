"""ringmq.server: the asyncio layer (sockets, timers, flow control) around the pure core.

Start a broker in-process with `BrokerThread(ServerOptions(...)).start()` (tests, embedding) or
`await BrokerServer(options).serve_forever()`; `run(options)` is what `ringmq serve` calls.
"""

from __future__ import annotations

from ringmq.server.clock import Clock, FakeClock, SystemClock
from ringmq.server.configfile import ConfigError, FileConfig, load_config
from ringmq.server.runtime import BrokerServer, BrokerThread, ServerOptions, options_from, run

__all__ = [
    "BrokerServer",
    "BrokerThread",
    "Clock",
    "ConfigError",
    "FakeClock",
    "FileConfig",
    "ServerOptions",
    "SystemClock",
    "load_config",
    "options_from",
    "run",
]
