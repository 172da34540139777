"""Publishes and consumers on one shard of queues another shard owns, end to end.

The owner is `ringmq serve --shard-link-port` (shard 1), a process of its own; the origin
(shard 0) is a broker server in this test's event loop (the loop `ringmq serve` runs on:
uvloop when installed), told where shard 1 listens (`ServerOptions.shard_peers`), holding
copies of shard 1's queues (made through the core's `Topology.create_copy`: nothing makes
copies from metadata yet, docs/dev/shards.md). aio-pika publishes with confirms and consumes
on the origin; pika publishes to and reads the owner. Asserted: the owner has every confirmed
message, in the publisher's order; an owner's refusal is the publisher's nack; a kill -9 of
the owner settles every publish (nothing hangs) and loses no confirmed one (the owner
restarted on its data directory has every message it confirmed); a consumer on the origin
gets every message of the owner's queue once, in order but for those it requeued, and its
acks empty the owner's queue; publisher and consumer both on the origin see the same.
"""

from __future__ import annotations

import asyncio
import os
import signal
from collections.abc import Iterator
from pathlib import Path

import aio_pika
import pika
import pytest

from ringmq.node import server as build_server
from ringmq.server.options import ServerOptions
from ringmq.server.runtime import BrokerServer
from tests.integration.shardkit import LINK_LINE, drain, run_on_ringmq_loop
from tests.serve import Serve

pytestmark = [
    pytest.mark.integration,
    pytest.mark.timeout(180),
    pytest.mark.filterwarnings("ignore::ResourceWarning"),
]

SECRET = "forward-secret"
_BOUND_S = 60.0
"""A bound against hanging only: every wait below ends as soon as its answer comes."""


def _owner(data: Path, log: Path) -> tuple[Serve, int]:
    extra = ("--shard-link-port", "0", "--shard-link-secret", SECRET, "--shard-index", "1")
    serve = Serve(data, log, extra=extra)
    return serve, serve.wait_port(LINK_LINE, 30)


@pytest.fixture
def owner(tmp_path: Path) -> Iterator[tuple[Serve, int]]:
    serve, port = _owner(tmp_path / "owner", tmp_path / "owner.log")
    yield serve, port
    serve.stop()


def _declare(serve: Serve, name: str, arguments: dict[str, object] | None = None) -> None:
    with pika.BlockingConnection(pika.URLParameters(serve.amqp_url)) as conn:
        conn.channel().queue_declare(name, durable=True, arguments=arguments)


async def _origin(data: Path, link_port: int, *copies: str) -> BrokerServer:
    options = ServerOptions(
        host="127.0.0.1",
        amqp_port=0,
        http_port=None,
        data_dir=data,
        shard_link_secret=SECRET.encode(),
        shard_peers={1: ("127.0.0.1", link_port)},
    )
    server = build_server(options)
    await server.start()
    topology = server.broker.topology
    for name in copies:
        topology.create_copy("/", name, 1, durable=True)
    return server


async def _publish(port: int, queue: str, bodies: list[bytes]) -> list[BaseException | None]:
    """Publish every body with confirms, all in flight at once; each one's outcome (None:
    acked; the exception of a nack)."""
    conn = await aio_pika.connect(f"amqp://guest:guest@127.0.0.1:{port}/")
    async with conn:
        ch = await conn.channel(publisher_confirms=True)
        sends = [
            ch.default_exchange.publish(
                aio_pika.Message(b, delivery_mode=aio_pika.DeliveryMode.PERSISTENT), queue
            )
            for b in bodies
        ]
        done = await asyncio.wait_for(asyncio.gather(*sends, return_exceptions=True), _BOUND_S)
    return [d if isinstance(d, BaseException) else None for d in done]


def test_confirmed_publishes_reach_the_owner_in_order(
    owner: tuple[Serve, int], tmp_path: Path
) -> None:
    serve, link_port = owner
    _declare(serve, "orders")
    bodies = [str(i).encode() for i in range(500)]

    async def main() -> list[BaseException | None]:
        origin = await _origin(tmp_path / "origin", link_port, "orders")
        try:
            return await _publish(origin.amqp_port, "orders", bodies)
        finally:
            await origin.stop()

    outcomes = run_on_ringmq_loop(main())
    assert outcomes == [None] * len(bodies)
    assert drain(serve, "orders") == bodies


def test_an_owner_refusal_is_the_publishers_nack(owner: tuple[Serve, int], tmp_path: Path) -> None:
    serve, link_port = owner
    _declare(serve, "tiny", {"x-max-length": 1, "x-overflow": "reject-publish"})

    async def main() -> tuple[list[BaseException | None], list[BaseException | None]]:
        origin = await _origin(tmp_path / "origin", link_port, "tiny", "ghost")
        try:
            port = origin.amqp_port
            tiny = [*await _publish(port, "tiny", [b"a"]), *await _publish(port, "tiny", [b"b"])]
            ghost = await _publish(port, "ghost", [b"c"])  # a copy the owner does not have
            return tiny, ghost
        finally:
            await origin.stop()

    tiny, ghost = run_on_ringmq_loop(main())
    assert tiny[0] is None
    assert isinstance(tiny[1], aio_pika.exceptions.DeliveryError)
    assert isinstance(ghost[0], aio_pika.exceptions.DeliveryError)
    assert drain(serve, "tiny") == [b"a"]


def test_a_killed_owner_settles_every_publish_and_loses_no_confirmed_one(
    tmp_path: Path,
) -> None:
    data = tmp_path / "owner"
    serve, link_port = _owner(data, tmp_path / "owner.log")
    _declare(serve, "jobs")
    bodies = [str(i).encode() for i in range(3000)]

    async def main() -> list[BaseException | None]:
        origin = await _origin(tmp_path / "origin", link_port, "jobs")
        try:
            loop = asyncio.get_running_loop()
            publishing = asyncio.create_task(_publish(origin.amqp_port, "jobs", bodies))
            await asyncio.sleep(0.3)  # some confirmed, some in flight
            await loop.run_in_executor(None, serve.kill)
            return await publishing
        finally:
            await origin.stop()

    outcomes = run_on_ringmq_loop(main())
    acked = {b for b, o in zip(bodies, outcomes, strict=True) if o is None}
    nacked = [o for o in outcomes if o is not None]
    assert all(isinstance(o, aio_pika.exceptions.DeliveryError) for o in nacked), nacked[:3]
    print(f"owner killed: {len(acked)} confirmed, {len(nacked)} nacked")
    back, _ = _owner(data, tmp_path / "owner-back.log")
    try:
        stored = drain(back, "jobs")
    finally:
        back.stop()
    lost = acked - set(stored)
    assert not lost, f"{len(lost)} confirmed messages lost"
    assert len(stored) == len(set(stored))  # each forwarded once
    assert stored == sorted(stored, key=int)  # in the publisher's order


def _publish_at(serve: Serve, name: str, bodies: list[bytes]) -> None:
    with pika.BlockingConnection(pika.URLParameters(serve.amqp_url)) as conn:
        ch = conn.channel()
        ch.confirm_delivery()
        for b in bodies:
            ch.basic_publish("", name, b, pika.BasicProperties(delivery_mode=2))


async def _consume(port: int, queue: str, count: int, requeue_first: int = 0) -> list[bytes]:
    """Consume `count` messages from `queue` (prefetch 10), acking each; the first
    `requeue_first` deliveries are nacked with requeue instead (and come again)."""
    got: list[bytes] = []
    conn = await aio_pika.connect(f"amqp://guest:guest@127.0.0.1:{port}/")
    async with conn:
        ch = await conn.channel()
        await ch.set_qos(prefetch_count=10)
        q = await ch.get_queue(queue, ensure=False)
        async with q.iterator() as it:
            async for m in it:
                if requeue_first:
                    requeue_first -= 1
                    await m.nack(requeue=True)
                    continue
                got.append(m.body)
                await m.ack()
                if len(got) == count:
                    break
    return got


def _count(serve: Serve, name: str) -> int:
    with pika.BlockingConnection(pika.URLParameters(serve.amqp_url)) as conn:
        count: int = conn.channel().queue_declare(name, passive=True).method.message_count
        return count


def test_a_consumer_on_the_origin_takes_the_owners_messages_and_settles_them(
    owner: tuple[Serve, int], tmp_path: Path
) -> None:
    serve, link_port = owner
    _declare(serve, "work")
    bodies = [str(i).encode() for i in range(300)]  # more than a subscription's credit
    _publish_at(serve, "work", bodies)

    async def main() -> list[bytes]:
        origin = await _origin(tmp_path / "origin", link_port, "work")
        try:
            return await asyncio.wait_for(
                _consume(origin.amqp_port, "work", len(bodies), requeue_first=3), _BOUND_S
            )
        finally:
            await origin.stop()

    got = run_on_ringmq_loop(main())
    assert sorted(got, key=int) == bodies  # each once; the requeued ones came again
    assert [b for b in got if int(b) >= 3] == bodies[3:]  # the rest in the owner's order
    assert _count(serve, "work") == 0  # every ack reached the owner


def test_publisher_and_consumer_on_the_origin_queue_on_the_owner(
    owner: tuple[Serve, int], tmp_path: Path
) -> None:
    serve, link_port = owner
    _declare(serve, "both")
    bodies = [str(i).encode() for i in range(400)]

    async def main() -> tuple[list[BaseException | None], list[bytes]]:
        origin = await _origin(tmp_path / "origin", link_port, "both")
        try:
            consuming = asyncio.create_task(_consume(origin.amqp_port, "both", len(bodies)))
            outcomes = await _publish(origin.amqp_port, "both", bodies)
            return outcomes, await asyncio.wait_for(consuming, _BOUND_S)
        finally:
            await origin.stop()

    outcomes, got = run_on_ringmq_loop(main())
    assert outcomes == [None] * len(bodies)
    assert got == bodies
    assert _count(serve, "both") == 0


def test_a_stopped_owner_is_found_by_its_silence(tmp_path: Path) -> None:
    # SIGSTOP: the owner's socket stays open and says nothing; the origin drops the link
    # after its stall time and nacks what waited, instead of holding publishers for ever
    serve, link_port = _owner(tmp_path / "owner", tmp_path / "owner.log")
    try:
        _declare(serve, "stuck")

        async def main() -> tuple[list[BaseException | None], list[BaseException | None]]:
            origin = await _origin(tmp_path / "origin", link_port, "stuck")
            try:
                links = origin.conns.shard_links
                assert links is not None
                links.stall_s = 1.0
                before = await _publish(origin.amqp_port, "stuck", [b"a"])
                os.kill(serve.proc.pid, signal.SIGSTOP)
                try:
                    during = await _publish(origin.amqp_port, "stuck", [b"b", b"c"])
                finally:
                    os.kill(serve.proc.pid, signal.SIGCONT)
                return before, during
            finally:
                await origin.stop()

        before, during = run_on_ringmq_loop(main())
        assert before == [None]
        assert all(isinstance(o, aio_pika.exceptions.DeliveryError) for o in during), during
    finally:
        serve.stop()
