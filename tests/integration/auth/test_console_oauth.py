"""The management console's OAuth 2 login (issue 29, RabbitMQ's `management.oauth_enabled`):
the `[management] oauth_*` settings, `GET /api/auth` telling the console how to log in, and
the authorization code flow with PKCE run over HTTP as the console's page runs it (discovery,
the provider's authorization endpoint, back to the console's callback page, the code traded
with the verifier at the token endpoint, then the token as the API's bearer credential).
tests/idp.py is the provider; its token endpoint checks the PKCE verifier."""

from __future__ import annotations

import secrets
from collections.abc import Iterator
from urllib.parse import parse_qs, urlsplit

import httpx
import pytest

from ringmq.server.configfile import ConfigError, parse_toml
from tests.idp import JwksServer, SigningKey, s256
from tests.integration.conftest import BrokerFactory

pytestmark = pytest.mark.integration
ADMIN = "rabbitmq.tag:administrator rabbitmq.configure:*/* rabbitmq.write:*/* rabbitmq.read:*/*"
CLIENT_ID = "ringmq-console"


@pytest.fixture
def idp() -> Iterator[JwksServer]:
    server = JwksServer([SigningKey("idp-1")], login_user="alice", login_scope=ADMIN)
    yield server
    server.close()


def _config(idp: JwksServer, management: str) -> str:
    return (
        '[auth]\nbackends = ["internal", "oauth2"]\n'
        f'[auth.oauth2]\nresource_server_id = "rabbitmq"\nissuer = "{idp.issuer}"\n'
        f"[management]\n{management}"
    )


def test_settings(idp: JwksServer) -> None:
    on = f'oauth_enabled = true\noauth_client_id = "{CLIENT_ID}"\n'
    m = parse_toml(_config(idp, on)).management
    # the provider defaults to the oauth2 backend's issuer
    assert (m.oauth_enabled, m.oauth_client_id, m.oauth_provider_url) == (
        True,
        CLIENT_ID,
        idp.issuer,
    )
    assert m.oauth_scopes == "openid profile"
    m = parse_toml(
        _config(idp, on + 'oauth_provider_url = "https://idp.example/realms/x/"\n')
    ).management
    assert m.oauth_provider_url == "https://idp.example/realms/x"
    assert parse_toml("").management.oauth_enabled is False
    with pytest.raises(ConfigError, match=r"unknown key.*'oauth_enable'"):
        parse_toml(_config(idp, "oauth_enable = true\n"))
    with pytest.raises(ConfigError, match="needs oauth_client_id"):
        parse_toml(_config(idp, "oauth_enabled = true\n"))
    with pytest.raises(ConfigError, match="needs the oauth2 backend"):
        parse_toml(f"[management]\n{on}")
    no_issuer = (
        '[auth]\nbackends = ["oauth2"]\n'
        f'[auth.oauth2]\nresource_server_id = "rabbitmq"\njwks_url = "{idp.url}"\n'
        f"[management]\n{on}"
    )
    with pytest.raises(ConfigError, match="needs oauth_provider_url"):
        parse_toml(no_issuer)


def _authorize(http: httpx.Client, idp_doc: dict[str, str], console: str) -> tuple[str, str]:
    """What oauth.js's begin() does, then the browser following the provider's redirect back
    to the console's callback page: (code, verifier)."""
    verifier = secrets.token_urlsafe(48)
    state = secrets.token_urlsafe(16)
    q = {
        "response_type": "code",
        "client_id": CLIENT_ID,
        "redirect_uri": f"{console}/oauth-callback.html",
        "scope": "openid profile",
        "state": state,
        "code_challenge": s256(verifier),
        "code_challenge_method": "S256",
    }
    page = http.get(idp_doc["authorization_endpoint"], params=q, follow_redirects=True)
    assert page.status_code == 200  # the console serves the callback page
    assert str(page.url).startswith(f"{console}/oauth-callback.html?")
    assert "RingMQOAuth.finish()" in page.text
    back = parse_qs(urlsplit(str(page.url)).query)
    assert back["state"] == [state]
    return back["code"][0], verifier


def test_console_login_with_pkce(broker_factory: BrokerFactory, idp: JwksServer) -> None:
    on = f'oauth_enabled = true\noauth_client_id = "{CLIENT_ID}"\n'
    b = broker_factory(_config(idp, on), http_port=0)
    console = f"http://127.0.0.1:{b.server.http_port}"
    with httpx.Client(timeout=30) as http:
        # the page asks how to log in (no credentials) and offers the OAuth 2 button
        auth = http.get(f"{console}/api/auth").json()
        assert auth == {
            "oauth_enabled": True,
            "oauth_client_id": CLIENT_ID,
            "oauth_provider_url": idp.issuer,
            "oauth_scopes": "openid profile",
        }
        assert "Login with OAuth 2" in http.get(f"{console}/").text
        assert http.get(f"{console}/oauth.js").status_code == 200
        idp_doc = http.get(f"{auth['oauth_provider_url']}/.well-known/openid-configuration")
        endpoints = idp_doc.json()

        def exchange(code: str, verifier: str) -> httpx.Response:
            form = {
                "grant_type": "authorization_code",
                "code": code,
                "redirect_uri": f"{console}/oauth-callback.html",
                "client_id": CLIENT_ID,
                "code_verifier": verifier,
            }
            return http.post(endpoints["token_endpoint"], data=form)

        # a code traded with another verifier (an intercepted code) is refused
        code, verifier = _authorize(http, endpoints, console)
        r = exchange(code, secrets.token_urlsafe(48))
        assert (r.status_code, r.json()["error"]) == (400, "invalid_grant")
        assert idp.refused == ["invalid_grant: code_verifier"]
        assert exchange(code, verifier).status_code == 400  # and the code is spent

        code, verifier = _authorize(http, endpoints, console)
        r = exchange(code, verifier)
        assert r.status_code == 200, r.text
        token = r.json()["access_token"]
        bearer = {"Authorization": f"Bearer {token}"}
        me = http.get(f"{console}/api/whoami", headers=bearer)
        assert me.json() == {"name": "alice", "tags": ["administrator"]}
        assert http.get(f"{console}/api/overview", headers=bearer).status_code == 200
        # the token is what logs in: without it, no API
        assert http.get(f"{console}/api/overview").status_code == 401


def test_login_with_oauth_off_by_default(broker_factory: BrokerFactory) -> None:
    b = broker_factory(http_port=0)
    r = httpx.get(f"http://127.0.0.1:{b.server.http_port}/api/auth", timeout=30)
    assert r.json() == {"oauth_enabled": False}
