"""A follower's relay over loopback: the PROXY header first, bounded buffers, both sides closed.

The "leader" here is a plain asyncio server the test controls: it can stop reading, so the
relay's write buffer toward it fills; the relay must then stop reading the client instead of
buffering without bound, and read again once the leader drains.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from ringmq.server.proxy import (
    RELAY_HIGH_WATER,
    LeaderAddresses,
    ProxyGate,
    StaticLeader,
)

CHUNK = 64 * 1024
TIMEOUT_S = 10.0


class _Leader(asyncio.Protocol):
    """The leader's end: collects bytes; reading can be paused."""

    def __init__(self) -> None:
        self.data = bytearray()
        self.transport: asyncio.Transport | None = None
        self.lost = asyncio.Event()
        self.got_any = asyncio.Event()

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        self.data += data
        self.got_any.set()

    def connection_lost(self, exc: Exception | None) -> None:
        self.lost.set()


async def _pair() -> tuple[ProxyGate, _Leader, asyncio.Server, asyncio.Server, int]:
    loop = asyncio.get_running_loop()
    leader = _Leader()
    leader_srv = await loop.create_server(lambda: leader, "127.0.0.1", 0)
    leader_port = leader_srv.sockets[0].getsockname()[1]
    gate = ProxyGate(StaticLeader(LeaderAddresses("l", "127.0.0.1", amqp_port=leader_port)))
    follower_srv = await loop.create_server(gate.wrap("amqp", _never), "127.0.0.1", 0)
    return gate, leader, leader_srv, follower_srv, follower_srv.sockets[0].getsockname()[1]


def _never() -> asyncio.Protocol:
    raise AssertionError("a follower serves nothing itself")


async def _until(pred: Callable[[], object], what: str) -> None:
    async def wait() -> None:
        while not pred():  # noqa: ASYNC110 - polls transport state, which has no event
            await asyncio.sleep(0.005)

    try:
        await asyncio.wait_for(wait(), TIMEOUT_S)
    except TimeoutError:
        raise AssertionError(f"not reached: {what}") from None


async def test_the_header_comes_first_and_bytes_pass_unchanged() -> None:
    gate, leader, lsrv, fsrv, port = await _pair()
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(b"AMQP\x00\x00\x09\x01")
    local = writer.get_extra_info("sockname")
    await _until(lambda: b"AMQP" in leader.data, "the client's bytes at the leader")
    line, _, rest = bytes(leader.data).partition(b"\r\n")
    assert line.startswith(f"PROXY TCP4 127.0.0.1 127.0.0.1 {local[1]} {port}".encode())
    assert rest == b"AMQP\x00\x00\x09\x01"
    assert leader.transport is not None
    leader.transport.write(b"from the leader")
    assert await asyncio.wait_for(reader.readexactly(15), TIMEOUT_S) == b"from the leader"
    # the leader closes: the client's side closes too
    leader.transport.close()
    assert await asyncio.wait_for(reader.read(), TIMEOUT_S) == b""
    writer.close()
    gate.close()
    lsrv.close()
    fsrv.close()


async def test_a_leader_that_stops_reading_pauses_the_client() -> None:
    gate, leader, lsrv, fsrv, port = await _pair()
    _reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(b"x")
    await _until(leader.got_any.is_set, "the relay connected")
    assert leader.transport is not None
    leader.transport.pause_reading()
    (relay,) = gate.relays
    client_transport = relay.client.transport
    assert client_transport is not None
    sent = 0
    # write until the relay stops reading the client (bounded: a few MiB at most)
    for _ in range(512):
        if not client_transport.is_reading():
            break
        writer.write(b"y" * CHUNK)
        sent += CHUNK
        await asyncio.sleep(0.002)
    assert not client_transport.is_reading()
    toward_leader = relay.leader.transport
    assert toward_leader is not None
    # what the relay holds is bounded by its high-water mark (plus what one read brought)
    assert toward_leader.get_write_buffer_size() <= RELAY_HIGH_WATER + 4 * CHUNK
    leader.transport.resume_reading()
    await _until(lambda: len(leader.data) >= sent + 1, "every byte at the leader")
    await _until(client_transport.is_reading, "the client read again")
    writer.close()
    await _until(leader.lost.is_set, "the leader's side closed after the client's")
    assert not gate.relays
    gate.close()
    lsrv.close()
    fsrv.close()


async def test_an_unreachable_leader_closes_the_client() -> None:
    loop = asyncio.get_running_loop()
    probe = await loop.create_server(asyncio.Protocol, "127.0.0.1", 0)
    dead_port = probe.sockets[0].getsockname()[1]
    probe.close()
    await probe.wait_closed()
    gate = ProxyGate(StaticLeader(LeaderAddresses("l", "127.0.0.1", amqp_port=dead_port)))
    fsrv = await loop.create_server(gate.wrap("amqp", _never), "127.0.0.1", 0)
    reader, writer = await asyncio.open_connection("127.0.0.1", fsrv.sockets[0].getsockname()[1])
    writer.write(b"AMQP\x00\x00\x09\x01")
    assert await asyncio.wait_for(reader.read(), TIMEOUT_S) == b""
    assert not gate.relays
    writer.close()
    gate.close()
    fsrv.close()


class _Local(asyncio.Protocol):
    """The node's own protocol (a stand-in broker's, on a follower)."""


def test_a_follower_closes_clients_while_no_leader_is_known() -> None:
    provider = StaticLeader(None)
    serving = ProxyGate(provider).wrap("amqp", _Local)
    stand_in = ProxyGate(provider, serve_unled=False).wrap("amqp", _Local)
    assert isinstance(serving(), _Local)  # a node that may lead serves its clients
    assert not isinstance(stand_in(), _Local)  # a follower's stand-in broker serves nobody


def test_a_refusing_follower_closes_a_protocol_it_cannot_refuse_in_words() -> None:
    leader = LeaderAddresses("n1", "127.0.0.1", amqp_port=5672)

    def no_words(protocol: str, at: LeaderAddresses) -> asyncio.Protocol | None:
        return None

    provider = StaticLeader(leader)
    assert isinstance(ProxyGate(provider, no_words).wrap("stomp", _Local)(), _Local)
    closing = ProxyGate(provider, no_words, serve_unled=False).wrap("stomp", _Local)
    assert not isinstance(closing(), _Local)
