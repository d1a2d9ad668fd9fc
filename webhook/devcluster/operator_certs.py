"""The serving certificate the Kubeflow training operator's own webhook expects, made before it starts.

The training operator (v1.8.1) manages its webhook certificate with open-policy-agent's cert-controller: it
reads the Secret ``training-operator-webhook-cert``, keeps a CA and a server certificate there (RSA keys, the
CA's in PKCS#1), and becomes ready only once ``tls.crt`` exists in its certificate directory, which a pod gets
by mounting the Secret. Out of cluster nothing mounts it, so the dev cluster makes the pair the rotator accepts
(the CA named ``training-operator-ca``, the server name ``training-operator.kubeflow.svc``, valid well beyond
its 90-day look-ahead), stores it in the Secret and writes the files where the operator reads them. The server
certificate also names 127.0.0.1: the API server calls the operator's webhook there.
"""

from __future__ import annotations

import datetime
import ipaddress
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import rsa
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from webhook.kube.servingcerts import ServingCerts

DAYS = 3650


def _rsa() -> rsa.RSAPrivateKey:
    return rsa.generate_private_key(public_exponent=65537, key_size=2048)


def _pkcs1(key: rsa.RSAPrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.TraditionalOpenSSL, serialization.NoEncryption()
    )


def _certificate(subject: x509.Name, issuer: x509.Name, key: rsa.RSAPublicKey, now: datetime.datetime,
                 until: datetime.datetime) -> x509.CertificateBuilder:
    """A certificate of ``subject`` for ``key``, issued by ``issuer``, valid from ``now`` to ``until``, with a
    random serial number; its extensions are the caller's."""
    return (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(issuer)
        .public_key(key)
        .serial_number(x509.random_serial_number())
        .not_valid_before(now)
        .not_valid_after(until)
    )


def serving_pair(ca_name: str, dns_name: str, ip: str = "127.0.0.1") -> ServingCerts:
    """A self-signed CA (``ca_name`` as its common and DNS name) and a server certificate for ``dns_name``
    and ``ip``, signed by it."""
    now = datetime.datetime.now(datetime.UTC) - datetime.timedelta(hours=1)
    until = now + datetime.timedelta(days=DAYS)
    ca_key = _rsa()
    ca_subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, ca_name)])
    ca = (
        _certificate(ca_subject, ca_subject, ca_key.public_key(), now, until)
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .add_extension(x509.SubjectAlternativeName([x509.DNSName(ca_name)]), critical=False)
        .add_extension(
            x509.KeyUsage(digital_signature=True, key_encipherment=True, key_cert_sign=True, content_commitment=False,
                          data_encipherment=False, key_agreement=False, crl_sign=False, encipher_only=False,
                          decipher_only=False),
            critical=True,
        )
        .sign(ca_key, hashes.SHA256())
    )
    key = _rsa()
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, dns_name)])
    cert = (
        _certificate(subject, ca_subject, key.public_key(), now, until)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(
            x509.SubjectAlternativeName([x509.DNSName(dns_name), x509.IPAddress(ipaddress.ip_address(ip))]),
            critical=False,
        )
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    return ServingCerts(
        ca_cert=ca.public_bytes(serialization.Encoding.PEM),
        ca_key=_pkcs1(ca_key),
        cert=cert.public_bytes(serialization.Encoding.PEM),
        key=_pkcs1(key),
    )


def ensure_serving_files(certs: Path, ca_file: Path, ca_name: str, dns_name: str) -> ServingCerts | None:
    """``tls.crt`` and ``tls.key`` in ``certs`` and the CA in ``ca_file``, made once (:func:`serving_pair`): the
    pair when it was made now, ``None`` when the files were there already."""
    if (certs / "tls.crt").exists() and ca_file.exists():
        return None
    pair = serving_pair(ca_name, dns_name)
    certs.mkdir(parents=True, exist_ok=True)
    (certs / "tls.crt").write_bytes(pair.cert)
    (certs / "tls.key").write_bytes(pair.key)
    (certs / "tls.key").chmod(0o600)
    ca_file.write_bytes(pair.ca_cert)
    return pair
