"""OAuth 2 for the management API and OpenID Connect discovery (issue 29): a token as the
bearer credential of `/api` (what RabbitMQ's management console sends after its OAuth login),
its scopes as tags and permissions; the JWKS URL found from `auth.oauth2.issuer` through
`/.well-known/openid-configuration`."""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pika
import pytest

from tests.idp import JwksServer, SigningKey
from tests.integration.conftest import BrokerFactory

pytestmark = pytest.mark.integration
ADMIN = "rabbitmq.tag:administrator rabbitmq.configure:*/* rabbitmq.write:*/* rabbitmq.read:*/*"


@pytest.fixture(scope="module")
def idp_key() -> SigningKey:
    return SigningKey("idp-1")


@pytest.fixture
def idp(idp_key: SigningKey) -> Iterator[JwksServer]:
    server = JwksServer([idp_key])
    yield server
    server.close()


def _config(idp: JwksServer) -> str:
    # no jwks_url: discovery from the issuer
    return (
        '[auth]\nbackends = ["internal", "oauth2"]\n'
        '[auth.oauth2]\nresource_server_id = "rabbitmq"\n'
        f'issuer = "{idp.issuer}"\n'
    )


def test_discovery_finds_the_jwks(
    broker_factory: BrokerFactory, idp: JwksServer, idp_key: SigningKey
) -> None:
    b = broker_factory(_config(idp))
    creds = pika.PlainCredentials("", idp_key.token(sub="svc", scope=ADMIN))
    params = pika.ConnectionParameters("127.0.0.1", b.port, credentials=creds, heartbeat=0)
    with pika.BlockingConnection(params) as conn:
        assert conn.channel().is_open
    assert idp.requests >= 2  # the discovery document, then the JWKS


def test_bearer_tokens_on_the_api(
    broker_factory: BrokerFactory, idp: JwksServer, idp_key: SigningKey
) -> None:
    b = broker_factory(_config(idp), http_port=0)
    base = f"http://127.0.0.1:{b.server.http_port}"

    def bearer(token: str) -> dict[str, str]:
        return {"Authorization": f"Bearer {token}"}

    with httpx.Client(base_url=base, timeout=30) as http:
        admin = idp_key.token(sub="ops", scope=ADMIN)
        r = http.get("/api/whoami", headers=bearer(admin))
        assert r.status_code == 200
        assert r.json() == {"name": "ops", "tags": ["administrator"]}
        assert http.get("/api/users", headers=bearer(admin)).status_code == 200
        # scopes without a management tag: authenticated, but no console
        plain = idp_key.token(sub="app", scope="rabbitmq.read:*/*")
        r = http.get("/api/whoami", headers=bearer(plain))
        assert (r.status_code, r.json()["reason"]) == (401, "Not management user")
        expired = idp_key.token(sub="ops", scope=ADMIN, exp_in_s=-60)
        assert http.get("/api/whoami", headers=bearer(expired)).status_code == 401
        forged = SigningKey("idp-1").token(sub="ops", scope=ADMIN)
        assert http.get("/api/whoami", headers=bearer(forged)).status_code == 401
        assert http.get("/api/whoami", headers=bearer("not-a-jwt")).status_code == 401
        # Basic credentials of the user table still work beside tokens
        assert http.get("/api/whoami", auth=("guest", "guest")).status_code == 200
