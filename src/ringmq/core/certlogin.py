"""The user name a client certificate stands for (RabbitMQ's `rabbit_auth_mechanism_ssl`).

A client that presented a certificate the TLS layer verified may log in without a password:
SASL EXTERNAL in AMQP 0-9-1 and 1.0, and a STOMP CONNECT or MQTT CONNECT without credentials
where the listener's certificate login is on (RabbitMQ's `stomp.ssl_cert_login`,
`mqtt.ssl_cert_login`). The name is taken from the certificate as RabbitMQ's
`ssl_cert_login_from` says:

* `distinguished_name` (the default): the subject's RFC 4514 string, most specific RDN first,
  as `openssl x509 -nameopt RFC2253` prints it ("CN=alice,O=Example,C=US");
* `common_name`: the subject's first CN;
* `subject_alternative_name`: the `ssl_cert_login_san_index`-th (from 0) entry of type
  `ssl_cert_login_san_type` (dns, email, uri, ip, other_name) of the certificate's
  subjectAltName extension.

The certificate arrives as its DER bytes (the server reads them off the TLS session once the
handshake verified it); a certificate with no such name logs in nobody. The user must then
exist in the user table; its password is not checked (RabbitMQ's EXTERNAL). Pure: parsing
bytes, no I/O.
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass
from enum import Enum
from typing import TYPE_CHECKING, Final

if TYPE_CHECKING:
    # imported where a certificate is read: `cryptography` costs ~10 MiB of RSS, paid only by
    # brokers that log users in by certificate (tests/unit/server/test_lazy_imports.py)
    from cryptography import x509


class CertLoginFrom(Enum):
    """RabbitMQ's `ssl_cert_login_from` values."""

    DISTINGUISHED_NAME = "distinguished_name"
    COMMON_NAME = "common_name"
    SUBJECT_ALTERNATIVE_NAME = "subject_alternative_name"


SAN_TYPES: Final = ("dns", "email", "uri", "ip", "other_name")
"""RabbitMQ's `ssl_cert_login_san_type` values."""

_SAN_CLASS_NAMES: Final = {
    "dns": "DNSName",
    "email": "RFC822Name",
    "uri": "UniformResourceIdentifier",
    "ip": "IPAddress",
    "other_name": "OtherName",
}


@dataclass(frozen=True, slots=True)
class CertLogin:
    """How a certificate names its user.

    Attributes:
        login_from: which part of the certificate (`ssl_cert_login_from`).
        san_type: the subjectAltName type (`ssl_cert_login_san_type`).
        san_index: which entry of that type, from 0 (`ssl_cert_login_san_index`).
        external: AMQP 0-9-1 and 1.0 offer SASL EXTERNAL to a client with a verified
            certificate (`auth_mechanisms` lists EXTERNAL).
        stomp: STOMP CONNECT frames without a login header log in by certificate
            (`stomp.ssl_cert_login`).
        mqtt: MQTT CONNECT packets without a user name log in by certificate
            (`mqtt.ssl_cert_login`).
    """

    login_from: CertLoginFrom = CertLoginFrom.DISTINGUISHED_NAME
    san_type: str = "dns"
    san_index: int = 0
    external: bool = True
    stomp: bool = False
    mqtt: bool = False

    def __post_init__(self) -> None:
        if self.san_type not in SAN_TYPES:
            raise ValueError(f"ssl_cert_login_san_type {self.san_type!r}: one of {SAN_TYPES}")
        if self.san_index < 0:
            raise ValueError("ssl_cert_login_san_index must be >= 0")


def offers_external(how: CertLogin | None) -> bool:
    """Whether AMQP offers SASL EXTERNAL to a client with a verified certificate."""
    return how is not None and how.external


def cert_user(der: bytes, how: CertLogin) -> str | None:
    """The user name certificate `der` stands for, or None when it has no such name.

    Raises:
        ValueError: `der` is not a certificate.
    """
    from cryptography import x509
    from cryptography.x509.oid import NameOID

    cert = x509.load_der_x509_certificate(der)
    match how.login_from:
        case CertLoginFrom.DISTINGUISHED_NAME:
            return cert.subject.rfc4514_string() or None
        case CertLoginFrom.COMMON_NAME:
            cns = cert.subject.get_attributes_for_oid(NameOID.COMMON_NAME)
            return _text(cns[0].value) if cns else None
        case CertLoginFrom.SUBJECT_ALTERNATIVE_NAME:
            return _san(cert, how.san_type, how.san_index)


def _san(cert: x509.Certificate, san_type: str, index: int) -> str | None:
    from cryptography import x509

    try:
        ext = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName)
    except x509.ExtensionNotFound:
        return None
    names = [n for n in ext.value if isinstance(n, getattr(x509, _SAN_CLASS_NAMES[san_type]))]
    if index >= len(names):
        return None
    value = names[index].value
    if isinstance(value, ipaddress.IPv4Address | ipaddress.IPv6Address):
        return str(value)
    return _text(value)


def _text(value: object) -> str | None:
    if isinstance(value, bytes):  # an otherName's raw DER value
        return value.decode("utf-8", "replace") or None
    if isinstance(value, str):
        return value or None
    return str(value)


__all__ = ["SAN_TYPES", "CertLogin", "CertLoginFrom", "cert_user", "offers_external"]
