"""Shard 0's definitions followed by shard 1 over the shard link, end to end.

Shard 0 is `ringmq serve --shard-link-port --shard-index 0`, a process of its own; shard 1 is
a broker server in this test's event loop (the loop `ringmq serve` runs on), told where shard
0's link listens (`ServerOptions.shard_peers`): it follows shard 0's definitions
(docs/dev/shards.md). Clients only: pika declares, binds and deletes on shard 0; aio-pika on
shard 1 sees the queues (a passive declare) and publishes with confirms to shard 0's
exchange, and the messages are in shard 0's queues, in order. Asserted: what was declared
before shard 1 started (the snapshot) and after (the changes) routes the same on shard 1; a
delete on shard 0 is a 404 on shard 1; shard 0 killed with SIGKILL and started again on its
directory and link port is followed again (a new snapshot), and a queue deleted and another
declared as it comes back are gone and there on shard 1 too.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import aio_pika
import pika
import pytest

from ringmq.node import server as build_server
from ringmq.server.options import ServerOptions
from ringmq.server.runtime import BrokerServer
from tests.integration.shardkit import LINK_LINE, drain, run_on_ringmq_loop
from tests.ports import free_ports
from tests.serve import Serve

pytestmark = [
    pytest.mark.integration,
    pytest.mark.timeout(180),
    pytest.mark.filterwarnings("ignore::ResourceWarning"),
]

SECRET = "definitions-secret"
_BOUND_S = 30.0
"""A bound against hanging only: every wait below ends as soon as its answer comes."""


def _shard_zero(data: Path, log: Path, link_port: int) -> Serve:
    extra = ("--shard-link-port", str(link_port), "--shard-link-secret", SECRET)
    serve = Serve(data, log, extra=(*extra, "--shard-index", "0"))
    assert serve.wait_port(LINK_LINE, 30) == link_port
    return serve


def _on_zero(serve: Serve, *steps: tuple[str, tuple[Any, ...], dict[str, Any]]) -> None:
    with pika.BlockingConnection(pika.URLParameters(serve.amqp_url)) as conn:
        ch = conn.channel()
        for method, args, kw in steps:
            getattr(ch, method)(*args, **kw)


async def _shard_one(data: Path, link_port: int) -> BrokerServer:
    options = ServerOptions(
        host="127.0.0.1",
        amqp_port=0,
        http_port=None,
        data_dir=data,
        shard_link_secret=SECRET.encode(),
        shard_index=1,
        shard_peers={0: ("127.0.0.1", link_port)},
    )
    server = build_server(options)
    await server.start()
    return server


async def _exists(port: int, queue: str) -> bool:
    conn = await aio_pika.connect(f"amqp://guest:guest@127.0.0.1:{port}/")
    async with conn:
        ch = await conn.channel()
        try:
            await ch.declare_queue(queue, passive=True)
        except aio_pika.exceptions.ChannelClosed:
            return False
        return True


async def _until(port: int, queue: str, present: bool) -> None:
    """Wait until shard 1 has (or no longer has) `queue`, as a client sees it."""
    deadline = asyncio.get_running_loop().time() + _BOUND_S
    while await _exists(port, queue) != present:
        assert asyncio.get_running_loop().time() < deadline, f"{queue} present: {not present}"
        await asyncio.sleep(0.05)


async def _publish(port: int, exchange: str, key: str, bodies: list[bytes]) -> None:
    """Publish every body with confirms to `exchange`; every one must be confirmed."""
    conn = await aio_pika.connect(f"amqp://guest:guest@127.0.0.1:{port}/")
    async with conn:
        ch = await conn.channel(publisher_confirms=True)
        x = await ch.get_exchange(exchange, ensure=False)
        sends = [
            x.publish(aio_pika.Message(b, delivery_mode=aio_pika.DeliveryMode.PERSISTENT), key)
            for b in bodies
        ]
        await asyncio.wait_for(asyncio.gather(*sends), _BOUND_S)


def _declare_orders(serve: Serve) -> None:
    _on_zero(
        serve,
        ("exchange_declare", ("orders",), {"exchange_type": "topic", "durable": True}),
        ("queue_declare", ("eu",), {"durable": True}),
        ("queue_bind", ("eu", "orders", "eu.#"), {}),
        ("queue_declare", ("all",), {"durable": True, "arguments": {"x-max-length": 10_000}}),
        ("queue_bind", ("all", "orders", "#"), {}),
    )


def test_shard_one_routes_by_shard_zeros_definitions(tmp_path: Path) -> None:
    (link_port,) = free_ports(1)
    zero = _shard_zero(tmp_path / "zero", tmp_path / "zero.log", link_port)
    try:
        _declare_orders(zero)  # before shard 1 starts: its snapshot
        eu = [f"eu-{i}".encode() for i in range(200)]
        us = [f"us-{i}".encode() for i in range(100)]

        async def main() -> None:
            one = await _shard_one(tmp_path / "one", link_port)
            try:
                port = one.amqp_port
                await _until(port, "eu", True)
                await _publish(port, "orders", "eu.paris", eu)
                # declared after shard 1 follows: a change
                loop = asyncio.get_running_loop()
                await loop.run_in_executor(
                    None,
                    lambda: _on_zero(
                        zero,
                        ("queue_declare", ("us",), {"durable": True}),
                        ("queue_bind", ("us", "orders", "us.*"), {}),
                    ),
                )
                await _until(port, "us", True)
                await _publish(port, "orders", "us.nyc", us)
                await loop.run_in_executor(None, lambda: drain(zero, "us"))
                await loop.run_in_executor(
                    None, lambda: _on_zero(zero, ("queue_delete", ("us",), {}))
                )
                await _until(port, "us", False)
            finally:
                await one.stop()

        run_on_ringmq_loop(main())
        assert drain(zero, "eu") == eu
        assert drain(zero, "all") == eu + us
    finally:
        zero.stop()


def test_a_restarted_shard_zero_is_followed_again(tmp_path: Path) -> None:
    (link_port,) = free_ports(1)
    data = tmp_path / "zero"
    zero = _shard_zero(data, tmp_path / "zero.log", link_port)
    _declare_orders(zero)
    _on_zero(zero, ("queue_declare", ("doomed",), {"durable": True}))
    holder: list[Serve] = [zero]

    async def main() -> None:
        one = await _shard_one(tmp_path / "one", link_port)
        loop = asyncio.get_running_loop()
        try:
            port = one.amqp_port
            await _until(port, "doomed", True)
            await loop.run_in_executor(None, holder[0].kill)  # SIGKILL
            # shard 0 back on its directory and link port, and a queue goes and another comes
            # as shard 1 links again: it learns them from its new snapshot or the changes
            # after it
            back = await loop.run_in_executor(
                None, lambda: _shard_zero(data, tmp_path / "zero-back.log", link_port)
            )
            holder[0] = back
            await loop.run_in_executor(
                None,
                lambda: _on_zero(
                    back,
                    ("queue_delete", ("doomed",), {}),
                    ("queue_declare", ("fresh",), {"durable": True}),
                    ("queue_bind", ("fresh", "orders", "fresh.*"), {}),
                ),
            )
            await _until(port, "doomed", False)
            await _until(port, "fresh", True)
            await _publish(port, "orders", "fresh.one", [b"f"])
        finally:
            await one.stop()

    try:
        run_on_ringmq_loop(main())
        assert drain(holder[0], "fresh") == [b"f"]
        assert drain(holder[0], "all") == [b"f"]
    finally:
        holder[0].stop()


def _on_one(port: int, *steps: tuple[str, tuple[Any, ...], dict[str, Any]]) -> list[Any]:
    params = pika.ConnectionParameters("127.0.0.1", port)
    with pika.BlockingConnection(params) as conn:
        ch = conn.channel()
        return [getattr(ch, method)(*args, **kw) for method, args, kw in steps]


def test_declarations_on_shard_one_are_made_by_shard_zero(tmp_path: Path) -> None:
    (link_port,) = free_ports(1)
    zero = _shard_zero(tmp_path / "zero", tmp_path / "zero.log", link_port)
    _on_zero(
        zero, ("queue_declare", ("strict",), {"durable": True, "arguments": {"x-max-length": 5}})
    )
    bodies = [f"m-{i}".encode() for i in range(50)]

    async def main() -> None:
        one = await _shard_one(tmp_path / "one", link_port)
        loop = asyncio.get_running_loop()
        port = one.amqp_port

        def on_one(*steps: tuple[str, tuple[Any, ...], dict[str, Any]]) -> Any:
            return loop.run_in_executor(None, lambda: _on_one(port, *steps))

        try:
            await _until(port, "strict", True)
            # declared by a pika client of shard 1: made by shard 0, the queue placed on
            # shard 1 (client-local), every answer as RabbitMQ gives it
            declared = await on_one(
                ("exchange_declare", ("orders",), {"exchange_type": "topic", "durable": True}),
                ("queue_declare", ("eu",), {"durable": True}),
                ("queue_bind", ("eu", "orders", "eu.#"), {}),
            )
            assert declared[1].method.queue == "eu"
            # shard 0 has them (a client of shard 0 sees the queue and the exchange)
            await loop.run_in_executor(
                None,
                lambda: _on_zero(
                    zero,
                    ("queue_declare", ("eu",), {"passive": True}),
                    ("exchange_declare", ("orders",), {"passive": True}),
                ),
            )
            await _publish(port, "orders", "eu.paris", bodies)
            got = await on_one(*[("basic_get", ("eu",), {"auto_ack": True})] * len(bodies))
            assert [body for _m, _p, body in got] == bodies
            # shard 0's refusal (or the same check here, once the feed brought "strict")
            with pytest.raises(pika.exceptions.ChannelClosedByBroker) as refused:
                await on_one(("queue_declare", ("strict",), {"durable": True}))
            assert refused.value.reply_code == 406
            await on_one(("queue_delete", ("eu",), {}))
            await _until(port, "eu", False)
            assert not await loop.run_in_executor(None, lambda: _exists_on_zero(zero, "eu"))
            # an exchange bound to another, unbound and deleted the same way
            await on_one(
                ("exchange_declare", ("audit",), {"exchange_type": "fanout"}),
                ("exchange_bind", ("audit", "orders", "#"), {}),
                ("exchange_unbind", ("audit", "orders", "#"), {}),
                ("exchange_delete", ("audit",), {}),
            )
            on_zero = lambda: _on_zero(zero, ("exchange_declare", ("audit",), {"passive": True}))  # noqa: E731
            with pytest.raises(pika.exceptions.ChannelClosedByBroker):
                await loop.run_in_executor(None, on_zero)
        finally:
            await one.stop()

    try:
        run_on_ringmq_loop(main())
    finally:
        zero.stop()


def _exists_on_zero(serve: Serve, queue: str) -> bool:
    try:
        _on_zero(serve, ("queue_declare", (queue,), {"passive": True}))
    except pika.exceptions.ChannelClosedByBroker:
        return False
    return True
