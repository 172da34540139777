"""The web console in a real headless Chromium (Selenium) against a live broker.

Needs Debian's `chromium` and `chromium-driver` packages and the `selenium` Python package;
skipped with the reason when any is missing. Screenshots go to test-artifacts/console/.
"""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from ringmq.server.runtime import BrokerThread, ServerOptions

pytestmark = [pytest.mark.slow, pytest.mark.integration]

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
CHROMEDRIVER = shutil.which("chromedriver") or "/usr/bin/chromedriver"
ARTIFACTS = Path(__file__).resolve().parents[2] / "test-artifacts" / "console"
WAIT_S = 15


def _missing() -> str | None:
    try:
        import selenium  # noqa: F401
    except ImportError:
        return "selenium is not installed (pip install selenium)"
    for path, pkg in ((CHROMIUM, "chromium"), (CHROMEDRIVER, "chromium-driver")):
        if not Path(path).exists():
            return f"{path} not found (apt-get install {pkg})"
    return None


@pytest.fixture(scope="module")
def live(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[BrokerThread, str]]:
    b = BrokerThread(
        ServerOptions(
            host="127.0.0.1",
            amqp_port=0,
            http_port=0,
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
        "--window-size=1400,1000",
    ):
        opts.add_argument(flag)
    opts.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    d = webdriver.Chrome(service=Service(CHROMEDRIVER), options=opts)
    d.set_page_load_timeout(WAIT_S)
    yield d
    d.quit()


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
