"""The configuration file's `[auth]` table: how clients log in.

Keys are RabbitMQ's, spelled as TOML allows (`auth_mechanisms.1 = EXTERNAL` becomes
`mechanisms = ["PLAIN", "AMQPLAIN", "EXTERNAL"]`; `stomp.ssl_cert_login = true` becomes
`stomp_ssl_cert_login = true`); docs/security.md maps them. `core_cert_login` turns the parsed
spec into the core's `CertLogin`. Plain translation: no I/O.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Final

from ringmq.core.certlogin import SAN_TYPES, CertLogin, CertLoginFrom
from ringmq.server.configspec import PASSWORD_MECHANISMS, AuthSpec, CertLoginSpec, ConfigError

if TYPE_CHECKING:
    from ringmq.server.configfile import _Table

EXTERNAL: Final = "EXTERNAL"
_LOGIN_FROM: Final = {f.value for f in CertLoginFrom} | {"subject_alt_name"}


def parse_auth(t: _Table) -> AuthSpec:
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
    return AuthSpec(cert_login=cert)


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


__all__ = ["core_cert_login", "parse_auth"]
