"""The OAuth 2 backend's JWKS document: fetched over HTTP(S) off the core, on the loop.

Theory of operation: `JwksFetcher` keeps the token check's (`core.oauth.TokenBackend`) JWKS
keys fresh. `start` fetches once before the listeners open (bounded by `FETCH_TIMEOUT_S`, so
the first clients find the keys; a failed fetch is logged and retried), then a task refetches
every `refresh_s`, and sooner when a token named a key id nobody knows (`wants_keys`, set by
the core; RabbitMQ refetches on an unknown `kid` too), at most once per `MIN_GAP_S`. A fetch
that fails (the server down, a malformed document) keeps the keys already known: tokens
signed with them still verify; others are refused with "no signing key".

Without a `jwks_url`, the `issuer`'s OpenID Connect discovery document
(`{issuer}/.well-known/openid-configuration`, RabbitMQ's `auth_oauth2.issuer`) names it
(`jwks_uri`): asked before the first fetch, and again after a fetch that failed.

The HTTP client (httpx, async) runs on the broker's loop: no thread, no blocking call; the
core only ever sees the parsed keys. Owned by the loop thread.
"""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING, Any, Final

from ringmq.core.oauth import TokenBackend
from ringmq.server.configspec import AuthSpec

if TYPE_CHECKING:
    import httpx

    from ringmq.core.broker import Broker

log = logging.getLogger(__name__)

FETCH_TIMEOUT_S: Final = 10.0
MIN_GAP_S: Final = 2.0
"""Fetches for unknown key ids are at least this far apart (a stream of forged kids cannot
turn the broker into a load generator against the identity provider)."""
_POLL_S: Final = 0.5


def parse_jwks(doc: object) -> dict[str, Any]:
    """The signing keys of a JWKS document by key id (keys without `kid` get "")."""
    if not isinstance(doc, dict):
        raise ValueError("a JWKS document is a JSON object with a 'keys' list")
    import jwt

    keys = jwt.PyJWKSet.from_dict(doc).keys
    return {k.key_id or "": k for k in keys if k.public_key_use in (None, "sig")}


class JwksFetcher:
    """Fetches `url` into `backend` (see the module docstring)."""

    def __init__(
        self,
        url: str | None,
        backend: TokenBackend,
        *,
        refresh_s: float,
        verify: bool | str = True,
        issuer: str | None = None,
    ) -> None:
        self.url = url
        self.issuer = issuer
        self._rediscover = False
        """The issuer's discovery named `url`, and the last fetch failed: ask it again."""
        self.backend = backend
        self.refresh_s = refresh_s
        self.verify = verify
        self.fetches = 0
        self.failures = 0
        self._task: asyncio.Task[None] | None = None

    async def start(self) -> None:
        """Fetch once now, then keep the keys fresh in a task."""
        await self.fetch()
        self._task = asyncio.get_running_loop().create_task(self._run())

    def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            self._task = None

    async def fetch(self) -> bool:
        """One fetch; False (logged) when it failed and the known keys stay."""
        import httpx  # imported where used: only brokers with a JWKS URL or issuer load it
        import jwt

        self.fetches += 1
        try:
            async with httpx.AsyncClient(timeout=FETCH_TIMEOUT_S, verify=self.verify) as http:
                if self.issuer is not None and (self.url is None or self._rediscover):
                    self.url = await self._discover(http)
                if self.url is None:
                    raise ValueError("no JWKS URL and no issuer to discover it from")
                r = await http.get(self.url)
                r.raise_for_status()
                keys = parse_jwks(r.json())
        except (httpx.HTTPError, ValueError, jwt.PyJWTError) as exc:
            self.failures += 1
            self.backend.wants_keys = False  # retried at the next period, not at once
            self._rediscover = self.issuer is not None
            where = self.url or f"(discovery of {self.issuer})"
            log.error("OAuth 2: could not fetch the JWKS document %s: %s", where, exc)
            return False
        self._rediscover = False
        self.backend.set_jwks_keys(keys)
        log.info("OAuth 2: %d signing key(s) from %s", len(keys), self.url)
        return True

    async def _discover(self, http: httpx.AsyncClient) -> str:
        # OpenID Connect discovery: the issuer's configuration names its `jwks_uri`
        assert self.issuer is not None
        url = self.issuer.rstrip("/") + "/.well-known/openid-configuration"
        r = await http.get(url)
        r.raise_for_status()
        doc = r.json()
        jwks_uri = doc.get("jwks_uri") if isinstance(doc, dict) else None
        if not isinstance(jwks_uri, str) or not jwks_uri:
            raise ValueError(f"{url} names no jwks_uri")
        log.info("OAuth 2: %s names the JWKS document %s", url, jwks_uri)
        return jwks_uri

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        last = loop.time()
        while True:
            await asyncio.sleep(_POLL_S)
            now = loop.time()
            due = now - last >= self.refresh_s
            if due or (self.backend.wants_keys and now - last >= MIN_GAP_S):
                last = now
                try:
                    await self.fetch()
                except Exception:  # a bug here must not end the refreshes
                    log.exception("OAuth 2: JWKS refresh failed")


async def start_jwks(broker: Broker, spec: AuthSpec) -> JwksFetcher | None:
    """Fetch the configured JWKS document into the broker's token check and keep it fresh;
    None when there is neither `jwks_url` nor `issuer` (or no oauth2 backend)."""
    o = spec.oauth2
    if o is None or (o.jwks_url is None and o.issuer is None) or broker.auth.tokens is None:
        return None
    tokens = broker.auth.tokens
    verify: bool | str = str(o.https_cacertfile) if o.https_cacertfile is not None else True
    fetcher = JwksFetcher(
        o.jwks_url, tokens, refresh_s=o.jwks_refresh_s, verify=verify, issuer=o.issuer
    )
    await fetcher.start()
    return fetcher


__all__ = ["JwksFetcher", "parse_jwks", "start_jwks"]
