"""A throwaway PKI for the login tests: a CA, a server certificate and client certificates,
made with `cryptography` (no openssl CLI), written as PEM files into a test's directory."""

from __future__ import annotations

import datetime
import ipaddress
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

_DAY = datetime.timedelta(days=1)


@dataclass(frozen=True)
class Issued:
    """A certificate and its key, as PEM files."""

    cert: Path
    key: Path
    der: bytes


class CA:
    """A self-signed certificate authority that issues certificates into `directory`."""

    def __init__(self, directory: Path, name: str) -> None:
        self.directory = directory
        self.name = name
        self.key = ec.generate_private_key(ec.SECP256R1())
        subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, f"{name} test CA")])
        now = datetime.datetime.now(datetime.UTC)
        self.cert = (
            x509.CertificateBuilder()
            .subject_name(subject)
            .issuer_name(subject)
            .public_key(self.key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - _DAY)
            .not_valid_after(now + _DAY)
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .sign(self.key, hashes.SHA256())
        )
        self.cert_file = directory / f"{name}-ca.pem"
        self.cert_file.write_bytes(self.cert.public_bytes(serialization.Encoding.PEM))

    def issue(
        self,
        file_name: str,
        subject: list[tuple[x509.ObjectIdentifier, str]],
        *,
        dns: tuple[str, ...] = (),
        emails: tuple[str, ...] = (),
        server: bool = False,
    ) -> Issued:
        """A certificate for `subject` (most general RDN first, as openssl's -subj)."""
        key = ec.generate_private_key(ec.SECP256R1())
        now = datetime.datetime.now(datetime.UTC)
        sans: list[x509.GeneralName] = [x509.DNSName(d) for d in dns]
        sans += [x509.RFC822Name(e) for e in emails]
        if server:
            sans.append(x509.IPAddress(ipaddress.ip_address("127.0.0.1")))
        builder = (
            x509.CertificateBuilder()
            .subject_name(x509.Name([x509.NameAttribute(oid, v) for oid, v in subject]))
            .issuer_name(self.cert.subject)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - _DAY)
            .not_valid_after(now + _DAY)
            .add_extension(
                x509.ExtendedKeyUsage(
                    [ExtendedKeyUsageOID.SERVER_AUTH if server else ExtendedKeyUsageOID.CLIENT_AUTH]
                ),
                critical=False,
            )
        )
        if sans:
            builder = builder.add_extension(x509.SubjectAlternativeName(sans), critical=False)
        cert = builder.sign(self.key, hashes.SHA256())
        cert_file = self.directory / f"{file_name}.pem"
        key_file = self.directory / f"{file_name}.key"
        cert_file.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
        key_file.write_bytes(
            key.private_bytes(
                serialization.Encoding.PEM,
                serialization.PrivateFormat.PKCS8,
                serialization.NoEncryption(),
            )
        )
        return Issued(cert_file, key_file, cert.public_bytes(serialization.Encoding.DER))


def person(cn: str) -> list[tuple[x509.ObjectIdentifier, str]]:
    """C=US, O=ringmq tests, CN=`cn` (the DN string is "CN=cn,O=ringmq tests,C=US")."""
    return [
        (NameOID.COUNTRY_NAME, "US"),
        (NameOID.ORGANIZATION_NAME, "ringmq tests"),
        (NameOID.COMMON_NAME, cn),
    ]
