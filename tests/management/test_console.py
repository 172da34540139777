"""The web console in a real headless Chromium (Selenium) against a live broker.

Needs Debian's `chromium` and `chromium-driver` packages and the `selenium` Python package;
skipped with the reason when any is missing. Screenshots go to test-artifacts/console/.
"""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any
from urllib.parse import quote

import httpx
import pytest

from ringmq.node import BrokerThread
from ringmq.server.runtime import ServerOptions

pytestmark = [pytest.mark.slow, pytest.mark.integration]


def _first(names: tuple[str, ...], paths: tuple[str, ...]) -> str:
    # on PATH under any of its names, else where distributions put it off PATH
    found = [shutil.which(n) for n in names] + [p for p in paths if Path(p).exists()]
    return next((f for f in found if f), paths[0])


CHROMIUM = _first(("chromium", "chromium-browser"), ("/usr/bin/chromium",))
CHROMEDRIVER = _first(
    ("chromedriver",),
    (
        "/usr/bin/chromedriver",
        "/usr/lib/chromium/chromedriver",
        "/usr/lib/chromium-browser/chromedriver",
    ),
)
ARTIFACTS = Path(__file__).resolve().parents[2] / "test-artifacts" / "console"
WAIT_S = 15


def _missing() -> str | None:
    try:
        import selenium  # noqa: F401
    except ImportError:
        return "selenium is not installed (pip install selenium)"
    for path, pkg in ((CHROMIUM, "chromium"), (CHROMEDRIVER, "chromium-driver")):
        if not Path(path).exists():
            return f"{path} not found (apt-get install {pkg}; `make install` does as root)"
    return None


@contextmanager
def headless_chromium(page_load_timeout_s: float, *flags: str) -> Iterator[Any]:
    """A headless Debian Chromium under selenium (browser console logs kept), quit on exit;
    `flags` are added to the common ones. Callers skip first when `_missing()` says why."""
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    opts = webdriver.ChromeOptions()
    opts.binary_location = CHROMIUM
    for flag in (
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-dev-shm-usage",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--no-first-run",
        *flags,
    ):
        opts.add_argument(flag)
    opts.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    d = webdriver.Chrome(service=Service(CHROMEDRIVER), options=opts)
    try:
        d.set_page_load_timeout(page_load_timeout_s)
        yield d
    finally:
        d.quit()


@pytest.fixture(scope="module")
def live(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[BrokerThread, str]]:
    b = BrokerThread(
        ServerOptions(
            host="127.0.0.1",
            amqp_port=0,
            http_port=0,
            mqtt_port=0,
            data_dir=tmp_path_factory.mktemp("console-broker"),
        )
    )
    b.start()
    yield b, f"http://127.0.0.1:{b.server.http_port}"
    b.stop()


@pytest.fixture(scope="module")
def driver() -> Iterator[Any]:
    reason = _missing()
    if reason is not None:
        pytest.skip(reason)
    with headless_chromium(WAIT_S, "--window-size=1400,1000") as d:
        yield d


def _api(url: str) -> httpx.Client:
    return httpx.Client(base_url=url + "/api", auth=("guest", "guest"), verify=False, timeout=10)


def _wait(driver: Any, predicate: Any) -> Any:
    from selenium.common.exceptions import NoSuchElementException, StaleElementReferenceException
    from selenium.webdriver.support.ui import WebDriverWait

    # The console re-renders its tables every poll, so elements may go stale between lookups.
    ignored = (NoSuchElementException, StaleElementReferenceException)
    wait = WebDriverWait(driver, WAIT_S, poll_frequency=0.1, ignored_exceptions=ignored)
    return wait.until(predicate)


def _shot(driver: Any, name: str) -> None:
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    driver.save_screenshot(str(ARTIFACTS / f"{name}.png"))


def test_console_lists_purges_and_edits_ring_size(
    live: tuple[BrokerThread, str], driver: Any
) -> None:
    from selenium.webdriver.common.by import By

    _broker, url = live
    with _api(url) as api:
        api.put("/queues/%2F/orders", json={"arguments": {"x-max-length": 100}}).raise_for_status()
        api.put("/queues/%2F/ring.prices", json={"arguments": {"x-ring-size": 3}})
        for i in range(7):
            api.post(
                "/exchanges/%2F/amq.default/publish",
                json={"routing_key": "orders", "payload": f"order {i}"},
            ).raise_for_status()
        for p in ("A", "B", "C", "D"):
            api.post(
                "/exchanges/%2F/amq.default/publish",
                json={"routing_key": "ring.prices", "payload": p},
            )

        # sign in
        driver.get(url + "/")
        _wait(driver, lambda d: d.find_element(By.ID, "login").is_displayed())
        driver.find_element(By.ID, "login-password").send_keys("guest")
        driver.find_element(By.ID, "login-submit").click()
        _wait(driver, lambda d: d.find_element(By.ID, "whoami").text == "guest")
        _wait(driver, lambda d: d.find_element(By.ID, "ov-messages").text == "10")
        _shot(driver, "01-overview")

        # queues table with counts; filtering
        driver.get(url + "/#/queues")

        def row(name: str) -> Any:
            return driver.find_element(By.CSS_SELECTOR, f'tr[data-queue="{name}"]')

        def cell(name: str, col: str) -> str:
            text: str = row(name).find_element(By.CSS_SELECTOR, f'td[data-col="{col}"]').text
            return text

        _wait(driver, lambda d: cell("orders", "messages") == "7")
        _wait(driver, lambda d: cell("ring.prices", "messages") == "3")
        _wait(driver, lambda d: "ring 3" in cell("ring.prices", "features"))
        _shot(driver, "02-queues")
        driver.find_element(By.ID, "queue-filter").send_keys("ring")
        _wait(driver, lambda d: len(d.find_elements(By.CSS_SELECTOR, "tr[data-queue]")) == 1)
        driver.find_element(By.ID, "queue-filter").clear()

        # queue page: purge
        driver.get(url + "/#/queue/%2F/orders")
        _wait(driver, lambda d: d.find_element(By.ID, "q-messages").text == "7")
        driver.find_element(By.ID, "peek").click()
        _wait(driver, lambda d: len(d.find_elements(By.CSS_SELECTOR, "pre.peeked")) == 5)
        _wait(driver, lambda d: d.find_elements(By.CSS_SELECTOR, "pre.peeked")[0].text == "order 0")
        _shot(driver, "03-queue-peek")
        driver.find_element(By.ID, "purge").click()
        _wait(driver, lambda d: d.switch_to.alert).accept()
        _wait(driver, lambda d: d.find_element(By.ID, "q-messages").text == "0")
        assert api.get("/queues/%2F/orders").json()["messages"] == 0
        _shot(driver, "04-queue-purged")

        # queue page: edit the ring size (lowering it keeps the messages)
        driver.get(url + "/#/queue/%2F/ring.prices")
        _wait(driver, lambda d: d.find_element(By.ID, "q-ring-size").text == "3")
        box = driver.find_element(By.ID, "ring-size")
        _wait(driver, lambda d: box.get_attribute("value") == "3")
        box.clear()
        box.send_keys("2")
        driver.find_element(By.ID, "ring-size-save").click()
        _wait(driver, lambda d: d.find_element(By.ID, "q-ring-size").text == "2")
        q = api.get("/queues/%2F/ring.prices").json()
        assert (q["ring_size"], q["messages"]) == (2, 3)
        _wait(driver, lambda d: d.find_element(By.ID, "c-ring-evicted").text == "1")
        _shot(driver, "05-queue-ring-size")

        # exchanges and connections pages render
        driver.get(url + "/#/exchanges")
        _wait(driver, lambda d: "amq.topic" in d.find_element(By.ID, "x-table").text)
        _shot(driver, "06-exchanges")
        driver.get(url + "/#/connections")
        _wait(driver, lambda d: d.find_element(By.ID, "c-table").text != "")
        _shot(driver, "07-connections")

    # no script errors along the way (the 401 of the first, credential-less load is expected)
    errors = [
        e["message"]
        for e in driver.get_log("browser")
        if e["level"] == "SEVERE" and "401" not in e["message"]
    ]
    assert errors == []


def test_console_shows_who_is_blocked_and_why(driver: Any) -> None:
    """Connections page against the app over a real Broker and a runtime reporting a blocked
    connection (a memory alarm is hard to raise on demand on a live server)."""
    import threading
    import time

    import uvicorn
    from selenium.webdriver.common.by import By

    from ringmq.core.broker import Broker
    from ringmq.management.app import create_app
    from ringmq.management.port import ConnectionInfo

    from .conftest import T0_MS, FakeRuntime

    def conn(n: int, **kw: Any) -> ConnectionInfo:
        return ConnectionInfo(
            n,
            f"127.0.0.1:{50000 + n} -> 127.0.0.1:5672",
            "guest",
            "/",
            "127.0.0.1",
            50000 + n,
            "127.0.0.1",
            5672,
            T0_MS,
            channels=1,
            client_properties={"product": "pika", "version": "1.3.2"},
            **kw,
        )

    runtime = FakeRuntime(
        conns=[
            conn(1),
            conn(2, state="blocked", blocked_reason="memory alarm: 1.1 GiB used, watermark 1 GiB"),
        ]
    )
    server = uvicorn.Server(
        uvicorn.Config(
            create_app(Broker(), runtime),
            host="127.0.0.1",
            port=0,
            log_level="warning",
            lifespan="off",
        )
    )
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + WAIT_S
    while not server.started and time.monotonic() < deadline:
        time.sleep(0.02)
    assert server.started
    port = server.servers[0].sockets[0].getsockname()[1]
    try:
        driver.get(f"http://127.0.0.1:{port}/")
        driver.execute_script("sessionStorage.setItem('ringmq.auth', btoa('guest:guest'))")
        driver.get(f"http://127.0.0.1:{port}/#/connections")
        _wait(driver, lambda d: "memory alarm" in d.find_element(By.ID, "c-table").text)
        _wait(driver, lambda d: not d.find_element(By.ID, "login").is_displayed())
        _wait(driver, lambda d: d.find_element(By.ID, "whoami").text == "guest")
        text = driver.find_element(By.ID, "c-table").text
        assert "blocked" in text
        assert "running" in text
        _shot(driver, "08-connections-blocked")
        driver.get(f"http://127.0.0.1:{port}/#/overview")
        # labels are upper-cased by CSS, and Selenium reports rendered text
        _wait(driver, lambda d: "1\nBLOCKED" in d.find_element(By.ID, "ov-stats").text.upper())
    finally:
        server.should_exit = True
        thread.join(10)


def test_console_operator_pages(live: tuple[BrokerThread, str], driver: Any) -> None:
    """Feature tags, node figures, queue consumers/bindings/delete, peek in place with
    properties, the exchange page, the admin page and the client-provided connection name."""
    import pika
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import Select

    broker, url = live

    def text(d: Any, id_: str) -> str:
        return str(d.find_element(By.ID, id_).text)

    with _api(url) as api:
        api.put("/queues/%2F/lvq", json={"arguments": {"x-last-value-key": "sym"}})
        api.put(
            "/queues/%2F/capped", json={"arguments": {"x-max-length": 10, "x-message-ttl": 60000}}
        )
        api.put("/exchanges/%2F/prices", json={"type": "topic"}).raise_for_status()
        api.post("/bindings/%2F/e/prices/q/capped", json={"routing_key": "eu.#"})
        pub = {"routing_key": "lvq", "payload": "old", "properties": {"headers": {"sym": "A"}}}
        api.post("/exchanges/%2F/amq.default/publish", json=pub).raise_for_status()

        params = pika.ConnectionParameters(
            broker.host, broker.port, client_properties={"connection_name": "pricing-feed"}
        )
        conn = pika.BlockingConnection(params)
        try:
            conn.channel().basic_consume("capped", lambda *a: None, consumer_tag="feed-1")

            driver.get(url + "/")
            driver.execute_script("sessionStorage.setItem('ringmq.auth', btoa('guest:guest'))")
            # overview: node figures and alarms
            driver.get(url + "/#/overview")
            _wait(driver, lambda d: " of " in text(d, "ov-memory"))
            assert text(driver, "ov-alarms") == "none"
            assert "limit" in text(driver, "ov-disk")
            _shot(driver, "09-overview-node")

            # queues: the feature tags read the keys the API sends
            driver.get(url + "/#/queues")

            def features(name: str) -> str:
                sel = f'tr[data-queue="{name}"] td[data-col="features"]'
                return str(driver.find_element(By.CSS_SELECTOR, sel).text)

            _wait(driver, lambda d: "LVQ" in features("lvq"))
            _wait(driver, lambda d: "max-length" in features("capped"))
            assert "TTL" in features("capped")
            assert "ring" not in features("capped")

            # queue page: consumers, bindings, no ring size on a plain queue, overflow shown
            driver.get(url + "/#/queue/%2F/capped")
            _wait(driver, lambda d: "feed-1" in text(d, "q-consumers"))
            _wait(driver, lambda d: "eu.#" in text(d, "q-bindings"))
            assert driver.find_elements(By.ID, "q-ring-size") == []
            assert not driver.find_element(By.ID, "ring-editor").is_displayed()
            _wait(driver, lambda d: text(d, "q-overflow") == "drop-head")
            _shot(driver, "10-queue-consumers-bindings")

            # peek browses in place: the LVQ shows its newest value after an update
            driver.get(url + "/#/queue/%2F/lvq")
            _wait(driver, lambda d: text(d, "q-messages") == "1")
            driver.find_element(By.ID, "peek").click()
            _wait(driver, lambda d: d.find_element(By.CSS_SELECTOR, "pre.peeked").text == "old")
            assert "sym" in driver.find_element(By.CSS_SELECTOR, "dl.props").text
            q = api.get("/queues/%2F/lvq").json()
            assert (q["messages_ready"], q["messages_unacknowledged"]) == (1, 0)
            pub["payload"] = "new"
            api.post("/exchanges/%2F/amq.default/publish", json=pub).raise_for_status()
            driver.find_element(By.ID, "peek").click()
            _wait(driver, lambda d: d.find_element(By.CSS_SELECTOR, "pre.peeked").text == "new")
            got = api.post("/queues/%2F/lvq/get", json={"count": 1, "ackmode": "ack_requeue_false"})
            assert [(m["payload"], m["redelivered"]) for m in got.json()] == [("new", False)]
            _shot(driver, "11-queue-peek-properties")

            # exchange page: bindings, bind a queue, publish through it
            driver.get(url + "/#/exchange/%2F/prices")
            _wait(driver, lambda d: text(d, "x-type") == "topic")
            _wait(driver, lambda d: "capped" in text(d, "x-bindings-out"))
            driver.find_element(By.ID, "x-bind-queue").send_keys("lvq")
            driver.find_element(By.ID, "x-bind-key").send_keys("us.*")
            driver.find_element(By.ID, "x-bind").click()
            _wait(driver, lambda d: "us.*" in text(d, "x-bindings-out"))
            driver.find_element(By.ID, "x-publish-key").send_keys("eu.fr")
            driver.find_element(By.ID, "x-publish-payload").send_keys("bonjour")
            driver.find_element(By.ID, "x-publish").click()
            _wait(driver, lambda d: text(d, "x-publish-result") == "routed")
            _wait(driver, lambda d: api.get("/queues/%2F/capped").json()["messages"] == 1)
            _shot(driver, "12-exchange")

            # connections: the client-provided name and the protocol
            driver.get(url + "/#/connections")
            _wait(driver, lambda d: "pricing-feed" in text(d, "c-table"))
            _wait(driver, lambda d: "AMQP 0-9-1" in text(d, "c-table"))

            # admin: a vhost, a user, its permissions, a policy
            driver.get(url + "/#/admin")
            _wait(driver, lambda d: "guest" in text(d, "a-users"))
            driver.find_element(By.ID, "a-vhost-name").send_keys("staging")
            driver.find_element(By.ID, "a-vhost-add").click()
            _wait(driver, lambda d: "staging" in text(d, "a-vhosts"))
            driver.find_element(By.ID, "a-user-name").send_keys("ops")
            driver.find_element(By.ID, "a-user-password").send_keys("pw")
            driver.find_element(By.ID, "a-user-tags").send_keys("monitoring")
            driver.find_element(By.ID, "a-user-add").click()
            _wait(driver, lambda d: "ops" in text(d, "a-users"))
            driver.find_element(By.ID, "a-perm-user").send_keys("ops")
            box = driver.find_element(By.ID, "a-perm-vhost")
            box.clear()
            box.send_keys("staging")
            driver.find_element(By.ID, "a-perm-set").click()
            _wait(driver, lambda d: "staging" in text(d, "a-perms"))
            driver.find_element(By.ID, "a-pol-name").send_keys("rings")
            driver.find_element(By.ID, "a-pol-pattern").send_keys("^ring\\.")
            driver.find_element(By.ID, "a-pol-def").send_keys('{"ring-size": 3}')
            Select(driver.find_element(By.ID, "a-pol-apply")).select_by_visible_text("queues")
            driver.find_element(By.ID, "a-pol-set").click()
            _wait(driver, lambda d: "rings" in text(d, "a-policies"))
            _shot(driver, "13-admin")
            assert any(u["name"] == "ops" for u in api.get("/users").json())
            perms = [p for p in api.get("/permissions").json() if p["user"] == "ops"]
            assert [(p["vhost"], p["configure"]) for p in perms] == [("staging", ".*")]
            assert api.get("/policies/%2F/rings").json()["definition"] == {"ring-size": 3}
            driver.find_element(By.CSS_SELECTOR, '[data-clear-policy="rings"]').click()
            _wait(driver, lambda d: api.get("/policies/%2F/rings").status_code == 404)

            # delete a queue from its page
            driver.get(url + "/#/queue/%2F/lvq")
            _wait(driver, lambda d: text(d, "q-messages") == "0")
            driver.find_element(By.ID, "queue-delete").click()
            _wait(driver, lambda d: d.switch_to.alert).accept()
            _wait(driver, lambda d: d.current_url.endswith("#/queues"))
            assert api.get("/queues/%2F/lvq").status_code == 404
        finally:
            conn.close()

    errors = [
        e["message"]
        for e in driver.get_log("browser")
        if e["level"] == "SEVERE" and "401" not in e["message"] and "404" not in e["message"]
    ]
    assert errors == []


def test_console_newcomer_pages(
    live: tuple[BrokerThread, str], driver: Any, tmp_path: Path
) -> None:
    """Issue 30: no "Log out" before signing in, add an exchange, publish with a delivery mode
    and properties, get with an ack mode, readable limits, connection and channel pages (an
    MQTT connection's channel count agrees with its channel list), the vhost selector and
    definitions export/import."""
    import json

    import paho.mqtt.client as mqtt
    from paho.mqtt.enums import CallbackAPIVersion
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import Select

    broker, url = live

    def text(d: Any, id_: str) -> str:
        return str(d.find_element(By.ID, id_).text)

    with _api(url) as api:
        api.put("/queues/%2F/capped500", json={"arguments": {"x-max-length": 500}})
        api.put("/vhosts/nc-staging").raise_for_status()
        api.put(
            "/permissions/nc-staging/guest", json={"configure": ".*", "write": ".*", "read": ".*"}
        )
        api.put("/queues/nc-staging/st.only", json={}).raise_for_status()

        # the sign-in page offers no "Log out"
        driver.delete_all_cookies()
        driver.get(url + "/")
        driver.execute_script("sessionStorage.clear()")
        driver.get(url + "/#/overview")
        _wait(driver, lambda d: d.find_element(By.ID, "login").is_displayed())
        assert not driver.find_element(By.ID, "logout").is_displayed()
        _shot(driver, "14-sign-in")
        driver.find_element(By.ID, "login-password").send_keys("guest")
        driver.find_element(By.ID, "login-submit").click()
        _wait(driver, lambda d: d.find_element(By.ID, "logout").is_displayed())

        # add an exchange
        driver.get(url + "/#/exchanges")
        driver.find_element(By.ID, "new-x-name").send_keys("nc.events")
        Select(driver.find_element(By.ID, "new-x-type")).select_by_visible_text("topic")
        driver.find_element(By.ID, "new-x-add").click()
        _wait(driver, lambda d: "nc.events" in text(d, "x-table"))
        assert api.get("/exchanges/%2F/nc.events").json()["type"] == "topic"
        _shot(driver, "15-add-exchange")

        # the queue page: readable limit, publish with delivery mode and properties, get+ack
        driver.get(url + "/#/queue/%2F/capped500")
        _wait(
            driver,
            lambda d: (
                "at most 500 messages (RabbitMQ max-length); when full: drop the oldest"
                in text(d, "q-settings")
            ),
        )
        driver.find_element(By.ID, "publish-payload").send_keys("persisted")
        Select(driver.find_element(By.ID, "publish-mode")).select_by_value("2")
        driver.find_element(By.ID, "publish-props").send_keys('{"content_type": "text/plain"}')
        driver.find_element(By.ID, "publish").click()
        _wait(driver, lambda d: text(d, "q-messages") == "1")
        peeked = api.post("/queues/%2F/capped500/browse", json={"count": 1}).json()
        assert peeked[0]["properties"]["delivery_mode"] == 2
        assert peeked[0]["properties"]["content_type"] == "text/plain"
        Select(driver.find_element(By.ID, "get-ackmode")).select_by_value("ack_requeue_false")
        driver.find_element(By.ID, "peek").click()
        _wait(driver, lambda d: d.find_element(By.CSS_SELECTOR, "pre.peeked").text == "persisted")
        _wait(driver, lambda d: text(d, "q-messages") == "0")
        assert api.get("/queues/%2F/capped500").json()["messages"] == 0
        _shot(driver, "16-queue-get-ack-publish")

        # an MQTT connection: its page and one of its channels
        client = mqtt.Client(CallbackAPIVersion.VERSION2, client_id="nc-console")
        client.username_pw_set("guest", "guest")
        client.connect("127.0.0.1", broker.port_of("mqtt"))
        client.loop_start()
        try:
            client.subscribe("nc/#", qos=1)
            driver.get(url + "/#/connections")
            _wait(driver, lambda d: "MQTT" in text(d, "c-table"))
            conn = next(
                c for c in api.get("/connections").json() if c["protocol"].startswith("MQTT")
            )
            mine = [
                ch
                for ch in api.get("/channels").json()
                if ch["connection_details"]["name"] == conn["name"]
            ]
            driver.find_element(By.LINK_TEXT, conn["name"]).click()
            _wait(driver, lambda d: text(d, "conn-protocol").startswith("MQTT"))
            _wait(driver, lambda d: text(d, "conn-channel-count") == str(len(mine)))
            rows = driver.find_elements(By.CSS_SELECTOR, "#conn-channels tbody tr")
            assert len(rows) == len(mine) == conn["channels"]
            _wait(driver, lambda d: "/s" in text(d, "conn-recv-rate"))
            _shot(driver, "17-connection")
            with_consumer = next(ch for ch in mine if ch["consumer_count"])
            driver.get(url + "/#/channel/" + quote(with_consumer["name"], safe=""))
            _wait(driver, lambda d: text(d, "chan-consumer-count") == "1")
            _wait(driver, lambda d: "mqtt-subscription-nc-console" in text(d, "chan-consumers"))
            assert conn["name"] in text(driver, "chan-connection")
            _shot(driver, "18-channel")
        finally:
            client.disconnect()
            client.loop_stop()

        # the vhost selector: the queue list follows it
        driver.get(url + "/#/queues")
        _wait(driver, lambda d: d.find_elements(By.CSS_SELECTOR, 'tr[data-queue="capped500"]'))
        _wait(
            driver,
            lambda d: (
                "nc-staging"
                in [o.text for o in Select(d.find_element(By.ID, "vhost-select")).options]
            ),
        )
        Select(driver.find_element(By.ID, "vhost-select")).select_by_visible_text("nc-staging")
        _wait(
            driver,
            lambda d: (
                [
                    r.get_attribute("data-queue")
                    for r in d.find_elements(By.CSS_SELECTOR, "tr[data-queue]")
                ]
                == ["st.only"]
            ),
        )
        _shot(driver, "19-vhost-selector")
        Select(driver.find_element(By.ID, "vhost-select")).select_by_visible_text("all")

        # definitions: export shows what it wrote; import a file
        driver.get(url + "/#/definitions")
        driver.find_element(By.ID, "defs-export").click()
        _wait(driver, lambda d: "queues" in text(d, "defs-export-result"))
        doc = {
            "queues": [
                {
                    "name": "nc.imported",
                    "vhost": "/",
                    "durable": True,
                    "auto_delete": False,
                    "arguments": {},
                }
            ]
        }
        path = tmp_path / "defs.json"
        path.write_text(json.dumps(doc))
        driver.find_element(By.ID, "defs-file").send_keys(str(path))
        driver.find_element(By.ID, "defs-import").click()
        _wait(driver, lambda d: text(d, "defs-import-result") == "imported")
        assert api.get("/queues/%2F/nc.imported").status_code == 200
        _shot(driver, "20-definitions")


def test_console_queue_chart_starts_with_the_servers_history(
    live: tuple[BrokerThread, str], driver: Any
) -> None:
    """Issue 30: the queue page's chart draws the samples the server kept before it loaded."""
    import time

    from selenium.webdriver.common.by import By

    _, url = live
    with _api(url) as api:
        api.put("/queues/%2F/charted", json={}).raise_for_status()
        history = "/queues/%2F/charted?msg_rates_age=600&msg_rates_incr=5"

        def publish_samples() -> list[int]:
            # publish a few, then read which running totals the server's timer has sampled
            for i in range(5):
                api.post(
                    "/exchanges/%2F/amq.default/publish",
                    json={
                        "routing_key": "charted",
                        "payload": str(i),
                        "payload_encoding": "string",
                        "properties": {},
                    },
                ).raise_for_status()
            details = api.get(history).json()["message_stats"].get("publish_details", {})
            return [s["sample"] for s in details.get("samples", [])]

        # bounded: the timer samples every 5 s; three samples of a growing total are enough
        deadline = time.monotonic() + 45
        while len(set(publish_samples())) < 3:
            assert time.monotonic() < deadline, "the server kept no queue history"
            time.sleep(0.5)

    driver.get(url + "/#/overview")
    _wait(
        driver,
        lambda d: (
            d.find_element(By.ID, "login").is_displayed() or d.find_element(By.ID, "whoami").text
        ),
    )
    if driver.find_element(By.ID, "login").is_displayed():
        driver.find_element(By.ID, "login-password").send_keys("guest")
        driver.find_element(By.ID, "login-submit").click()
    _wait(driver, lambda d: d.find_element(By.ID, "whoami").text == "guest")
    loaded_ms = int(time.time() * 1000)
    driver.get(url + "/#/queue/%2F/charted")
    canvas = _wait(driver, lambda d: d.find_element(By.ID, "rate-chart"))
    _wait(
        driver,
        lambda d: int(d.find_element(By.ID, "rate-chart").get_attribute("data-points") or 0) >= 2,
    )
    since = int(canvas.get_attribute("data-since"))
    assert since < loaded_ms  # points from before the page was opened
    _shot(driver, "21-queue-chart")
