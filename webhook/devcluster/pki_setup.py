"""The dev cluster's certificates: one CA; the apiserver's serving certificate; a client certificate per
component; the service-account key pair; our service's serving certificate; kwok's serving certificate (the
fake nodes' "kubelet", which the apiserver checks against the CA). Made once, then reused."""

from __future__ import annotations

from pathlib import Path

from webhook import pki
from webhook.api.names import CONTROLLER_COMPONENT, EXTENDER_COMPONENT
from webhook.devcluster.config import KWOK_NODE_IP

CLIENTS: dict[str, tuple[str, tuple[str, ...]]] = {
    "admin": ("kube-admin", ("system:masters",)),
    "kcm": ("system:kube-controller-manager", ()),
    "scheduler": ("system:kube-scheduler", ()),
    "kwok": ("kwok-controller", ("system:masters",)),
    "controller": (CONTROLLER_COMPONENT, ()),
    "extender": (EXTENDER_COMPONENT, ()),
}
"""File stem -> (user name, groups)."""

APISERVER_NAMES = (
    "localhost",
    "kubernetes",
    "kubernetes.default",
    "kubernetes.default.svc",
    "kubernetes.default.svc.cluster.local",
)
SERVICE_NAMES = ("localhost", "kube-queue-webhook", "kube-queue-webhook.kube-queue.svc")


def _write(path: Path, data: bytes, private: bool = False) -> None:
    path.write_bytes(data)
    if private:
        path.chmod(0o600)


def ensure_pki(directory: Path) -> None:
    """Create whatever certificate or key is missing under ``directory``."""
    directory.mkdir(parents=True, exist_ok=True)
    ca_crt, ca_key = directory / "ca.crt", directory / "ca.key"
    if not (ca_crt.exists() and ca_key.exists()):
        cert, key = pki.make_ca("kube-queue-dev-ca")
        _write(ca_crt, cert)
        _write(ca_key, key, private=True)
        for stale in directory.glob("*.crt"):
            if stale.name != "ca.crt":
                stale.unlink()
    ca_cert_pem, ca_key_pem = ca_crt.read_bytes(), ca_key.read_bytes()

    def issue(stem: str, common_name: str, **kwargs: object) -> None:
        crt, key = directory / f"{stem}.crt", directory / f"{stem}.key"
        if crt.exists() and key.exists():
            return
        cert, private = pki.issue_cert(ca_cert_pem, ca_key_pem, common_name, **kwargs)  # type: ignore[arg-type]
        _write(crt, cert)
        _write(key, private, private=True)

    issue(
        "apiserver", "kube-apiserver", dns_names=APISERVER_NAMES, ip_addresses=("127.0.0.1", "10.96.0.1")
    )
    issue("service", "kube-queue-webhook", dns_names=SERVICE_NAMES, ip_addresses=("127.0.0.1",))
    issue("kwok-serving", "kwok-kubelet", dns_names=("localhost",), ip_addresses=(KWOK_NODE_IP,))
    for stem, (user, groups) in CLIENTS.items():
        issue(stem, user, server=False, client=True, organizations=groups)
    _front_proxy(directory)
    if not (directory / "sa.key").exists():
        private, public = pki.make_rsa_key_pem()
        _write(directory / "sa.key", private, private=True)
        _write(directory / "sa.pub", public)


FRONT_PROXY_CLIENT = "front-proxy-client"
"""The name the API server's aggregator presents to an aggregated API (``--requestheader-allowed-names``)."""


def _front_proxy(directory: Path) -> None:
    """The aggregator's own CA and client certificate (``front-proxy-ca``, ``front-proxy-client``): an aggregated
    API trusts the user headers only from a client this CA signed, so it is not the cluster's client CA."""
    ca_crt, ca_key = directory / "front-proxy-ca.crt", directory / "front-proxy-ca.key"
    crt, key = directory / "front-proxy-client.crt", directory / "front-proxy-client.key"
    if not (ca_crt.exists() and ca_key.exists()):
        cert, private = pki.make_ca("kube-queue-dev-front-proxy-ca")
        _write(ca_crt, cert)
        _write(ca_key, private, private=True)
        crt.unlink(missing_ok=True)
    if not (crt.exists() and key.exists()):
        cert, private = pki.issue_cert(ca_crt.read_bytes(), ca_key.read_bytes(), FRONT_PROXY_CLIENT, server=False,
                                       client=True)
        _write(crt, cert)
        _write(key, private, private=True)
