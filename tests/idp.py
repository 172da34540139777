"""A stand-in OAuth 2 identity provider for the token tests: signing keys, tokens minted with
pyjwt, and a JWKS document served over HTTP on loopback (a thread of its own)."""

from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

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


class JwksServer:
    """Serves `{"keys": [...]}` of `keys` at http://127.0.0.1:PORT/jwks (keys may change), and
    the OpenID Connect discovery document naming it (`issuer` is http://127.0.0.1:PORT)."""

    def __init__(self, keys: list[SigningKey]) -> None:
        self.keys = list(keys)
        self.requests = 0
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                outer.requests += 1
                if self.path == "/.well-known/openid-configuration":  # OpenID discovery
                    doc: dict[str, Any] = {"issuer": outer.issuer, "jwks_uri": outer.url}
                else:
                    doc = {"keys": [k.jwk() for k in outer.keys]}
                body = json.dumps(doc).encode()
                known = ("/jwks", "/.well-known/openid-configuration")
                self.send_response(200 if self.path in known else 404)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: Any) -> None:
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.issuer = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        self.url = f"{self.issuer}/jwks"
        self._thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self._thread.start()

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
        self._thread.join(5)
