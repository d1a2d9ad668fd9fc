"""The dev cluster's aggregator certificates (webhook/devcluster/pki_setup.py): an aggregated API trusts the user
headers only from the API server's front-proxy client, whose CA is not the cluster's client CA."""

from __future__ import annotations

from pathlib import Path

import pytest
from cryptography import x509
from cryptography.exceptions import InvalidSignature
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from webhook.devcluster import cluster
from webhook.devcluster.config import ClusterConfig
from webhook.devcluster.pki_setup import FRONT_PROXY_CLIENT, ensure_pki


def _cert(path: Path) -> x509.Certificate:
    return x509.load_pem_x509_certificate(path.read_bytes())


def test_the_front_proxy_client_is_signed_by_its_own_ca_only(tmp_path: Path) -> None:
    ensure_pki(tmp_path)
    client = _cert(tmp_path / "front-proxy-client.crt")
    client.verify_directly_issued_by(_cert(tmp_path / "front-proxy-ca.crt"))
    with pytest.raises((ValueError, InvalidSignature)):
        client.verify_directly_issued_by(_cert(tmp_path / "ca.crt"))
    assert client.subject.get_attributes_for_oid(NameOID.COMMON_NAME)[0].value == FRONT_PROXY_CLIENT
    usages = client.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
    assert ExtendedKeyUsageOID.CLIENT_AUTH in usages


def test_the_certificates_are_made_once_and_a_new_ca_reissues_the_client(tmp_path: Path) -> None:
    ensure_pki(tmp_path)
    first = (tmp_path / "front-proxy-client.crt").read_bytes()
    ensure_pki(tmp_path)
    assert (tmp_path / "front-proxy-client.crt").read_bytes() == first
    (tmp_path / "front-proxy-ca.crt").unlink()
    ensure_pki(tmp_path)
    client = _cert(tmp_path / "front-proxy-client.crt")
    client.verify_directly_issued_by(_cert(tmp_path / "front-proxy-ca.crt"))
    assert (tmp_path / "front-proxy-client.crt").read_bytes() != first


def test_the_api_server_runs_the_aggregator_with_them(tmp_path: Path) -> None:
    config = ClusterConfig(state_dir=tmp_path)
    (apiserver,) = [part for part in cluster.components(config, tmp_path / "bin") if part.name == "kube-apiserver"]
    flags = set(apiserver.argv)
    pki = config.pki
    assert f"--requestheader-client-ca-file={pki / 'front-proxy-ca.crt'}" in flags
    assert f"--requestheader-allowed-names={FRONT_PROXY_CLIENT}" in flags
    assert f"--proxy-client-cert-file={pki / 'front-proxy-client.crt'}" in flags
    assert f"--proxy-client-key-file={pki / 'front-proxy-client.key'}" in flags
    assert "--requestheader-username-headers=X-Remote-User" in flags
