"""TLS-only brokers (issue 16, 1.7): HTTPS management, listener addresses per protocol, and the
plain AMQP listener turned off."""

from __future__ import annotations

import socket
import ssl
from collections.abc import Iterator
from pathlib import Path

import httpx
import pika
import pytest

from ringmq.node import BrokerThread
from ringmq.server.configfile import ConfigError, parse_toml
from ringmq.server.runtime import options_from
from tests.integration.test_config import _self_signed

pytestmark = pytest.mark.integration

AMQPS_HOST = "127.0.0.2"
HTTPS_HOST = "127.0.0.3"


@pytest.fixture
def tls_only(tmp_path: Path) -> Iterator[tuple[BrokerThread, Path]]:
    cert, key = _self_signed(tmp_path)  # SAN 127.0.0.1 only: these tests connect by address
    config = parse_toml(
        f'[tls]\ncert_file = "{cert}"\nkey_file = "{key}"\nport = 0\nhttps = true\n'
        f'[server]\namqp_port = "off"\namqps_bind = "{AMQPS_HOST}"\n'
    )
    options = options_from(
        config,
        host="127.0.0.1",
        http_port=0,
        http_bind=HTTPS_HOST,
        data_dir=tmp_path / "data",
        stomp_port=-1,
        mqtt_port=-1,
        stream_port=-1,
    )
    b = BrokerThread(options)
    b.start()
    try:
        yield b, cert
    finally:
        b.stop()


def _client_context(cert: Path) -> ssl.SSLContext:
    ctx = ssl.create_default_context(cafile=str(cert))
    ctx.check_hostname = False  # the certificate names 127.0.0.1; the listeners are elsewhere
    return ctx


def test_management_is_served_over_https_verified_against_the_certificate(
    tls_only: tuple[BrokerThread, Path],
) -> None:
    b, cert = tls_only
    port = b.server.http_port
    with httpx.Client(verify=_client_context(cert)) as http:
        r = http.get(f"https://{HTTPS_HOST}:{port}/api/whoami", auth=("guest", "guest"))
    assert r.status_code == 200
    assert r.json()["name"] == "guest"
    # nothing answers in clear on that port
    with httpx.Client() as plain, pytest.raises(httpx.HTTPError):
        plain.get(f"http://{HTTPS_HOST}:{port}/api/whoami", auth=("guest", "guest"))
    listeners = {(lst.protocol, lst.ip_address) for lst in b.call(b.server.listeners)}
    assert listeners == {("amqp/ssl", AMQPS_HOST), ("https", HTTPS_HOST)}


def test_amqps_on_its_own_address_and_no_plain_listener(
    tls_only: tuple[BrokerThread, Path],
) -> None:
    b, cert = tls_only
    with pytest.raises(LookupError):
        _ = b.server.amqp_port  # no plain AMQP listener at all
    params = pika.ConnectionParameters(
        host=AMQPS_HOST,
        port=b.server.amqps_port,
        ssl_options=pika.SSLOptions(_client_context(cert)),
        heartbeat=0,
    )
    with pika.BlockingConnection(params) as conn:
        ch = conn.channel()
        ch.queue_declare("secure")
        ch.basic_publish("", "secure", b"tls")
        assert ch.basic_get("secure", auto_ack=True)[2] == b"tls"
    # the AMQPS listener is bound to its address only
    with pytest.raises(OSError), socket.create_connection(("127.0.0.1", b.server.amqps_port), 2):
        pass


def test_turning_the_plain_listener_off_needs_tls() -> None:
    with pytest.raises(ConfigError, match="tls"):
        options_from(parse_toml('[server]\namqp_port = "off"\n'))
    with pytest.raises(ConfigError, match="amqp_port"):
        parse_toml('[server]\namqp_port = "sometimes"\n')
