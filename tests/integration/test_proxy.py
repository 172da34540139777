"""A follower relays clients to the leader: two `ringmq serve` processes on loopback.

The follower is told where the leader is by `[cluster.leader]` (the static provider, no etcd);
the leader believes PROXY headers from 127.0.0.1 (`proxy_protocol_from`). pika (AMQP 0-9-1),
python-qpid-proton (AMQP 1.0), stomp.py and paho-mqtt connect to the follower and publish and
consume through it; the leader's management API shows each client's own port; the management
API answers through the follower; a leader that goes away closes the relayed connections.
"""

from __future__ import annotations

import base64
import json
import queue
import socket
import ssl
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pika
import pytest
import stomp
from proton import ConnectionException, Message
from proton.utils import BlockingConnection

from ringmq.server.proxy import LeaderAddresses, StaticLeader
from tests.facade import admin_of
from tests.integration.conftest import BrokerFactory, wait_until
from tests.integration.mqtt.clients import Paho
from tests.integration.test_config import _self_signed
from tests.serve import Serve

pytestmark = pytest.mark.integration

TRUST_LOOPBACK = '[cluster]\nproxy_protocol_from = ["127.0.0.1"]\n'


def follower_config(leader: Serve, *, proxy: bool = True) -> str:
    return (
        f"[cluster]\nproxy = {'true' if proxy else 'false'}\n"
        "[cluster.leader]\n"
        'name = "leader"\nhost = "127.0.0.1"\n'
        f"amqp_port = {leader.port}\nstomp_port = {leader.stomp_port}\n"
        f"mqtt_port = {leader.mqtt_port}\nhttp_port = {leader.http_port}\n"
    )


def start(tmp: Path, name: str, config: str) -> Serve:
    (tmp / f"{name}.toml").write_text(config)
    return Serve(
        tmp / name,
        tmp / f"{name}.log",
        http=True,
        stomp=True,
        mqtt=True,
        config=tmp / f"{name}.toml",
    )


@pytest.fixture(scope="module")
def pair(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Serve, Serve]]:
    tmp = tmp_path_factory.mktemp("proxy")
    leader = start(tmp, "leader", TRUST_LOOPBACK)
    try:
        follower = start(tmp, "follower", follower_config(leader))
    except BaseException:
        leader.stop()
        raise
    yield leader, follower
    follower.stop()
    leader.stop()


def api(port: int, path: str) -> Any:
    req = urllib.request.Request(f"http://127.0.0.1:{port}{path}")
    req.add_header("Authorization", "Basic " + base64.b64encode(b"guest:guest").decode())
    with urllib.request.urlopen(req, timeout=10) as resp:
        return json.loads(resp.read())


def peer_ports(leader: Serve) -> set[int]:
    assert leader.http_port is not None
    return {c["peer_port"] for c in api(leader.http_port, "/api/connections")}


def pika_local_port(conn: Any) -> int:
    # pika keeps its socket on the transport of the connection's implementation
    return int(conn._impl._transport._sock.getsockname()[1])


def test_pika_publishes_and_consumes_through_the_follower(pair: tuple[Serve, Serve]) -> None:
    leader, follower = pair
    conn = pika.BlockingConnection(pika.ConnectionParameters("127.0.0.1", follower.port))
    try:
        ch = conn.channel()
        ch.confirm_delivery()
        ch.queue_declare("via-follower-091")
        ch.basic_publish("", "via-follower-091", b"hello through the follower")
        # the queue is the leader's: a direct connection to it reads the message
        direct = pika.BlockingConnection(pika.ConnectionParameters("127.0.0.1", leader.port))
        try:
            got = direct.channel().basic_get("via-follower-091", auto_ack=True)
            assert got[2] == b"hello through the follower"
        finally:
            direct.close()
        # the leader records the client's own address (the PROXY header), not the relay's
        wait_until(lambda: pika_local_port(conn) in peer_ports(leader), timeout=10)
    finally:
        conn.close()


def declare_on_leader(leader: Serve, name: str) -> None:
    direct = pika.BlockingConnection(pika.ConnectionParameters("127.0.0.1", leader.port))
    try:
        direct.channel().queue_declare(name)
    finally:
        direct.close()


def test_amqp10_sends_and_receives_through_the_follower(pair: tuple[Serve, Serve]) -> None:
    leader, follower = pair
    declare_on_leader(leader, "via-follower-10")
    c = BlockingConnection(f"amqp://guest:guest@127.0.0.1:{follower.port}", timeout=10)
    try:
        snd = c.create_sender("/queues/via-follower-10")
        snd.send(Message(body="hello 1.0"))
        rcv = c.create_receiver("/queues/via-follower-10")
        msg = rcv.receive(timeout=10)
        rcv.accept()
        assert msg.body == "hello 1.0"
    finally:
        c.close()


class _Inbox(stomp.ConnectionListener):  # type: ignore[misc]
    def __init__(self) -> None:
        self.messages: queue.Queue[Any] = queue.Queue()

    def on_message(self, frame: Any) -> None:
        self.messages.put(frame)


def test_stomp_through_the_follower(pair: tuple[Serve, Serve]) -> None:
    _leader, follower = pair
    assert follower.stomp_port is not None
    conn = stomp.Connection12([("127.0.0.1", follower.stomp_port)])
    inbox = _Inbox()
    conn.set_listener("inbox", inbox)
    conn.connect("guest", "guest", wait=True)
    try:
        conn.subscribe("/queue/via-follower-stomp", id="1", ack="auto")
        conn.send("/queue/via-follower-stomp", "hello stomp", receipt="r1")
        frame = inbox.messages.get(timeout=10)
        assert frame.body == "hello stomp"
    finally:
        conn.disconnect()


def test_mqtt_through_the_follower(pair: tuple[Serve, Serve]) -> None:
    _leader, follower = pair
    assert follower.mqtt_port is not None
    client = Paho(follower.mqtt_port, "via-follower")
    try:
        client.subscribe("via/follower", qos=1)
        client.publish("via/follower", b"hello mqtt", qos=1)
        assert client.get(timeout=10).payload == b"hello mqtt"
    finally:
        client.disconnect()


def test_management_api_through_the_follower(pair: tuple[Serve, Serve]) -> None:
    leader, follower = pair
    declare_on_leader(leader, "declared-on-the-leader")
    assert follower.http_port is not None
    got = api(follower.http_port, "/api/queues/%2F/declared-on-the-leader")
    assert got["name"] == "declared-on-the-leader"


def drain_until_closed(conn: Any) -> None:
    for _ in range(200):  # a bound against hanging: the close arrives well before
        conn.process_data_events(time_limit=0.05)


def test_a_leader_that_goes_away_closes_relayed_connections(tmp_path: Path) -> None:
    leader = start(tmp_path, "leader", TRUST_LOOPBACK)
    follower = start(tmp_path, "follower", follower_config(leader))
    try:
        conn = pika.BlockingConnection(pika.ConnectionParameters("127.0.0.1", follower.port))
        conn.channel().queue_declare("q")
        leader.kill()
        with pytest.raises(pika.exceptions.AMQPConnectionError):
            drain_until_closed(conn)
        assert not conn.is_open
    finally:
        follower.stop()
        leader.kill()


@pytest.fixture(scope="module")
def refusing(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Serve, Serve]]:
    """A leader and a follower with `[cluster] proxy = false`."""
    tmp = tmp_path_factory.mktemp("refusing")
    leader = start(tmp, "leader", TRUST_LOOPBACK)
    try:
        follower = start(tmp, "follower", follower_config(leader, proxy=False))
    except BaseException:
        leader.stop()
        raise
    yield leader, follower
    follower.stop()
    leader.stop()


def test_refusal_amqp091_closes_with_530_naming_the_leader(
    refusing: tuple[Serve, Serve],
) -> None:
    leader, follower = refusing
    params = pika.ConnectionParameters("127.0.0.1", follower.port, connection_attempts=1)
    # pika reports a close during the handshake as a refused vhost, with the broker's words
    with pytest.raises(pika.exceptions.ProbableAccessDeniedError) as err:
        pika.BlockingConnection(params)
    assert "(530) 'NOT_ALLOWED - not the leader" in str(err.value)
    assert f"127.0.0.1:{leader.port}" in str(err.value)


def test_refusal_amqp10_redirects_to_the_leader(refusing: tuple[Serve, Serve]) -> None:
    leader, follower = refusing
    with pytest.raises(ConnectionException) as err:
        BlockingConnection(f"amqp://guest:guest@127.0.0.1:{follower.port}", timeout=10)
    cond = err.value.args[0]
    assert "amqp:connection:redirect" in str(cond)
    assert f"127.0.0.1:{leader.port}" in str(cond)


def test_refusal_amqp10_redirect_info_names_the_leader(refusing: tuple[Serve, Serve]) -> None:
    leader, follower = refusing
    with socket.create_connection(("127.0.0.1", follower.port), timeout=10) as s:
        s.sendall(b"AMQP\x00\x01\x00\x00")
        got = b""
        while True:  # until the follower closes (it does after the close frame)
            chunk = s.recv(4096)
            if not chunk:
                break
            got += chunk
    assert got.startswith(b"AMQP\x00\x01\x00\x00")
    assert b"amqp:connection:redirect" in got
    assert b"network-host" in got
    assert leader.port.to_bytes(4, "big") in got  # the port, a uint


class _Errors(stomp.ConnectionListener):  # type: ignore[misc]
    def __init__(self) -> None:
        self.errors: queue.Queue[Any] = queue.Queue()

    def on_error(self, frame: Any) -> None:
        self.errors.put(frame)


def test_refusal_stomp_error_names_the_leader(refusing: tuple[Serve, Serve]) -> None:
    leader, follower = refusing
    assert follower.stomp_port is not None
    conn = stomp.Connection12([("127.0.0.1", follower.stomp_port)], reconnect_attempts_max=1)
    errors = _Errors()
    conn.set_listener("errors", errors)
    with pytest.raises(stomp.exception.ConnectFailedException):
        conn.connect("guest", "guest", wait=True)
    frame = errors.errors.get(timeout=10)
    assert f"127.0.0.1:{leader.stomp_port}" in frame.headers["message"]


def test_refusal_mqtt5_says_use_another_server(refusing: tuple[Serve, Serve]) -> None:
    _leader, follower = refusing
    assert follower.mqtt_port is not None
    client = Paho(follower.mqtt_port, "refused-v5", v5=True)
    try:
        assert client.refused
        assert client.connack.value == 0x9C  # use another server
    finally:
        client.disconnect()


def test_refusal_mqtt311_is_refused(refusing: tuple[Serve, Serve]) -> None:
    _leader, follower = refusing
    assert follower.mqtt_port is not None
    client = Paho(follower.mqtt_port, "refused-v3")
    try:
        assert client.refused
    finally:
        client.disconnect()


def test_refusal_http_redirects_to_the_leader(refusing: tuple[Serve, Serve]) -> None:
    leader, follower = refusing
    assert follower.http_port is not None
    req = urllib.request.Request(f"http://127.0.0.1:{follower.http_port}/api/overview")
    opener = urllib.request.build_opener(_NoRedirect)
    with pytest.raises(urllib.error.HTTPError) as err:
        opener.open(req, timeout=10)
    err.value.close()
    assert err.value.code == 307
    assert err.value.headers["Location"] == (f"http://127.0.0.1:{leader.http_port}/api/overview")


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args: Any, **kwargs: Any) -> None:
        return None


def test_a_leader_change_closes_relays_and_new_clients_follow_it(
    broker_factory: BrokerFactory,
) -> None:
    # in-process nodes, so the test can tell the follower's provider that the leader changed
    leader = broker_factory(TRUST_LOOPBACK)
    provider = StaticLeader(LeaderAddresses("leader", "127.0.0.1", amqp_port=leader.port))
    follower = broker_factory(leader=provider)
    relayed = pika.BlockingConnection(pika.ConnectionParameters("127.0.0.1", follower.port))
    relayed.channel().queue_declare("only-on-the-old-leader")
    follower.call(lambda: provider.set(None))  # this node leads now
    with pytest.raises(pika.exceptions.AMQPConnectionError):
        drain_until_closed(relayed)
    # a new client is served by the follower itself, which has no such queue
    direct = pika.BlockingConnection(pika.ConnectionParameters("127.0.0.1", follower.port))
    try:
        with pytest.raises(pika.exceptions.ChannelClosedByBroker) as err:
            direct.channel().queue_declare("only-on-the-old-leader", passive=True)
        assert err.value.reply_code == 404
    finally:
        direct.close()


def open_properties(port: int) -> dict[Any, Any]:
    c = BlockingConnection(f"amqp://guest:guest@127.0.0.1:{port}", timeout=10)
    try:
        assert c.conn is not None
        return dict(c.conn.remote_properties or {})
    finally:
        c.close()


def test_amqp10_open_lists_the_cluster_nodes_for_failover(broker_factory: BrokerFactory) -> None:
    node = broker_factory(
        "[[cluster.nodes]]\n"
        'name = "a"\nhost = "10.0.0.1"\namqp_port = 5672\n'
        "[[cluster.nodes]]\n"
        'name = "b"\nhost = "10.0.0.2"\namqp_port = 5673\n'
    )
    servers = open_properties(node.port)["failover-server-list"]
    assert [(s["network-host"], s["port"]) for s in servers] == [
        ("10.0.0.1", 5672),
        ("10.0.0.2", 5673),
    ]


def test_a_single_node_open_has_no_failover_list(broker_factory: BrokerFactory) -> None:
    props = open_properties(broker_factory().port)
    assert "failover-server-list" not in props
    assert props["product"] == "ringmq"


def test_amqps_ends_at_the_follower_and_is_relayed_in_clear(
    broker_factory: BrokerFactory, tmp_path: Path
) -> None:
    leader = broker_factory(TRUST_LOOPBACK)
    cert, key = _self_signed(tmp_path)
    provider = StaticLeader(LeaderAddresses("leader", "127.0.0.1", amqp_port=leader.port))
    follower = broker_factory(
        f'[tls]\ncert_file = "{cert}"\nkey_file = "{key}"\nport = 0\n', leader=provider
    )
    ctx = ssl.create_default_context(cafile=str(cert))
    params = pika.ConnectionParameters(
        "127.0.0.1", follower.server.amqps_port, ssl_options=pika.SSLOptions(ctx)
    )
    with pika.BlockingConnection(params) as conn:
        ch = conn.channel()
        ch.queue_declare("secure-via-follower")
        ch.basic_publish("", "secure-via-follower", b"tls")
        assert ch.basic_get("secure-via-follower", auto_ack=True)[2] == b"tls"
        client_port = pika_local_port(conn)
        peers = {c.peer_port for c in leader.call(leader.server.connections)}
        assert client_port in peers
    assert "secure-via-follower" not in {
        q.name for q in follower.call(lambda: admin_of(follower).queues("/"))
    }
