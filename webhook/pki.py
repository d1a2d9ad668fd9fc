"""Certificates with ``cryptography``: one CA, serving and client certificates (PEM bytes in, PEM bytes out).

Used by ``kq certs`` (the webhook's serving certificate) and by the dev cluster (apiserver serving
certificate, component client certificates).
"""

from __future__ import annotations

import datetime
import ipaddress
from collections.abc import Sequence

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

_BACKDATE = datetime.timedelta(minutes=5)


def _key() -> ec.EllipticCurvePrivateKey:
    return ec.generate_private_key(ec.SECP256R1())


def _key_pem(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )


def _now() -> datetime.datetime:
    return datetime.datetime.now(datetime.UTC)


def _builder(
    subject: x509.Name, issuer: x509.Name, key: ec.EllipticCurvePrivateKey, days: int, *, ca: bool
) -> x509.CertificateBuilder:
    """A certificate for ``key``, valid ``days`` from a little before now, whose key signs; a CA's also signs
    certificates and revocation lists."""
    now = _now()
    return (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(issuer)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - _BACKDATE)
        .not_valid_after(now + datetime.timedelta(days=days))
        .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                key_cert_sign=ca,
                crl_sign=ca,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
    )


def make_ca(common_name: str, days: int = 3650) -> tuple[bytes, bytes]:
    """A self-signed CA: ``(cert_pem, key_pem)``."""
    key = _key()
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])
    cert = (
        _builder(name, name, key, days, ca=True)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .sign(key, hashes.SHA256())
    )
    return cert.public_bytes(serialization.Encoding.PEM), _key_pem(key)


def issue_cert(
    ca_cert_pem: bytes,
    ca_key_pem: bytes,
    common_name: str,
    *,
    dns_names: Sequence[str] = (),
    ip_addresses: Sequence[str] = (),
    server: bool = True,
    client: bool = False,
    organizations: Sequence[str] = (),
    days: int = 365,
) -> tuple[bytes, bytes]:
    """A certificate signed by the CA: ``(cert_pem, key_pem)``.

    ``organizations`` become the subject's O fields, which Kubernetes reads as the client's groups
    (``system:masters`` for an admin). ``dns_names``/``ip_addresses`` become subjectAltNames.
    """
    ca_cert = x509.load_pem_x509_certificate(ca_cert_pem)
    ca_key = serialization.load_pem_private_key(ca_key_pem, password=None)
    if not isinstance(ca_key, ec.EllipticCurvePrivateKey):
        raise ValueError("the CA key must be an EC private key made by make_ca")
    key = _key()
    attributes = [x509.NameAttribute(NameOID.ORGANIZATION_NAME, org) for org in organizations]
    attributes.append(x509.NameAttribute(NameOID.COMMON_NAME, common_name))
    usages = []
    if server:
        usages.append(ExtendedKeyUsageOID.SERVER_AUTH)
    if client:
        usages.append(ExtendedKeyUsageOID.CLIENT_AUTH)
    builder = _builder(x509.Name(attributes), ca_cert.subject, key, days, ca=False).add_extension(
        x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), critical=False
    )
    if usages:
        builder = builder.add_extension(x509.ExtendedKeyUsage(usages), critical=False)
    sans: list[x509.GeneralName] = [x509.DNSName(name) for name in dns_names]
    sans += [x509.IPAddress(ipaddress.ip_address(ip)) for ip in ip_addresses]
    if sans:
        builder = builder.add_extension(x509.SubjectAlternativeName(sans), critical=False)
    cert = builder.sign(ca_key, hashes.SHA256())
    return cert.public_bytes(serialization.Encoding.PEM), _key_pem(key)


def not_after(cert_pem: bytes) -> datetime.datetime:
    """When the certificate expires (UTC)."""
    return x509.load_pem_x509_certificate(cert_pem).not_valid_after_utc


def make_rsa_key_pem(bits: int = 2048) -> tuple[bytes, bytes]:
    """An RSA key pair ``(private_pem, public_pem)`` (the apiserver's service-account signing key)."""


    key = rsa.generate_private_key(public_exponent=65537, key_size=bits)
    public = key.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    private = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.TraditionalOpenSSL,
        serialization.NoEncryption(),
    )
    return private, public
