"""Integration fixtures: a real broker in-process on port 0, its event loop in a thread.

`broker` gives a running broker with default settings; `broker_factory(config=..., **opts)`
starts more with a custom `FileConfig` (TOML or Artemis parsed by `ringmq.server.configfile`).
Clients (pika, kombu, raw sockets) connect to `broker.host:broker.port` from the test thread;
aio-pika tests run their own loop in the test thread, so the broker's thread is shared by all.
"""

from __future__ import annotations

import socket
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from ringmq.node import BrokerThread
from ringmq.server.configfile import FileConfig, parse_toml
from ringmq.server.runtime import ServerOptions

BrokerFactory = Callable[..., BrokerThread]


@pytest.fixture
def broker_factory(tmp_path: Path) -> Iterator[BrokerFactory]:
    started: list[BrokerThread] = []

    def start(
        config: FileConfig | str | None = None, *, data_dir: Path | None = None, **opts: Any
    ) -> BrokerThread:
        if isinstance(config, str):
            config = parse_toml(config)
        options = ServerOptions(
            host="127.0.0.1",
            amqp_port=0,
            http_port=opts.pop("http_port", None),
            stomp_port=opts.pop("stomp_port", 0),
            mqtt_port=opts.pop("mqtt_port", 0),
            stream_port=opts.pop("stream_port", None),
            data_dir=data_dir or tmp_path / f"data{len(started)}",
            config=config or FileConfig(),
            **opts,
        )
        b = BrokerThread(options)
        b.start()
        started.append(b)
        return b

    yield start
    for b in started:
        b.stop()


@pytest.fixture
def broker(broker_factory: BrokerFactory) -> BrokerThread:
    return broker_factory()


def wait_until(pred: Callable[[], object], timeout: float = 5.0, interval: float = 0.01) -> None:
    """Poll `pred` until truthy; fail the test after `timeout` seconds (never a threshold)."""
    deadline = time.monotonic() + timeout
    while not pred():
        if time.monotonic() > deadline:
            raise AssertionError("condition not reached in time")
        time.sleep(interval)


def raw_connect(b: BrokerThread) -> socket.socket:
    s = socket.create_connection((b.host, b.port), timeout=5)
    return s
