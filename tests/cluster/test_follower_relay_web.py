"""A follower relays the WebSocket ports and the stream protocol's port too (`-m cluster`).

Three nodes on one etcd, each with `--stream-port` and the Web STOMP, Web MQTT and Web AMQP
ports; clients connect to a follower only. paho-mqtt (`transport="websockets"`), stomp.py's
WebSocket transport, AMQP 1.0 over a WebSocket and rstream reach the leader's broker; the
leader records a WebSocket client's own port (the PROXY header); rstream's connection
advertises the leader's host and stream port, and its stream metadata names the leader. With
`proxy = false` each of these ports refuses, naming the leader's port of the same protocol.
"""

from __future__ import annotations

import asyncio
import queue
import socket
import struct
import threading
from collections.abc import Callable
from typing import Any

import httpx
import paho.mqtt.client as mqtt
import pika
import pytest
import stomp
from paho.mqtt.enums import CallbackAPIVersion
from rstream import AMQPMessage, Consumer, ConsumerOffsetSpecification, OffsetType, Producer
from rstream import amqp_decoder as decode_amqp

from tests.cluster.conftest import EtcdCluster, Node
from tests.cluster.test_election_etcd import one_leader, wait_for
from tests.integration.test_proxy import _Errors, _Inbox
from tests.integration.test_websockets import _masked, _upgrade

pytestmark = [pytest.mark.cluster, pytest.mark.timeout(180)]

AUTH = ("guest", "guest")
LOGIN: dict[str, Any] = {"username": "guest", "password": "guest"}
TIMEOUT_S = 10.0
ISR_TIMEOUT = "isr_timeout_ms = 1500\n"


def start_three(
    etcd_cluster: Callable[[int], EtcdCluster],
    start_node: Callable[..., Node],
    extra_config: str = "",
) -> tuple[Node, Node]:
    """(leader, a follower), every node in the ISR."""
    etcd = etcd_cluster(1)
    nodes = [
        start_node(name, etcd.endpoints, extra_config=ISR_TIMEOUT + extra_config, web=True)
        for name in ("n1", "n2", "n3")
    ]
    name, _ = wait_for("one leader", lambda: one_leader(nodes))
    wait_for("three in sync", lambda: len(nodes[0].cluster()["isr"]) == 3)
    leader = next(n for n in nodes if n.name == name)
    return leader, next(n for n in nodes if n is not leader)


def web_ports(node: Node) -> tuple[int, int, int]:
    """(Web MQTT, Web STOMP, Web AMQP) ports of a node started with `web=True`."""
    assert node.web_mqtt_port is not None
    assert node.web_stomp_port is not None
    assert node.web_amqp_port is not None
    return node.web_mqtt_port, node.web_stomp_port, node.web_amqp_port


def peer_ports(leader: Node) -> set[int]:
    url = f"http://127.0.0.1:{leader.http_port}/api/connections"
    return {c["peer_port"] for c in httpx.get(url, auth=AUTH, timeout=10).json()}


class WsMqtt:
    """paho-mqtt over WebSockets (path /ws), its network loop on a thread."""

    def __init__(self, port: int, client_id: str, *, v5: bool = False) -> None:
        self.client = mqtt.Client(
            CallbackAPIVersion.VERSION2,
            client_id=client_id,
            transport="websockets",
            protocol=mqtt.MQTTv5 if v5 else mqtt.MQTTv311,
        )
        self.client.ws_set_options(path="/ws")
        self.client.username_pw_set("guest", "guest")
        self.answered = threading.Event()
        self.reason: Any = None
        self.properties: Any = None
        self.messages: queue.Queue[Any] = queue.Queue()
        self.subscribed = threading.Event()

        def on_connect(_c: Any, _u: Any, _f: Any, reason: Any, props: Any) -> None:
            self.reason, self.properties = reason, props
            self.answered.set()

        self.client.on_connect = on_connect
        self.client.on_message = lambda _c, _u, m: self.messages.put(m)
        self.client.on_subscribe = lambda *_a: self.subscribed.set()
        self.client.connect("127.0.0.1", port, keepalive=30)
        self.client.loop_start()
        if not self.answered.wait(TIMEOUT_S):
            self.close()
            raise AssertionError("no CONNACK")

    def close(self) -> None:
        self.client.disconnect()
        self.client.loop_stop()


def test_websocket_and_stream_clients_reach_the_leader_through_a_follower(
    etcd_cluster: Callable[[int], EtcdCluster], start_node: Callable[..., Node]
) -> None:
    leader, via = start_three(etcd_cluster, start_node)
    web_mqtt, web_stomp, web_amqp = web_ports(via)
    # Web MQTT: paho over WebSockets, subscribe and publish through the follower
    client = wait_for("Web MQTT through the follower", lambda: _ws_mqtt(web_mqtt))
    try:
        assert client.reason == 0, client.reason
        client.client.subscribe("ws/via", 1)
        assert client.subscribed.wait(TIMEOUT_S)
        client.client.publish("ws/via", b"over ws", qos=1).wait_for_publish(TIMEOUT_S)
        assert client.messages.get(timeout=TIMEOUT_S).payload == b"over ws"
        # the leader records the client's own address (the PROXY header), not the relay's
        sock = client.client.socket()
        raw = getattr(sock, "_socket", sock)  # paho's WebSocket wrapper holds the socket
        assert isinstance(raw, socket.socket)
        port = raw.getsockname()[1]
        wait_for("the WebSocket client's port on the leader", lambda: port in peer_ports(leader))
    finally:
        client.close()
    # Web STOMP: stomp.py's WebSocket transport; the message is the leader's
    conn = stomp.WSStompConnection([("127.0.0.1", web_stomp)], ws_path="/ws", vhost="/")
    inbox = _Inbox()
    conn.set_listener("inbox", inbox)
    conn.connect("guest", "guest", wait=True)
    try:
        conn.subscribe("/queue/ws-via", id="s1", ack="auto")
        conn.send("/queue/ws-via", "web stomp", receipt="r1")
        assert inbox.messages.get(timeout=TIMEOUT_S).body == "web stomp"
    finally:
        conn.disconnect()
    with pika.BlockingConnection(pika.ConnectionParameters("127.0.0.1", leader.port)) as pc:
        pc.channel().queue_declare("ws-via", passive=True)  # made on the leader
    # Web AMQP: the AMQP 1.0 header over a WebSocket is answered by the leader's SASL layer
    with socket.create_connection(("127.0.0.1", web_amqp), TIMEOUT_S) as s:
        s.sendall(_upgrade(protocols="amqp") + _masked(b"AMQP\x03\x01\x00\x00"))
        got = _read_until(s, lambda b: len(b.partition(b"\r\n\r\n")[2]) >= 10)
        head, _, frames = got.partition(b"\r\n\r\n")
        assert head.startswith(b"HTTP/1.1 101"), got
        assert frames[2:10] == b"AMQP\x03\x01\x00\x00"
    # the stream protocol: rstream through the follower
    asyncio.run(_rstream_through(via, leader))


def _ws_mqtt(port: int) -> WsMqtt | None:
    try:
        return WsMqtt(port, "ws-via")
    except (OSError, AssertionError, mqtt.WebsocketConnectionError):
        return None


async def _rstream_through(via: Node, leader: Node) -> None:
    assert via.stream_port is not None
    async with Producer("127.0.0.1", port=via.stream_port, **LOGIN) as p:
        await p.create_stream("via-follower")
        for i in range(3):
            await p.send_wait("via-follower", AMQPMessage(body=f"s{i}".encode()))
        # a locator connection through the follower
        client = await p.default_client
        props = client.server_properties
        assert props is not None
        # the connection, relayed, was opened by the leader: it advertises itself
        assert (props["advertised_host"], props["advertised_port"]) == (
            "127.0.0.1",
            str(leader.stream_port),
        )
        broker, _replicas = await client.query_leader_and_replicas("via-follower")
        assert (broker.host, broker.port) == ("127.0.0.1", leader.stream_port)
        await client.close()  # the producer's close leaves its locator connection open
    got: list[bytes] = []
    done = asyncio.Event()

    async def on(msg: Any, _ctx: Any) -> None:
        got.append(bytes(msg.body))
        if len(got) >= 3:
            done.set()

    c = Consumer("127.0.0.1", port=via.stream_port, **LOGIN)
    await c.start()
    try:
        first = ConsumerOffsetSpecification(OffsetType.FIRST)
        await c.subscribe("via-follower", on, decoder=decode_amqp, offset_specification=first)
        await asyncio.wait_for(done.wait(), TIMEOUT_S)
    finally:
        await c.close()
    assert got == [b"s0", b"s1", b"s2"]


def _read_until(s: socket.socket, enough: Callable[[bytes], bool]) -> bytes:
    got = b""
    while not enough(got):
        chunk = s.recv(4096)
        if not chunk:
            break
        got += chunk
    return got


def test_with_proxy_off_the_websocket_and_stream_ports_refuse_naming_the_leader(
    etcd_cluster: Callable[[int], EtcdCluster], start_node: Callable[..., Node]
) -> None:
    leader, via = start_three(etcd_cluster, start_node, "proxy = false\n")
    web_mqtt, web_stomp, web_amqp = web_ports(via)
    assert via.stream_port is not None
    # Web MQTT 5: CONNACK 0x9C "use another server", the leader's Web MQTT port as reference
    client = wait_for("a refusal on Web MQTT", lambda: _refused_mqtt(web_mqtt))
    assert client.reason.value == 0x9C
    assert client.properties.ServerReference == f"127.0.0.1:{leader.web_mqtt_port}"
    # Web STOMP: an ERROR frame naming the leader's Web STOMP port
    conn = stomp.WSStompConnection(
        [("127.0.0.1", web_stomp)], ws_path="/ws", vhost="/", reconnect_attempts_max=1
    )
    errors = _Errors()
    conn.set_listener("errors", errors)
    with pytest.raises(stomp.exception.ConnectFailedException):
        conn.connect("guest", "guest", wait=True)
    message = errors.errors.get(timeout=TIMEOUT_S).headers["message"]
    assert f"not the leader: connect to 127.0.0.1:{leader.web_stomp_port}" in message
    # Web AMQP: the AMQP 1.0 close redirects (amqp:connection:redirect), then a WebSocket close
    with socket.create_connection(("127.0.0.1", web_amqp), TIMEOUT_S) as s:
        s.sendall(_upgrade(protocols="amqp") + _masked(b"AMQP\x00\x01\x00\x00"))
        got = _read_until(s, lambda _b: False)  # until the follower closes
    assert got.startswith(b"HTTP/1.1 101"), got
    assert b"amqp:connection:redirect" in got
    assert f"not the leader: connect to 127.0.0.1:{leader.web_amqp_port}".encode() in got
    assert b"\x88\x02\x03\xe8" in got  # the WebSocket close, 1000
    # the stream protocol: the first request (PeerProperties) is answered with a Close naming
    # the leader (spoken here byte by byte: rstream leaves a refused connection's socket behind)
    peer_properties = struct.pack(">HHIi", 0x0011, 1, 1, 0)
    with socket.create_connection(("127.0.0.1", via.stream_port), TIMEOUT_S) as s:
        s.sendall(struct.pack(">I", len(peer_properties)) + peer_properties)
        got = _read_until(s, lambda _b: False)  # until the follower closes
    assert struct.unpack(">H", got[4:6])[0] == 0x0016, got  # Close
    assert f"not the leader: connect to 127.0.0.1:{leader.stream_port}".encode() in got


def _refused_mqtt(port: int) -> WsMqtt | None:
    try:
        client = WsMqtt(port, "refused-ws", v5=True)
    except (OSError, AssertionError, mqtt.WebsocketConnectionError):
        return None
    client.close()
    return client if client.reason.value == 0x9C else None
