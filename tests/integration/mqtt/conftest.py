"""MQTT integration fixtures: paho clients closed at teardown whatever the test did."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest

from ringmq.node import BrokerThread
from tests.integration.mqtt.clients import Paho

MakePaho = Callable[..., Paho]


@pytest.fixture
def paho() -> Iterator[MakePaho]:
    made: list[Paho] = []

    def make(b: BrokerThread | int, client_id: str, **kw: Any) -> Paho:
        c = Paho(b, client_id, **kw)
        made.append(c)
        return c

    yield make
    for c in made:
        c.disconnect()
