"""A follower that does not relay (`[cluster] proxy = false`) refuses clients, naming the leader.

Theory of operation: each protocol says "not here, there" in its own words: AMQP 0-9-1 closes
the connection with 530 NOT_ALLOWED, AMQP 1.0 closes with `amqp:connection:redirect` and the
leader's `network-host` and `port`, STOMP sends an ERROR frame, MQTT a CONNACK refusal (v5:
0x9C "use another server" with a server reference), HTTP a 307 redirect to the leader's
management port. The words are a sans-IO `Refuser` per protocol (bytes in; bytes out and
whether it is done); the protocols' own ones come from their adapters through the composition
root (`ringmq.node`, as the protocols' handlers do: `server/` imports no codec), HTTP's is here.
`RefusalConnection` drives one over a transport: it writes what the refuser answers and closes
once the refuser is done (or the client goes away, or it sends more than `MAX_REFUSAL_INPUT`).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Mapping
from typing import Final, Protocol, cast

from ringmq.server.handlers import AMQP10_HEADERS
from ringmq.server.proxy import LeaderAddresses

log = logging.getLogger(__name__)

MAX_REFUSAL_INPUT: Final = 64 * 1024
"""Bytes a refused client may send before it is disconnected without an answer."""


class Refuser(Protocol):
    """One refused connection's words (sans-IO)."""

    def receive(self, data: bytes) -> tuple[bytes, bool]:
        """The bytes to send after `data` (b"" for none yet) and whether to close then."""
        ...


RefuserFactory = Callable[[str, int], Refuser]
"""`(leader_host, leader_port) -> Refuser` of one protocol, for the leader's port of it."""


class RefusalConnection(asyncio.Protocol):
    """Drives a `Refuser` over one accepted connection (see the module docstring)."""

    def __init__(self, refuser: Refuser) -> None:
        self.refuser = refuser
        self.transport: asyncio.Transport | None = None
        self.received = 0

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast("asyncio.Transport", transport)
        self._answer(b"")  # protocols whose server speaks first (none yet) answer here

    def data_received(self, data: bytes) -> None:
        self.received += len(data)
        if self.received > MAX_REFUSAL_INPUT:
            self._close()
            return
        self._answer(data)

    def eof_received(self) -> bool | None:
        return False

    def connection_lost(self, exc: Exception | None) -> None:
        self.transport = None

    def _answer(self, data: bytes) -> None:
        if self.transport is None or self.transport.is_closing():
            return
        out, done = self.refuser.receive(data)
        if out:
            self.transport.write(out)
        if done:
            self._close()

    def _close(self) -> None:
        if self.transport is not None:
            self.transport.close()  # after the answer is written


class HttpRefuser:
    """HTTP: a 307 to the same path on the leader's management port."""

    def __init__(self, host: str, port: int) -> None:
        self.host = host
        self.port = port
        self.head = b""

    def receive(self, data: bytes) -> tuple[bytes, bool]:
        self.head += data
        end = self.head.find(b"\r\n\r\n")
        if end < 0:
            return b"", False
        line = self.head.split(b"\r\n", 1)[0].decode("latin-1").split(" ")
        path = line[1] if len(line) >= 2 and line[1].startswith("/") else "/"
        host = f"[{self.host}]" if ":" in self.host else self.host
        body = f"not the leader: the leader serves http://{host}:{self.port}{path}\n"
        head = (
            "HTTP/1.1 307 Temporary Redirect\r\n"
            f"Location: http://{host}:{self.port}{path}\r\n"
            "Content-Type: text/plain; charset=utf-8\r\n"
            f"Content-Length: {len(body)}\r\n"
            "Connection: close\r\n\r\n"
        )
        return (head + body).encode("latin-1"), True


class AmqpPortRefuser:
    """The AMQP port's refusal: 0-9-1's or 1.0's, told apart by the protocol header."""

    def __init__(self, amqp091: Refuser, amqp10: Refuser) -> None:
        self.amqp091 = amqp091
        self.amqp10 = amqp10
        self.chosen: Refuser | None = None
        self.head = b""

    def receive(self, data: bytes) -> tuple[bytes, bool]:
        if self.chosen is None:
            self.head += data
            if len(self.head) < 8:
                return b"", False
            is_10 = self.head[:8] in AMQP10_HEADERS
            self.chosen = self.amqp10 if is_10 else self.amqp091
            data, self.head = self.head, b""
        return self.chosen.receive(data)


class Refusals:
    """The refusal of each listener's protocol (`ProxyGate`'s `refuse`).

    Args:
        refusers: the protocols' refusers by handler key ("amqp091", "amqp10", "stomp",
            "mqtt"), from the composition root; the AMQP port's and HTTP's are made here.
    """

    def __init__(self, refusers: Mapping[str, RefuserFactory]) -> None:
        self.refusers: dict[str, RefuserFactory] = {"http": HttpRefuser, **refusers}
        amqp091, amqp10 = refusers.get("amqp091"), refusers.get("amqp10")
        if amqp091 is not None and amqp10 is not None:
            self.refusers["amqp"] = lambda h, p: AmqpPortRefuser(amqp091(h, p), amqp10(h, p))
        elif amqp091 is not None or amqp10 is not None:
            self.refusers["amqp"] = cast("RefuserFactory", amqp091 or amqp10)

    def __call__(self, protocol: str, leader: LeaderAddresses) -> asyncio.Protocol | None:
        base = protocol.split("/", 1)[0]
        if base == "https":
            base = "http"
        make = self.refusers.get(base)
        port = leader.port_of(base)
        if make is None or port is None:
            return None
        return RefusalConnection(make(leader.host, port))
