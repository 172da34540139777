"""The leader's reading of PROXY v1 headers: parsing, and trust only in configured peers."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from ringmq.server.proxy import proxy_v1_header
from ringmq.server.proxyheader import ProxyHeaderReader, TrustedPeers, parse_v1


def test_parse_v1_gives_the_source() -> None:
    assert parse_v1(b"PROXY TCP4 10.0.0.7 10.0.0.1 51234 5672") == ("10.0.0.7", 51234)
    assert parse_v1(b"PROXY TCP6 ::1 ::1 4000 5672") == ("::1", 4000)
    assert parse_v1(b"PROXY UNKNOWN") is None


@pytest.mark.parametrize(
    "line",
    [
        b"PROXY TCP4 10.0.0.7 10.0.0.1 51234",
        b"PROXY TCP4 ::1 10.0.0.1 1 2",
        b"PROXY TCP5 10.0.0.7 10.0.0.1 1 2",
        b"PROXY TCP4 10.0.0.7 10.0.0.1 70000 2",
        b"PROXY TCP4 host 10.0.0.1 1 2",
    ],
)
def test_parse_v1_rejects_bad_lines(line: bytes) -> None:
    with pytest.raises(ValueError, match=r"."):
        parse_v1(line)


def test_the_relay_header_round_trips() -> None:
    line = proxy_v1_header(("127.0.0.1", 40001), ("127.0.0.2", 5672))
    assert line == b"PROXY TCP4 127.0.0.1 127.0.0.2 40001 5672\r\n"
    assert parse_v1(line[:-2]) == ("127.0.0.1", 40001)


class _Transport(asyncio.Transport):
    def __init__(self, peer: tuple[str, int]) -> None:
        super().__init__()
        self.peer = peer
        self.protocol: Any = None
        self.aborted = False

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return self.peer if name == "peername" else default

    def set_protocol(self, protocol: asyncio.BaseProtocol) -> None:
        self.protocol = protocol

    def is_closing(self) -> bool:
        return self.aborted

    def abort(self) -> None:
        self.aborted = True


class _Proto(asyncio.Protocol):
    def __init__(self) -> None:
        self.forwarded_peer: tuple[str, int] | None = None
        self.data = b""

    def data_received(self, data: bytes) -> None:
        self.data += data


def _reader(peer: tuple[str, int]) -> tuple[ProxyHeaderReader, _Transport, list[_Proto]]:
    made: list[_Proto] = []

    def make() -> asyncio.Protocol:
        made.append(_Proto())
        return made[-1]

    reader = ProxyHeaderReader(make, TrustedPeers(["10.1.0.0/16"]))
    transport = _Transport(peer)
    reader.connection_made(transport)
    return reader, transport, made


HEADER = b"PROXY TCP4 192.0.2.9 10.1.0.1 40000 5672\r\n"


def test_a_trusted_peer_names_the_client() -> None:
    reader, transport, made = _reader(("10.1.2.3", 1000))
    assert made == []
    reader.data_received(HEADER[:10])
    reader.data_received(HEADER[10:] + b"AMQP\x00\x00\x09\x01")
    assert made[0].forwarded_peer == ("192.0.2.9", 40000)
    assert made[0].data == b"AMQP\x00\x00\x09\x01"
    assert transport.protocol is made[0]


def test_a_trusted_peer_may_connect_without_a_header() -> None:
    reader, _transport, made = _reader(("10.1.2.3", 1000))
    reader.data_received(b"AMQP\x00\x00\x09\x01")
    assert made[0].forwarded_peer is None
    assert made[0].data == b"AMQP\x00\x00\x09\x01"


def test_an_untrusted_peer_cannot_forge_its_address() -> None:
    _, transport, made = _reader(("192.0.2.50", 1000))
    assert len(made) == 1  # handed over at once: its bytes are the protocol's, not a header
    assert transport.protocol is made[0]
    assert made[0].forwarded_peer is None


def test_a_malformed_header_from_a_trusted_peer_closes() -> None:
    reader, transport, made = _reader(("10.1.2.3", 1000))
    reader.data_received(b"PROXY TCP4 nonsense\r\n")
    assert transport.aborted
    assert made == []
