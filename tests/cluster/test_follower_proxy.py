"""Clients reach the leader of a 3-node etcd cluster through a follower (`-m cluster`).

A follower's client ports relay each connection to the leader etcd names, with a PROXY header
so the leader records the client's own address; its management port answers `/api/cluster`
itself and forwards the rest of the API. After a step-down, the relayed connections close and
the clients reconnect through the same follower to the new leader; a resend with the same
message id is de-duplicated by the queue's window. With `proxy = false` each protocol refuses,
naming the leader. Waits are bounded against hanging, never timed.
"""

from __future__ import annotations

import ssl
from collections.abc import Callable
from pathlib import Path

import httpx
import pika
import pytest
import stomp
from proton import ConnectionException, Message
from proton.utils import BlockingConnection

from tests.cluster.conftest import EtcdCluster, Node
from tests.cluster.test_election_etcd import one_leader, wait_for
from tests.integration.mqtt.clients import Paho
from tests.integration.test_config import _self_signed
from tests.integration.test_proxy import _Errors, _Inbox, drain_until_closed, pika_local_port
from tests.ports import free_ports

pytestmark = [pytest.mark.cluster, pytest.mark.timeout(240)]

ISR_TIMEOUT = "isr_timeout_ms = 1500\n"
AUTH = ("guest", "guest")


def start_three(
    etcd_cluster: Callable[[int], EtcdCluster],
    start_node: Callable[..., Node],
    extra_config: str = "",
    tls: tuple[Path, Path] | None = None,
) -> tuple[Node, list[Node], list[Node]]:
    """Three nodes with STOMP and MQTT ports (and, with `tls`'s certificate and key, AMQPS and
    STOMP over TLS on the ports `TLS_PORTS` lists by node): (leader, followers, all), every one
    in the ISR."""
    etcd = etcd_cluster(1)
    nodes = []
    for name in ("n1", "n2", "n3"):
        more = ""
        if tls is not None:
            amqps, stomps = free_ports(2)
            TLS_PORTS[name] = (amqps, stomps)
            more = (
                f'[tls]\ncert_file = "{tls[0]}"\nkey_file = "{tls[1]}"\n'
                f"port = {amqps}\nstomp_port = {stomps}\n"
            )
        nodes.append(
            start_node(
                name,
                etcd.endpoints,
                extra_config=ISR_TIMEOUT + extra_config + more,
                protocols=True,
            )
        )
    name, _ = wait_for("one leader", lambda: one_leader(nodes))
    wait_for("three in sync", lambda: len(nodes[0].cluster()["isr"]) == 3)
    leader = next(n for n in nodes if n.name == name)
    return leader, [n for n in nodes if n is not leader], nodes


TLS_PORTS: dict[str, tuple[int, int]] = {}
"""(AMQPS, STOMP over TLS) ports by node name, of the nodes `start_three` gave a [tls] table."""


def connect(node: Node) -> pika.BlockingConnection:
    params = pika.ConnectionParameters("127.0.0.1", node.port, connection_attempts=1)
    return pika.BlockingConnection(params)


def reconnect(node: Node) -> pika.BlockingConnection:
    """A pika connection through `node`, once it reaches a leader (it closes new connections
    while it knows none)."""

    def attempt() -> pika.BlockingConnection | None:
        try:
            return connect(node)
        except pika.exceptions.AMQPConnectionError:
            return None

    conn: pika.BlockingConnection = wait_for(f"a connection through {node.name}", attempt)
    return conn


def peer_ports(leader: Node) -> set[int]:
    url = f"http://127.0.0.1:{leader.http_port}/api/connections"
    return {c["peer_port"] for c in httpx.get(url, auth=AUTH, timeout=10).json()}


def test_every_protocol_and_the_api_reach_the_leader_through_a_follower(
    etcd_cluster: Callable[[int], EtcdCluster], start_node: Callable[..., Node], tmp_path: Path
) -> None:
    cert, key = _self_signed(tmp_path)
    leader, followers, _ = start_three(etcd_cluster, start_node, tls=(cert, key))
    via = followers[0]
    # AMQP 0-9-1: publish with confirms and consume through the follower
    conn = reconnect(via)
    try:
        ch = conn.channel()
        ch.confirm_delivery()
        ch.queue_declare("via-follower", durable=True)
        ch.basic_publish("", "via-follower", b"0-9-1", pika.BasicProperties(delivery_mode=2))
        assert ch.basic_get("via-follower", auto_ack=True)[2] == b"0-9-1"
        # the leader records the client's own address (the PROXY header), not the relay's
        port = pika_local_port(conn)
        wait_for("the client's port on the leader", lambda: port in peer_ports(leader))
    finally:
        conn.close()
    # AMQP 1.0
    c = BlockingConnection(f"amqp://guest:guest@127.0.0.1:{via.port}", timeout=10)
    try:
        c.create_sender("/queues/via-follower").send(Message(body="1.0"))
        rcv = c.create_receiver("/queues/via-follower")
        assert rcv.receive(timeout=10).body == "1.0"
        rcv.accept()
    finally:
        c.close()
    # STOMP
    sc = stomp.Connection12([("127.0.0.1", via.stomp_port)])
    inbox = _Inbox()
    sc.set_listener("inbox", inbox)
    sc.connect("guest", "guest", wait=True)
    try:
        sc.subscribe("/queue/via-follower-stomp", id="1", ack="auto")
        sc.send("/queue/via-follower-stomp", "stomp", receipt="r1")
        assert inbox.messages.get(timeout=10).body == "stomp"
    finally:
        sc.disconnect()
    # MQTT
    assert via.mqtt_port is not None
    client = Paho(via.mqtt_port, "via-follower")
    try:
        client.subscribe("via/follower", qos=1)
        client.publish("via/follower", b"mqtt", qos=1)
        assert client.get(timeout=10).payload == b"mqtt"
    finally:
        client.disconnect()
    # TLS ends at the follower, which relays to the leader's plain ports: AMQPS and STOMP
    amqps, stomps = TLS_PORTS[via.name]
    ctx = ssl.create_default_context(cafile=str(cert))
    params = pika.ConnectionParameters("127.0.0.1", amqps, ssl_options=pika.SSLOptions(ctx))
    with pika.BlockingConnection(params) as secure:
        ch = secure.channel()
        ch.basic_publish("", "via-follower", b"amqps")
        assert ch.basic_get("via-follower", auto_ack=True)[2] == b"amqps"
        port = pika_local_port(secure)
        wait_for("the TLS client's port on the leader", lambda: port in peer_ports(leader))
    sc = stomp.Connection12([("127.0.0.1", stomps)])
    sc.set_ssl(for_hosts=[("127.0.0.1", stomps)], ca_certs=str(cert))
    inbox = _Inbox()
    sc.set_listener("inbox", inbox)
    sc.connect("guest", "guest", wait=True)
    try:
        sc.subscribe("/queue/via-follower-stomps", id="1", ack="auto")
        sc.send("/queue/via-follower-stomps", "stomps", receipt="r1")
        assert inbox.messages.get(timeout=10).body == "stomps"
    finally:
        sc.disconnect()
    # the HTTP API: the follower's own broker is empty, the leader's queue is answered
    base = f"http://127.0.0.1:{via.http_port}"
    got = httpx.get(f"{base}/api/queues/%2F/via-follower", auth=AUTH, timeout=10)
    assert got.status_code == 200
    assert got.json()["name"] == "via-follower"
    assert got.json()["node"] == leader.name
    # ... and /api/cluster is the follower's own
    assert httpx.get(f"{base}/api/cluster", auth=AUTH, timeout=10).json()["role"] == "follower"


DEDUP_QUEUE = "dedup-failover"
DEDUP_ARGS = {"x-message-deduplication-window-ms": 600_000}


def publish_ids(conn: pika.BlockingConnection, ids: range) -> None:
    ch = conn.channel()
    ch.confirm_delivery()
    ch.queue_declare(DEDUP_QUEUE, durable=True, arguments=DEDUP_ARGS)
    for i in ids:
        props = pika.BasicProperties(delivery_mode=2, message_id=f"m{i}")
        ch.basic_publish("", DEDUP_QUEUE, str(i).encode(), props)  # raises unless confirmed


def test_after_a_step_down_clients_reconnect_through_the_same_follower_and_resends_dedup(
    etcd_cluster: Callable[[int], EtcdCluster], start_node: Callable[..., Node]
) -> None:
    old, followers, nodes = start_three(etcd_cluster, start_node)
    via = followers[0]
    conn = reconnect(via)
    publish_ids(conn, range(5))
    # a planned switchover: the old leader steps down, another node is elected
    url = f"http://127.0.0.1:{old.http_port}/api/cluster/step-down"
    assert httpx.post(url, auth=AUTH, timeout=10).status_code < 300
    # the relayed connection to the old leader is closed
    with pytest.raises(pika.exceptions.AMQPConnectionError):
        drain_until_closed(conn)
    name, _ = wait_for("a new leader", lambda: (v := one_leader(nodes)) and v[0] != old.name and v)
    new = next(n for n in nodes if n.name == name)
    wait_for("the new leader's ISR", lambda: len(new.cluster()["isr"]) >= 2)
    # the publisher is unsure of 3 and 4: it resends them with the same ids, and goes on
    conn = reconnect(via)
    try:
        publish_ids(conn, range(3, 8))
        if via is not new:
            port = pika_local_port(conn)
            wait_for("the client's port on the new leader", lambda: port in peer_ports(new))
        ch = conn.channel()
        got = []
        for _ in range(100):  # bounded
            method, _props, body = ch.basic_get(DEDUP_QUEUE, auto_ack=True)
            if method is None:
                break
            got.append(int(body))
    finally:
        conn.close()
    assert sorted(got) == list(range(8)), got
    # AMQP 1.0, STOMP, MQTT and the HTTP API through the same follower reach the new leader
    c = BlockingConnection(f"amqp://guest:guest@127.0.0.1:{via.port}", timeout=10)
    try:
        c.create_sender(f"/queues/{DEDUP_QUEUE}").send(Message(body="1.0 again"))
        rcv = c.create_receiver(f"/queues/{DEDUP_QUEUE}")
        assert rcv.receive(timeout=10).body == "1.0 again"
        rcv.accept()
    finally:
        c.close()
    url = f"http://127.0.0.1:{via.http_port}/api/queues/%2F/{DEDUP_QUEUE}"
    assert httpx.get(url, auth=AUTH, timeout=10).json()["node"] == new.name
    sc = stomp.Connection12([("127.0.0.1", via.stomp_port)])
    inbox = _Inbox()
    sc.set_listener("inbox", inbox)
    sc.connect("guest", "guest", wait=True)
    try:
        sc.subscribe("/queue/after-step-down", id="1", ack="auto")
        sc.send("/queue/after-step-down", "again", receipt="r1")
        assert inbox.messages.get(timeout=10).body == "again"
    finally:
        sc.disconnect()
    assert via.mqtt_port is not None
    client = Paho(via.mqtt_port, "after-step-down")
    try:
        client.subscribe("after/step-down", qos=1)
        client.publish("after/step-down", b"again", qos=1)
        assert client.get(timeout=10).payload == b"again"
    finally:
        client.disconnect()


def test_with_proxy_off_a_follower_refuses_each_protocol_naming_the_leader(
    etcd_cluster: Callable[[int], EtcdCluster], start_node: Callable[..., Node]
) -> None:
    leader, followers, _ = start_three(etcd_cluster, start_node, "proxy = false\n")
    via = followers[0]
    wait_for("the follower knows the leader", lambda: _refused_091(via) is not None)
    # AMQP 0-9-1: 530 naming the leader's AMQP port
    text = _refused_091(via)
    assert text is not None
    assert "(530) 'NOT_ALLOWED - not the leader" in text
    assert f"127.0.0.1:{leader.port}" in text
    # AMQP 1.0: amqp:connection:redirect to the leader
    with pytest.raises(ConnectionException) as err:
        BlockingConnection(f"amqp://guest:guest@127.0.0.1:{via.port}", timeout=10)
    assert "amqp:connection:redirect" in str(err.value.args[0])
    assert f"127.0.0.1:{leader.port}" in str(err.value.args[0])
    # STOMP: an ERROR frame naming the leader's STOMP port
    sc = stomp.Connection12([("127.0.0.1", via.stomp_port)], reconnect_attempts_max=1)
    errors = _Errors()
    sc.set_listener("errors", errors)
    with pytest.raises(stomp.exception.ConnectFailedException):
        sc.connect("guest", "guest", wait=True)
    assert f"127.0.0.1:{leader.stomp_port}" in errors.errors.get(timeout=10).headers["message"]
    # MQTT 5: CONNACK 0x9C, use another server
    assert via.mqtt_port is not None
    client = Paho(via.mqtt_port, "refused-v5", v5=True)
    try:
        assert client.refused
        assert client.connack.value == 0x9C
    finally:
        client.disconnect()
    # HTTP: the API answers 307 to the leader; /api/cluster stays the follower's own
    base = f"http://127.0.0.1:{via.http_port}"
    got = httpx.get(f"{base}/api/overview", auth=AUTH, timeout=10)
    assert got.status_code == 307
    assert got.headers["location"] == f"http://127.0.0.1:{leader.http_port}/api/overview"
    assert httpx.get(f"{base}/api/cluster", auth=AUTH, timeout=10).json()["role"] == "follower"


def _refused_091(node: Node) -> str | None:
    """The refusal pika reports (None: the connection was closed without one)."""
    try:
        connect(node).close()
    except pika.exceptions.ProbableAccessDeniedError as exc:
        return str(exc)
    except pika.exceptions.AMQPConnectionError:
        return None
    raise AssertionError("a follower with proxy = false served an AMQP client")
