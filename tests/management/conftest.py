"""Management fixtures: a real core `Broker`, the app over it, an httpx client in-process.

`FakeRuntime` stands in for the server's side of the `Runtime` port (connections, listeners,
effect application) and records what management asked of it; the broker is the real one.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

import httpx
import pytest

from ringmq.adapters.amqp091 import Amqp091
from ringmq.amqp import spec
from ringmq.core.broker import Broker
from ringmq.core.effects import Effect
from ringmq.management.app import create_app
from ringmq.management.port import ConnectionInfo, ListenerInfo

AUTH = ("guest", "guest")
T0_MS = 1_800_000_000_000


@dataclass
class FakeRuntime:
    node: str = "ringmq@test"
    started_at_ms: int = T0_MS
    conns: list[ConnectionInfo] = field(default_factory=list)
    closed: list[tuple[str, str]] = field(default_factory=list)
    applied: list[Effect] = field(default_factory=list)
    batches: int = 0

    def connections(self) -> list[ConnectionInfo]:
        return list(self.conns)

    def close_connection(self, name: str, reason: str) -> bool:
        self.closed.append((name, reason))
        return any(c.name == name for c in self.conns)

    def listeners(self) -> list[ListenerInfo]:
        return [ListenerInfo("amqp", "127.0.0.1", 5672), ListenerInfo("http", "127.0.0.1", 15672)]

    def run_batch(self, fn: Callable[[], Any]) -> Any:
        self.batches += 1
        return fn()

    def apply_effects(self, effects: Iterable[Effect]) -> None:
        self.applied.extend(effects)


@dataclass
class Clock:
    now_ms: int = T0_MS

    def __call__(self) -> int:
        return self.now_ms

    def advance(self, ms: int) -> None:
        self.now_ms += ms


@pytest.fixture
def broker() -> Broker:
    return Broker()


@pytest.fixture
def runtime() -> FakeRuntime:
    return FakeRuntime()


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
async def client(
    broker: Broker, runtime: FakeRuntime, clock: Clock
) -> AsyncIterator[httpx.AsyncClient]:
    app = create_app(broker, runtime, background_rates=False, clock_ms=clock)
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://testserver", auth=AUTH) as c:
        yield c


def open_consumer(broker: Broker, queue: str, *, conn_id: int = 1, prefetch: int = 0) -> None:
    """A client connection with one channel consuming `queue` (ack required)."""
    broker.connection_opened(conn_id, "guest", "/", "127.0.0.1:5000", {}, T0_MS)
    broker.channel_opened(conn_id, 1, T0_MS)
    amqp = Amqp091(broker)
    if prefetch:
        amqp.handle(conn_id, 1, spec.BasicQos(prefetch_count=prefetch), None, T0_MS)
    amqp.handle(conn_id, 1, spec.BasicConsume(queue=queue, consumer_tag="c1"), None, T0_MS)
