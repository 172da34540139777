"""A stand-in OAuth 2 identity provider for the token tests: signing keys, tokens minted with
pyjwt, and a JWKS document served over HTTP on loopback (a thread of its own).

It also runs the authorization code flow with PKCE (RFC 7636) as the console's OAuth login
uses it: `/authorize` approves `login_user` at once (no login form) and redirects back with a
one-time code bound to the client id, redirect URI and S256 code challenge; `/token` trades
the code for an access token only with the verifier whose SHA-256 is that challenge. Every
answer carries `Access-Control-Allow-Origin: *`, as a real provider does for browser clients
of another origin (the console's page fetches discovery and the token endpoint)."""

from __future__ import annotations

import base64
import hashlib
import json
import secrets
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlencode, urlsplit

import jwt
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa
from jwt.algorithms import RSAAlgorithm


class SigningKey:
    """An RSA key pair with a key id."""

    def __init__(self, kid: str) -> None:
        self.kid = kid
        self.private = rsa.generate_private_key(public_exponent=65537, key_size=2048)

    def jwk(self) -> dict[str, Any]:
        doc: dict[str, Any] = json.loads(RSAAlgorithm.to_jwk(self.private.public_key()))
        doc.update(kid=self.kid, use="sig", alg="RS256")
        return doc

    def public_pem(self) -> bytes:
        return self.private.public_key().public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
        )

    def token(
        self,
        *,
        sub: str = "app",
        scope: str | list[str] = "",
        aud: str | list[str] = "rabbitmq",
        exp_in_s: float = 300,
        kid: str | None = None,
        **claims: Any,
    ) -> str:
        """A token signed with this key (`kid` overrides the header's key id: a forgery, or
        "" for a token without one)."""
        body = {"sub": sub, "scope": scope, "aud": aud, "exp": int(time.time() + exp_in_s)}
        body.update(claims)
        kid = self.kid if kid is None else kid
        return jwt.encode(body, self.private, "RS256", headers={"kid": kid} if kid else None)


def s256(verifier: str) -> str:
    """PKCE's S256 code challenge of a verifier: base64url(SHA-256), unpadded."""
    digest = hashlib.sha256(verifier.encode("ascii")).digest()
    return base64.urlsafe_b64encode(digest).rstrip(b"=").decode("ascii")


class JwksServer:
    """Serves `{"keys": [...]}` of `keys` at http://127.0.0.1:PORT/jwks (keys may change), the
    OpenID Connect discovery document naming it (`issuer` is http://127.0.0.1:PORT), and the
    authorization code flow: `/authorize` logs `login_user` in with `login_scope` at once and
    `/token` signs its token with the first key (`login_exp_in_s` long)."""

    def __init__(
        self,
        keys: list[SigningKey],
        *,
        login_user: str = "console-user",
        login_scope: str = "",
        audience: str = "rabbitmq",
        login_exp_in_s: float = 300,
    ) -> None:
        self.keys = list(keys)
        self.requests = 0
        self.login_user = login_user
        self.login_scope = login_scope
        self.audience = audience
        self.login_exp_in_s = login_exp_in_s
        self.codes: dict[str, dict[str, str]] = {}  # code -> the /authorize request's params
        self.refused: list[str] = []  # why /token refused, in order
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                outer.requests += 1
                url = urlsplit(self.path)
                if url.path == "/.well-known/openid-configuration":  # OpenID discovery
                    self._json(200, outer.discovery())
                elif url.path == "/jwks":
                    self._json(200, {"keys": [k.jwk() for k in outer.keys]})
                elif url.path == "/authorize":
                    self._authorize({k: v[0] for k, v in parse_qs(url.query).items()})
                else:
                    self._json(404, {"error": "not_found"})

            def do_POST(self) -> None:
                outer.requests += 1
                length = int(self.headers.get("Content-Length") or 0)
                form = {k: v[0] for k, v in parse_qs(self.rfile.read(length).decode()).items()}
                if urlsplit(self.path).path != "/token":
                    self._json(404, {"error": "not_found"})
                    return
                status, doc = outer.exchange(form)
                self._json(status, doc)

            def _authorize(self, q: dict[str, str]) -> None:
                if (
                    q.get("response_type") != "code"
                    or not q.get("client_id")
                    or not q.get("redirect_uri")
                    or q.get("code_challenge_method") != "S256"
                    or not q.get("code_challenge")
                ):
                    self._json(400, {"error": "invalid_request"})
                    return
                code = secrets.token_urlsafe(16)
                outer.codes[code] = q
                back = {"code": code, **({"state": q["state"]} if "state" in q else {})}
                self.send_response(302)
                self.send_header("Location", f"{q['redirect_uri']}?{urlencode(back)}")
                self.send_header("Content-Length", "0")
                self.end_headers()

            def _json(self, status: int, doc: dict[str, Any]) -> None:
                body = json.dumps(doc).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.send_header("Access-Control-Allow-Origin", "*")
                self.send_header("Cache-Control", "no-store")
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: Any) -> None:
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.issuer = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        self.url = f"{self.issuer}/jwks"
        self._thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self._thread.start()

    def discovery(self) -> dict[str, Any]:
        return {
            "issuer": self.issuer,
            "jwks_uri": self.url,
            "authorization_endpoint": f"{self.issuer}/authorize",
            "token_endpoint": f"{self.issuer}/token",
            "response_types_supported": ["code"],
            "grant_types_supported": ["authorization_code"],
            "code_challenge_methods_supported": ["S256"],
        }

    def exchange(self, form: dict[str, str]) -> tuple[int, dict[str, Any]]:
        """The token endpoint: a code (used once) and the verifier of its challenge."""
        if form.get("grant_type") != "authorization_code":
            return self._refuse("unsupported_grant_type")
        asked = self.codes.pop(form.get("code", ""), None)  # one use, right or wrong
        if asked is None:
            return self._refuse("invalid_grant: unknown code")
        if form.get("client_id") != asked["client_id"]:
            return self._refuse("invalid_grant: client_id")
        if form.get("redirect_uri") != asked["redirect_uri"]:
            return self._refuse("invalid_grant: redirect_uri")
        if s256(form.get("code_verifier", "")) != asked["code_challenge"]:
            return self._refuse("invalid_grant: code_verifier")
        token = self.keys[0].token(
            sub=self.login_user,
            scope=self.login_scope,
            aud=self.audience,
            exp_in_s=self.login_exp_in_s,
            iss=self.issuer,
            azp=asked["client_id"],
        )
        doc = {"access_token": token, "token_type": "Bearer", "expires_in": self.login_exp_in_s}
        return 200, doc

    def _refuse(self, why: str) -> tuple[int, dict[str, Any]]:
        self.refused.append(why)
        error, _, detail = why.partition(": ")
        return 400, {"error": error, "error_description": detail}

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
        self._thread.join(5)
