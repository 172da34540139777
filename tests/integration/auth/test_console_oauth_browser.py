"""The console's OAuth 2 login in a real headless Chromium (issue 29): the page's own
JavaScript runs the PKCE flow against tests/idp.py, lands on the overview with the broker's
figures, logs out, and a token past its expiry sends it back to the login page.

Needs Debian's `chromium` and `chromium-driver` and the `selenium` Python package; skipped
with the reason when any is missing (as tests/management/test_console.py)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from tests.idp import JwksServer, SigningKey
from tests.integration.auth.test_console_oauth import ADMIN, CLIENT_ID, _config
from tests.integration.conftest import BrokerFactory
from tests.management.test_console import _missing, _wait, headless_chromium

pytestmark = [pytest.mark.slow, pytest.mark.integration]
WAIT_S = 20


@pytest.fixture
def chromium() -> Iterator[Any]:
    reason = _missing()
    if reason is not None:
        pytest.skip(reason)
    with headless_chromium(WAIT_S) as d:
        yield d


def test_chromium_logs_in_with_oauth(broker_factory: BrokerFactory, chromium: Any) -> None:
    from selenium.webdriver.common.by import By

    key = SigningKey("idp-1")
    idp = JwksServer([key], login_user="alice", login_scope=ADMIN)
    try:
        on = f'oauth_enabled = true\noauth_client_id = "{CLIENT_ID}"\n'
        b = broker_factory(_config(idp, on), http_port=0)
        url = f"http://127.0.0.1:{b.server.http_port}"
        with httpx.Client(base_url=url + "/api", auth=("guest", "guest"), timeout=30) as api:
            api.put("/queues/%2F/orders", json={}).raise_for_status()
            for i in range(3):
                api.post(
                    "/exchanges/%2F/amq.default/publish",
                    json={"routing_key": "orders", "payload": f"order {i}", "properties": {}},
                ).raise_for_status()

        d = chromium
        d.get(url + "/")
        _wait(d, lambda d: d.find_element(By.ID, "oauth-login").is_displayed())
        d.find_element(By.ID, "oauth-login-button").click()
        # provider, callback page, token exchange, then the console's overview as alice
        _wait(d, lambda d: d.find_element(By.ID, "whoami").text == "alice")
        _wait(d, lambda d: d.find_element(By.ID, "ov-messages").text == "3")
        assert d.current_url == url + "/#/overview"
        assert idp.refused == []
        assert idp.codes == {}
        token = d.execute_script("return sessionStorage.getItem('ringmq.oauth.token');")
        assert token
        assert d.execute_script("return sessionStorage.getItem('ringmq.auth');") is None

        d.find_element(By.ID, "logout").click()
        _wait(d, lambda d: d.find_element(By.ID, "login").is_displayed())
        assert d.execute_script("return sessionStorage.getItem('ringmq.oauth.token');") is None

        # a token past its expiry: back to the login page, the token dropped
        expired = key.token(sub="alice", scope=ADMIN, exp_in_s=-60)
        d.execute_script("sessionStorage.setItem('ringmq.oauth.token', arguments[0]);", expired)
        d.get(url + "/#/overview")
        d.refresh()
        _wait(d, lambda d: d.find_element(By.ID, "login").is_displayed())
        assert d.execute_script("return sessionStorage.getItem('ringmq.oauth.token');") is None

        # a user whose scopes give no management tag: signed in, refused, told why
        idp.login_scope = "rabbitmq.read:*/*"
        _wait(d, lambda d: d.find_element(By.ID, "oauth-login").is_displayed())
        d.find_element(By.ID, "oauth-login-button").click()
        _wait(d, lambda d: "Not management user" in d.find_element(By.ID, "login-error").text)
        assert d.execute_script("return sessionStorage.getItem('ringmq.oauth.token');") is None
    finally:
        idp.close()
