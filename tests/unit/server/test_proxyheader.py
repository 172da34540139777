"""The leader's reading of PROXY v1 and v2 headers: parsing, and trust only in known peers."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from ringmq.server.proxy import proxy_v1_header
from ringmq.server.proxyheader import (
    V2_SIGNATURE,
    ProxyHeaderReader,
    TrustedPeers,
    parse_v1,
    parse_v2,
)


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


def _v2(command: int, family: int, addresses: bytes, tlvs: bytes = b"") -> bytes:
    body = addresses + tlvs
    return V2_SIGNATURE + bytes([0x20 | command, family]) + len(body).to_bytes(2, "big") + body


V2_TCP4 = _v2(
    1,
    0x11,
    bytes([192, 0, 2, 9]) + bytes([10, 1, 0, 1]) + (40000).to_bytes(2, "big") + b"\x16\x28",
    tlvs=b"\x04\x00\x02ok",  # a TLV (NOOP), skipped
)


def test_parse_v2_gives_the_source_of_tcp4_and_tcp6() -> None:
    assert parse_v2(V2_TCP4) == (len(V2_TCP4), ("192.0.2.9", 40000))
    six = _v2(1, 0x21, bytes(15) + b"\x01" + bytes(16) + (4000).to_bytes(2, "big") + b"\x00\x01")
    assert parse_v2(six) == (len(six), ("::1", 4000))


def test_parse_v2_needs_the_whole_header_and_names_nobody_for_local() -> None:
    assert parse_v2(V2_TCP4[:20]) == (0, None)
    local = _v2(0, 0x00, b"")
    assert parse_v2(local) == (16, None)


@pytest.mark.parametrize(
    "header",
    [
        b"\r\n\r\n\x00\r\nQUIX\n" + b"\x21\x11\x00\x0c" + bytes(12),  # signature
        V2_SIGNATURE + b"\x11\x11\x00\x0c" + bytes(12),  # version 1 in a v2 header
        V2_SIGNATURE + b"\x21\x11\xff\xff",  # longer than anything a peer sends
    ],
)
def test_parse_v2_rejects_bad_headers(header: bytes) -> None:
    with pytest.raises(ValueError, match=r"."):
        parse_v2(header)


def test_a_trusted_peer_names_the_client_with_a_v2_header() -> None:
    reader, transport, made = _reader(("10.1.2.3", 1000))
    reader.data_received(V2_TCP4[:7])  # split inside the signature, then inside the body
    reader.data_received(V2_TCP4[7:20])
    assert made == []
    reader.data_received(V2_TCP4[20:] + b"AMQP\x00\x00\x09\x01")
    assert made[0].forwarded_peer == ("192.0.2.9", 40000)
    assert made[0].data == b"AMQP\x00\x00\x09\x01"
    assert transport.protocol is made[0]


def test_a_bad_v2_header_from_a_trusted_peer_closes() -> None:
    reader, transport, made = _reader(("10.1.2.3", 1000))
    reader.data_received(V2_SIGNATURE + b"\x11\x11\x00\x0c")
    assert transport.aborted
    assert made == []


def test_cluster_members_are_trusted_as_they_come_and_go() -> None:
    members = {"10.9.0.1"}
    trusted = TrustedPeers([], members=lambda: members)
    assert trusted  # a reader is put in front of the listeners even with no fixed entry
    assert trusted.trusts("10.9.0.1")
    assert not trusted.trusts("10.9.0.2")
    members.add("10.9.0.2")
    assert trusted.trusts("10.9.0.2")
    members.add("node3.example")  # a name, not an address: never matches
    assert not trusted.trusts("10.9.0.3")
