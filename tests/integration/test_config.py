"""Configuration files over the wire: TOML users/vhosts/permissions/declarations, Artemis
broker.xml addresses and address-settings (with reload), limits, heartbeats, TLS, `ringmq serve`."""

from __future__ import annotations

import os
import re
import shutil
import signal
import socket
import ssl
import struct
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pika
import pika.exceptions
import pytest

from ringmq.node import BrokerThread
from ringmq.server.configfile import load_config
from tests.facade import admin_of
from tests.integration.conftest import BrokerFactory, wait_until
from tests.integration.test_errors import _frame, _recv_frame, _shortstr

pytestmark = pytest.mark.integration

TOML = r"""
[limits]
max_message_size = 4096

[[users]]
name = "alice"
password = "wonderland"
tags = ["administrator"]

[[users]]
name = "guest"
password = "guest"

[[vhosts]]
name = "prod"

[[permissions]]
user = "alice"
vhost = "prod"
configure = "^alice\\."
write = ".*"
read = ".*"

[[permissions]]
user = "guest"
vhost = "/"

[[exchanges]]
name = "orders"
vhost = "prod"
type = "topic"

[[queues]]
name = "alice.orders"
vhost = "prod"
arguments = { "x-max-length" = 2 }

[[bindings]]
vhost = "prod"
source = "orders"
destination = "alice.orders"
routing_key = "order.#"

[[policies]]
name = "small"
vhost = "/"
pattern = "^small\\."
apply_to = "queues"
definition = { max-length = 1 }
"""


def params(b: BrokerThread, user: str = "guest", pw: str = "guest", vhost: str = "/") -> Any:
    return pika.ConnectionParameters(
        host=b.host, port=b.port, virtual_host=vhost, credentials=pika.PlainCredentials(user, pw)
    )


def test_toml_users_vhosts_permissions_and_declarations(broker_factory: BrokerFactory) -> None:
    b = broker_factory(TOML)
    with pika.BlockingConnection(params(b, "alice", "wonderland", "prod")) as conn:
        ch = conn.channel()
        # declared from the file, bound to the topic exchange, x-max-length 2
        for i in range(3):
            ch.basic_publish("orders", "order.new", str(i).encode())
        assert ch.queue_declare("alice.orders", passive=True).method.message_count == 2
        ch.queue_declare("alice.mine")  # configure permission matches ^alice\.
        with pytest.raises(pika.exceptions.ChannelClosedByBroker) as exc:
            ch.queue_declare("bob.q")
        assert exc.value.reply_code == 403
    # guest has no permission on prod
    with pytest.raises(pika.exceptions.ProbableAccessDeniedError, match="530"):
        pika.BlockingConnection(params(b, vhost="prod"))
    # policy from the file applies to queues declared later
    with pika.BlockingConnection(params(b)) as conn:
        ch = conn.channel()
        ch.queue_declare("small.q")
        ch.basic_publish("", "small.q", b"1")
        ch.basic_publish("", "small.q", b"2")
        assert ch.basic_get("small.q", auto_ack=True)[2] == b"2"
        # max_message_size from [limits]
        ch.queue_declare("sized")
        ch.basic_publish("", "sized", b"x" * 4096)
        ch.basic_publish("", "sized", b"x" * 4097)
        with pytest.raises(pika.exceptions.ChannelClosedByBroker) as exc:
            ch.queue_declare("sized", passive=True)
        assert exc.value.reply_code == 406


BROKER_XML = """<?xml version="1.0" encoding="UTF-8"?>
<configuration xmlns="urn:activemq">
  <core xmlns="urn:activemq:core">
    <configuration-file-refresh-period>{period}</configuration-file-refresh-period>
    <address-settings>
      <address-setting match="ring.#">
        <default-ring-size>{ring}</default-ring-size>
      </address-setting>
    </address-settings>
    <addresses>
      <address name="myRing">
        <anycast><queue name="myRing" ring-size="3"/></anycast>
      </address>
      <address name="ring.auto">
        <anycast><queue name="ring.auto"/></anycast>
      </address>
      <address name="news">
        <multicast>
          <queue name="news.a"/>
          <queue name="news.b" ring-size="1"/>
        </multicast>
      </address>
      {extra}
    </addresses>
  </core>
</configuration>
"""


def _write_xml(path: Path, *, ring: int, period: int = 100, extra: str = "") -> None:
    path.write_text(BROKER_XML.format(ring=ring, period=period, extra=extra))


def test_artemis_broker_xml(broker_factory: BrokerFactory, tmp_path: Path) -> None:
    xml = tmp_path / "broker.xml"
    _write_xml(xml, ring=2, period=0)
    b = broker_factory(load_config(xml))
    with pika.BlockingConnection(params(b)) as conn:
        ch = conn.channel()
        for body in (b"A", b"B", b"C", b"D"):
            ch.basic_publish("", "myRing", body)  # anycast: the default exchange
            ch.basic_publish("", "ring.auto", body)  # default-ring-size 2 from ring.#
            ch.basic_publish("news", "", body)  # multicast: a fanout exchange
        assert ch.queue_declare("myRing", passive=True).method.message_count == 3
        assert ch.queue_declare("ring.auto", passive=True).method.message_count == 2
        assert ch.queue_declare("news.a", passive=True).method.message_count == 4
        assert ch.queue_declare("news.b", passive=True).method.message_count == 1
        # a client-declared queue on a matching address gets the default too
        ch.queue_declare("ring.client")
        for body in (b"1", b"2", b"3"):
            ch.basic_publish("", "ring.client", body)
        assert ch.queue_declare("ring.client", passive=True).method.message_count == 2


def test_artemis_address_settings_reload(broker_factory: BrokerFactory, tmp_path: Path) -> None:
    xml = tmp_path / "broker.xml"
    _write_xml(xml, ring=2)
    b = broker_factory(load_config(xml))

    def ring_size(name: str) -> int:
        return b.call(lambda: admin_of(b).queue("/", name)).ring_size

    assert ring_size("ring.auto") == 2
    extra = '<address name="ring.late"><anycast><queue name="ring.late"/></anycast></address>'
    _write_xml(xml, ring=5, extra=extra)
    future = time.time() + 5  # a distinct mtime even on coarse file systems
    os.utime(xml, (future, future))
    wait_until(lambda: ring_size("ring.auto") == 5)
    assert ring_size("ring.late") == 5  # addresses added to the file are declared
    # an invalid file is refused and the running settings stay
    xml.write_text("<configuration><core><address-settings>")
    os.utime(xml, (future + 5, future + 5))
    time.sleep(0.3)
    assert ring_size("ring.auto") == 5
    assert b.server.reload_config() is False


def test_server_heartbeats_and_missed_heartbeats(broker_factory: BrokerFactory) -> None:
    b = broker_factory("[limits]\nheartbeat_s = 1\n")
    with socket.create_connection((b.host, b.port), timeout=10) as s:
        s.sendall(b"AMQP\x00\x00\x09\x01")
        _recv_frame(s)
        start_ok = (
            struct.pack(">HH", 10, 11)
            + struct.pack(">I", 0)
            + _shortstr("PLAIN")
            + struct.pack(">I", 12)
            + b"\x00guest\x00guest"
            + _shortstr("en_US")
        )
        s.sendall(_frame(1, 0, start_ok))
        tune = _recv_frame(s)[2]
        assert struct.unpack(">H", tune[-2:])[0] == 1  # heartbeat offered
        s.sendall(_frame(1, 0, struct.pack(">HHHIH", 10, 31, 2047, 131072, 1)))
        s.sendall(_frame(1, 0, struct.pack(">HH", 10, 40) + _shortstr("/") + b"\x00\x00"))
        _recv_frame(s)  # open-ok
        # stay silent: the server sends heartbeats, then gives up after two missed intervals
        heartbeats = 0
        while True:
            try:
                ftype, _, _ = _recv_frame(s)
            except (ConnectionError, OSError):
                break
            if ftype == 8:
                heartbeats += 1
        assert heartbeats >= 1
    with pika.BlockingConnection(params(b)) as conn:
        conn.channel()


def _self_signed(tmp_path: Path) -> tuple[Path, Path]:
    openssl = shutil.which("openssl")
    if openssl is None:
        pytest.skip("openssl CLI not available to make a test certificate")
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    subprocess.run(
        [
            openssl,
            "req",
            "-x509",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-keyout",
            str(key),
            "-out",
            str(cert),
            "-days",
            "1",
            "-subj",
            "/CN=localhost",
            "-addext",
            "subjectAltName=IP:127.0.0.1,DNS:localhost",
        ],
        check=True,
        capture_output=True,
        timeout=60,
    )
    return cert, key


def test_amqps(broker_factory: BrokerFactory, tmp_path: Path) -> None:
    cert, key = _self_signed(tmp_path)
    b = broker_factory(f'[tls]\ncert_file = "{cert}"\nkey_file = "{key}"\nport = 0\n')
    ctx = ssl.create_default_context(cafile=str(cert))
    p = pika.ConnectionParameters(
        host="127.0.0.1", port=b.server.amqps_port, ssl_options=pika.SSLOptions(ctx, "127.0.0.1")
    )
    with pika.BlockingConnection(p) as conn:
        ch = conn.channel()
        ch.queue_declare("secure")
        ch.basic_publish("", "secure", b"tls")
        assert ch.basic_get("secure", auto_ack=True)[2] == b"tls"
    # the plain listener keeps working beside it
    with pika.BlockingConnection(params(b)) as conn:
        assert conn.channel().queue_declare("secure", passive=True).method.message_count == 0


def test_ringmq_serve_cli_and_sigterm(tmp_path: Path) -> None:
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "ringmq",
            "serve",
            "--amqp-port",
            "0",
            "--http-port",
            "-1",
            "--stomp-port",
            "off",
            "--mqtt-port",
            "off",
            "--stream-port",
            "off",
            "--data-dir",
            str(tmp_path / "data"),
        ],
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stderr is not None
        port = None
        deadline = time.monotonic() + 30
        lines = []
        while port is None and time.monotonic() < deadline:
            line = proc.stderr.readline()
            if not line:
                break
            lines.append(line)
            if m := re.search(r"AMQP listening on 127\.0\.0\.1:(\d+)", line):
                port = int(m.group(1))
        assert port is not None, "".join(lines)
        conn = pika.BlockingConnection(pika.ConnectionParameters("127.0.0.1", port))
        ch = conn.channel()
        ch.queue_declare("cli")
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=20) == 0

        def drain_until_closed() -> None:
            for _ in range(100):
                conn.process_data_events(0.05)

        with pytest.raises(pika.exceptions.ConnectionClosedByBroker) as exc:
            drain_until_closed()
        assert exc.value.reply_code == 320
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        if proc.stderr is not None:
            proc.stderr.close()


def test_management_http_on_the_same_loop(broker_factory: BrokerFactory) -> None:
    httpx = pytest.importorskip("httpx")
    b = broker_factory(http_port=0)
    with pika.BlockingConnection(params(b)) as conn:
        conn.channel().queue_declare("visible")
        r = httpx.get(
            f"http://127.0.0.1:{b.server.http_port}/api/queues/%2F/visible",
            auth=("guest", "guest"),
            timeout=10,
        )
        assert r.status_code == 200
        assert r.json()["name"] == "visible"
        conns = httpx.get(
            f"http://127.0.0.1:{b.server.http_port}/api/connections",
            auth=("guest", "guest"),
            timeout=10,
        ).json()
        assert len(conns) == 1


BLOCK_TOML = """
[[address_settings]]
match = "blk"
address_full_policy = "BLOCK"
max_size_messages = 2
"""


def test_address_full_block_sends_connection_blocked(broker_factory: BrokerFactory) -> None:
    b = broker_factory(BLOCK_TOML)
    events: list[str] = []
    with (
        pika.BlockingConnection(params(b)) as pub,
        pika.BlockingConnection(params(b)) as cons,
    ):
        pub.add_on_connection_blocked_callback(lambda _c, m: events.append("blocked"))
        pub.add_on_connection_unblocked_callback(lambda _c, m: events.append("unblocked"))
        ch = pub.channel()
        ch.queue_declare("blk")
        for body in (b"1", b"2", b"3"):
            ch.basic_publish("", "blk", body)

        def seen(what: str) -> bool:
            pub.process_data_events(0.01)
            return what in events

        wait_until(lambda: seen("blocked"))
        # a consumer drains the queue: the address is no longer full, the publisher resumes
        cch = cons.channel()
        drained: list[bytes] = []
        while len(drained) < 3:
            m, _, body = cch.basic_get("blk", auto_ack=True)
            if m is not None:
                drained.append(body)
        wait_until(lambda: seen("unblocked") and events[-1] == "unblocked")
        # depending on how far the drain got when reading resumed, the third publish may have
        # filled the address again: blocked/unblocked always alternate and end unblocked
        assert events[0::2] == ["blocked"] * (len(events) // 2)
        assert events[1::2] == ["unblocked"] * (len(events) // 2)
        assert drained == [b"1", b"2", b"3"]
        ch.basic_publish("", "blk", b"after")  # read again: one message is below the limit
        wait_until(lambda: cch.queue_declare("blk", passive=True).method.message_count == 1)


def test_management_closes_a_connection_with_320(broker_factory: BrokerFactory) -> None:
    httpx = pytest.importorskip("httpx")
    from urllib.parse import quote

    b = broker_factory(http_port=0)
    base = f"http://127.0.0.1:{b.server.http_port}/api/connections"
    conn = pika.BlockingConnection(params(b))
    try:
        (info,) = httpx.get(base, auth=("guest", "guest"), timeout=10).json()
        r = httpx.delete(
            f"{base}/{quote(info['name'], safe='')}",
            auth=("guest", "guest"),
            headers={"X-Reason": "maintenance"},
            timeout=10,
        )
        assert r.status_code in {200, 204}

        def drain() -> None:
            for _ in range(100):
                conn.process_data_events(0.05)

        with pytest.raises(pika.exceptions.ConnectionClosedByBroker) as exc:
            drain()
        assert exc.value.reply_code == 320
    finally:
        if conn.is_open:
            conn.close()


def test_max_connections(broker_factory: BrokerFactory) -> None:
    b = broker_factory("[limits]\nmax_connections = 2\n")
    with (
        pika.BlockingConnection(params(b)),
        pika.BlockingConnection(params(b)),
        pytest.raises(pika.exceptions.AMQPConnectionError),
    ):
        pika.BlockingConnection(params(b))
    # the slots are free again once those two are gone
    wait_until(lambda: len(b.call(b.server.connections)) == 0)
    with pika.BlockingConnection(params(b)) as conn:
        conn.channel()
