"""How the console logs in: `GET /api/auth`, RabbitMQ's management endpoint of the same name.

The console asks before it shows its login page (no credentials needed: it is what decides
which credentials to ask for). With `management.oauth_enabled` the answer names the identity
provider and the console's client id, and the page offers "Login with OAuth 2": the
authorization code flow with PKCE runs in the browser (console/oauth.js), and the token it
gets is then the bearer credential of every API call, checked by the oauth2 backend as any
other token (`Api.user`). Nothing of the flow runs here: the broker never sees the code or
the verifier, only the token.
"""

from __future__ import annotations

from dataclasses import dataclass

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route


@dataclass(frozen=True, slots=True)
class ConsoleOAuth:
    """The console's OAuth 2 login (RabbitMQ's `management.oauth_*` settings)."""

    client_id: str
    provider_url: str
    """The identity provider: its OpenID discovery document names the endpoints."""
    scopes: str = "openid profile"


def routes(oauth: ConsoleOAuth | None) -> list[Route]:
    """`GET /api/auth`: `{"oauth_enabled": false}`, or the provider the console logs in with."""

    async def auth(request: Request) -> Response:
        if oauth is None:
            return JSONResponse({"oauth_enabled": False})
        return JSONResponse(
            {
                "oauth_enabled": True,
                "oauth_client_id": oauth.client_id,
                "oauth_provider_url": oauth.provider_url,
                "oauth_scopes": oauth.scopes,
            }
        )

    return [Route("/api/auth", auth, methods=["GET"])]
