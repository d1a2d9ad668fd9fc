"""The dev cluster with our system installed: CRDs, RBAC, the service process and its webhooks.

This is the wiring behind ``kq dev up`` and the end-to-end tests' fixture. It lives in the CLI layer
because it ties the shells together (the dev cluster, the admission service, the extender).
"""

from __future__ import annotations

import base64
import importlib.util
import json
import ssl
import sys
import urllib.error
import urllib.request
from collections.abc import Mapping, Sequence
from pathlib import Path

import yaml

from webhook.api.objects import Doc
from webhook.devcluster import cluster, operators, processes
from webhook.devcluster.config import SERVICE_ACCOUNT, ClusterConfig
from webhook.devcluster.kubeconfig import write_token_kubeconfig
from webhook.devcluster.processes import Component
from webhook.extender.config import SCHEDULER_SETTINGS, extender_entry

REPO = Path(__file__).resolve().parents[2]
MANIFESTS = REPO / "manifests"


def service_available() -> bool:
    """Whether ``kq serve`` exists in this build."""
    return importlib.util.find_spec("webhook.cli.serve") is not None


def service_components(
    config: ClusterConfig, bins: Path, env: Mapping[str, str] | None = None
) -> Sequence[Component]:
    """``kq serve`` for the dev cluster: the service on loopback with the dev CA's certificate.

    ``config.service_args`` are appended to its command line (``--oversellrate=1``...), ``env`` to its
    environment (``StrictPriority=true``...).
    """
    if not service_available():
        return []
    pki = config.pki
    argv = (
        sys.executable,
        "-m",
        "webhook.cli.main",
        "serve",
        "--host=127.0.0.1",  # loopback only on a laptop or shared machine (the in-cluster Deployment: all)
        f"--kubeconfig={config.controller_kubeconfig}",
        f"--port={config.ports.webhook}",
        f"--cert={pki / 'service.crt'}",
        f"--key={pki / 'service.key'}",
        f"--metrics-port={config.ports.metrics}",
        *operators.pod_creators(config),
        *config.service_args,
    )
    return [Component("kq-serve", argv, config.ports.webhook, env=dict(env or {}))]


def extender_available() -> bool:
    """Whether ``kq extender`` exists in this build."""
    return importlib.util.find_spec("webhook.cli.extender") is not None


def extender_url(config: ClusterConfig) -> str:
    """Where the dev cluster's scheduler reaches the extender (plain HTTP on loopback)."""
    return f"http://127.0.0.1:{config.ports.extender}/extender"


def extender_components(config: ClusterConfig, bins: Path) -> Sequence[Component]:
    """``kq extender`` for the dev cluster, on ``config.ports.extender`` (loopback, HTTP)."""
    if not extender_available():
        return []
    argv = (
        sys.executable,
        "-m",
        "webhook.cli.main",
        "extender",
        f"--kubeconfig={config.state_dir / 'extender.kubeconfig'}",
        "--host=127.0.0.1",
        f"--port={config.ports.extender}",
    )
    return [Component("kq-extender", argv, config.ports.extender)]


def console_available() -> bool:
    """Whether ``kq console`` exists in this build."""
    return importlib.util.find_spec("webhook.console") is not None


def console_url(config: ClusterConfig) -> str:
    """Where the dev cluster's web console listens (loopback, HTTP)."""
    return f"http://127.0.0.1:{config.ports.console}/"


def console_components(config: ClusterConfig, bins: Path) -> Sequence[Component]:
    """``kq console`` for the dev cluster, on ``config.ports.console``: loopback only, acting as the
    kubeconfig's admin for visitors who paste no token of their own (docs/console.md)."""
    if not console_available():
        return []
    argv = (
        sys.executable,
        "-m",
        "webhook.cli.main",
        "console",
        f"--kubeconfig={config.kubeconfig}",
        "--act-as-kubeconfig",
        "--host=127.0.0.1",
        f"--port={config.ports.console}",
    )
    return [Component("kq-console", argv, config.ports.console)]


def scheduler_extender(config: ClusterConfig) -> dict[str, object] | None:
    """The scheduler's ``extenders[0]`` for the dev cluster (``None`` when the service is not started: a
    scheduler that must ask an extender nobody runs would schedule nothing)."""
    if not config.with_service or not extender_available():
        return None
    return extender_entry(extender_url(config))


def scheduler_settings(config: ClusterConfig) -> dict[str, object]:
    """Top-level scheduler settings the dev extender needs (:data:`~webhook.extender.config.SCHEDULER_SETTINGS`:
    the sampling and the full-scan profiles), none without it."""
    return dict(SCHEDULER_SETTINGS) if scheduler_extender(config) is not None else {}


def system_components(config: ClusterConfig, bins: Path) -> Sequence[Component]:
    """Every process of our system on the dev cluster: ``kq serve``, ``kq extender`` and ``kq console``, and the
    job operators ``config.operators`` names."""
    return [*service_components(config, bins), *extender_components(config, bins), *console_components(config, bins),
            *operators.components(config)]


def service_ready(config: ClusterConfig) -> bool:
    """Whether ``kq serve`` answers ``/readyz`` with 200: its caches have listed, so it admits (before that it
    refuses every admission request, and the API server with it)."""
    context = ssl.create_default_context(cafile=str(config.pki / "ca.crt"))
    url = f"https://127.0.0.1:{config.ports.webhook}/readyz"
    try:
        with urllib.request.urlopen(url, context=context, timeout=1.0) as response:
            return bool(response.status == 200)
    except urllib.error.HTTPError as error:  # 503 until the caches listed: close its connection
        error.close()
        return False
    except OSError:
        return False


def restart_service(config: ClusterConfig, bins: Path, env: Mapping[str, str] | None = None) -> None:
    """Stop and start ``kq serve`` with ``config.service_args`` and ``env`` (the seed's "edit the
    controller's arguments and restart it"); waits until it listens again and its caches have listed."""
    marker = str(config.state_dir)
    processes.stop(config.run, "kq-serve", marker)
    for component in service_components(config, bins, env):
        processes.start(component, config.run, config.logs)
        port = component.port
        assert port is not None
        processes.wait_for(lambda p=port: processes.port_open(p), 60, f"kq serve to listen on {port}")
        processes.wait_for(lambda: service_ready(config), 60, "kq serve's caches to list (/readyz)")


SHIPPED_RBAC = (
    MANIFESTS / "controller" / "rbac.yaml",
    MANIFESTS / "webhook" / "rbac.yaml",
    MANIFESTS / "scheduler" / "rbac.yaml",
)
"""The least-privilege roles an operator installs: the dev cluster runs the system under exactly these."""
READ_API = MANIFESTS / "webhook" / "read-api.yaml"
"""The read API's roles and APIService (docs/queueing.md, "Reading every job")."""


def read_api_objects(config: ClusterConfig | None = None) -> list[Doc]:
    """The shipped read API objects: without ``config``, all but the APIService (the roles ``kq serve`` needs
    before it starts); with it, the APIService for the dev cluster's ``kq serve`` on loopback (the aggregator
    resolves an ExternalName Service by its name alone; the dev CA signs the serving certificate) and that
    Service."""
    documents: list[Doc] = [doc for doc in yaml.safe_load_all(READ_API.read_text()) if isinstance(doc, dict)]
    if config is None:
        return [doc for doc in documents if doc.get("kind") != "APIService"]
    (api_service,) = (doc for doc in documents if doc.get("kind") == "APIService")
    spec = api_service["spec"]
    service = spec.get("service") if isinstance(spec, dict) else None
    if not isinstance(spec, dict) or not isinstance(service, dict):
        raise ValueError(f"{READ_API}: the APIService names no service")
    service["port"] = config.ports.webhook
    spec["caBundle"] = base64.b64encode((config.pki / "ca.crt").read_bytes()).decode()
    external: Doc = {"apiVersion": "v1", "kind": "Service",
                "metadata": {"name": service["name"], "namespace": service["namespace"]},
                "spec": {"type": "ExternalName", "externalName": "localhost"}}
    return [external, api_service]
TOKEN_LIFETIME = "8760h"
"""How long the service's token lives (``kq dev up`` issues a new one every time)."""


def install_api_objects(config: ClusterConfig, bins: Path) -> None:
    """CRDs, the kube-queue namespace and the shipped RBAC; ``kq serve`` runs as the manifests' ServiceAccount
    (a token from the TokenRequest API in ``controller.kubeconfig``) and ``kq extender`` as the user
    ``kube-queue-extender`` (a client certificate), bound by nothing but the roles in ``manifests/``."""
    crds = MANIFESTS / "crds"
    if crds.is_dir() and any(crds.glob("*.yaml")):
        cluster.kubectl(config, bins, "apply", "--server-side", "--force-conflicts", "-f", str(crds))
        cluster.kubectl(
            config, bins, "wait", "--for=condition=Established", "--timeout=60s", "-f", str(crds)
        )
    namespace = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": SERVICE_ACCOUNT[0]}}
    cluster.kubectl(config, bins, "apply", "--server-side", "--force-conflicts", "-f", "-", stdin=json.dumps(namespace))
    # An older dev cluster bound the controller to cluster-admin: that binding must not survive.
    cluster.kubectl(config, bins, "delete", "clusterrolebinding", "kube-queue-dev-controller", "--ignore-not-found")
    for path in SHIPPED_RBAC:
        cluster.kubectl(config, bins, "apply", "--server-side", "--force-conflicts", "-f", str(path))
    roles = json.dumps({"apiVersion": "v1", "kind": "List", "items": read_api_objects()})
    cluster.kubectl(config, bins, "apply", "--server-side", "--force-conflicts", "-f", "-", stdin=roles)
    token = cluster.kubectl(
        config, bins, "create", "token", SERVICE_ACCOUNT[1], "-n", SERVICE_ACCOUNT[0], f"--duration={TOKEN_LIFETIME}"
    ).strip()
    write_token_kubeconfig(config.controller_kubeconfig, config.server, config.pki,
                           SERVICE_ACCOUNT[1], token)

    def kubectl(*args: str, stdin: str | None = None) -> str:
        return cluster.kubectl(config, bins, *args, stdin=stdin)

    operators.install(config, kubectl)


def register_webhooks(config: ClusterConfig, bins: Path) -> None:
    """Point the apiserver's admission webhooks at the local service, once it listens, beside the admission
    policies of the tree's pods (:mod:`webhook.admission.policies`)."""
    if not service_available():
        return
    try:
        from webhook.admission.configs import dev_webhook_configs  # noqa: PLC0415
        from webhook.admission.policies import admission_policies  # noqa: PLC0415
    except ImportError:
        return
    processes.wait_for(lambda: service_ready(config), 60, "kq serve's caches to list (/readyz)")
    ca = (config.pki / "ca.crt").read_bytes()
    # The admission policies first: the webhooks that let workload controllers' pods through while the service
    # is down count on them (the dev cluster runs Kubernetes 1.36, which serves them).
    items = [*admission_policies(), *dev_webhook_configs(f"https://127.0.0.1:{config.ports.webhook}", ca),
             *read_api_objects(config)]
    doc = json.dumps({"apiVersion": "v1", "kind": "List", "items": items})
    cluster.kubectl(config, bins, "apply", "--server-side", "--force-conflicts", "-f", "-", stdin=doc)
    operators.wait_ready(config)


def up(config: ClusterConfig) -> Path:
    """Bring up the cluster with the system installed; returns the binaries' directory."""
    return cluster.up(
        config,
        service=system_components,
        extender=scheduler_extender(config),
        scheduler_settings=scheduler_settings(config),
        after_api=install_api_objects,
        after_service=register_webhooks,
    )


SEED = REPO / "examples" / "seed"


def install_seed(config: ClusterConfig, bins: Path) -> None:
    """The seed's namespaces (user-a, user-b, user-c), quota tree and PriorityClasses."""
    cluster.kubectl(config, bins, "apply", "-f", str(SEED))


def next_steps(config: ClusterConfig, seeded: bool = False) -> str:
    """What a newcomer can try next."""
    env = f'  eval "$(.venv/bin/kq dev env{_dir_flag(config)})"   # kubectl and kq on PATH, talking to the dev cluster'
    lines = ["", "Next:", env, "  kubectl get nodes                     # 4 ECS nodes and a virtual node, Ready"]
    if not seeded:
        lines.append("  kubectl apply -f examples/seed/       # the seed's namespaces, quota tree, PriorityClasses")
    lines += [
        "  kq submit job -n user-a --name pi1 --cpu 10 --memory 10Gi --workers 6 -- sleep 60",
        "  kq submit job -n user-a --name pi2 --cpu 10 --memory 10Gi --workers 6 -- sleep 60",
        "  kq list -n user-a                     # status, queue and position of each job",
        "  kq why pi2 -n user-a                  # why a job waits: quota level, resource, shortfall",
        "  kq logs pi1 -n user-a -f --tail 3     # follow a job's log (fake pods share a generated one)",
        "  kq top quota                          # the quota tree: min / max / used / borrowed",
        *(["  kq submit pytorchjob -n user-b --name pt1 --cpu 4 --workers 2 -- python train.py"
           "   # run by the Kubeflow training operator (docs/job-kinds.md)"]
          if "training-operator" in config.operators else []),
        "  kubectl get queue -n kube-queue       # one Queue per namespace of each quota",
        f"  {console_url(config):<37} # the web console: jobs, why they wait, logs, the quota tree",
        "  make down                             # stop everything",
    ]
    return "\n".join(lines)


def _dir_flag(config: ClusterConfig) -> str:
    default = ClusterConfig().state_dir
    return "" if config.state_dir == default else f" --dir {config.state_dir}"
