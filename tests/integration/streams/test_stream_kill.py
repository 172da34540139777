"""kill -9 under confirmed publishing to a stream queue: nothing confirmed is lost, and every
offset keeps its message across the crashes.

Each cycle starts `ringmq serve` on the same data dir, publishes numbered messages with
publisher confirms from a thread (each `basic_publish` returns once confirmed), SIGKILLs the
broker after a random while, and reads the whole stream back on the next start.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import threading
import time
from pathlib import Path
from typing import Any

import pika
import pika.exceptions
import pytest
from rstream import (
    AMQPMessage,
    ConfirmationStatus,
    Consumer,
    ConsumerOffsetSpecification,
    MessageContext,
    OffsetType,
    Producer,
    amqp_decoder,
)
from rstream.recovery import BackOffRecoveryStrategy

from tests.serve import Serve

pytestmark = [
    pytest.mark.integration,
    # pika leaves the sockets of connections the kill broke for the garbage collector
    pytest.mark.filterwarnings("ignore::ResourceWarning"),
    pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning"),
]

CYCLES = 3
ARGS = {"x-queue-type": "stream", "x-stream-max-segment-size-bytes": 20_000}


def _params(serve: Serve) -> pika.ConnectionParameters:
    return pika.ConnectionParameters(
        host="127.0.0.1", port=serve.port, connection_attempts=1, socket_timeout=5
    )


def _publish(serve: Serve, first_id: int, confirmed: list[int], stop: threading.Event) -> None:
    with contextlib.suppress(pika.exceptions.AMQPError, OSError):
        conn = pika.BlockingConnection(_params(serve))
        ch = conn.channel()
        ch.queue_declare("s", durable=True, arguments=ARGS)
        ch.confirm_delivery()
        n = first_id
        while not stop.is_set() and n < first_id + 100_000:
            ch.basic_publish("", "s", str(n).encode() + b" " + b"x" * 200)
            confirmed.append(n)  # returned: confirmed by the broker
            n += 1


def _read_all(serve: Serve) -> list[tuple[int, int]]:
    conn = pika.BlockingConnection(_params(serve))
    try:
        ch = conn.channel()
        ch.queue_declare("s", durable=True, arguments=ARGS)
        total = ch.queue_declare("s", passive=True).method.message_count
        ch.basic_qos(prefetch_count=total or 1)  # the whole stream at once, acked at the end
        out: list[tuple[int, int]] = []
        if total:
            for method, props, body in ch.consume(
                "s", arguments={"x-stream-offset": "first"}, inactivity_timeout=10
            ):
                assert method is not None, "the stream did not deliver all it holds"
                out.append((props.headers["x-stream-offset"], int(body.split(b" ")[0])))
                if len(out) == total:
                    break
        return out
    finally:
        with contextlib.suppress(pika.exceptions.AMQPError, OSError):
            conn.close()


def test_kill_9_loses_nothing_confirmed_and_keeps_offsets(tmp_path: Path) -> None:
    rng = random.Random(27)
    data = tmp_path / "data"
    confirmed: list[int] = []
    seen: dict[int, int] = {}  # offset -> message id, as read after a restart
    next_id = 0
    for cycle in range(CYCLES + 1):
        serve = Serve(data, tmp_path / f"broker{cycle}.log")
        try:
            if cycle:
                stream = _read_all(serve)
                offsets = [o for o, _ in stream]
                assert offsets == list(range(len(stream)))  # contiguous from 0
                ids = {i for _, i in stream}
                assert set(confirmed) <= ids  # nothing confirmed is lost
                for offset, ident in stream:  # every offset keeps its message
                    assert seen.setdefault(offset, ident) == ident
                next_id = max(ids | set(confirmed), default=-1) + 1
            if cycle == CYCLES:
                break
            stop = threading.Event()
            t = threading.Thread(target=_publish, args=(serve, next_id, confirmed, stop))
            t.start()
            time.sleep(rng.uniform(0.3, 0.8))
        finally:
            serve.kill()
        stop.set()
        t.join(timeout=30)
        assert not t.is_alive()
    assert len(confirmed) > CYCLES  # the publishers did publish


# --- the `written` confirm rule, over the stream protocol (rstream) ----------------------------

WRITTEN = ("--stream-confirm", "written")
LOGIN: dict[str, Any] = {"username": "guest", "password": "guest"}


async def _rstream_publish(
    port: int, first_id: int, confirmed: set[int], stop: threading.Event
) -> None:
    # Pipelined batches (up to 2,000 messages unconfirmed), each message's number in its body;
    # the numbers whose publishing ids rstream reports confirmed join `confirmed`.
    numbers: dict[int, int] = {}  # publishing id -> message number
    done: set[int] = set()  # confirmed publishing ids (the callback may run before `numbers`)

    def on_confirm(status: ConfirmationStatus) -> None:
        if status.is_confirmed:
            done.add(status.message_id)

    p = Producer(
        "127.0.0.1", port=port, recovery_strategy=BackOffRecoveryStrategy(enable=False), **LOGIN
    )
    try:
        await p.start()
        await p.create_stream("s", exists_ok=True)
        n = first_id
        while not stop.is_set() and n < first_id + 200_000:
            if len(numbers) - len(done) > 2_000:
                await asyncio.sleep(0.001)
                continue
            batch = [
                AMQPMessage(body=str(i).encode() + b" " + b"x" * 200) for i in range(n, n + 50)
            ]
            ids = await p.send_batch("s", batch, on_publish_confirm=on_confirm)
            numbers.update(zip(ids, range(n, n + 50), strict=True))
            n += 50
    finally:
        confirmed.update(numbers[i] for i in done if i in numbers)
        with contextlib.suppress(Exception):
            await asyncio.wait_for(p.close(), 5)


async def _rstream_read_all(port: int, total: int) -> list[tuple[int, int]]:
    if not total:
        return []
    got: list[tuple[int, int]] = []
    done = asyncio.Event()

    async def on(msg: AMQPMessage, ctx: MessageContext) -> None:
        got.append((ctx.offset, int(bytes(msg.body).split(b" ")[0])))
        if len(got) >= total:
            done.set()

    c = Consumer("127.0.0.1", port=port, **LOGIN)
    await c.start()
    try:
        first = ConsumerOffsetSpecification(OffsetType.FIRST)
        await c.subscribe("s", on, decoder=amqp_decoder, offset_specification=first)
        await asyncio.wait_for(done.wait(), 30)
    finally:
        with contextlib.suppress(Exception):
            await asyncio.wait_for(c.close(), 5)
    return got[:total]


def _rstream_thread(port: int, first_id: int, confirmed: set[int], stop: threading.Event) -> None:
    with contextlib.suppress(Exception):  # the kill breaks the connection: expected
        asyncio.run(asyncio.wait_for(_rstream_publish(port, first_id, confirmed, stop), 60))


def _count(serve: Serve) -> int:
    conn = pika.BlockingConnection(_params(serve))
    try:
        return int(conn.channel().queue_declare("s", passive=True).method.message_count)
    finally:
        with contextlib.suppress(pika.exceptions.AMQPError, OSError):
            conn.close()


def test_kill_9_under_the_written_rule_loses_nothing_rstream_confirmed(tmp_path: Path) -> None:
    """`--stream-confirm written` confirms before any fsync; a kill -9 (the process, not the
    machine) still loses nothing confirmed, since the chunk was handed to the OS first."""
    rng = random.Random(2727)
    data = tmp_path / "data"
    confirmed: set[int] = set()
    seen: dict[int, int] = {}
    next_id = 0
    for cycle in range(CYCLES + 1):
        serve = Serve(data, tmp_path / f"written{cycle}.log", stream=True, extra=WRITTEN)
        try:
            assert serve.stream_port is not None
            if cycle:
                stream = asyncio.run(_rstream_read_all(serve.stream_port, _count(serve)))
                offsets = [o for o, _ in stream]
                assert offsets == list(range(len(stream)))
                ids = {i for _, i in stream}
                assert confirmed <= ids, sorted(confirmed - ids)[:10]  # nothing confirmed lost
                for offset, ident in stream:
                    assert seen.setdefault(offset, ident) == ident
                next_id = max(ids | confirmed, default=-1) + 1
            if cycle == CYCLES:
                break
            stop = threading.Event()
            t = threading.Thread(
                target=_rstream_thread, args=(serve.stream_port, next_id, confirmed, stop)
            )
            t.start()
            time.sleep(rng.uniform(0.5, 1.0))
        finally:
            serve.kill()
        stop.set()
        t.join(timeout=60)
        assert not t.is_alive()
    assert len(confirmed) > CYCLES  # the publisher did publish
