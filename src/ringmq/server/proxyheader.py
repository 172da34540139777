"""The leader's side of a relay: a PROXY protocol header names the client's real address.

Theory of operation: a follower's relay (`server/proxy.py`) writes `PROXY TCP4 src dst sport
dport\\r\\n` before the client's first byte. `ProxyHeaderReader` sits in front of a listener's
protocol factory on the leader: for a connection from a trusted address (the cluster's members,
`[cluster] proxy_protocol_from`) it reads such a header if the first bytes begin one (v1's
`PROXY `, or v2's 12-byte binary signature, which HAProxy and most TCP load balancers send),
and hands the connection, and the bytes after the header, to the real protocol, telling it the
client's address (`Forwardable.forwarded_peer`). A trusted peer may also connect directly (no
header): AMQP, STOMP, MQTT and HTTP never begin with either. From any other address nothing is
read here: the connection goes to the protocol at once, so a client cannot forge its address.
A malformed header closes the connection. v2's LOCAL command (a health check of the balancer
itself) and address families other than TCP over IPv4/IPv6 name no client: the connection's
own address stays; v2's TLVs are skipped.
"""

from __future__ import annotations

import asyncio
import ipaddress
import logging
import struct
from collections.abc import Callable, Iterable
from typing import Final, Protocol, cast, runtime_checkable

log = logging.getLogger(__name__)

PROXY_V1_MAX: Final = 107
"""The longest v1 line, CRLF included (HAProxy's proxy-protocol.txt)."""
_PREFIX: Final = b"PROXY "
V2_SIGNATURE: Final = b"\r\n\r\n\x00\r\nQUIT\n"
"""v2's first 12 bytes; the 16-byte fixed part ends with version/command, family and length."""
V2_MAX: Final = 16 + 216
"""The longest v2 header read (addresses plus TLVs; a longer one closes the connection)."""
_V2_HEAD: Final = struct.Struct(">12sBBH")
_V2_TCP4: Final = struct.Struct(">4s4sHH")
_V2_TCP6: Final = struct.Struct(">16s16sHH")


@runtime_checkable
class Forwardable(Protocol):
    """A protocol that records the client address a PROXY header gave (before
    `connection_made`)."""

    forwarded_peer: tuple[str, int] | None


def parse_v1(line: bytes) -> tuple[str, int] | None:
    """The source (host, port) of a v1 line without its CRLF; None for `PROXY UNKNOWN`.

    Raises:
        ValueError: the line is not a v1 header.
    """
    parts = line.decode("ascii").split(" ")
    if parts[0] != "PROXY":
        raise ValueError("not a PROXY header")
    if len(parts) >= 2 and parts[1] == "UNKNOWN":
        return None
    if len(parts) != 6 or parts[1] not in ("TCP4", "TCP6"):
        raise ValueError(f"bad PROXY header {line!r}")
    src = ipaddress.ip_address(parts[2])
    ipaddress.ip_address(parts[3])
    if (src.version == 4) != (parts[1] == "TCP4"):
        raise ValueError(f"bad PROXY header {line!r}")
    port = int(parts[4])
    if not 0 <= port <= 65535 or not 0 <= int(parts[5]) <= 65535:
        raise ValueError(f"bad port in PROXY header {line!r}")
    return (str(src), port)


def parse_v2(header: bytes) -> tuple[int, tuple[str, int] | None]:
    """(the header's length, the source (host, port)) of a v2 header at the start of `header`;
    the length is 0 while more bytes are needed; the source is None for LOCAL or a family that
    names no TCP client.

    Raises:
        ValueError: the bytes are not a v2 header (or one longer than `V2_MAX`).
    """
    if len(header) < _V2_HEAD.size:
        return 0, None
    sig, ver_cmd, family, length = _V2_HEAD.unpack_from(header)
    if sig != V2_SIGNATURE or ver_cmd >> 4 != 2 or ver_cmd & 0x0F > 1:
        raise ValueError("bad PROXY v2 header")
    total = _V2_HEAD.size + length
    if total > V2_MAX:
        raise ValueError("PROXY v2 header too long")
    if len(header) < total:
        return 0, None
    if ver_cmd & 0x0F == 0:  # LOCAL: the connection is the balancer's own
        return total, None
    if family == 0x11 and length >= _V2_TCP4.size:  # TCP over IPv4
        src, _dst, sport, _dport = _V2_TCP4.unpack_from(header, _V2_HEAD.size)
        return total, (str(ipaddress.IPv4Address(src)), sport)
    if family == 0x21 and length >= _V2_TCP6.size:  # TCP over IPv6
        src, _dst, sport, _dport = _V2_TCP6.unpack_from(header, _V2_HEAD.size)
        return total, (str(ipaddress.IPv6Address(src)), sport)
    return total, None


class TrustedPeers:
    """The addresses whose PROXY headers are believed: exact addresses or networks
    (`[cluster] proxy_protocol_from`), and, on etcd, the hosts the cluster's nodes advertise
    (`members`, read at each connection: a node that joins is trusted from then on)."""

    def __init__(
        self, entries: Iterable[str], members: Callable[[], Iterable[str]] | None = None
    ) -> None:
        self.networks = tuple(ipaddress.ip_network(e, strict=False) for e in entries)
        self.members = members

    def __bool__(self) -> bool:
        return bool(self.networks) or self.members is not None

    def trusts(self, host: str) -> bool:
        try:
            addr = ipaddress.ip_address(host)
        except ValueError:
            return False
        if any(addr in net for net in self.networks):
            return True
        return self.members is not None and any(_same(addr, member) for member in self.members())


def _same(addr: ipaddress.IPv4Address | ipaddress.IPv6Address, host: str) -> bool:
    # an advertised host that is a name (not an address) is not matched: list the nodes'
    # addresses in `proxy_protocol_from` then
    try:
        return addr == ipaddress.ip_address(host)
    except ValueError:
        return False


class ProxyHeaderReader(asyncio.Protocol):
    """Reads an optional PROXY v1 header from a trusted peer, then hands over (see above)."""

    def __init__(self, make: Callable[[], asyncio.Protocol], trusted: TrustedPeers) -> None:
        self._make = make
        self._trusted = trusted
        self._transport: asyncio.Transport | None = None
        self._head = b""

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = cast("asyncio.Transport", transport)
        peer = transport.get_extra_info("peername") or ("",)
        if not self._trusted.trusts(str(peer[0])):
            self._hand_over(b"", None)

    def data_received(self, data: bytes) -> None:
        head = self._head = self._head + data
        if head.startswith(V2_SIGNATURE[: len(head)]):
            self._read_v2(head)
            return
        if not head.startswith(_PREFIX[: len(head)]):
            self._hand_over(head, None)  # no header: a direct connection
            return
        end = head.find(b"\r\n")
        if end < 0:
            if len(head) >= PROXY_V1_MAX:
                self._reject("PROXY header too long")
            return
        try:
            peer = parse_v1(head[:end])
        except ValueError as exc:
            self._reject(str(exc))
            return
        self._hand_over(head[end + 2 :], peer)

    def _read_v2(self, head: bytes) -> None:
        try:
            length, peer = parse_v2(head)
        except ValueError as exc:
            self._reject(str(exc))
            return
        if length:
            self._hand_over(head[length:], peer)

    def eof_received(self) -> bool | None:
        return False

    def connection_lost(self, exc: Exception | None) -> None:
        self._transport = None

    def _reject(self, why: str) -> None:
        log.info("closing a connection from a cluster peer: %s", why)
        if self._transport is not None:
            self._transport.abort()
            self._transport = None

    def _hand_over(self, rest: bytes, peer: tuple[str, int] | None) -> None:
        transport = self._transport
        if transport is None:
            return
        self._transport = None
        proto = self._make()
        if peer is not None and isinstance(proto, Forwardable):
            proto.forwarded_peer = peer
        transport.set_protocol(proto)
        proto.connection_made(transport)
        if rest and not transport.is_closing():
            proto.data_received(rest)


def reading_headers(
    make: Callable[[], asyncio.Protocol], trusted: TrustedPeers
) -> Callable[[], asyncio.Protocol]:
    """`make` behind a `ProxyHeaderReader` (or `make` itself when nobody is trusted)."""
    if not trusted:
        return make
    return lambda: ProxyHeaderReader(make, trusted)
