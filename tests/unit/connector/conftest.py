"""A running broker (AMQP + management on port 0, loop in a thread) for connector tests."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from ringmq.node import BrokerThread
from ringmq.server.configfile import FileConfig
from ringmq.server.runtime import ServerOptions


@pytest.fixture
def live_broker(tmp_path: Path) -> Iterator[BrokerThread]:
    b = BrokerThread(
        ServerOptions(
            host="127.0.0.1", amqp_port=0, http_port=0, data_dir=tmp_path, config=FileConfig()
        )
    )
    b.start()
    yield b
    b.stop()


def urls(b: BrokerThread) -> tuple[str, str]:
    """(AMQP URL, management URL) of a running broker."""
    return (
        f"amqp://guest:guest@127.0.0.1:{b.port}/%2F",
        f"http://guest:guest@127.0.0.1:{b.server.http_port}",
    )
