"""Anonymous clients (no user name in CONNECT) log in as the broker's anonymous login.

RabbitMQ 4's `anonymous_login_user` / `anonymous_login_pass` (guest/guest by default, so only
from loopback), one setting (`[auth]`) for MQTT, AMQP 1.0 and STOMP, as docs/mqtt.md says.
"""

from __future__ import annotations

import shutil
import socket
import subprocess

import pytest

from ringmq.node import BrokerThread
from tests.integration.conftest import BrokerFactory, wait_until
from tests.integration.mqtt.conftest import MakePaho
from tests.integration.mqtt.test_mosquitto import _subscribed

pytestmark = pytest.mark.integration

APP = """
[auth]
anonymous_login_user = "app"
anonymous_login_pass = "app-secret"

[[users]]
name = "app"
password = "app-secret"

[[permissions]]
user = "app"
vhost = "/"
"""
OFF = '[auth]\nanonymous_login_user = "off"\n'


def _users(b: BrokerThread) -> list[tuple[str, str]]:
    return [(c.protocol, c.user) for c in b.server.connections()]


@pytest.mark.parametrize("v5", [False, True])
def test_paho_without_user_name_logs_in_as_guest(
    broker: BrokerThread, paho: MakePaho, v5: bool
) -> None:
    sub = paho(broker, "anon-sub", user=None, v5=v5)
    assert not sub.refused, sub.connack
    sub.subscribe("anon/#", qos=1)
    pub = paho(broker, "anon-pub", user=None, v5=v5)
    pub.client.publish("anon/t", b"hello", qos=1).wait_for_publish(10)
    assert sub.messages.get(timeout=10).payload == b"hello"
    assert {user for _proto, user in _users(broker)} == {"guest"}


def test_the_setting_names_another_user(broker_factory: BrokerFactory, paho: MakePaho) -> None:
    b = broker_factory(APP)
    c = paho(b, "anon-app", user=None)
    assert not c.refused, c.connack
    assert [user for _proto, user in _users(b)] == ["app"]


@pytest.mark.parametrize("v5", [False, True])
def test_off_refuses_anonymous_clients(
    broker_factory: BrokerFactory, paho: MakePaho, v5: bool
) -> None:
    b = broker_factory(OFF)
    c = paho(b, "anon-off", user=None, v5=v5)
    assert c.refused
    # 3.1.1: return code 4, bad user name or password; 5.0: 0x86, the same
    assert c.connack.value in (4, 0x86)
    ok = paho(b, "named", v5=v5)  # a user name still logs in
    assert not ok.refused


def test_stomp_without_login_uses_the_same_setting(broker_factory: BrokerFactory) -> None:
    for config, want in ((APP, b"user-name:app"), (OFF, b"anonymous logins are off")):
        b = broker_factory(config)
        with socket.create_connection(("127.0.0.1", b.port_of("stomp")), timeout=10) as s:
            s.sendall(b"CONNECT\naccept-version:1.2\nhost:/\n\n\x00")
            got = b""
            while b"\x00" not in got:
                chunk = s.recv(4096)
                if not chunk:
                    break
                got += chunk
        assert want in got, got


@pytest.mark.skipif(
    shutil.which("mosquitto_pub") is None or shutil.which("mosquitto_sub") is None,
    reason="mosquitto_pub/mosquitto_sub not installed (Debian package mosquitto-clients)",
)
def test_mosquitto_pub_without_u(broker: BrokerThread) -> None:
    base = ["-h", "127.0.0.1", "-p", str(broker.port_of("mqtt"))]
    sub = subprocess.Popen(
        ["mosquitto_sub", *base, "-i", "anon-msub", "-t", "t", "-q", "1", "-C", "1"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        wait_until(lambda: _subscribed(broker, "anon-msub", "1"), timeout=10)
        subprocess.run(
            ["mosquitto_pub", *base, "-t", "t", "-m", "hello", "-q", "1"], check=True, timeout=10
        )
        out, err = sub.communicate(timeout=10)
    finally:
        if sub.poll() is None:
            sub.kill()
            sub.communicate()
    assert sub.returncode == 0, err
    assert out.strip() == "hello"
