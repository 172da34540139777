"""The `[auth]` table: RabbitMQ's `auth_mechanisms` and `ssl_cert_login_*` keys."""

from __future__ import annotations

import pytest

from ringmq.core.certlogin import CertLogin, CertLoginFrom
from ringmq.server.authconfig import core_cert_login
from ringmq.server.configfile import ConfigError, parse_toml


def test_no_auth_table_no_certificate_logins() -> None:
    assert parse_toml("").auth.cert_login is None
    assert core_cert_login(parse_toml("[auth]\n").auth) is None


def test_external_and_the_login_choices() -> None:
    cfg = parse_toml(
        "[auth]\nmechanisms = ['PLAIN', 'AMQPLAIN', 'EXTERNAL']\n"
        "ssl_cert_login_from = 'subject_alt_name'\nssl_cert_login_san_type = 'EMAIL'\n"
        "ssl_cert_login_san_index = 2\nmqtt_ssl_cert_login = true\n"
    )
    assert core_cert_login(cfg.auth) == CertLogin(
        CertLoginFrom.SUBJECT_ALTERNATIVE_NAME, "email", 2, external=True, mqtt=True
    )


def test_stomp_certificate_login_without_external() -> None:
    got = core_cert_login(parse_toml("[auth]\nstomp_ssl_cert_login = true\n").auth)
    assert got == CertLogin(external=False, stomp=True)


@pytest.mark.parametrize(
    ("text", "needle"),
    [
        ("[auth]\nmechanisms = ['PLAIN', 'AMQPLAIN', 'KERBEROS']\n", "unknown mechanism"),
        ("[auth]\nmechanisms = ['EXTERNAL']\n", "always offers PLAIN"),
        ("[auth]\nssl_cert_login_from = 'serial'\n", "ssl_cert_login_from"),
        ("[auth]\nssl_cert_login_san_type = 'phone'\n", "ssl_cert_login_san_type"),
        ("[auth]\nssl_cert_login_san_index = -1\n", "must be >= 0"),
        ("[auth]\nssl_cert_login = true\n", "unknown key"),
    ],
)
def test_auth_errors(text: str, needle: str) -> None:
    with pytest.raises(ConfigError, match=needle):
        parse_toml(text)
