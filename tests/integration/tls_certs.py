"""Certificates for the TLS tests, made with the ``cryptography`` package (nothing shipped).

`make_pki` writes, under a directory: two independent CAs (``ca`` and ``other-ca``), a server
certificate for 127.0.0.1 / localhost signed by ``ca``, and client certificates signed by
each CA. EC P-256 keys keep generation fast.
"""

from __future__ import annotations

import datetime
from dataclasses import dataclass
from ipaddress import IPv4Address
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID


@dataclass(frozen=True)
class Pki:
    """Paths of the generated PEM files."""

    ca: Path
    other_ca: Path
    server_cert: Path
    server_key: Path
    client_cert: Path  # CN=app-client,O=amqpd tests, signed by ca
    client_key: Path
    rogue_cert: Path  # CN=app-client, signed by other-ca
    rogue_key: Path


def _name(common_name: str) -> x509.Name:
    return x509.Name(
        [
            x509.NameAttribute(NameOID.ORGANIZATION_NAME, "amqpd tests"),
            x509.NameAttribute(NameOID.COMMON_NAME, common_name),
        ]
    )


def _write_key(key: ec.EllipticCurvePrivateKey, path: Path) -> None:
    path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )


def _write_cert(cert: x509.Certificate, path: Path) -> None:
    path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))


def _ca(common_name: str) -> tuple[x509.Certificate, ec.EllipticCurvePrivateKey]:
    key = ec.generate_private_key(ec.SECP256R1())
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(_name(common_name))
        .issuer_name(_name(common_name))
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=2))
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=True,
                crl_sign=True,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .sign(key, hashes.SHA256())
    )
    return cert, key


def _leaf(
    common_name: str,
    ca: x509.Certificate,
    ca_key: ec.EllipticCurvePrivateKey,
    server: bool,
) -> tuple[x509.Certificate, ec.EllipticCurvePrivateKey]:
    key = ec.generate_private_key(ec.SECP256R1())
    now = datetime.datetime.now(datetime.UTC)
    builder = (
        x509.CertificateBuilder()
        .subject_name(_name(common_name))
        .issuer_name(ca.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(
            x509.ExtendedKeyUsage(
                [ExtendedKeyUsageOID.SERVER_AUTH if server else ExtendedKeyUsageOID.CLIENT_AUTH]
            ),
            critical=False,
        )
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()),
            critical=False,
        )
    )
    if server:
        builder = builder.add_extension(
            x509.SubjectAlternativeName(
                [x509.DNSName("localhost"), x509.IPAddress(IPv4Address("127.0.0.1"))]
            ),
            critical=False,
        )
    return builder.sign(ca_key, hashes.SHA256()), key


def make_pki(directory: Path) -> Pki:
    """Generate the CAs, the server and the client certificates under ``directory``."""
    directory.mkdir(parents=True, exist_ok=True)
    pki = Pki(
        *(
            directory / name
            for name in (
                "ca.pem",
                "other-ca.pem",
                "server.pem",
                "server.key",
                "client.pem",
                "client.key",
                "rogue.pem",
                "rogue.key",
            )
        )
    )
    ca, ca_key = _ca("amqpd test CA")
    other_ca, other_key = _ca("another CA")
    _write_cert(ca, pki.ca)
    _write_cert(other_ca, pki.other_ca)
    for path_cert, path_key, common_name, issuer, issuer_key, server in (
        (pki.server_cert, pki.server_key, "localhost", ca, ca_key, True),
        (pki.client_cert, pki.client_key, "app-client", ca, ca_key, False),
        (pki.rogue_cert, pki.rogue_key, "app-client", other_ca, other_key, False),
    ):
        cert, key = _leaf(common_name, issuer, issuer_key, server)
        _write_cert(cert, path_cert)
        _write_key(key, path_key)
    return pki
