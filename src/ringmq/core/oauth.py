"""OAuth 2 access tokens (JWT) as credentials, with RabbitMQ's `rabbitmq_auth_backend_oauth2`
semantics.

Theory of operation: a client passes its access token where a password goes (PLAIN's
password, STOMP's passcode, MQTT's password; the user name is ignored, or carries the token
when the password is empty). `TokenBackend.verify` checks it and returns a `Grant`:

* the signature, against a key named by the token header's `kid` (or `default_key`), among
  the configured signing keys and those of the JWKS document the server fetched
  (`set_jwks_keys`); an unknown `kid` sets `wants_keys`, which the server answers with a fetch
  (the JWKS fetch is I/O: it lives in server/, this module never does any);
* `exp` and `nbf` against `now_ms` (the clock is an argument; pyjwt's own time checks are off);
* the audience: `aud` (a string or a list) must name `resource_server_id` (`verify_aud`);
* the user name: the first of `preferred_username_claims` present (RabbitMQ's default: `sub`,
  then `client_id`);
* the scopes: the `scope` claim (a space-separated string or a list) plus the claim
  `additional_scopes_key` names (a dotted path into nested objects). Scopes that do not start
  with `scope_prefix` (default: `resource_server_id` + ".") are ignored; the rest are
  `read:VHOST/NAME`, `write:VHOST/NAME`, `configure:VHOST/NAME` (each pattern with `*`
  wildcards, URL-encoded: `%2F` is the vhost "/"; an optional third part, a routing-key
  pattern for topic authorisation, is accepted and ignored) and `tag:TAG` (management tags).

A `Grant` answers the permission checks `AuthDB` makes for the user while the token is valid:
vhost access when any permission scope's vhost pattern matches, a resource when a scope of
that kind matches both its vhost and its name. `expires_ms` is when open connections of that
user are closed ("credential expired"), unless an update-secret brings a new token first.

Pure: no I/O, no clock.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from enum import Enum
from typing import Any, Final
from urllib.parse import unquote

import jwt
from jwt.types import Options

from ringmq.core.errors import BrokerError, Condition

DEFAULT_USERNAME_CLAIMS: Final = ("sub", "client_id")
DEFAULT_ALGORITHMS: Final = ("RS256", "RS384", "RS512", "ES256", "ES384", "ES512", "PS256")
_OPTIONS: Final[Options] = {
    "verify_signature": True,
    "verify_exp": False,  # checked here against now_ms
    "verify_nbf": False,
    "verify_iat": False,
    "verify_aud": False,  # checked here: RabbitMQ's verify_aud and its error text
    "verify_iss": False,
}


class ScopeAccess(Enum):
    READ = "read"
    WRITE = "write"
    CONFIGURE = "configure"


@dataclass(frozen=True, slots=True)
class ScopePermission:
    """One `read:`/`write:`/`configure:` scope: wildcard patterns, compiled."""

    access: ScopeAccess
    vhost: re.Pattern[str]
    name: re.Pattern[str]


@dataclass(frozen=True, slots=True)
class Grant:
    """What a valid token lets its user do.

    Attributes:
        user: the user name (`preferred_username_claims`).
        tags: management tags (`tag:` scopes).
        permissions: the `read:`/`write:`/`configure:` scopes.
        expires_ms: the token's `exp` in ms (None: the token has none).
    """

    user: str
    tags: tuple[str, ...]
    permissions: tuple[ScopePermission, ...]
    expires_ms: int | None

    def allows_vhost(self, vhost: str) -> bool:
        return any(p.vhost.fullmatch(vhost) for p in self.permissions)

    def allows(self, access: str, vhost: str, name: str, kind: str = "queue") -> bool:
        """`access` is "configure", "write" or "read" (`core.auth.Access` values); scopes
        name queues and exchanges alike (`kind` is not read)."""
        return any(
            p.access.value == access and p.vhost.fullmatch(vhost) and p.name.fullmatch(name)
            for p in self.permissions
        )

    def checks_topic(self, vhost: str, exchange: str) -> bool:
        """Routing keys are not checked (routing-key scopes are accepted and ignored)."""
        return False

    def allows_topic(
        self, access: str, vhost: str, exchange: str, routing_key: str, client_id: str | None
    ) -> bool:
        return True


@dataclass(frozen=True, slots=True)
class OAuth2Settings:
    """RabbitMQ's `auth_oauth2.*` settings that the token check reads."""

    resource_server_id: str
    scope_prefix: str | None = None
    """None: `resource_server_id` + "."."""
    verify_aud: bool = True
    preferred_username_claims: tuple[str, ...] = DEFAULT_USERNAME_CLAIMS
    additional_scopes_key: str | None = None
    default_key: str | None = None
    algorithms: tuple[str, ...] = DEFAULT_ALGORITHMS

    @property
    def prefix(self) -> str:
        return self.resource_server_id + "." if self.scope_prefix is None else self.scope_prefix


@dataclass(slots=True)
class TokenBackend:
    """Verifies tokens (see the module docstring).

    Args:
        settings: the `auth_oauth2` settings.
        signing_keys: configured keys by key id (pyjwt key objects or PEM/secret text).
    """

    settings: OAuth2Settings
    signing_keys: dict[str, Any] = field(default_factory=dict)
    jwks_keys: dict[str, Any] = field(default_factory=dict)
    wants_keys: bool = False
    """An unknown key id was seen: the server should fetch the JWKS document again."""

    def set_jwks_keys(self, keys: dict[str, Any]) -> None:
        """The keys of the JWKS document the server fetched (replacing the earlier ones)."""
        self.jwks_keys = dict(keys)
        self.wants_keys = False

    def verify(self, token: str, now_ms: int) -> Grant:
        """The grant of a valid token.

        Raises:
            BrokerError: ACCESS_REFUSED saying why (malformed, unknown key, bad signature,
                expired, not yet valid, wrong audience, no user name claim).
        """
        try:
            header = jwt.get_unverified_header(token)
        except jwt.PyJWTError:
            raise _refused("the token is not a JWT") from None
        kid = header.get("kid") or self.settings.default_key
        key = self._key(kid)
        try:
            claims: dict[str, Any] = jwt.decode(
                token,
                key,
                algorithms=list(self.settings.algorithms),
                options=_OPTIONS,
            )
        except jwt.PyJWTError as exc:
            raise _refused(f"token signature check failed ({exc})") from None
        return self._grant(claims, now_ms)

    def _key(self, kid: object) -> Any:
        if isinstance(kid, str):
            key = self.signing_keys.get(kid, self.jwks_keys.get(kid))
            if key is not None:
                return key
        elif len(self.signing_keys) + len(self.jwks_keys) == 1:
            # no kid and no default_key: the only key there is (RabbitMQ's single-key setup)
            return next(iter({**self.signing_keys, **self.jwks_keys}.values()))
        self.wants_keys = True
        raise _refused(f"no signing key {kid!r} (not configured, not in the JWKS document)")

    def _grant(self, claims: dict[str, Any], now_ms: int) -> Grant:
        s = self.settings
        exp = _number(claims.get("exp"))
        if exp is not None and exp * 1000 <= now_ms:
            raise _refused("the token has expired")
        nbf = _number(claims.get("nbf"))
        if nbf is not None and nbf * 1000 > now_ms:
            raise _refused("the token is not valid yet (nbf)")
        if s.verify_aud:
            aud = claims.get("aud")
            auds = [aud] if isinstance(aud, str) else aud if isinstance(aud, list) else []
            if s.resource_server_id not in auds:
                raise _refused(f"the token's audience does not name {s.resource_server_id!r}")
        user = next(
            (
                claims[c]
                for c in s.preferred_username_claims
                if isinstance(claims.get(c), str) and claims[c]
            ),
            None,
        )
        if user is None:
            raise _refused(f"the token has none of {', '.join(s.preferred_username_claims)}")
        scopes = _scopes(claims.get("scope"))
        if s.additional_scopes_key:
            scopes += _scopes(_path(claims, s.additional_scopes_key))
        tags: list[str] = []
        perms: list[ScopePermission] = []
        for scope in scopes:
            if not scope.startswith(s.prefix):
                continue
            kind, sep, rest = scope[len(s.prefix) :].partition(":")
            if not sep:
                continue
            if kind == "tag":
                tags.append(rest)
            elif kind in {a.value for a in ScopeAccess}:
                parts = rest.split("/")
                if len(parts) in (2, 3):
                    perms.append(
                        ScopePermission(ScopeAccess(kind), _wildcard(parts[0]), _wildcard(parts[1]))
                    )
        return Grant(user, tuple(tags), tuple(perms), None if exp is None else int(exp * 1000))


def _refused(why: str) -> BrokerError:
    return BrokerError(Condition.ACCESS_REFUSED, f"OAuth 2 token refused: {why}")


def _number(value: object) -> float | None:
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


def _scopes(value: object) -> list[str]:
    if isinstance(value, str):
        return value.split()
    if isinstance(value, list):
        return [v for v in value if isinstance(v, str)]
    return []


def _path(claims: dict[str, Any], key: str) -> object:
    # "realm_access.roles": a claim inside nested objects (Keycloak's roles); a claim whose
    # own name has dots is taken first
    if key in claims:
        return claims[key]
    value: object = claims
    for part in key.split("."):
        if not isinstance(value, dict):
            return None
        value = value.get(part)
    return value


def _wildcard(pattern: str) -> re.Pattern[str]:
    # RabbitMQ's wildcard match: `*` is any text; the rest literal, URL-decoded ("%2F" is "/")
    return re.compile(".*".join(re.escape(unquote(p)) for p in pattern.split("*")))


__all__ = ["Grant", "OAuth2Settings", "ScopeAccess", "ScopePermission", "TokenBackend"]
