"""The configuration file's `[auth]` table: how clients log in.

Keys are RabbitMQ's, spelled as TOML allows (`auth_mechanisms.1 = EXTERNAL` becomes
`mechanisms = ["PLAIN", "AMQPLAIN", "EXTERNAL"]`; `stomp.ssl_cert_login = true` becomes
`stomp_ssl_cert_login = true`; `auth_oauth2.resource_server_id` becomes `[auth.oauth2]`
`resource_server_id`); docs/security.md maps them. `core_cert_login` and `core_tokens` turn
the parsed spec into the core's objects; the latter reads the configured signing keys' PEM
files (start-up I/O, in server/).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

from ringmq.core.certlogin import SAN_TYPES, CertLogin, CertLoginFrom
from ringmq.core.ldapquery import TRUE, LdapQueries, Query, parse_query
from ringmq.core.oauth import DEFAULT_ALGORITHMS, OAuth2Settings, TokenBackend
from ringmq.server.configspec import (
    AUTH_BACKENDS,
    PASSWORD_MECHANISMS,
    AuthSpec,
    CertLoginSpec,
    ConfigError,
    LdapSpec,
    OAuth2Spec,
)

if TYPE_CHECKING:
    from ringmq.server.configtable import Table

EXTERNAL: Final = "EXTERNAL"
_LOGIN_FROM: Final = {f.value for f in CertLoginFrom} | {"subject_alt_name"}


def parse_auth(t: Table) -> AuthSpec:
    """The `[auth]` table (`t.done()` is the caller's).

    Raises:
        ConfigError: an unknown mechanism or `ssl_cert_login_*` value, or a mechanism list
            without PLAIN and AMQPLAIN (ringmq always offers them).
    """
    mechanisms = tuple(m.upper() for m in t.str_list("mechanisms")) or PASSWORD_MECHANISMS
    unknown = sorted(set(mechanisms) - {*PASSWORD_MECHANISMS, EXTERNAL})
    if unknown:
        raise ConfigError(f"{t.where}.mechanisms: unknown mechanism(s) {', '.join(unknown)}")
    if not set(PASSWORD_MECHANISMS) <= set(mechanisms):
        raise ConfigError(
            f"{t.where}.mechanisms: ringmq always offers PLAIN and AMQPLAIN; list them too"
        )
    login_from = t.opt_str("ssl_cert_login_from", "distinguished_name") or ""
    if login_from not in _LOGIN_FROM:
        raise ConfigError(f"{t.where}.ssl_cert_login_from: one of {', '.join(sorted(_LOGIN_FROM))}")
    if login_from == "subject_alt_name":  # RabbitMQ accepts both spellings
        login_from = CertLoginFrom.SUBJECT_ALTERNATIVE_NAME.value
    san_type = (t.opt_str("ssl_cert_login_san_type", "dns") or "").lower()
    if san_type not in SAN_TYPES:
        raise ConfigError(f"{t.where}.ssl_cert_login_san_type: one of {', '.join(SAN_TYPES)}")
    san_index = t.opt_int("ssl_cert_login_san_index", 0)
    assert san_index is not None
    external = EXTERNAL in mechanisms
    stomp = bool(t.opt_bool("stomp_ssl_cert_login", False))
    mqtt = bool(t.opt_bool("mqtt_ssl_cert_login", False))
    cert = None
    if external or stomp or mqtt:
        cert = CertLoginSpec(login_from, san_type, san_index, external, stomp, mqtt)
    # RabbitMQ's module names (rabbit_auth_backend_oauth2) are accepted for its short ones
    backends = tuple(b.removeprefix("rabbit_auth_backend_") for b in t.str_list("backends")) or (
        "internal",
    )
    unknown = sorted(set(backends) - set(AUTH_BACKENDS))
    if unknown:
        raise ConfigError(
            f"{t.where}.backends: unknown backend(s) {', '.join(unknown)} "
            f"(known: {', '.join(AUTH_BACKENDS)})"
        )
    oauth2 = None
    raw = t.value("oauth2", (dict,), "a table")
    if raw is not None:
        oauth2 = _oauth2(type(t)(dict(raw), f"{t.where}.oauth2"))
    if "oauth2" in backends and oauth2 is None:
        raise ConfigError(f"{t.where}.backends: oauth2 needs an [auth.oauth2] table")
    ldap = None
    raw = t.value("ldap", (dict,), "a table")
    if raw is not None:
        ldap = _ldap(type(t)(dict(raw), f"{t.where}.ldap"))
    if "ldap" in backends and ldap is None:
        raise ConfigError(f"{t.where}.backends: ldap needs an [auth.ldap] table")
    return AuthSpec(cert_login=cert, backends=backends, oauth2=oauth2, ldap=ldap)


def _ldap(t: Table) -> LdapSpec:
    servers = t.str_list("servers")
    if not servers:
        raise ConfigError(f"{t.where}.servers: at least one LDAP server")
    other = t.value("other_bind", (str, dict), '"as_user", "anon" or { user_dn, password }')
    other_dn = other_pw = None
    if isinstance(other, dict):
        other_dn, other_pw = other.get("user_dn"), other.get("password")
        if not isinstance(other_dn, str) or not isinstance(other_pw, str) or len(other) != 2:
            raise ConfigError(f"{t.where}.other_bind: {{ user_dn = ..., password = ... }}")
        other = "dn"
    elif other is None:
        other = "as_user"
    elif other not in ("as_user", "anon"):
        raise ConfigError(f'{t.where}.other_bind: "as_user", "anon" or {{ user_dn, password }}')
    try:
        tags = tuple(
            (tag, parse_query(q, f"{t.where}.tag_queries.{tag}"))
            for tag, q in t.table("tag_queries").items()
        )
        queries = LdapQueries(
            vhost_access=_query(t, "vhost_access_query"),
            resource_access=_query(t, "resource_access_query"),
            tags=tags,
            topic_access=_query(t, "topic_access_query"),
        )
    except ValueError as exc:
        raise ConfigError(str(exc)) from None
    timeout = t.value("timeout_s", (int, float), "seconds")
    spec = LdapSpec(
        servers=servers,
        user_dn_pattern=t.req_str("user_dn_pattern"),
        port=t.opt_int("port", 389, minimum=1, maximum=65535) or 389,
        use_ssl=bool(t.opt_bool("use_ssl", False)),
        timeout_s=float(timeout) if timeout is not None else 5.0,
        other_bind=other,
        other_bind_dn=other_dn,
        other_bind_password=other_pw,
        queries=queries,
    )
    t.done()
    return spec


def _query(t: Table, key: str) -> Query:
    raw = t.value(key, (dict,), "a query table")
    return TRUE if raw is None else parse_query(raw, f"{t.where}.{key}")


def _oauth2(t: Table) -> OAuth2Spec:
    keys = t.table("signing_keys")
    if not all(isinstance(v, str) for v in keys.values()):
        raise ConfigError(f"{t.where}.signing_keys: key id = PEM file path")
    jwks_url = t.opt_str("jwks_url")
    issuer = t.opt_str("issuer")
    if not keys and jwks_url is None and issuer is None:
        raise ConfigError(f"{t.where}: give signing_keys, jwks_url or issuer")
    default_key = t.opt_str("default_key")
    if default_key is not None and default_key not in keys:
        raise ConfigError(f"{t.where}.default_key: {default_key!r} is not in signing_keys")
    cafile = t.opt_str("https_cacertfile")
    algorithms = t.str_list("algorithms")
    bad = sorted(set(algorithms) - set(DEFAULT_ALGORITHMS) - {"PS384", "PS512", "EdDSA"})
    if bad:
        raise ConfigError(f"{t.where}.algorithms: unsupported {', '.join(bad)}")
    spec = OAuth2Spec(
        resource_server_id=t.req_str("resource_server_id"),
        scope_prefix=t.opt_str("scope_prefix"),
        verify_aud=bool(t.opt_bool("verify_aud", True)),
        preferred_username_claims=t.str_list("preferred_username_claims") or ("sub", "client_id"),
        additional_scopes_key=t.opt_str("additional_scopes_key"),
        default_key=default_key,
        signing_keys=tuple((k, Path(v)) for k, v in keys.items()),
        jwks_url=jwks_url,
        issuer=issuer,
        jwks_refresh_s=t.opt_int("jwks_refresh_s", 300, minimum=1) or 300,
        https_cacertfile=Path(cafile) if cafile else None,
        algorithms=algorithms,
    )
    t.done()
    return spec


def core_tokens(spec: AuthSpec) -> TokenBackend | None:
    """The core's token check, its configured signing keys read (None: no oauth2 backend).

    Raises:
        ConfigError: a signing key file that cannot be read or is no PEM public key.
    """
    o = spec.oauth2
    if o is None or "oauth2" not in spec.backends:
        return None
    keys: dict[str, Any] = {}
    for kid, path in o.signing_keys:
        try:
            from cryptography.hazmat.primitives.serialization import load_pem_public_key

            keys[kid] = load_pem_public_key(path.read_bytes())
        except (OSError, ValueError) as exc:
            raise ConfigError(f"auth.oauth2.signing_keys.{kid}: {path}: {exc}") from None
    settings = OAuth2Settings(
        resource_server_id=o.resource_server_id,
        scope_prefix=o.scope_prefix,
        verify_aud=o.verify_aud,
        preferred_username_claims=o.preferred_username_claims,
        additional_scopes_key=o.additional_scopes_key,
        default_key=o.default_key,
        algorithms=o.algorithms or DEFAULT_ALGORITHMS,
    )
    return TokenBackend(settings, keys)


def core_cert_login(spec: AuthSpec) -> CertLogin | None:
    """The core's certificate-login settings (None: certificate logins are off)."""
    c = spec.cert_login
    if c is None:
        return None
    return CertLogin(
        login_from=CertLoginFrom(c.login_from),
        san_type=c.san_type,
        san_index=c.san_index,
        external=c.external,
        stomp=c.stomp,
        mqtt=c.mqtt,
    )


__all__ = ["core_cert_login", "core_tokens", "parse_auth"]
