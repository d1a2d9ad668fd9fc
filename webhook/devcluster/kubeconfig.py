"""Kubeconfig files with the certificates embedded, so they work from any directory."""

from __future__ import annotations

import base64
import json
from pathlib import Path


def _b64(path: Path) -> str:
    return base64.b64encode(path.read_bytes()).decode()


def kubeconfig(server: str, pki_dir: Path, user: str, context: str = "kq-dev") -> dict[str, object]:
    """A kubeconfig for ``user`` (the stem of its client certificate under ``pki_dir``)."""
    return {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {
                "name": context,
                "cluster": {"server": server, "certificate-authority-data": _b64(pki_dir / "ca.crt")},
            }
        ],
        "users": [
            {
                "name": f"{context}-{user}",
                "user": {
                    "client-certificate-data": _b64(pki_dir / f"{user}.crt"),
                    "client-key-data": _b64(pki_dir / f"{user}.key"),
                },
            }
        ],
        "contexts": [{"name": context, "context": {"cluster": context, "user": f"{context}-{user}"}}],
        "current-context": context,
    }


def token_kubeconfig(server: str, pki_dir: Path, name: str, token: str, context: str = "kq-dev") -> dict[str, object]:
    """A kubeconfig that authenticates with a bearer ``token`` (a ServiceAccount's, from the TokenRequest API)."""
    config = kubeconfig(server, pki_dir, "admin", context)
    config["users"] = [{"name": f"{context}-{name}", "user": {"token": token}}]
    config["contexts"] = [{"name": context, "context": {"cluster": context, "user": f"{context}-{name}"}}]
    return config


def write_token_kubeconfig(path: Path, server: str, pki_dir: Path, name: str, token: str) -> None:
    """Write :func:`token_kubeconfig`, readable by the owner only."""
    path.write_text(json.dumps(token_kubeconfig(server, pki_dir, name, token), indent=2))
    path.chmod(0o600)


def write_kubeconfig(path: Path, server: str, pki_dir: Path, user: str) -> None:
    """Write the kubeconfig (JSON, which every YAML reader accepts), readable by the owner only."""
    path.write_text(json.dumps(kubeconfig(server, pki_dir, user), indent=2))
    path.chmod(0o600)
