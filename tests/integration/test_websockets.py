"""STOMP, MQTT and AMQP 1.0 over WebSockets (issue 29): the Web STOMP, Web MQTT and Web AMQP
listeners (path /ws, subprotocol negotiation), with real clients (stomp.py's WebSocket
transport, paho-mqtt's `transport="websockets"`, rhea with the `ws` package) exchanging
messages with pika; a malformed handshake, a wrong path and a malformed frame close that
connection alone. The browser's clients: test_browser.py."""

from __future__ import annotations

import base64
import json
import os
import queue
import shutil
import socket
import ssl
import subprocess
import threading
from pathlib import Path
from typing import Any

import paho.mqtt.client as mqtt
import pika
import pytest
import stomp
from paho.mqtt.enums import CallbackAPIVersion

from ringmq.node import BrokerThread
from tests.integration.conftest import BrokerFactory
from tests.pki import CA, person

pytestmark = pytest.mark.integration
TIMEOUT_S = 10.0


@pytest.fixture
def web(broker_factory: BrokerFactory) -> BrokerThread:
    return broker_factory(web_stomp_port=0, web_mqtt_port=0)


def _users(b: BrokerThread) -> set[tuple[str, str]]:
    return {(c.protocol, c.user) for c in b.call(b.server.connections)}


def test_mqtt_over_websockets_with_paho_meets_pika(web: BrokerThread) -> None:
    client = mqtt.Client(CallbackAPIVersion.VERSION2, client_id="ws-paho", transport="websockets")
    client.ws_set_options(path="/ws")
    client.username_pw_set("guest", "guest")
    connected = threading.Event()
    got: queue.Queue[Any] = queue.Queue()
    subscribed = threading.Event()
    client.on_connect = lambda _c, _u, _f, reason, _p: connected.set()
    client.on_message = lambda _c, _u, m: got.put(m)
    client.on_subscribe = lambda *_a: subscribed.set()
    client.connect("127.0.0.1", web.port_of("web-mqtt"), keepalive=30)
    client.loop_start()
    try:
        assert connected.wait(TIMEOUT_S)
        client.subscribe("ws/news", 1)
        assert subscribed.wait(TIMEOUT_S)
        with pika.BlockingConnection(pika.ConnectionParameters("127.0.0.1", web.port)) as conn:
            conn.channel().basic_publish("amq.topic", "ws.news", b"from pika")
        assert got.get(timeout=TIMEOUT_S).payload == b"from pika"
        assert ("Web MQTT 3.1.1", "guest") in _users(web)
    finally:
        client.loop_stop()
        client.disconnect()


class _Inbox(stomp.ConnectionListener):  # type: ignore[misc]
    def __init__(self) -> None:
        self.messages: queue.Queue[Any] = queue.Queue()
        self.receipts: queue.Queue[str] = queue.Queue()

    def on_message(self, frame: Any) -> None:
        self.messages.put(frame)

    def on_receipt(self, frame: Any) -> None:
        self.receipts.put(frame.headers["receipt-id"])


def test_stomp_over_websockets_with_stomp_py_meets_pika(web: BrokerThread) -> None:
    port = web.port_of("web-stomp")
    conn = stomp.WSStompConnection([("127.0.0.1", port)], ws_path="/ws", vhost="/")
    inbox = _Inbox()
    conn.set_listener("inbox", inbox)
    conn.connect("guest", "guest", wait=True)
    try:
        conn.subscribe("/queue/ws-q", id="s1", headers={"receipt": "subscribed"})
        assert inbox.receipts.get(timeout=TIMEOUT_S) == "subscribed"
        with pika.BlockingConnection(pika.ConnectionParameters("127.0.0.1", web.port)) as pc:
            ch = pc.channel()
            ch.queue_declare("ws-q", passive=True)  # made by the STOMP subscription
            ch.basic_publish("", "ws-q", b"to the browser")
            conn.send("/queue/back", "from the browser")
            assert _get(pc, "back") == b"from the browser"
        assert inbox.messages.get(timeout=TIMEOUT_S).body == "to the browser"
        assert ("Web STOMP 1.2", "guest") in _users(web)
    finally:
        conn.disconnect()


def _get(conn: pika.BlockingConnection, queue_name: str) -> bytes | None:
    """The next message of `queue_name`, which a STOMP client is about to make (bounded)."""
    for _ in range(100):
        ch = conn.channel()
        try:
            body = ch.basic_get(queue_name, auto_ack=True)[2]
        except pika.exceptions.ChannelClosedByBroker:  # 404: not declared yet
            body = None
        if body is not None:
            return bytes(body)
        conn.sleep(0.1)
    return None


def _upgrade(path: str = "/ws", protocols: str | None = "v12.stomp") -> bytes:
    key = base64.b64encode(os.urandom(16)).decode()
    head = (
        f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
        f"Sec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\n"
    )
    if protocols is not None:
        head += f"Sec-WebSocket-Protocol: {protocols}\r\n"
    return (head + "\r\n").encode()


def _exchange(port: int, data: bytes) -> bytes:
    """Send `data`, read until the broker closes (bounded by the timeout)."""
    with socket.create_connection(("127.0.0.1", port), TIMEOUT_S) as s:
        s.sendall(data)
        got = b""
        while chunk := s.recv(4096):
            got += chunk
        return got


def test_the_handshake_negotiates_a_subprotocol(web: BrokerThread) -> None:
    port = web.port_of("web-stomp")
    with socket.create_connection(("127.0.0.1", port), TIMEOUT_S) as s:
        s.sendall(_upgrade(protocols="v10.stomp, v12.stomp"))
        head = s.recv(4096)
    assert head.startswith(b"HTTP/1.1 101")
    assert b"sec-websocket-protocol: v10.stomp" in head.lower()


@pytest.mark.parametrize(
    ("request_bytes", "status"),
    [
        (b"GET /ws HTTP/1.1\r\nHost: x\r\n\r\n", b"400"),  # no upgrade at all
        (b"\x16\x03\x01 garbage, not HTTP\r\n\r\n", b"400"),
        (_upgrade(path="/stomp"), b"404"),
        (_upgrade(protocols="mqtt"), b"400"),  # a subprotocol STOMP does not speak
    ],
)
def test_bad_handshakes_are_refused_the_broker_serves_on(
    web: BrokerThread, request_bytes: bytes, status: bytes
) -> None:
    reply = _exchange(web.port_of("web-stomp"), request_bytes)
    assert reply.split(b"\r\n", 1)[0].split()[1] == status
    with pika.BlockingConnection(pika.ConnectionParameters("127.0.0.1", web.port)) as conn:
        assert conn.channel().is_open


def test_a_malformed_frame_closes_that_connection(web: BrokerThread) -> None:
    # after the upgrade, an unmasked frame (clients must mask theirs: RFC 6455 5.1)
    reply = _exchange(web.port_of("web-mqtt"), _upgrade(protocols="mqtt") + b"\x82\x02\x10\x00")
    head, _, frames = reply.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 101")
    assert frames[:1] == b"\x88"  # a close frame
    assert int.from_bytes(frames[2:4], "big") == 1002  # protocol error
    with pika.BlockingConnection(pika.ConnectionParameters("127.0.0.1", web.port)) as conn:
        assert conn.channel().is_open


def test_mqtt_over_secure_websockets(broker_factory: BrokerFactory, tmp_path: Path) -> None:
    ca = CA(tmp_path, "wss")
    server = ca.issue("server", person("localhost"), server=True)
    b = broker_factory(
        f'[tls]\ncert_file = "{server.cert}"\nkey_file = "{server.key}"\nport = 0\n'
        "web_mqtt_port = 0\n",
    )
    client = mqtt.Client(CallbackAPIVersion.VERSION2, client_id="wss-paho", transport="websockets")
    client.ws_set_options(path="/ws")
    client.tls_set_context(ssl.create_default_context(cafile=str(ca.cert_file)))
    client.username_pw_set("guest", "guest")
    reasons: queue.Queue[Any] = queue.Queue()
    client.on_connect = lambda _c, _u, _f, reason, _p: reasons.put(reason)
    client.connect("127.0.0.1", b.port_of("web-mqtt/ssl"), keepalive=30)
    client.loop_start()
    try:
        assert not reasons.get(timeout=TIMEOUT_S).is_failure
        assert ("Web MQTT 3.1.1", "guest") in _users(b)
    finally:
        client.loop_stop()
        client.disconnect()


def _masked(payload: bytes) -> bytes:
    """One binary frame as a client sends it (masked: RFC 6455 5.3), payload under 126 bytes."""
    mask = os.urandom(4)
    return (
        bytes([0x82, 0x80 | len(payload)])
        + mask
        + bytes(b ^ mask[i % 4] for i, b in enumerate(payload))
    )


def _amqp_header_over(s: socket.socket) -> None:
    """Upgrade `s` offering two AMQP subprotocols, send the SASL header, check the answer."""
    s.sendall(_upgrade(protocols="AMQPWSB10, amqp") + _masked(b"AMQP\x03\x01\x00\x00"))
    got = b""
    while b"\r\n\r\n" not in got or len(got.partition(b"\r\n\r\n")[2]) < 10:
        chunk = s.recv(4096)
        assert chunk, got
        got += chunk
    head, _, frames = got.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 101")
    assert b"sec-websocket-protocol: amqpwsb10" in head.lower()  # the first one offered
    assert frames[:1] == b"\x82"  # binary, as the WebSocket binding requires
    assert frames[2:10] == b"AMQP\x03\x01\x00\x00"  # the SASL layer's header back


def test_amqp10_over_websockets_answers_the_protocol_header(
    broker_factory: BrokerFactory,
) -> None:
    b = broker_factory(web_amqp_port=0)
    with socket.create_connection(("127.0.0.1", b.port_of("web-amqp")), TIMEOUT_S) as s:
        _amqp_header_over(s)


def test_amqp10_over_secure_websockets(broker_factory: BrokerFactory, tmp_path: Path) -> None:
    ca = CA(tmp_path, "wss-amqp")
    server = ca.issue("server", person("localhost"), server=True)
    b = broker_factory(
        f'[tls]\ncert_file = "{server.cert}"\nkey_file = "{server.key}"\nport = 0\n'
        "web_amqp_port = 0\n",
    )
    context = ssl.create_default_context(cafile=str(ca.cert_file))
    context.check_hostname = False
    raw = socket.create_connection(("127.0.0.1", b.port_of("web-amqp/ssl")), TIMEOUT_S)
    with context.wrap_socket(raw) as s:
        _amqp_header_over(s)


RHEA = Path(__file__).resolve().parent / "amqp10" / "rhea"


def test_amqp10_over_websockets_with_rhea_meets_pika(broker_factory: BrokerFactory) -> None:
    node = shutil.which("node")
    if node is None:
        pytest.skip("node is not on PATH (rhea needs Node.js)")
    for package in ("rhea", "ws"):
        if not (RHEA / "node_modules" / package / "package.json").exists():
            pytest.skip(f"{package} is not installed: run `npm ci` in {RHEA} (make install does)")
    b = broker_factory(web_amqp_port=0)
    with pika.BlockingConnection(pika.ConnectionParameters("127.0.0.1", b.port)) as conn:
        ch = conn.channel()
        for q in ("ws-amqp-in", "ws-amqp-out"):
            ch.queue_declare(q)
        ch.basic_publish("", "ws-amqp-in", b"from pika")
        proc = subprocess.run(
            [node, str(RHEA / "websocket.js"), str(b.port_of("web-amqp"))],
            cwd=RHEA,
            capture_output=True,
            text=True,
            timeout=30,  # the script gives up after 15 s itself
            check=False,
        )
        assert proc.returncode == 0, proc.stderr
        assert json.loads(proc.stdout.strip().splitlines()[-1]) == {"body": "from pika"}
        assert _get(conn, "ws-amqp-out") == b"from rhea over websockets"
