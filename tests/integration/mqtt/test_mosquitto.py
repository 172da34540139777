"""Debian's mosquitto_pub / mosquitto_sub as a second MQTT client (3.1.1 and 5)."""

from __future__ import annotations

import shutil
import subprocess

import pytest

from ringmq.node import BrokerThread
from tests.integration.conftest import wait_until

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(
        shutil.which("mosquitto_sub") is None or shutil.which("mosquitto_pub") is None,
        reason="mosquitto_pub/mosquitto_sub not installed (Debian package mosquitto-clients)",
    ),
]


def _base(b: BrokerThread, version: str) -> list[str]:
    port = str(b.port_of("mqtt"))
    return ["-h", "127.0.0.1", "-p", port, "-u", "guest", "-P", "guest", "-V", version]


@pytest.mark.parametrize("version", ["mqttv311", "5"])
@pytest.mark.parametrize("qos", ["0", "1", "2"])
def test_mosquitto_pub_to_mosquitto_sub(broker: BrokerThread, version: str, qos: str) -> None:
    base = _base(broker, version)
    sub = subprocess.Popen(
        ["mosquitto_sub", *base, "-i", "msub", "-t", "m/#", "-q", qos, "-C", "2", "-v"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        wait_until(lambda: _subscribed(broker, "msub", qos))
        for i in (1, 2):
            subprocess.run(
                [
                    "mosquitto_pub",
                    *base,
                    "-i",
                    "mpub",
                    "-t",
                    f"m/{i}",
                    "-m",
                    f"hello {i}",
                    "-q",
                    qos,
                ],
                check=True,
                timeout=10,
            )
        out, err = sub.communicate(timeout=10)
    finally:
        if sub.poll() is None:
            sub.kill()
            sub.communicate()
    assert sub.returncode == 0, err
    assert out.splitlines() == ["m/1 hello 1", "m/2 hello 2"]


def test_mosquitto_sub_reads_a_retained_message(broker: BrokerThread) -> None:
    base = _base(broker, "mqttv311")
    subprocess.run(
        ["mosquitto_pub", *base, "-t", "cfg/x", "-m", "v1", "-r", "-q", "1"], check=True, timeout=10
    )
    done = subprocess.run(
        ["mosquitto_sub", *base, "-t", "cfg/#", "-C", "1", "-v", "-W", "5"],
        capture_output=True,
        text=True,
        timeout=10,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == ["cfg/x v1"]


def test_bad_password_is_refused(broker: BrokerThread) -> None:
    bad = [*_base(broker, "mqttv311")[:-3], "nope"]  # password "nope", version default
    done = subprocess.run(
        ["mosquitto_pub", *bad, "-t", "t", "-m", "x"],
        capture_output=True,
        text=True,
        timeout=10,
        check=False,
    )
    assert done.returncode != 0
    assert "not authorised" in done.stderr.lower() or "bad user" in done.stderr.lower()


def _subscribed(b: BrokerThread, client_id: str, qos: str) -> bool:
    # The subscriber's queue is bound to amq.topic: publishing now reaches it.
    name = f"mqtt-subscription-{client_id}qos{min(int(qos), 1)}"

    def bound() -> bool:
        vh = b.broker.vhosts["/"]
        return name in vh.queues and bool(vh.bindings_to(("q", name)))

    return b.call(bound)
