"""The user name a client certificate stands for (`core.certlogin`) and the EXTERNAL login
(`AuthDB.login_external`): RabbitMQ's `ssl_cert_login_from` choices."""

from __future__ import annotations

from pathlib import Path

import pytest
from cryptography.x509.oid import NameOID

from ringmq.core.auth import AuthDB
from ringmq.core.certlogin import CertLogin, CertLoginFrom, cert_user, offers_external
from ringmq.core.errors import BrokerError
from tests.pki import CA, person

F = CertLoginFrom


@pytest.fixture(scope="module")
def der(tmp_path_factory: pytest.TempPathFactory) -> bytes:
    ca = CA(Path(tmp_path_factory.mktemp("pki")), "unit")
    return ca.issue(
        "alice",
        person("alice"),
        dns=("a.example", "b.example"),
        emails=("alice@example.org",),
    ).der


@pytest.mark.parametrize(
    ("how", "want"),
    [
        (CertLogin(), "CN=alice,O=ringmq tests,C=US"),
        (CertLogin(F.COMMON_NAME), "alice"),
        (CertLogin(F.SUBJECT_ALTERNATIVE_NAME), "a.example"),
        (CertLogin(F.SUBJECT_ALTERNATIVE_NAME, san_index=1), "b.example"),
        (CertLogin(F.SUBJECT_ALTERNATIVE_NAME, san_type="email"), "alice@example.org"),
        (CertLogin(F.SUBJECT_ALTERNATIVE_NAME, san_index=2), None),
        (CertLogin(F.SUBJECT_ALTERNATIVE_NAME, san_type="uri"), None),
    ],
)
def test_the_name_each_choice_takes(der: bytes, how: CertLogin, want: str | None) -> None:
    assert cert_user(der, how) == want


def test_a_certificate_without_a_common_name(tmp_path: Path) -> None:
    der = CA(tmp_path, "x").issue("o", [(NameOID.ORGANIZATION_NAME, "only")]).der
    assert cert_user(der, CertLogin(F.COMMON_NAME)) is None
    assert cert_user(der, CertLogin(F.SUBJECT_ALTERNATIVE_NAME)) is None  # no SAN at all
    assert cert_user(der, CertLogin()) == "O=only"


def test_bad_settings_are_refused() -> None:
    with pytest.raises(ValueError, match="san_type"):
        CertLogin(san_type="phone")
    with pytest.raises(ValueError, match="san_index"):
        CertLogin(san_index=-1)


def test_login_external(der: bytes) -> None:
    auth = AuthDB()
    auth.add_user("alice", password="never checked")
    auth.add_user("local", password="x", loopback_only=True)
    with pytest.raises(BrokerError, match="certificate logins are off"):
        auth.login_external(der, peer_loopback=True)
    auth.cert_login = CertLogin(F.COMMON_NAME)
    assert auth.login_external(der, peer_loopback=False).name == "alice"
    with pytest.raises(BrokerError, match="no client certificate"):
        auth.login_external(None, peer_loopback=True)
    auth.cert_login = CertLogin(F.SUBJECT_ALTERNATIVE_NAME, san_index=5)
    with pytest.raises(BrokerError, match="names no user"):
        auth.login_external(der, peer_loopback=True)
    auth.cert_login = CertLogin()  # the DN is no user here
    with pytest.raises(BrokerError, match=r"ACCESS_REFUSED.*'CN=alice,O=ringmq tests,C=US'"):
        auth.login_external(der, peer_loopback=True)
    with pytest.raises(BrokerError, match="names no user"):
        auth.login_external(b"not a certificate", peer_loopback=True)


def test_external_is_offered_only_when_listed() -> None:
    assert not offers_external(None)
    assert offers_external(CertLogin())
    assert not offers_external(CertLogin(external=False, stomp=True))
