"""The `[auth]` table: RabbitMQ's `auth_mechanisms` and `ssl_cert_login_*` keys."""

from __future__ import annotations

from pathlib import Path

import pytest

from ringmq.core.certlogin import CertLogin, CertLoginFrom
from ringmq.server.authconfig import core_cert_login, core_tokens
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


def test_oauth2_settings(tmp_path: Path) -> None:
    from tests.idp import SigningKey

    pem = tmp_path / "k.pem"
    key = SigningKey("k")
    pem.write_bytes(key.public_pem())
    cfg = parse_toml(
        "[auth]\nbackends = ['rabbit_auth_backend_internal', 'oauth2']\n"
        "[auth.oauth2]\nresource_server_id = 'mq'\nscope_prefix = 'mq:'\n"
        f"signing_keys = {{ k = '{pem}' }}\ndefault_key = 'k'\n"
        "additional_scopes_key = 'roles'\njwks_url = 'https://idp/jwks'\n"
    )
    assert cfg.auth.backends == ("internal", "oauth2")
    tokens = core_tokens(cfg.auth)
    assert tokens is not None
    assert tokens.settings.prefix == "mq:"
    assert tokens.verify(key.token(aud="mq", kid="", scope="mq:read:*/*"), 0).user == "app"
    assert core_tokens(parse_toml("").auth) is None


@pytest.mark.parametrize(
    ("text", "needle"),
    [
        ("[auth]\nbackends = ['ldap2']\n", "unknown backend"),
        ("[auth]\nbackends = ['oauth2']\n", r"needs an \[auth.oauth2\]"),
        ("[auth.oauth2]\nresource_server_id = 'x'\n", "signing_keys, jwks_url or issuer"),
        ("[auth.oauth2]\njwks_url = 'http://x'\n", "resource_server_id"),
        ("[auth.oauth2]\nresource_server_id='x'\njwks_url='u'\ndefault_key='k'\n", "default_key"),
        ("[auth.oauth2]\nresource_server_id='x'\njwks_url='u'\nalgorithms=['none']\n", "none"),
        ("[auth.oauth2]\nresource_server_id='x'\njwks_url='u'\nissuerr='u'\n", "unknown key"),
    ],
)
def test_oauth2_errors(text: str, needle: str) -> None:
    with pytest.raises(ConfigError, match=needle):
        parse_toml(text)


def test_an_unreadable_signing_key(tmp_path: Path) -> None:
    cfg = parse_toml(
        "[auth]\nbackends = ['oauth2']\n[auth.oauth2]\nresource_server_id = 'mq'\n"
        f"signing_keys = {{ k = '{tmp_path / 'missing.pem'}' }}\n"
    )
    with pytest.raises(ConfigError, match=r"missing\.pem"):
        core_tokens(cfg.auth)


def test_ldap_settings() -> None:
    cfg = parse_toml(
        "[auth]\nbackends = ['internal', 'ldap']\n[auth.ldap]\nservers = ['ldap1', 'ldap2']\n"
        "user_dn_pattern = 'cn=${username},ou=People,dc=ex'\nport = 636\nuse_ssl = true\n"
        "timeout_s = 2.5\nother_bind = { user_dn = 'cn=svc,dc=ex', password = 'pw' }\n"
        "vhost_access_query = { exists = 'ou=${vhost},ou=vhosts,dc=ex' }\n"
        "topic_access_query = { match = ['${routing_key}', '^${username}\\.'] }\n"
        "[auth.ldap.tag_queries]\nadministrator = { in_group = 'cn=admins,dc=ex' }\n"
    )
    ldap = cfg.auth.ldap
    assert ldap is not None
    assert (ldap.servers, ldap.port, ldap.use_ssl, ldap.timeout_s) == (
        ("ldap1", "ldap2"),
        636,
        True,
        2.5,
    )
    assert (ldap.other_bind, ldap.other_bind_dn) == ("dn", "cn=svc,dc=ex")
    assert ldap.queries.vhost_access.op == "exists"
    assert ldap.queries.topic_access.op == "match"
    assert ldap.queries.resource_access.op == "constant"  # RabbitMQ's default
    assert [t for t, _ in ldap.queries.tags] == ["administrator"]


@pytest.mark.parametrize(
    ("text", "needle"),
    [
        ("[auth]\nbackends = ['ldap']\n", r"needs an \[auth.ldap\]"),
        ("[auth.ldap]\nservers = []\nuser_dn_pattern = 'x'\n", "at least one"),
        ("[auth.ldap]\nservers = ['h']\n", "user_dn_pattern"),
        ("[auth.ldap]\nservers = ['h']\nuser_dn_pattern = 'x'\nother_bind = 'root'\n", "as_user"),
        (
            "[auth.ldap]\nservers = ['h']\nuser_dn_pattern = 'x'\n"
            "resource_access_query = { in_group = 'cn=${name}' }\n",
            "only",
        ),
    ],
)
def test_ldap_errors(text: str, needle: str) -> None:
    with pytest.raises(ConfigError, match=needle):
        parse_toml(text)
