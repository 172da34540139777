"""The server's one connection driver (server/handlers.py), driven over real sockets with a
toy line protocol: listeners per protocol, the AMQP port telling 0-9-1 from 1.0 by its header,
admission, one write per batch, closes started by the server (operator, shutdown, a defect in a
handler) and the core's cleanup when the socket goes away."""

from __future__ import annotations

import socket
import ssl
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pika
import pytest

from ringmq.adapters.handler import HandlerContext, HandlerInfo
from ringmq.core.effects import Effect
from ringmq.core.errors import BrokerError, Condition
from ringmq.node import BrokerThread
from ringmq.server.configfile import parse_toml
from ringmq.server.runtime import ServerOptions
from tests.integration.conftest import wait_until
from tests.integration.test_config import _self_signed

pytestmark = pytest.mark.integration

LOST: list[int] = []
"""conn_ids whose handler was told the socket went away (the toy records them)."""


class Toy:
    """A line protocol: LOGIN user pass | ECHO text | CRASH | BYE; AMQP 1.0's header answered."""

    def __init__(self, ctx: HandlerContext) -> None:
        self.ctx = ctx
        self.buf = b""
        self.out = bytearray()
        self._opened = False
        self._closed = False
        self.user = ""
        self.ticks = 0

    @property
    def opened(self) -> bool:
        return self._opened

    @property
    def closed(self) -> bool:
        return self._closed

    def receive_data(self, data: bytes, now_ms: int) -> list[Effect]:
        self.buf += data
        if self.buf.startswith(b"AMQP"):
            if len(self.buf) < 8:
                return []
            self.out += b"HEADER " + self.buf[:8].hex().encode() + b"\n"
            self.buf = self.buf[8:]
        while b"\n" in self.buf:
            line, self.buf = self.buf.split(b"\n", 1)
            word, _, rest = line.decode().partition(" ")
            if word == "LOGIN":
                user, _, password = rest.partition(" ")
                try:
                    self.ctx.login("PLAIN", user, password, now_ms)
                    self.ctx.broker.connection_opened(
                        self.ctx.conn_id, user, "/", self.ctx.peer.address, {}, now_ms
                    )
                except BrokerError as exc:
                    self.out += f"ERR {exc.condition.value}\n".encode()
                    continue
                self.user = user
                self._opened = True
                self.out += b"OK\n"
            elif word == "ECHO":
                self.out += rest.encode() + b"\n"
            elif word == "TICKS":
                self.out += f"{self.ticks}\n".encode()
            elif word == "CRASH":
                raise RuntimeError("a defect in a handler")
            elif word == "BYE":
                self.out += b"BYE\n"
                self._closed = True
        return []

    def apply(self, effect: Effect) -> None:
        self.out += f"EFFECT {type(effect).__name__}\n".encode()

    def data_to_send(self) -> bytes:
        data, self.out = bytes(self.out), bytearray()
        return data

    def tick(self, now_ms: int, mono_ms: int) -> list[Effect]:
        self.ticks += 1
        return []

    def close(self, condition: Condition, text: str) -> None:
        self.out += f"CLOSE {condition.value} {text}\n".encode()
        self._closed = True

    def connection_lost(self, now_ms: int) -> list[Effect]:
        LOST.append(self.ctx.conn_id)
        return self.ctx.broker.connection_closed(self.ctx.conn_id, now_ms)

    def info(self) -> HandlerInfo:
        return HandlerInfo("TOY 1.0", user=self.user, vhost="/", channels=1)


def _start(tmp_path: Path, **opts: Any) -> BrokerThread:
    options = ServerOptions(
        host="127.0.0.1",
        amqp_port=0,
        http_port=None,
        stomp_port=0,
        mqtt_port=None,
        data_dir=tmp_path / "data",
        **opts,
    )
    b = BrokerThread(options, handlers={"stomp": Toy, "amqp10": Toy})
    b.start()
    return b


@pytest.fixture
def toy(tmp_path: Path) -> Iterator[BrokerThread]:
    b = _start(tmp_path)
    yield b
    b.stop()


OPEN: list[socket.socket] = []


@pytest.fixture(autouse=True)
def _close_sockets() -> Iterator[None]:
    LOST.clear()  # conn_ids restart with each broker
    yield
    while OPEN:
        OPEN.pop().close()


def _connect(port: int) -> socket.socket:
    s = socket.create_connection(("127.0.0.1", port), timeout=5)
    s.settimeout(5)
    OPEN.append(s)
    return s


def _line(s: socket.socket) -> bytes:
    data = b""
    while not data.endswith(b"\n"):
        chunk = s.recv(1)
        if not chunk:
            return data
        data += chunk
    return data


def _eof(s: socket.socket) -> bytes:
    data = b""
    while chunk := s.recv(4096):
        data += chunk
    return data


def test_a_protocol_listener_drives_its_handler(toy: BrokerThread) -> None:
    with pytest.raises(LookupError):
        toy.port_of("mqtt")  # not wired: no listener
    s = _connect(toy.port_of("stomp"))
    s.sendall(b"LOGIN guest guest\nECHO one\nECHO two\n")
    assert [_line(s) for _ in range(3)] == [b"OK\n", b"one\n", b"two\n"]
    conns = toy.call(toy.server.connections)
    assert [(c.protocol, c.user, c.vhost, c.channels) for c in conns] == [
        ("TOY 1.0", "guest", "/", 1)
    ]
    assert "stomp" in [lst.protocol for lst in toy.call(toy.server.listeners)]

    def ticked() -> bool:
        s.sendall(b"TICKS\n")
        return _line(s) != b"0\n"

    wait_until(ticked)  # the periodic sweep ticks the handler
    s.sendall(b"BYE\n")
    assert _eof(s) == b"BYE\n"  # the handler finished: the server closed the socket
    wait_until(lambda: not toy.call(toy.server.connections))


def test_a_refused_login_is_the_handlers_to_answer_and_the_core_never_knew_it(
    toy: BrokerThread,
) -> None:
    s = _connect(toy.port_of("stomp"))
    s.sendall(b"LOGIN guest wrong\n")
    assert _line(s) == b"ERR access-refused\n"
    conn_id = max(toy.call(lambda: list(toy.server.conns.table)))
    s.close()
    wait_until(lambda: not toy.call(lambda: list(toy.server.conns.table)))
    assert conn_id not in LOST  # never opened: no connection_lost


def test_a_defect_in_a_handler_costs_that_connection_only(toy: BrokerThread) -> None:
    other = _connect(toy.port_of("stomp"))
    other.sendall(b"LOGIN guest guest\n")
    assert _line(other) == b"OK\n"
    s = _connect(toy.port_of("stomp"))
    s.sendall(b"LOGIN guest guest\n")
    assert _line(s) == b"OK\n"
    crashed = toy.call(lambda: max(toy.server.conns.table))
    s.sendall(b"CRASH\n")
    assert _eof(s).startswith(b"CLOSE internal-error")
    wait_until(lambda: crashed in LOST)  # its core state was released
    other.sendall(b"ECHO still here\n")
    assert _line(other) == b"still here\n"
    conn = pika.BlockingConnection(pika.ConnectionParameters("127.0.0.1", toy.port))
    conn.channel().queue_declare("after-the-crash")
    conn.close()


def test_the_amqp_port_tells_amqp_1_0_from_0_9_1_by_the_protocol_header(
    toy: BrokerThread,
) -> None:
    for header in (b"AMQP\x00\x01\x00\x00", b"AMQP\x03\x01\x00\x00"):
        s = _connect(toy.port)
        for b in header:  # byte by byte: the sniffer waits for the whole header
            s.sendall(bytes([b]))
            time.sleep(0.001)
        assert _line(s) == b"HEADER " + header.hex().encode() + b"\n"
        s.sendall(b"LOGIN guest guest\n")
        assert _line(s) == b"OK\n"
        s.close()
    conn = pika.BlockingConnection(pika.ConnectionParameters("127.0.0.1", toy.port))
    ch = conn.channel()
    ch.queue_declare("q")
    ch.basic_publish("", "q", b"hello")
    assert ch.basic_get("q", auto_ack=True)[2] == b"hello"
    conn.close()
    # anything else is the 0-9-1 machine's to refuse: it answers with its own header
    s = _connect(toy.port)
    s.sendall(b"GET / HTTP/1.1\r\n\r\n")
    assert _eof(s) == b"AMQP\x00\x00\x09\x01"


def test_closes_started_by_the_server_reach_the_handler(toy: BrokerThread) -> None:
    s = _connect(toy.port_of("stomp"))
    s.sendall(b"LOGIN guest guest\n")
    assert _line(s) == b"OK\n"
    (info,) = toy.call(toy.server.connections)
    assert toy.call(lambda: toy.server.close_connection(info.name, "go away"))
    assert _eof(s) == b"CLOSE connection-forced go away\n"
    s2 = _connect(toy.port_of("stomp"))
    s2.sendall(b"LOGIN guest guest\n")
    assert _line(s2) == b"OK\n"
    toy.stop()
    assert _eof(s2) == b"CLOSE connection-forced broker shutdown\n"


def test_the_handshake_timeout_covers_silent_sockets_on_every_listener(
    tmp_path: Path,
) -> None:
    b = _start(tmp_path, config=parse_toml("[limits]\nhandshake_timeout_ms = 300\n"))
    try:
        silent_amqp = _connect(b.port)  # not even a protocol header
        silent_toy = _connect(b.port_of("stomp"))  # connected, never logged in
        assert _eof(silent_amqp) == b""
        assert _eof(silent_toy) == b""
    finally:
        b.stop()


def test_the_amqps_port_tells_them_apart_too(tmp_path: Path) -> None:
    cert, key = _self_signed(tmp_path)
    config = parse_toml(
        f'[tls]\ncert_file = "{cert}"\nkey_file = "{key}"\nport = 0\nstomp_port = 0\n'
    )
    b = _start(tmp_path, config=config)
    try:
        port = b.server.amqps_port
        ctx = ssl.create_default_context(cafile=str(cert))
        with (
            socket.create_connection(("127.0.0.1", port), timeout=5) as raw,
            ctx.wrap_socket(raw, server_hostname="127.0.0.1") as s,
        ):
            s.sendall(b"AMQP\x00\x01\x00\x00LOGIN guest guest\n")
            assert _line(s) == b"HEADER 414d515000010000\n"
            assert _line(s) == b"OK\n"
        params = pika.ConnectionParameters(
            "127.0.0.1", port, ssl_options=pika.SSLOptions(ctx, "127.0.0.1")
        )
        conn = pika.BlockingConnection(params)
        conn.channel().queue_declare("over-tls")
        conn.close()
        # [tls] stomp_port: the adapter protocol over TLS (mqtt_port is not set: no listener)
        with (
            socket.create_connection(("127.0.0.1", b.port_of("stomp/ssl")), timeout=5) as raw,
            ctx.wrap_socket(raw, server_hostname="127.0.0.1") as s,
        ):
            s.sendall(b"LOGIN guest guest\nECHO secret\n")
            assert _line(s) == b"OK\n"
            assert _line(s) == b"secret\n"
            # while it is open (the AMQPS toy connection above may still be closing)
            toys = [c for c in b.call(b.server.connections) if c.protocol == "TOY 1.0"]
            assert [c.ssl for c in toys if c.port == b.port_of("stomp/ssl")] == [True]
        with pytest.raises(LookupError):
            b.port_of("mqtt/ssl")
    finally:
        b.stop()


def test_the_table_wires_amqp_091_like_any_other_protocol(tmp_path: Path) -> None:
    # AMQP 0-9-1 is a row of the composition root's table too: a handler wired under
    # "amqp091" serves the AMQP port (the server has no 0-9-1 of its own to fall back on)
    options = ServerOptions(
        host="127.0.0.1", amqp_port=0, http_port=None, data_dir=tmp_path / "data"
    )
    b = BrokerThread(options, handlers={"amqp091": Toy})
    b.start()
    try:
        s = _connect(b.port)
        s.sendall(b"LOGIN guest guest\nECHO through the table\n")
        assert [_line(s) for _ in range(2)] == [b"OK\n", b"through the table\n"]
        (info,) = b.call(b.server.connections)
        assert (info.protocol, info.user) == ("TOY 1.0", "guest")
        s.sendall(b"BYE\n")
        assert _eof(s) == b"BYE\n"
        wait_until(lambda: bool(LOST))  # released through the handler, once
        assert len(LOST) == 1
    finally:
        b.stop()
