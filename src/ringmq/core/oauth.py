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
  wildcards, URL-encoded: `%2F` is the vhost "/"; an optional third part is a routing-key
  pattern for topic authorisation, below) and `tag:TAG` (management tags).

A `Grant` answers the permission checks `AuthDB` makes for the connection that presented the
token, while it is valid: vhost access when any permission scope's vhost pattern matches, a
resource when a scope of that kind matches both its vhost and its name. `expires_ms` is when
that connection is closed ("credential expired"), unless an update-secret brings a new token
first.

Topic authorisation (RabbitMQ's `rabbit_oauth2_scope:topic_access`): on a topic exchange every
publish ("write") and binding ("read") is checked, and only the three-part scopes
`write:VHOST/EXCHANGE/ROUTINGKEY` and `read:VHOST/EXCHANGE/ROUTINGKEY` allow one (a two-part
scope grants the exchange, not its routing keys): the vhost, the exchange's name and the
routing or binding key must each match their wildcard pattern. In those three patterns
`{vhost}` stands for the connection's vhost and `{claim}` for the token's claim of that name
when its value is a string (`{sub}`, `{client_id}`...), as RabbitMQ expands them; `{username}`,
when the token has no such claim, for the user name the token gave (as in ringmq's topic
permissions); any other `{name}` for `name`. Substituted values match literally (a `*` in a
claim is no wildcard). Patterns are compiled once per vhost and cached on the grant.

Pure: no I/O, no clock.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from enum import Enum
from typing import TYPE_CHECKING, Any, Final
from urllib.parse import unquote

if TYPE_CHECKING:
    # pyjwt (and the `cryptography` it loads) is imported where a token is checked: ~10 MiB
    # of RSS, paid only by brokers with the OAuth 2 backend (tests/unit/server/test_lazy_imports.py)
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
class TopicScope:
    """One three-part `read:`/`write:` scope, its patterns as written (URL-encoded, with their
    `{variables}`: expanded for the connection's vhost when checked)."""

    access: ScopeAccess
    vhost: str
    exchange: str
    routing_key: str


_Compiled = tuple[tuple[str, re.Pattern[str], re.Pattern[str], re.Pattern[str]], ...]


@dataclass(frozen=True, slots=True)
class Grant:
    """What a valid token lets the connection that presented it do.

    Attributes:
        user: the user name (`preferred_username_claims`).
        tags: management tags (`tag:` scopes).
        permissions: the `read:`/`write:`/`configure:` scopes.
        expires_ms: the token's `exp` in ms (None: the token has none).
        topics: the three-part scopes (topic authorisation).
        claims: the token's claims whose value is a string (the `{claim}` variables).
    """

    user: str
    tags: tuple[str, ...]
    permissions: tuple[ScopePermission, ...]
    expires_ms: int | None
    topics: tuple[TopicScope, ...] = ()
    claims: tuple[tuple[str, str], ...] = ()
    _by_vhost: dict[str, _Compiled] = field(default_factory=dict, compare=False, repr=False)

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
        """Every routing key on a topic exchange is checked (no three-part scope: refused)."""
        return True

    def allows_topic(
        self, access: str, vhost: str, exchange: str, routing_key: str, client_id: str | None
    ) -> bool:
        """A three-part `access` scope matches the vhost, `exchange` and `routing_key`
        (`client_id` is not a token variable: RabbitMQ's oauth2 backend expands claims)."""
        compiled = self._by_vhost.get(vhost)
        if compiled is None:
            compiled = self._by_vhost[vhost] = self._compile(vhost)
        return any(
            a == access
            and v.fullmatch(vhost)
            and x.fullmatch(exchange)
            and k.fullmatch(routing_key)
            for a, v, x, k in compiled
        )

    def _compile(self, vhost: str) -> _Compiled:
        variables = dict(self.claims)
        variables.setdefault("username", self.user)
        variables["vhost"] = vhost
        return tuple(
            (
                t.access.value,
                _wildcard(t.vhost, variables),
                _wildcard(t.exchange, variables),
                _wildcard(t.routing_key, variables),
            )
            for t in self.topics
        )


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
        import jwt

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
        topics: list[TopicScope] = []
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
                if len(parts) not in (2, 3):
                    continue
                access = ScopeAccess(kind)
                perms.append(ScopePermission(access, _wildcard(parts[0]), _wildcard(parts[1])))
                if len(parts) == 3 and access is not ScopeAccess.CONFIGURE:
                    # a routing-key pattern: topic authorisation (RabbitMQ's topic_access)
                    topics.append(TopicScope(access, parts[0], parts[1], parts[2]))
        return Grant(
            user,
            tuple(tags),
            tuple(perms),
            None if exp is None else int(exp * 1000),
            tuple(topics),
            tuple((k, v) for k, v in claims.items() if isinstance(v, str)),
        )


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


_VARIABLE = re.compile(r"\{([^{}]*)\}")


def _wildcard(pattern: str, variables: dict[str, str] | None = None) -> re.Pattern[str]:
    # RabbitMQ's wildcard match: `*` is any text; the rest literal, URL-decoded ("%2F" is "/");
    # with `variables`, each `{name}` is its value (literal), or `name` when there is none
    def piece(text: str) -> str:
        text = unquote(text)
        if variables is None:
            return re.escape(text)
        out, at = [], 0
        for m in _VARIABLE.finditer(text):
            out.append(re.escape(text[at : m.start()]))
            out.append(re.escape(variables.get(m.group(1), m.group(1))))
            at = m.end()
        out.append(re.escape(text[at:]))
        return "".join(out)

    return re.compile(".*".join(piece(p) for p in pattern.split("*")))


__all__ = [
    "Grant",
    "OAuth2Settings",
    "ScopeAccess",
    "ScopePermission",
    "TokenBackend",
    "TopicScope",
]
