"""Stream queues in a cluster (`-m cluster`): their segments and stored offsets are replicated.

Three `ringmq serve` nodes on one etcd with the stream protocol open. Publishers with confirms
into one stream (rstream over the stream protocol, pika over AMQP 0-9-1) follow the leader
(tests/cluster/faults.py); the leader is killed with SIGKILL. On the new leader every message
confirmed before the kill is at the offset it had (read from `first`), the checker finds no
confirmed message lost, and a consumer's stored offset (rstream `store_offset`) is there, so
the consumer continues from it. A follower wiped and started again is brought level by a bulk
sync, and holds the stream when it is the last node left and leads. Waits are bounded against
hanging, never timed.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import signal
import threading
import time
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any, TypeVar

import httpx
import pika
import pytest
from rstream import (
    AMQPMessage,
    Consumer,
    ConsumerOffsetSpecification,
    MessageContext,
    OffsetType,
    Producer,
    amqp_decoder,
)
from rstream.exceptions import OffsetNotFound
from rstream.recovery import BackOffRecoveryStrategy

from tests.cluster.conftest import EtcdCluster, Node
from tests.cluster.faults import ACK_TIMEOUT_S, Amqp091, Publisher, check
from tests.cluster.test_election_etcd import one_leader, wait_for

pytestmark = [
    pytest.mark.cluster,
    pytest.mark.timeout(300),
]

STREAM = "events"
ARGS = {"x-queue-type": "stream", "x-stream-max-segment-size-bytes": 20_000}
"""Small segments: the stream rolls many while the tests publish."""
ISR_TIMEOUT = "isr_timeout_ms = 1500\n"
READER = "reader"

_T = TypeVar("_T")


def _login(node: Node) -> dict[str, Any]:
    return {"username": node.user, "password": node.password}


def _params(node: Node) -> pika.ConnectionParameters:
    credentials = pika.PlainCredentials(node.user, node.password)
    return pika.ConnectionParameters(
        node.host, node.port, credentials=credentials, connection_attempts=3, socket_timeout=5
    )


def _declare(node: Node) -> None:
    conn = pika.BlockingConnection(_params(node))
    try:
        conn.channel().queue_declare(STREAM, durable=True, arguments=ARGS)
    finally:
        conn.close()


def start_three(
    etcd_cluster: Callable[[int], EtcdCluster], start_node: Callable[..., Node]
) -> list[Node]:
    etcd = etcd_cluster(1)
    nodes = [
        start_node(n, etcd.endpoints, extra_config=ISR_TIMEOUT, stream=True)
        for n in ("n1", "n2", "n3")
    ]
    wait_for("one leader", lambda: one_leader(nodes))
    wait_for("three in sync", lambda: len(nodes[0].cluster()["isr"]) == 3)
    _declare(_leader(nodes))
    return nodes


def _leader(nodes: list[Node]) -> Node:
    found = one_leader(nodes)
    assert found is not None
    return next(n for n in nodes if n.name == found[0])


class StreamProtocol(Publisher):
    """rstream's producer: `send_wait` returns once the broker confirmed the message."""

    def connect(self, node: Node) -> None:
        self.loop = asyncio.new_event_loop()
        assert node.stream_port is not None
        # no recovery of its own: on a failure the thread finds the leader and connects there
        self.producer = Producer(
            node.host,
            port=node.stream_port,
            heartbeat=2,
            recovery_strategy=BackOffRecoveryStrategy(enable=False),
            **_login(node),
        )
        try:
            self._run(self.producer.start())
        except BaseException:
            self.loop.close()
            raise

    def _run(self, coro: Coroutine[Any, Any, _T]) -> _T:
        return self.loop.run_until_complete(asyncio.wait_for(coro, ACK_TIMEOUT_S))

    def send(self, body: bytes) -> None:
        self._run(self.producer.send_wait(STREAM, AMQPMessage(body=body), timeout=10))

    def close(self) -> None:
        try:
            with contextlib.suppress(Exception):
                self.loop.run_until_complete(asyncio.wait_for(self.producer.close(), 5))
        finally:
            self.loop.close()


class AmqpIntoStream(Amqp091):
    """pika with publisher confirms, into the stream."""

    def send(self, body: bytes) -> None:
        self.ch.basic_publish("", STREAM, body, self.props, mandatory=True)


def read_stream(node: Node) -> list[tuple[int, bytes]]:
    """Every (offset, body) of the stream on `node`, read over AMQP 0-9-1 from `first`."""
    conn = pika.BlockingConnection(_params(node))
    try:
        ch = conn.channel()
        total = ch.queue_declare(STREAM, durable=True, arguments=ARGS).method.message_count
        ch.basic_qos(prefetch_count=min(max(total, 1), 65_535))
        out: list[tuple[int, bytes]] = []
        if total:
            for method, props, body in ch.consume(
                STREAM, arguments={"x-stream-offset": "first"}, inactivity_timeout=10
            ):
                assert method is not None, f"the stream delivered {len(out)} of {total}"
                out.append((props.headers["x-stream-offset"], body))
                if len(out) == total:
                    break
        return out
    finally:
        with contextlib.suppress(Exception):
            conn.close()


async def _consumer(node: Node) -> Consumer:
    assert node.stream_port is not None
    c = Consumer(node.host, port=node.stream_port, **_login(node))
    await c.start()
    return c


def store_offset(node: Node, offset: int) -> None:
    """Store `offset` for READER and wait until a query on the same connection answers it
    (store offset has no reply: the query, behind it on the connection, follows it)."""

    async def run() -> None:
        c = await _consumer(node)
        try:
            await c.store_offset(STREAM, READER, offset)
            for _ in range(100):
                with contextlib.suppress(OffsetNotFound):
                    if await c.query_offset(STREAM, READER) == offset:
                        return
                await asyncio.sleep(0.05)
            raise AssertionError(f"the stored offset {offset} is not answered")
        finally:
            await c.close()

    asyncio.run(asyncio.wait_for(run(), 60))


def resume(node: Node, n: int) -> tuple[int, list[tuple[int, bytes]]]:
    """The consumer's restart: its stored offset, and `n` messages from the one after it."""

    async def run() -> tuple[int, list[tuple[int, bytes]]]:
        got: list[tuple[int, bytes]] = []
        done = asyncio.Event()

        async def on(msg: Any, ctx: MessageContext) -> None:
            got.append((ctx.offset, bytes(msg.body)))
            if len(got) >= n:
                done.set()

        c = await _consumer(node)
        try:
            stored = await c.query_offset(STREAM, READER)
            spec = ConsumerOffsetSpecification(OffsetType.OFFSET, stored + 1)
            await c.subscribe(STREAM, on, decoder=amqp_decoder, offset_specification=spec)
            await asyncio.wait_for(done.wait(), 30)
        finally:
            await c.close()
        return stored, got[:n]

    return asyncio.run(asyncio.wait_for(run(), 60))


def confirmed_bodies(pubs: list[Publisher]) -> set[bytes]:
    return {f"{p.name_}:{seq}".encode() for p in pubs for seq in list(p.confirmed)}


def test_kill_9_of_the_leader_keeps_confirmed_stream_messages_at_their_offsets(
    etcd_cluster: Callable[[int], EtcdCluster], start_node: Callable[..., Node]
) -> None:
    nodes = start_three(etcd_cluster, start_node)
    pubs: list[Publisher] = [
        StreamProtocol(name_="rstream", nodes=lambda: list(nodes), deadline_s=240.0),
        AmqpIntoStream(name_="pika", nodes=lambda: list(nodes), deadline_s=240.0),
    ]
    for p in pubs:
        p.start()
    try:
        for p in pubs:
            p.wait_confirms(100)
        leader = _leader(nodes)
        confirmed = confirmed_bodies(pubs)  # before the read: each of these is in it
        before = read_stream(leader)
        at = dict(before)
        assert {b for _, b in before} >= confirmed
        # a consumer stores the offset it has processed; the publishers' next confirms are
        # released after it, and so cover it (they wait for the followers as it does)
        stored = before[len(before) // 2][0]
        store_offset(leader, stored)
        for p in pubs:
            p.wait_confirms(3)
        epoch = leader.cluster()["epoch"]
        killed_at = time.monotonic()
        leader.kill()
        name, new_epoch = wait_for("a new leader", lambda: one_leader(nodes))
        assert new_epoch > epoch
        for p in pubs:  # they confirm again, on the new leader
            p.wait_confirms(20)
        resumed = time.monotonic() - killed_at
        print(f"{leader.name} -> {name}: confirming again after {resumed:.2f} s")
        new_leader = _leader(nodes)
        # the consumer continues from its stored offset, at the same messages
        offset, got = resume(new_leader, 5)
        assert offset == stored
        assert got == [(o, at[o]) for o in range(stored + 1, stored + 6)]
    finally:
        for p in pubs:
            p.stop()
        for p in pubs:
            p.join(timeout=60)
    after = read_stream(new_leader)
    assert [o for o, _ in after] == list(range(len(after)))  # offsets from 0, no gap
    now = dict(after)
    moved = {o: (b, now.get(o)) for o, b in before if b in confirmed and now.get(o) != b}
    assert not moved, f"confirmed messages not at their offsets: {list(moved.items())[:5]}"
    check(pubs, [b for _, b in after])


def test_a_follower_rejoining_by_bulk_sync_holds_the_stream(
    etcd_cluster: Callable[[int], EtcdCluster],
    start_node: Callable[..., Node],
    tmp_path: Path,
) -> None:
    nodes = start_three(etcd_cluster, start_node)
    leader = _leader(nodes)
    pub = StreamProtocol(name_="rstream", nodes=lambda: list(nodes), deadline_s=240.0)
    pub.start()
    try:
        pub.wait_confirms(100)
        victim, other = (n for n in nodes if n is not leader)
        victim.kill()
        shutil.rmtree(tmp_path / victim.name)  # a new machine: nothing to resume from
        pub.wait_confirms(100)  # the stream goes on without it
        stored = 42
        store_offset(leader, stored)
        back = start_node(**victim.spec)
        nodes[nodes.index(victim)] = back
        wait_for("back in the ISR", lambda: back.name in leader.cluster()["isr"])
        assert "bulk sync done" in back.log_path.read_text()
        pub.wait_confirms(20)  # confirmed with the rejoined follower's acknowledgement too
    finally:
        pub.stop()
        pub.join(timeout=60)
    confirmed = confirmed_bodies([pub])
    before = read_stream(leader)
    # the rejoined follower is the only one left: it must lead with what the leader had
    leader.kill()
    other.kill()
    wait_for("the rejoined node leads", lambda: one_leader([back]))
    after = read_stream(back)
    assert {o: b for o, b in after if b in confirmed} == {o: b for o, b in before if b in confirmed}
    offset, got = resume(back, 3)
    assert offset == stored
    assert got == [(o, dict(before)[o]) for o in (43, 44, 45)]
    check([pub], [b for _, b in after])


def test_a_stream_consumer_on_the_leader_sees_a_chunk_only_once_the_followers_have_it(
    etcd_cluster: Callable[[int], EtcdCluster], start_node: Callable[..., Node]
) -> None:
    # Committed reads (storage/streamdirs.py): the followers stopped (SIGSTOP: connected, not
    # acknowledging), a message published to the leader is not delivered to its consumer
    # until the leader released it, here when the ISR deadline (1.5 s) dropped the followers.
    nodes = start_three(etcd_cluster, start_node)
    leader = _leader(nodes)
    followers = [n for n in nodes if n is not leader]
    got: list[bytes] = []
    stop = threading.Event()
    subscribed = threading.Event()

    def consume() -> None:
        conn = pika.BlockingConnection(_params(leader))
        try:
            ch = conn.channel()
            ch.basic_qos(prefetch_count=10)
            subscribed.set()
            for method, _props, body in ch.consume(
                STREAM, arguments={"x-stream-offset": "next"}, inactivity_timeout=0.05
            ):
                if method is not None:
                    got.append(body)
                    ch.basic_ack(method.delivery_tag)
                if stop.is_set():
                    return
        finally:
            with contextlib.suppress(Exception):
                conn.close()

    reader = threading.Thread(target=consume, daemon=True)
    reader.start()
    assert subscribed.wait(30)
    confirmed = threading.Event()
    publish_failed: list[BaseException] = []

    def publish() -> None:
        try:
            conn = pika.BlockingConnection(_params(leader))
            ch = conn.channel()
            ch.confirm_delivery()
            ch.basic_publish("", STREAM, b"held", mandatory=True)  # returns once confirmed
            confirmed.set()
            conn.close()
        except BaseException as exc:  # noqa: BLE001 - reported by the test below
            publish_failed.append(exc)

    try:
        time.sleep(0.5)  # the consumer is attached at `next` (its basic.consume-ok came back)
        for n in followers:
            os.kill(n.proc.pid, signal.SIGSTOP)
        publisher = threading.Thread(target=publish, daemon=True)
        publisher.start()
        time.sleep(0.5)  # a third of the ISR deadline: the followers still count
        assert len(leader.cluster()["isr"]) == 3
        assert not confirmed.is_set()
        assert got == [], "a consumer got a chunk its followers did not have"
        assert _stream_offsets(leader) == (0, 0), "the API shows an offset readers cannot read"
        publisher.join(timeout=30)
        assert not publish_failed, publish_failed
        assert confirmed.is_set()
        wait_for("the consumer gets it", lambda: got == [b"held"])
        assert _stream_offsets(leader) == (1, 1)
        for n in followers:
            os.kill(n.proc.pid, signal.SIGCONT)
        wait_for("three in sync again", lambda: len(leader.cluster()["isr"]) == 3)
        # a publish no confirm waits for is shown too (a group commit starts for it)
        conn = pika.BlockingConnection(_params(leader))
        conn.channel().basic_publish("", STREAM, b"unconfirmed")
        conn.close()
        wait_for("the consumer gets the unconfirmed one", lambda: got == [b"held", b"unconfirmed"])
    finally:
        for n in followers:
            with contextlib.suppress(ProcessLookupError):
                os.kill(n.proc.pid, signal.SIGCONT)
        stop.set()
        reader.join(timeout=30)


def _stream_offsets(node: Node) -> tuple[int, int]:
    """(messages, next_offset) of the stream in the management API of `node`."""
    url = f"http://127.0.0.1:{node.http_port}/api/queues/%2F/{STREAM}"
    q = httpx.get(url, auth=("guest", "guest"), timeout=10).json()
    return q["messages"], q["stream"]["next_offset"]
