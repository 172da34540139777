"""Single active consumer on a stream with rstream: of two subscriptions under one consumer
name, only the first gets messages; when it goes, the second is told it is active (the
consumer update), starts where its listener says, and gets them."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from rstream import (
    AMQPMessage,
    Consumer,
    MessageContext,
    OffsetSpecification,
    OffsetType,
    Producer,
    amqp_decoder,
)

from ringmq.node import BrokerThread
from tests.integration.conftest import BrokerFactory

pytestmark = pytest.mark.integration

LOGIN: dict[str, Any] = {"username": "guest", "password": "guest"}
SAC = {"single-active-consumer": "true", "name": "g"}


@pytest.fixture
def broker(broker_factory: BrokerFactory) -> BrokerThread:
    return broker_factory(stream_port=0)


class Member:
    """One consumer of the group: what it got and what its update listener was told."""

    def __init__(self, port: int) -> None:
        self.consumer = Consumer("127.0.0.1", port=port, **LOGIN)
        self.got: list[bytes] = []
        self.updates: list[bool] = []
        self.changed = asyncio.Event()

    async def on_message(self, msg: Any, _ctx: MessageContext) -> None:
        self.got.append(bytes(msg.body))
        self.changed.set()

    async def on_update(self, active: bool, _ctx: Any) -> OffsetSpecification:
        self.updates.append(active)
        return OffsetSpecification(OffsetType.FIRST, 0)

    async def start(self) -> None:
        await self.consumer.start()
        await self.consumer.subscribe(
            "s", self.on_message, decoder=amqp_decoder, properties=dict(SAC),
            consumer_update_listener=self.on_update,
        )  # fmt: skip

    async def wait_for(self, n: int) -> None:
        async with asyncio.timeout(10):
            while len(self.got) < n:
                self.changed.clear()
                await self.changed.wait()


async def _publish(p: Producer, bodies: list[bytes]) -> None:
    done = asyncio.Event()
    confirmed: list[object] = []

    def on_confirm(c: object) -> None:
        confirmed.append(c)
        if len(confirmed) == len(bodies):
            done.set()

    await p.send_batch("s", [AMQPMessage(body=b) for b in bodies], on_publish_confirm=on_confirm)
    await asyncio.wait_for(done.wait(), 10)


async def test_only_the_active_consumer_gets_messages_then_the_next(broker: BrokerThread) -> None:
    port = broker.port_of("stream")
    first = [b"a%d" % i for i in range(5)]
    then = [b"b%d" % i for i in range(5)]
    async with Producer("127.0.0.1", port=port, **LOGIN) as p:
        await p.create_stream("s")
        await _publish(p, first)
        one, two = Member(port), Member(port)
        await one.start()
        await two.start()
        await one.wait_for(5)
        await _publish(p, then)
        await one.wait_for(10)
        # the second subscription waits: nothing delivered, never told it is active
        assert (two.got, two.updates) == ([], [])
        await one.consumer.close()
        await two.wait_for(10)  # active now, from where its listener said: the first
        await two.consumer.close()
    assert one.got == first + then
    assert one.updates == [True]
    assert two.got == first + then
    assert two.updates == [True]
