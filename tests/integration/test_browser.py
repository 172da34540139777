"""A browser talks to ringmq over WebSockets (issue 29): headless Chromium loads a page served
here on loopback (tests/integration/browser/page.html) that runs the npm registry's browser
builds of `@stomp/stompjs` and `mqtt` (MQTT.js) against the Web STOMP and Web MQTT listeners,
and pika exchanges messages with it both ways.

Needs Debian's `chromium` and `chromium-driver`, the `selenium` Python package and
tests/integration/browser/node_modules (`make install` or `.ci/run` runs `npm ci` there);
skipped with the reason when any is missing.
"""

from __future__ import annotations

import functools
import threading
import time
from collections.abc import Iterator
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pika
import pytest

from ringmq.node import BrokerThread
from tests.integration.conftest import BrokerFactory
from tests.management.test_console import _missing, headless_chromium

pytestmark = pytest.mark.integration
PAGE_DIR = Path(__file__).resolve().parent / "browser"
BUNDLES = (
    "node_modules/@stomp/stompjs/bundles/stomp.umd.min.js",
    "node_modules/mqtt/dist/mqtt.min.js",
)
TIMEOUT_S = 20.0


def _missing_bundle() -> str | None:
    for bundle in BUNDLES:
        if not (PAGE_DIR / bundle).exists():
            return f"{PAGE_DIR / bundle} not found (`npm ci` in {PAGE_DIR}; `make install` does it)"
    return None


class _Quiet(SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        pass


@pytest.fixture
def page_url() -> Iterator[str]:
    """The page's folder served on loopback (http://, as a web application's would be)."""
    server = ThreadingHTTPServer(
        ("127.0.0.1", 0), functools.partial(_Quiet, directory=str(PAGE_DIR))
    )
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}/page.html"
    server.shutdown()
    server.server_close()


@pytest.fixture
def chromium() -> Iterator[Any]:
    reason = _missing() or _missing_bundle()
    if reason is not None:
        pytest.skip(reason)
    with headless_chromium(TIMEOUT_S) as d:
        yield d


def _state(driver: Any) -> dict[str, Any]:
    state: dict[str, Any] = driver.execute_script("return window.ringmq || {};")
    assert not state.get("errors"), (state["errors"], driver.get_log("browser"))
    return state


def _until(driver: Any, key: str) -> Any:
    deadline = time.monotonic() + TIMEOUT_S
    while time.monotonic() < deadline:
        value = _state(driver).get(key)
        if value:
            return value
        time.sleep(0.1)
    raise AssertionError(f"the page never set {key}: {driver.get_log('browser')}")


def _get(channel: Any, queue: str) -> bytes:
    deadline = time.monotonic() + TIMEOUT_S
    while time.monotonic() < deadline:
        _method, _props, body = channel.basic_get(queue, auto_ack=True)
        if body is not None:
            return bytes(body)
        time.sleep(0.1)
    raise AssertionError(f"nothing reached {queue}")


def test_browser_stompjs_and_mqttjs_meet_pika(
    broker_factory: BrokerFactory, page_url: str, chromium: Any
) -> None:
    b: BrokerThread = broker_factory(web_stomp_port=0, web_mqtt_port=0)
    with pika.BlockingConnection(pika.ConnectionParameters("127.0.0.1", b.port)) as conn:
        ch = conn.channel()
        for q in ("browser-stomp-in", "browser-stomp-out", "browser-mqtt-out"):
            ch.queue_declare(q)
        ch.queue_bind("browser-mqtt-out", "amq.topic", "browser.mqtt.out")
        ch.basic_publish("", "browser-stomp-in", b"from pika to stompjs")

        chromium.get(f"{page_url}?stomp={b.port_of('web-stomp')}&mqtt={b.port_of('web-mqtt')}")
        _until(chromium, "mqttSubscribed")
        ch.basic_publish("amq.topic", "browser.mqtt.in", b"from pika to mqtt.js")

        assert _until(chromium, "stomp") == "from pika to stompjs"
        assert _until(chromium, "mqtt") == "from pika to mqtt.js"
        assert _get(ch, "browser-stomp-out") == b"from stompjs"
        assert _get(ch, "browser-mqtt-out") == b"from mqtt.js"
        protocols = {c.protocol for c in b.call(b.server.connections)}
        assert {"Web STOMP 1.2", "Web MQTT 3.1.1"} <= protocols, protocols
