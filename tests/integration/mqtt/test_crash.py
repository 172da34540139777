"""SIGKILL a `ringmq serve` right after MQTT QoS 1 and QoS 2 publishes were acknowledged:
after the restart, every one of them is in the offline persistent session, and the retained
message is still retained."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.integration.mqtt.conftest import MakePaho
from tests.serve import Serve

pytestmark = [
    pytest.mark.integration,
    # paho's sockets to the killed broker are left for the garbage collector
    pytest.mark.filterwarnings("ignore::ResourceWarning"),
    pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning"),
]

N = 100


def test_acknowledged_qos1_and_qos2_publishes_survive_sigkill(
    tmp_path: Path, paho: MakePaho
) -> None:
    data = tmp_path / "data"
    first = Serve(data, tmp_path / "first.log", mqtt=True)
    try:
        assert first.mqtt_port is not None
        dev = paho(first.mqtt_port, "dev", clean=False)
        dev.subscribe("crash/#", 2)
        dev.disconnect()
        pub = paho(first.mqtt_port, "pub")
        sent = [pub.client.publish(f"crash/{i % 2 + 1}", b"%d" % i, 1 + i % 2) for i in range(N)]
        for info in sent:
            info.wait_for_publish(5)  # PUBACK / PUBCOMP: acknowledged
            assert info.is_published()
        pub.publish("state/last", b"retained", 1, retain=True)
    finally:
        first.kill()
    pub.drop()
    second = Serve(data, tmp_path / "second.log", mqtt=True)
    try:
        assert second.mqtt_port is not None
        again = paho(second.mqtt_port, "dev", clean=False)
        assert again.session_present
        got = [again.get() for _ in range(N)]
        assert sorted(int(m.payload) for m in got) == list(range(N))
        assert {m.qos for m in got} == {1, 2}
        again.subscribe("state/#", 1)
        m = again.get()
        assert (m.topic, m.payload, m.retain) == ("state/last", b"retained", True)
        again.disconnect()
    finally:
        second.stop()
