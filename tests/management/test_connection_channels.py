"""A STOMP or MQTT connection shows as many channels in /api/connections as /api/channels
lists for it (issue 30: the console showed 1 and 2)."""

from __future__ import annotations

import socket
from collections.abc import Iterator
from pathlib import Path

import httpx
import paho.mqtt.client as mqtt
import pytest
from paho.mqtt.enums import CallbackAPIVersion

from ringmq.node import BrokerThread
from ringmq.server.runtime import ServerOptions
from tests.integration.conftest import wait_until

pytestmark = pytest.mark.integration


@pytest.fixture
def live(tmp_path: Path) -> Iterator[BrokerThread]:
    b = BrokerThread(
        ServerOptions(
            host="127.0.0.1",
            amqp_port=0,
            http_port=0,
            stomp_port=0,
            mqtt_port=0,
            data_dir=tmp_path / "d",
        )
    )
    b.start()
    yield b
    b.stop()


def _counts(b: BrokerThread, protocol: str) -> tuple[int, int]:
    with httpx.Client(
        base_url=f"http://127.0.0.1:{b.server.http_port}/api", auth=("guest", "guest")
    ) as api:
        (conn,) = [c for c in api.get("/connections").json() if c["protocol"].startswith(protocol)]
        listed = [
            ch
            for ch in api.get("/channels").json()
            if ch["connection_details"]["name"] == conn["name"]
        ]
        one = api.get(f"/connections/{conn['name']}").json()
        assert one["channels"] == conn["channels"]
    return conn["channels"], len(listed)


def test_mqtt_connection_channels_match_the_channel_list(live: BrokerThread) -> None:
    c = mqtt.Client(CallbackAPIVersion.VERSION2, client_id="chans")
    c.username_pw_set("guest", "guest")
    c.connect("127.0.0.1", live.port_of("mqtt"))
    c.loop_start()
    try:
        wait_until(lambda: any(i.protocol.startswith("MQTT") for i in live.server.connections()))
        shown, listed = _counts(live, "MQTT")
        assert listed >= 1
        assert shown == listed
    finally:
        c.disconnect()
        c.loop_stop()


def test_stomp_connection_channels_match_the_channel_list(live: BrokerThread) -> None:
    with socket.create_connection(("127.0.0.1", live.port_of("stomp")), timeout=10) as s:
        s.sendall(b"CONNECT\naccept-version:1.2\nhost:/\nlogin:guest\npasscode:guest\n\n\x00")
        assert s.recv(4096).startswith(b"CONNECTED")
        s.sendall(b"SUBSCRIBE\nid:1\ndestination:/queue/chans\n\n\x00")
        wait_until(lambda: any(i.protocol.startswith("STOMP") for i in live.server.connections()))
        shown, listed = _counts(live, "STOMP")
        assert listed >= 1
        assert shown == listed
