"""JobSet's controller on the dev cluster: out of cluster, with its own webhooks on 127.0.0.1.

JobSet's manager rotates its own certificate by default, for a Service inside the cluster. Here its
configuration file turns that off (``internalCertManagement.enable: false``) and names a certificate directory
of :mod:`webhook.devcluster.operator_certs`; its webhook configurations are its own manifests
(``config/components/webhook``) with the patches its kustomization applies (the pod hooks select JobSet's pods
only), named as its kustomization names them and pointed at the manager's port on 127.0.0.1.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Callable, Iterable
from pathlib import Path

import yaml

from webhook.api.objects import Doc, Obj, mapping
from webhook.devcluster import processes
from webhook.devcluster.cluster import DevClusterError
from webhook.devcluster.config import ClusterConfig
from webhook.devcluster.operator_certs import ensure_serving_files

NAMESPACE = "jobset-system"
PREFIX = "jobset-"
PATCHES = {
    "MutatingWebhookConfiguration": "mutating-patch.yaml",
    "ValidatingWebhookConfiguration": "validating-patch.yaml",
}
"""Which of the kustomization's patch files applies to which configuration."""


def _yaml_documents(path: Path) -> list[object]:
    return [doc for doc in yaml.safe_load_all(path.read_text()) if doc is not None]


def _patched(doc: Doc, ops: Iterable[object], source: Path) -> list[object]:
    """The webhooks of ``doc`` with the kustomization's JSON patch applied: its operations replace or add whole
    webhooks."""
    hooks = doc.get("webhooks")
    if not isinstance(hooks, list):
        raise DevClusterError(f"the {doc.get('kind')} in JobSet's manifests lists no webhooks")
    for op in ops:
        step = mapping(op)
        path = str(step.get("path", ""))
        if step.get("op") not in ("replace", "add") or not path.startswith("/webhooks/"):
            raise DevClusterError(f"{source}: an operation this set-up does not apply: {step}")
        index = path.removeprefix("/webhooks/")
        if index == "-":
            hooks.append(step["value"])
        elif step.get("op") == "replace":
            hooks[int(index)] = step["value"]
        else:
            hooks.insert(int(index), step["value"])
    return hooks


def webhook_configurations(directory: Path, port: int, ca: bytes) -> list[Doc]:
    """JobSet's mutating and validating webhook configurations from its build directory (``webhooks/``,
    ``webhook-patches/``), each hook pointed at ``https://127.0.0.1:port``."""
    out: list[Doc] = []
    base = f"https://127.0.0.1:{port}"
    for raw in _yaml_documents(directory / "webhooks" / "manifests.yaml"):
        doc = dict(mapping(raw))
        kind = str(doc.get("kind"))
        if kind not in PATCHES:
            continue
        patch_file = directory / "webhook-patches" / PATCHES[kind]
        ops = [op for part in _yaml_documents(patch_file) for op in (part if isinstance(part, list) else [part])]
        hooks = [dict(mapping(hook)) for hook in _patched(doc, ops, patch_file)]
        for hook in hooks:
            path = mapping(mapping(hook.get("clientConfig")).get("service")).get("path")
            if not isinstance(path, str):
                raise DevClusterError(f"the JobSet webhook {hook.get('name')} names no service path")
            hook["clientConfig"] = {"url": base + path, "caBundle": base64.b64encode(ca).decode()}
        name = PREFIX + str(mapping(doc.get("metadata")).get("name"))
        out.append({"apiVersion": doc["apiVersion"], "kind": kind, "metadata": {"name": name}, "webhooks": hooks})
    if len(out) != len(PATCHES):
        raise DevClusterError(f"JobSet's manifests in {directory / 'webhooks'} lack a webhook configuration")
    return out


def install(config: ClusterConfig, state: Path, directory: Path, apply: Callable[[Iterable[Obj]], None]) -> None:
    """The serving certificate (made once), the manager's configuration file, and the webhook configurations."""
    certs, ca_file = state / "certs", state / "ca.crt"
    ensure_serving_files(certs, ca_file, "jobset-ca", f"{PREFIX}webhook-service.{NAMESPACE}.svc")
    settings = {
        "apiVersion": "config.jobset.x-k8s.io/v1alpha1",
        "kind": "Configuration",
        "internalCertManagement": {"enable": False},
        "webhook": {"port": config.ports.jobset_webhook, "host": "127.0.0.1", "certDir": str(certs)},
    }
    (state / "config.yaml").write_text(json.dumps(settings))
    apply(webhook_configurations(directory, config.ports.jobset_webhook, ca_file.read_bytes()))


def component(config: ClusterConfig, state: Path, executable: Path, kubeconfig: str) -> processes.Component:
    """The manager: no metrics server, no leader election, ready once its webhook server serves."""
    argv = (
        str(executable), kubeconfig, f"--config={state / 'config.yaml'}", "--metrics-bind-address=0",
        f"--health-probe-bind-address=127.0.0.1:{config.ports.jobset_probe}", "--leader-elect=false",
    )
    return processes.Component("jobset", argv, config.ports.jobset_probe)
