"""ringmq.server: the asyncio layer (sockets, timers, flow control) around the pure core.

The server does not build the broker or the management app: the composition root
(`ringmq.node`) does, and hands them in. Start a broker in-process with
`ringmq.node.BrokerThread(ServerOptions(...)).start()` (tests, embedding); `ringmq.node.run`
is what `ringmq serve` calls.
"""

from __future__ import annotations

from ringmq.server.clock import Clock, FakeClock, SystemClock
from ringmq.server.configfile import ConfigError, FileConfig, load_config
from ringmq.server.options import ServerOptions, options_from
from ringmq.server.runtime import AppFactory, BrokerServer, Core, OpenCore
from ringmq.server.thread import ServerThread, run_server

__all__ = [
    "AppFactory",
    "BrokerServer",
    "Clock",
    "ConfigError",
    "Core",
    "FakeClock",
    "FileConfig",
    "OpenCore",
    "ServerOptions",
    "ServerThread",
    "SystemClock",
    "load_config",
    "options_from",
    "run_server",
]
